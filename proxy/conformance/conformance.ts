import { isRecord } from '../../crds/is-record.js';
import type { CallerDialect } from '../endpoints/dialects.js';
import { FRAME_KEY, type FrameKeys } from '../upstreams/frame-keys.js';
import { frameJson, frameValue, type ReadEvent, type StreamReader } from '../upstreams/stream-reader.js';
import { message, messageEvent, messageEventMayNeed } from './anthropic-messages.js';
import { chatChunk, chatCompletion } from './openai-chat.js';
import { completion, completionChunk } from './openai-completions.js';
import { embeddingList } from './openai-embeddings.js';
import { response, responseEvent, responseEventBytesOk, responseEventMayNeed } from './openai-responses.js';
import type { Json } from './shape.js';

/**
 * Each dialect's answers as its published spec has them (OpenAI's and Anthropic's OpenAPI
 * documents), whatever upstream or translator made them: fields the spec requires and a server
 * left out are added with the API's own empty values; nulls where the spec allows none are
 * dropped. A normalizer returns the value it was given where nothing had to change, so an answer
 * already conformant goes out as the bytes that came in.
 *
 * Applied on the way out: a whole answer in account.ts, a relayed stream's events in its reader
 * (conformingReader, for every upstream that streams the caller's dialect), a translator's events
 * where it writes them.
 */

interface DialectConformance {
  /** A whole answer. */
  answer(body: Json): Json;
  /** One stream event by its SSE name (absent for OpenAI's unnamed `data:` events). */
  event(name: string | undefined, data: Json): Json;
  /** Whether an event, as its SSE frame, may need an edit: the others are not parsed. */
  mayNeed(name: string | undefined, frame: string): boolean;
  /**
   * Whether an event's bytes (named `name`, if at all) can go out unread (the relay's fast path),
   * for the events that most often can: by its name, one search of its bytes, or the keys a
   * reader asks of them too (`keys`, looked for once).
   */
  fastOk(raw: Buffer, name: string | undefined, keys: FrameKeys): boolean;
}

/** Usage as an object (not null), compact or spaced. */
const USAGE_OBJECT = /"usage":\s*\{/;
const EMPTY_CHOICES = '"choices":[]';
/** Logprobs a chat caller asked for, as Ollama writes them: without the refusal the spec requires beside. */
const LOGPROBS_OBJECT = /"logprobs":\s*\{/;
const REFUSAL = '"refusal"';

const CONFORMANCE: Readonly<Record<CallerDialect, DialectConformance>> = {
  'openai-chat': {
    answer: chatCompletion,
    event: (_name, data) => chatChunk(data),
    // A chunk with usage beside its choices (the usage chunk itself has none), or logprobs without their refusal.
    mayNeed: (_name, frame) =>
      (USAGE_OBJECT.test(frame) && !frame.includes(EMPTY_CHOICES)) ||
      (LOGPROBS_OBJECT.test(frame) && !frame.includes(REFUSAL)),
    // Token chunks go out unread, but those with logprobs the caller asked for and no refusal in them.
    fastOk: (_raw, _name, frame) => {
      const keys = frame.get();
      return !(keys & FRAME_KEY.logprobsObject) || (keys & FRAME_KEY.refusal) !== 0;
    },
  },
  'openai-completions': {
    answer: completion,
    event: (_name, data) => completionChunk(data),
    mayNeed: (_name, frame) =>
      !frame.includes('"logprobs"') || (USAGE_OBJECT.test(frame) && !frame.includes(EMPTY_CHOICES)),
    fastOk: (_raw, _name, frame) => (frame.get() & FRAME_KEY.logprobs) !== 0,
  },
  'openai-embeddings': {
    answer: embeddingList,
    event: (_name, data) => data,
    mayNeed: () => false,
    fastOk: () => true,
  },
  'openai-responses': {
    answer: response,
    event: responseEvent,
    mayNeed: responseEventMayNeed,
    // A text delta without the logprobs the spec requires is read and given them. One question,
    // asked of a delta only: one native search costs less than reading its bytes for every key.
    fastOk: responseEventBytesOk,
  },
  'anthropic-messages': {
    answer: message,
    event: messageEvent,
    mayNeed: messageEventMayNeed,
    fastOk: (_raw, name) => !messageEventMayNeed(name),
  },
};

/** A whole answer of the dialect as the spec has it; the same value where it already was. */
export function conformAnswer(dialect: CallerDialect, body: unknown): unknown {
  return isRecord(body) ? CONFORMANCE[dialect].answer(body) : body;
}

/**
 * One event as the reader read it: unchanged (its value, where it was parsed here or by the
 * reader), or its value changed and where its frame (`event: x\ndata: {...}\n\n`, one data
 * line) holds the JSON to replace.
 */
function conformed(
  c: DialectConformance,
  name: string | undefined,
  frame: string,
  parsed: Json | undefined,
): { data?: Json; span?: [number, number] } {
  if (!c.mayNeed(name, frame)) return parsed ? { data: parsed } : {};
  const span = frameJson(frame);
  const event = span ? (parsed ?? frameValue(frame)) : undefined;
  if (!span || !event) return {};
  const after = c.event(name, event);
  return after === event ? { data: event } : { data: after, span };
}

/**
 * The event with its value changed: its frame is written only when read. An edit after this
 * one (stored Responses' stamp, on the value) writes its own, and this one is never made.
 */
function rewritten(r: ReadEvent, data: Json, span: [number, number]): ReadEvent {
  const frame = r.out;
  let out: string | undefined;
  return {
    token: r.token,
    last: r.last,
    ...(r.usage ? { usage: r.usage } : {}),
    data,
    get out() {
      out ??= `${frame.slice(0, span[0])}${JSON.stringify(data)}${frame.slice(span[1])}`;
      return out;
    },
  };
}

/**
 * A relay's reader for a stream of the caller's dialect, its events as the spec has them. The
 * events that are most of a stream (tokens) keep the relay's fast path and go out unread; the few
 * that may need an edit (the start, the usage, the end) are parsed, and written anew only where
 * something changed.
 */
export function conformingReader(dialect: CallerDialect, reader: StreamReader): StreamReader {
  const c = CONFORMANCE[dialect];
  const fast = reader.fast;
  return {
    ...(fast
      ? {
          fast: (raw: Buffer, name: string | undefined, keys: FrameKeys) =>
            c.fastOk(raw, name, keys) ? fast(raw, name, keys) : undefined,
        }
      : {}),
    read(name, data) {
      const r = reader.read(name, data);
      if (!r || r.out === '') return r;
      const { data: value, span } = conformed(c, name, r.out, r.data);
      if (span && value) return rewritten(r, value, span);
      return value === r.data || !value ? r : { ...r, data: value };
    },
  };
}

/** A translator's event, built as an object, as the spec has it before it is written (no parse). */
export function conformEvent(dialect: CallerDialect, name: string | undefined, event: Json): Json {
  return CONFORMANCE[dialect].event(name, event);
}
