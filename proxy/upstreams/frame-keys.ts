/**
 * Which of a few JSON keys an SSE event's bytes hold: what the dialects' readers and conformance
 * ask before letting a token event go out unread (sse-relay.ts's fast path). Found in one pass
 * over the bytes, on the first ask: named events are decided by their name, or by one native
 * search where one question is all (a Responses delta's logprobs), and the large ones (a
 * Response, a message) are never read.
 *
 * Asked with Buffer searches, the same questions cost three to five native calls per chat
 * chunk (0.2-0.25 µs each, most of it the call); this loop reads a chunk of a few hundred bytes
 * in less (0.95 -> 0.37 µs a chunk through the chat reader). A key matches as `Buffer.includes`
 * would match it, quotes included: text inside a string value has its quotes escaped, so it
 * never matches.
 */

/** The keys found, as bits of `FrameKeys.get()`. */
export const FRAME_KEY = {
  /** "usage" */
  usage: 1,
  /** "content" or "text" with a non-empty string value, compact or spaced: the event carries a token. */
  content: 2,
  /** "logprobs" */
  logprobs: 4,
  /** "logprobs":{ (compact, as Ollama writes it) */
  logprobsObject: 8,
  /** "refusal" */
  refusal: 16,
} as const;

const QUOTE = 34;
const COLON = 58;
const SPACE = 32;
const BRACE = 123;

const key = (text: string): Buffer => Buffer.from(`${text}"`, 'latin1');
/** Each key's bytes after its opening quote, closing quote included, by its first byte. */
const USAGE = key('usage');
const CONTENT = key('content');
const TEXT = key('text');
const LOGPROBS = key('logprobs');
const REFUSAL = key('refusal');

/** Whether `buf` holds `k` at `at` (compared in place: a native call costs more than a few bytes). */
function holds(buf: Buffer, at: number, end: number, k: Buffer): boolean {
  if (at + k.length > end) return false;
  for (let i = 0; i < k.length; i++) if (buf[at + i] !== k[i]) return false;
  return true;
}

/** After a `"content"` or `"text"` key: `:`, a space or none, then a string that is not empty. */
function nonEmptyString(buf: Buffer, at: number, end: number): boolean {
  if (buf[at] !== COLON) return false;
  let i = at + 1;
  if (buf[i] === SPACE) i++;
  return i + 1 < end && buf[i] === QUOTE && buf[i + 1] !== QUOTE;
}

/** The bits for the key starting at `at` (just past its opening quote), if it is one asked about. */
function keyAt(buf: Buffer, at: number, end: number): number {
  switch (buf[at]) {
    case USAGE[0]:
      return holds(buf, at, end, USAGE) ? FRAME_KEY.usage : 0;
    case CONTENT[0]:
      return holds(buf, at, end, CONTENT) && nonEmptyString(buf, at + CONTENT.length, end) ? FRAME_KEY.content : 0;
    case TEXT[0]:
      return holds(buf, at, end, TEXT) && nonEmptyString(buf, at + TEXT.length, end) ? FRAME_KEY.content : 0;
    case LOGPROBS[0]: {
      if (!holds(buf, at, end, LOGPROBS)) return 0;
      const after = at + LOGPROBS.length;
      return after + 1 < end && buf[after] === COLON && buf[after + 1] === BRACE
        ? FRAME_KEY.logprobs | FRAME_KEY.logprobsObject
        : FRAME_KEY.logprobs;
    }
    case REFUSAL[0]:
      return holds(buf, at, end, REFUSAL) ? FRAME_KEY.refusal : 0;
    default:
      return 0;
  }
}

/** The FRAME_KEY bits of `raw`'s bytes in [from, end). */
export function keysOf(raw: Buffer, from = 0, end = raw.length): number {
  let keys = 0;
  for (let i = from; i < end; i++) if (raw[i] === QUOTE) keys |= keyAt(raw, i + 1, end);
  return keys;
}

/** One event's keys, looked for on the first ask only; reused by its relay for every event. */
export class FrameKeys {
  private raw: Buffer = Buffer.alloc(0);
  private found = -1;

  /** The event asked about from now on. */
  of(raw: Buffer): this {
    this.raw = raw;
    this.found = -1;
    return this;
  }

  get(): number {
    if (this.found < 0) this.found = keysOf(this.raw);
    return this.found;
  }
}
