import { ProxyError } from '../endpoints/errors.js';
import type { Translation, Translator } from './translator.js';

/**
 * What the translators' tests ask of one: the translation of a body that must translate, or the
 * refusal of one that must not, failing with what came instead.
 */

type Json = Record<string, unknown>;

export function translationOf(translator: Translator, body: Json, stream = false): Translation {
  const t = translator.begin(body, stream);
  if (t instanceof ProxyError) throw new Error(`expected a translation, got ${t.status} ${t.param}: ${t.message}`);
  return t;
}

export function refusalOf(translator: Translator, body: Json): ProxyError {
  const t = translator.begin(body, false);
  if (!(t instanceof ProxyError)) throw new Error(`expected a ProxyError, got ${JSON.stringify(t.body)}`);
  return t;
}
