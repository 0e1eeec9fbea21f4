import { isRecord } from '../../crds/is-record.js';
import { invalidRequest, type ProxyError } from './errors.js';

/**
 * The OpenAI chat-completions request as the gateway checks it: what it must see to route
 * and account for the call. Other fields are passed to the upstream untouched.
 */

export interface ParsedRequest {
  model: string;
  stream: boolean;
  includeUsage: boolean;
  /** Raw body `tags`, parsed with the headers' tags. */
  tags: unknown;
  /** The body to forward: everything but the gateway's own `tags`. */
  forward: Record<string, unknown>;
}

const ROLES = new Set(['system', 'developer', 'user', 'assistant', 'tool', 'function']);
const MAX_MESSAGES = 10_000;
/**
 * Deepest nesting of arrays and objects accepted anywhere in the body, the body itself being
 * level 1. Real requests (tool schemas included) stay far below it; deeper junk would make the
 * upstream translators' recursive JSON.stringify overflow the stack. Both limits are checked on
 * the body's text before it is parsed (proxy/endpoints/json-shape.ts, called by the chat handler), so
 * parseChatRequest never sees a body past them.
 */
export const MAX_NESTING = 64;
/**
 * Most JSON values a chat request body may hold (containers, members, elements). A conversation of
 * 10,000 messages with tools stays well below it; a 10 MiB body of millions of tiny values would
 * cost hundreds of MB to parse.
 */
export const MAX_JSON_VALUES = 200_000;

function checkContent(content: unknown, at: string): ProxyError | undefined {
  if (typeof content === 'string' || content === null) return undefined;
  if (!Array.isArray(content))
    return invalidRequest(`${at}.content must be a string or an array of content parts`, `${at}.content`);
  for (const [i, part] of content.entries()) {
    const p = `${at}.content[${i}]`;
    if (!isRecord(part) || typeof part.type !== 'string')
      return invalidRequest(`${p} must be an object with a type`, p);
    if (part.type === 'text' && typeof part.text !== 'string')
      return invalidRequest(`${p}.text must be a string`, `${p}.text`);
    if (part.type === 'image_url' && !(isRecord(part.image_url) && typeof part.image_url.url === 'string')) {
      return invalidRequest(`${p}.image_url.url must be a string`, `${p}.image_url.url`);
    }
  }
  return undefined;
}

/**
 * Most choices one request may ask for (`n`, OpenAI's own maximum). A server that takes `n` gets
 * it as asked; for one that does not, the gateway makes that many calls (proxy/upstreams/fan-out.ts).
 */
export const MAX_CHOICES = 128;

/** The request's `n`: absent or null is 1; else a whole number from 1 to MAX_CHOICES. */
export function choicesOf(n: unknown): number | ProxyError {
  if (n === undefined || n === null) return 1;
  if (typeof n !== 'number' || !Number.isInteger(n) || n < 1 || n > MAX_CHOICES) {
    return invalidRequest(`n must be a whole number from 1 to ${MAX_CHOICES}`, 'n', 'invalid_n');
  }
  return n;
}

/** The request's `model`, as every endpoint requires it. */
export function modelOf(body: Record<string, unknown>): string | ProxyError {
  const { model } = body;
  if (typeof model !== 'string' || model.trim() === '') {
    return invalidRequest(
      'model is required: the name of a deployed model or a provider model id',
      'model',
      'missing_model',
    );
  }
  if (model.length > 256) return invalidRequest('model is longer than 256 characters', 'model');
  return model;
}

export function parseChatRequest(body: unknown): ParsedRequest | ProxyError {
  if (!isRecord(body)) return invalidRequest('the request body must be a JSON object');
  const { model: _model, messages, stream, stream_options, n, tags, ...rest } = body;
  const model = modelOf(body);
  if (typeof model !== 'string') return model;
  if (!Array.isArray(messages) || messages.length === 0) {
    return invalidRequest(
      'messages must be a non-empty array of {role, content} objects',
      'messages',
      'missing_messages',
    );
  }
  if (messages.length > MAX_MESSAGES)
    return invalidRequest(`messages has more than ${MAX_MESSAGES} entries`, 'messages');
  for (const [i, m] of messages.entries()) {
    const at = `messages[${i}]`;
    if (!isRecord(m)) return invalidRequest(`${at} must be an object with role and content`, at);
    if (typeof m.role !== 'string' || !ROLES.has(m.role)) {
      return invalidRequest(`${at}.role must be one of ${[...ROLES].join(', ')}`, `${at}.role`);
    }
    if (!('content' in m) && m.role !== 'assistant')
      return invalidRequest(`${at}.content is required`, `${at}.content`);
    const bad = checkContent(m.content ?? null, at);
    if (bad) return bad;
  }
  // OpenAI's schema has stream as "boolean or null"; null means the default, like absent.
  if (stream !== undefined && stream !== null && typeof stream !== 'boolean')
    return invalidRequest('stream must be a boolean', 'stream');
  if (stream_options !== undefined && stream_options !== null && !isRecord(stream_options)) {
    return invalidRequest('stream_options must be an object', 'stream_options');
  }
  const choices = choicesOf(n);
  if (typeof choices !== 'number') return choices;
  const includeUsage = isRecord(stream_options) && stream_options.include_usage === true;
  const forward: Record<string, unknown> = { model, messages, ...rest };
  if (stream !== undefined && stream !== null) forward.stream = stream;
  if (stream_options !== undefined && stream_options !== null) forward.stream_options = stream_options;
  if (n !== undefined) forward.n = n;
  return { model, stream: stream === true, includeUsage, tags, forward };
}
