import { createHash } from 'node:crypto';
import type { CallerDialect } from '../../crds/constants.js';
import { isRecord } from '../../crds/is-record.js';

/**
 * What makes two requests the same for the response cache: the scope (a team's or a key's),
 * the endpoint, the model that serves it, the anthropic-beta flags sent with it, and the body as
 * forwarded (after the guardrails), its object keys in a fixed order; not what only names the
 * caller (user, metadata), except on Responses, whose answers repeat them. A semantic lookup
 * matches everything but the last question exactly (its bucket: the system text and the earlier
 * turns included), and that question by its embedding.
 */

/** Fields that name the caller or the call, not what is asked: two requests differing only in them are the same. */
const NOT_ASKED = new Set(['user', 'metadata', 'safety_identifier', 'prompt_cache_key']);

/** The longest question a semantic lookup embeds: past it, embedding models cut the text, and two long texts alike at the start would match. */
const MAX_SEMANTIC_CHARS = 2_000;

/** JSON with object keys sorted, so that the same request hashes the same whatever its key order. */
function canonical(v: unknown, drop?: ReadonlySet<string>): string {
  if (Array.isArray(v)) return `[${v.map((x) => canonical(x)).join(',')}]`;
  if (!isRecord(v)) return JSON.stringify(v) ?? 'null';
  const keys = Object.keys(v)
    .filter((k) => !drop?.has(k) && v[k] !== undefined)
    .sort();
  return `{${keys.map((k) => `${JSON.stringify(k)}:${canonical(v[k])}`).join(',')}}`;
}

const digest = (parts: readonly string[]) => createHash('sha256').update(parts.join('\u0000')).digest('base64url');

export interface KeyParts {
  scope: string;
  endpoint: string;
  dialect: CallerDialect;
  model: string;
  betas: readonly string[];
}

const bodyKey = (k: KeyParts, body: Record<string, unknown>) =>
  canonical(body, k.dialect === 'openai-responses' ? undefined : NOT_ASKED);

export function exactKey(k: KeyParts, body: Record<string, unknown>): string {
  return `pao:cache:v1:${digest([k.scope, k.endpoint, k.model, [...k.betas].sort().join(','), bodyKey(k, body)])}`;
}

/** A request's last question and the rest of it (the question blanked): what a semantic lookup embeds and matches exactly. */
export interface Question {
  text: string;
  bucket: string;
}

export function questionOf(k: KeyParts, body: Record<string, unknown>): Question | undefined {
  if (semanticUnsafe(body)) return undefined;
  const asked = LAST_QUESTION[k.dialect]?.(body);
  if (!asked || asked.text.trim() === '' || asked.text.length > MAX_SEMANTIC_CHARS) return undefined;
  return {
    text: asked.text,
    bucket: digest([k.scope, k.endpoint, k.model, [...k.betas].sort().join(','), bodyKey(k, asked.rest)]),
  };
}

/** A message content's text (a string, or its text parts), and the content with it blanked. */
function contentText(content: unknown): { text: string; blank: unknown } | undefined {
  if (typeof content === 'string') return { text: content, blank: '' };
  if (!Array.isArray(content)) return undefined;
  const texts = content.filter(isRecord).flatMap((p) => (typeof p.text === 'string' ? [p.text] : []));
  return {
    text: texts.join('\n'),
    blank: content.map((p) => (isRecord(p) && typeof p.text === 'string' ? { ...p, text: '' } : p)),
  };
}

/** The last user message of a list (`field` of the body), its text, and the body with it blanked. */
function lastUserMessage(
  body: Record<string, unknown>,
  field: string,
): { text: string; rest: Record<string, unknown> } | undefined {
  const list = body[field];
  if (!Array.isArray(list)) return undefined;
  const i = list.findLastIndex((m) => isRecord(m) && m.role === 'user');
  const m = list[i];
  if (!isRecord(m)) return undefined;
  const c = contentText(m.content);
  if (!c) return undefined;
  const blanked = [...list];
  blanked[i] = { ...m, content: c.blank };
  return { text: c.text, rest: { ...body, [field]: blanked } };
}

const LAST_QUESTION: Readonly<
  Partial<
    Record<
      CallerDialect,
      (body: Record<string, unknown>) => { text: string; rest: Record<string, unknown> } | undefined
    >
  >
> = {
  'openai-chat': (body) => lastUserMessage(body, 'messages'),
  'anthropic-messages': (body) => lastUserMessage(body, 'messages'),
  'openai-responses': (body) =>
    typeof body.input === 'string'
      ? { text: body.input, rest: { ...body, input: '' } }
      : lastUserMessage(body, 'input'),
  'openai-completions': (body) =>
    typeof body.prompt === 'string' ? { text: body.prompt, rest: { ...body, prompt: '' } } : undefined,
};

/** Tools, tool calls or images make a near match unsafe: a different call, a different picture, same words. */
function semanticUnsafe(body: Record<string, unknown>): boolean {
  if (Array.isArray(body.tools) && body.tools.length > 0) return true;
  return /"(image_url|input_image|image|tool_calls|tool_use|tool_result|function_call|function_call_output)"|"role":"tool"/.test(
    JSON.stringify(body),
  );
}
