import { createHash } from 'node:crypto';
import type { CallerDialect } from '../../crds/constants.js';
import { isRecord } from '../../crds/is-record.js';
import { REQUEST_TEXTS } from '../guardrails/request-texts.js';

/**
 * What makes two requests the same for the response cache: the scope (a team's or a key's),
 * the endpoint, the model that serves it, and the body as forwarded (after the guardrails), its
 * object keys in a fixed order; not what only names the caller (user, metadata). A semantic
 * lookup matches everything but the text exactly (its bucket), and the text by its embedding.
 */

/** Fields that name the caller or the call, not what is asked: two requests differing only in them are the same. */
const NOT_ASKED = new Set(['user', 'metadata', 'safety_identifier', 'prompt_cache_key']);

/** JSON with object keys sorted, so that the same request hashes the same whatever its key order. */
function canonical(v: unknown, top = false): string {
  if (Array.isArray(v)) return `[${v.map((x) => canonical(x)).join(',')}]`;
  if (!isRecord(v)) return JSON.stringify(v) ?? 'null';
  const keys = Object.keys(v)
    .filter((k) => !(top && NOT_ASKED.has(k)) && v[k] !== undefined)
    .sort();
  return `{${keys.map((k) => `${JSON.stringify(k)}:${canonical(v[k])}`).join(',')}}`;
}

const digest = (parts: readonly string[]) => createHash('sha256').update(parts.join('\u0000')).digest('base64url');

export function exactKey(scope: string, endpoint: string, model: string, body: Record<string, unknown>): string {
  return `pao:cache:v1:${digest([scope, endpoint, model, canonical(body, true)])}`;
}

/** The request's texts (prompt, system, conversation), joined: what a semantic lookup embeds. */
export function promptText(dialect: CallerDialect, body: Record<string, unknown>): string {
  const texts: string[] = [];
  REQUEST_TEXTS[dialect](body, (t) => {
    texts.push(t);
    return t;
  });
  return texts.join('\n');
}

/** Everything but the texts, exactly: requests of one bucket differ only in what they say. */
export function semanticBucket(
  scope: string,
  endpoint: string,
  model: string,
  dialect: CallerDialect,
  body: Record<string, unknown>,
): string {
  const blank = REQUEST_TEXTS[dialect](body, () => '');
  return digest([scope, endpoint, model, canonical(blank, true)]);
}

/** Tools, tool calls or images make a near match unsafe: a different call, a different picture, same words. */
export function semanticUnsafe(body: Record<string, unknown>): boolean {
  if (Array.isArray(body.tools) && body.tools.length > 0) return true;
  return /"(image_url|input_image|image|tool_calls|tool_use|tool_result|function_call|function_call_output)"|"role":"tool"/.test(
    JSON.stringify(body),
  );
}
