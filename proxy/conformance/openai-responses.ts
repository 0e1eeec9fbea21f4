import { eachRecord, edited, filled, ifRecord, type Json, withoutNulls } from './shape.js';

/**
 * OpenAI's Responses object (Response) and its stream's events (ResponseStreamEvent). Ollama and
 * the gateway's own translator write null for fields the spec types as a value or absent
 * (`safety_identifier`, `prompt_cache_key`, `usage` before the end): those are dropped. Required
 * fields a server leaves out get the API's own defaults; so do usage's token details and each
 * output text's `annotations` and `logprobs`.
 */

/** The Response's fields the spec never types as null (absent instead). */
const NEVER_NULL = [
  'user',
  'safety_identifier',
  'prompt_cache_key',
  'model',
  'text',
  'tools',
  'tool_choice',
  'output',
  'usage',
  'parallel_tool_calls',
];

/** Required fields, with what the API answers when a request left them unset. */
const REQUIRED = {
  error: null,
  incomplete_details: null,
  instructions: null,
  tools: [],
  output: [],
  parallel_tool_calls: true,
  metadata: {},
  tool_choice: 'auto',
  temperature: null,
  top_p: null,
};

const USAGE = { input_tokens: 0, output_tokens: 0 };

function usage(u: Json): Json {
  const details = filled(filled(u, USAGE), {
    input_tokens_details: { cached_tokens: 0 },
    output_tokens_details: { reasoning_tokens: 0 },
  });
  const total = (details.input_tokens as number) + (details.output_tokens as number);
  return filled(details, { total_tokens: Number.isFinite(total) ? total : 0 });
}

/** A content part of a message: output text carries its annotations and logprobs, empty where none. */
const part = (p: Json): Json => (p.type === 'output_text' ? filled(p, { annotations: [], logprobs: [] }) : p);

/** An output item: a message's parts, as above. */
const item = (i: Json): Json => (i.type === 'message' ? edited(i, 'content', (list) => eachRecord(list, part)) : i);

export function response(body: Json): Json {
  const r = filled(withoutNulls(body, NEVER_NULL), REQUIRED);
  return edited(
    edited(r, 'output', (list) => eachRecord(list, item)),
    'usage',
    ifRecord(usage),
  );
}

const LOGPROBS_KEY = '"logprobs"';

/** What each event needs, by its type; events not named here pass unchanged. */
const EVENTS: Readonly<Record<string, (e: Json) => Json>> = {
  'response.created': (e) => edited(e, 'response', ifRecord(response)),
  'response.queued': (e) => edited(e, 'response', ifRecord(response)),
  'response.in_progress': (e) => edited(e, 'response', ifRecord(response)),
  'response.completed': (e) => edited(e, 'response', ifRecord(response)),
  'response.incomplete': (e) => edited(e, 'response', ifRecord(response)),
  'response.failed': (e) => edited(e, 'response', ifRecord(response)),
  'response.output_item.added': (e) => edited(e, 'item', ifRecord(item)),
  'response.output_item.done': (e) => edited(e, 'item', ifRecord(item)),
  'response.content_part.added': (e) => edited(e, 'part', ifRecord(part)),
  'response.content_part.done': (e) => edited(e, 'part', ifRecord(part)),
  'response.output_text.delta': (e) => filled(e, { logprobs: [] }),
  'response.output_text.done': (e) => filled(e, { logprobs: [] }),
};

/** One event, named by its SSE name or else its `type`. */
export function responseEvent(name: string | undefined, event: Json): Json {
  const type = name ?? (typeof event.type === 'string' ? event.type : '');
  const edit = Object.hasOwn(EVENTS, type) ? EVENTS[type] : undefined;
  return edit ? edit(event) : event;
}

/** Whether an event as it goes out (its SSE frame) may need an edit: the deltas, most of a stream, mostly do not. */
export function responseEventMayNeed(name: string | undefined, frame: string): boolean {
  if (name === undefined || !Object.hasOwn(EVENTS, name)) return false;
  return name.endsWith('.delta') ? !frame.includes(LOGPROBS_KEY) : true;
}

const LOGPROBS_BYTES = Buffer.from(LOGPROBS_KEY);

/** responseEventMayNeed's answer on an event's bytes, unread: whether they can go out as they are. */
export function responseEventBytesOk(raw: Buffer, name: string | undefined): boolean {
  if (name === undefined || !Object.hasOwn(EVENTS, name)) return true;
  return name.endsWith('.delta') && raw.includes(LOGPROBS_BYTES);
}
