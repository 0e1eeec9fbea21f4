import { eachRecord, edited, filled, ifRecord, type Json } from './shape.js';

/**
 * Anthropic's Message and its stream's events as the spec has them. Ollama's /v1/messages leaves
 * out `stop_sequence` (and, in message_start, `stop_reason`), the usage's cache counts and the
 * fields newer than it (`stop_details`, `container`, usage's `server_tool_use`, ...); the spec
 * requires each, null where there is nothing to say. Token counts a server left out are 0, as
 * Anthropic answers without a cache.
 */

const MESSAGE = {
  type: 'message',
  role: 'assistant',
  content: [],
  stop_reason: null,
  stop_sequence: null,
  stop_details: null,
  container: null,
};

const USAGE = {
  input_tokens: 0,
  output_tokens: 0,
  cache_creation_input_tokens: 0,
  cache_read_input_tokens: 0,
  cache_creation: null,
  inference_geo: null,
  output_tokens_details: null,
  server_tool_use: null,
  service_tier: null,
};

/** message_delta's usage: the cumulative counts; its input count may be null where unknown. */
const DELTA_USAGE = {
  input_tokens: null,
  output_tokens: 0,
  cache_creation_input_tokens: null,
  cache_read_input_tokens: null,
  output_tokens_details: null,
  server_tool_use: null,
};

const DELTA = { stop_reason: null, stop_sequence: null, stop_details: null, container: null };

/** What each kind of content block requires beside its own fields. */
const BLOCKS: Readonly<Record<string, Json>> = {
  text: { text: '', citations: null },
  thinking: { thinking: '', signature: '' },
  tool_use: { input: {}, caller: { type: 'direct' } },
};

function block(b: Json): Json {
  const required = typeof b.type === 'string' && Object.hasOwn(BLOCKS, b.type) ? BLOCKS[b.type] : undefined;
  return required ? filled(b, required) : b;
}

const usage = (u: unknown): unknown => (u === undefined ? { ...USAGE } : ifRecord((r) => filled(r, USAGE))(u));

export const message = (body: Json): Json =>
  edited(
    edited(filled(body, MESSAGE), 'content', (list) => eachRecord(list, block)),
    'usage',
    usage,
  );

const EVENTS: Readonly<Record<string, (e: Json) => Json>> = {
  message_start: (e) => edited(e, 'message', ifRecord(message)),
  message_delta: (e) =>
    edited(
      edited(e, 'delta', (d) => (d === undefined ? { ...DELTA } : ifRecord((r) => filled(r, DELTA))(d))),
      'usage',
      (u) => (u === undefined ? { ...DELTA_USAGE } : ifRecord((r) => filled(r, DELTA_USAGE))(u)),
    ),
  content_block_start: (e) => edited(e, 'content_block', ifRecord(block)),
};

/** One event, named by its SSE name or else its `type`. */
export function messageEvent(name: string | undefined, event: Json): Json {
  const type = name ?? (typeof event.type === 'string' ? event.type : '');
  const edit = Object.hasOwn(EVENTS, type) ? EVENTS[type] : undefined;
  return edit ? edit(event) : event;
}

/** The events that may need an edit: once or a few times a stream, never the deltas. */
export const messageEventMayNeed = (name: string | undefined): boolean =>
  name !== undefined && Object.hasOwn(EVENTS, name);
