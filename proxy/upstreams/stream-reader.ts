import { isRecord } from '../../crds/is-record.js';
import type { FrameKeys } from './frame-keys.js';
import type { Usage } from './upstream.js';

/**
 * Reading an upstream's SSE stream in the dialect it speaks: each event is handed on (or
 * dropped) and the gateway notes what it accounts for: tokens as they pass, the usage the
 * upstream reports, and the event that completes the stream.
 */

/** One upstream SSE event, as the relay hands it on. */
export interface ReadEvent {
  /** What goes to the client ('' for nothing). */
  out: string;
  /** It carried a generated token (first-token time; the count should usage never come). */
  token: boolean;
  usage?: Usage;
  /** The dialect's last event: the stream is complete. */
  last: boolean;
  /**
   * `out`'s data as a value, where a reader parsed it anyway (and `out` is that value's frame):
   * whoever reads the event after it need not parse it again. A reader that changes `out`
   * without it drops it; a dropped event ('' out) has none.
   */
  data?: Json;
}

type Json = Record<string, unknown>;

/**
 * An edit of a stream's events made where they are read (the relay), on the value its reader
 * already parsed: an event a reader and an edit both need is parsed once and written once
 * (stored Responses' stamp, proxy/stored-responses/answer.ts).
 */
export interface EventEdit {
  /** Whether an event, by its SSE name, may be edited: such events go through edit(), never unread. */
  wants(name: string | undefined): boolean;
  /**
   * The event's data as it goes out (the same object where nothing changed); `before`: the
   * event goes out, with what follows it, once this settled.
   */
  edit(name: string | undefined, data: Json): { data: Json; before?: Promise<unknown> };
}

export interface StreamReader {
  /** One event by its SSE name and data; undefined where the data is not the dialect's JSON. */
  read(event: string | undefined, data: string): ReadEvent | undefined;
  /**
   * One event given as its bytes, a single `data: {...}` line and its blank line, after an
   * `event: name` line where `name` is given: whether it carries a token, when it goes to the
   * caller unchanged and carries nothing else the gateway accounts for; undefined sends it through
   * read(). Saves decoding the events that are most of a stream (sse-relay.ts). `keys`: the JSON
   * keys in `raw` (frame-keys.ts), looked for once whoever asks first.
   */
  fast?(raw: Buffer, name: string | undefined, keys: FrameKeys): FastEvent | undefined;
}

/** What `fast` says of an event it passes unchanged. */
export interface FastEvent {
  readonly token: boolean;
}
/** The two answers of `fast`, shared: no object per event. */
export const TOKEN: FastEvent = Object.freeze({ token: true });
export const NO_TOKEN: FastEvent = Object.freeze({ token: false });

/**
 * An SSE event of `data` (and its name): each line of `data` a `data:` line of its own, the SSE
 * spec's framing, so that a value with a newline in it cannot end the event early or leave a line
 * no reader takes for data.
 */
export const sseFrame = (data: string, event?: string) =>
  `${event ? `event: ${event}\n` : ''}data: ${data.includes('\n') ? data.replaceAll('\n', '\ndata: ') : data}\n\n`;

const DATA = 'data: ';

/**
 * Where a frame as readers write it (`event: x\ndata: {...}\n\n`, one data line) has its JSON
 * object: [start, end), or undefined for any other frame.
 */
export function frameJson(frame: string): [number, number] | undefined {
  const at = frame.indexOf(DATA);
  const end = frame.indexOf('\n', at);
  if (at === -1 || end === -1 || frame.charCodeAt(at + DATA.length) !== 123 /* { */) return undefined;
  return [at + DATA.length, end];
}

/** A frame's JSON object, parsed; undefined where it has none. */
export function frameValue(frame: string): Json | undefined {
  const span = frameJson(frame);
  if (!span) return undefined;
  try {
    const v: unknown = JSON.parse(frame.slice(span[0], span[1]));
    return isRecord(v) ? v : undefined;
  } catch {
    return undefined;
  }
}

/** An SSE event's data: its data lines' values, joined by newlines (the SSE spec's own rule). */
export const sseData = (event: string): string =>
  event
    .split(/\r?\n/)
    .filter((l) => l.startsWith('data:'))
    .map((l) => l.slice(5).trimStart())
    .join('\n');

export const num = (v: unknown): number => (typeof v === 'number' && Number.isFinite(v) ? v : 0);
