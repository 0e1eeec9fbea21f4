import type { FrameKeys } from './frame-keys.js';
import type { Usage } from './upstream.js';

/**
 * Reading an upstream's SSE stream in the dialect it speaks: each event is handed on (or
 * dropped) and the gateway notes what it accounts for: tokens as they pass, the usage the
 * upstream reports, and the event that completes the stream.
 */

/** One upstream SSE event, as the relay hands it on. */
interface ReadEvent {
  /** What goes to the client ('' for nothing). */
  out: string;
  /** It carried a generated token (first-token time; the count should usage never come). */
  token: boolean;
  usage?: Usage;
  /** The dialect's last event: the stream is complete. */
  last: boolean;
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

export const sseFrame = (data: string, event?: string) => `${event ? `event: ${event}\n` : ''}data: ${data}\n\n`;

/** An SSE event's data: its data lines' values, joined by newlines (the SSE spec's own rule). */
export const sseData = (event: string): string =>
  event
    .split(/\r?\n/)
    .filter((l) => l.startsWith('data:'))
    .map((l) => l.slice(5).trimStart())
    .join('\n');

export const num = (v: unknown): number => (typeof v === 'number' && Number.isFinite(v) ? v : 0);
