import { TextDecoder } from 'node:util';
import { createParser, type EventSourceParser } from 'eventsource-parser';
import type { ProxyError } from '../endpoints/errors.js';
import { type ChunkSink, type ChunkSource, SinkPusher } from './chunk-source.js';
import type { StreamedBody } from './dispatch.js';
import { FrameKeys } from './frame-keys.js';
import { type EventEdit, frameValue, type ReadEvent, type StreamReader, sseFrame } from './stream-reader.js';
import type { StreamOutcome } from './upstream.js';

/**
 * An upstream's SSE stream relayed to the caller in the same dialect, reading only what the
 * gateway accounts for (tokens as they pass, the usage, the last event).
 *
 * LLM traffic is thousands of streams held open, one small event every few tens of ms each, so
 * the cost that counts is per event. Events are split on the bytes as they arrive: one the
 * dialect's reader passes unchanged (`fast`) is never decoded nor re-encoded, and a chunk made
 * only of such events goes out as the very buffer that came in. Only the others (usage, the end,
 * anything the reader rewrites) are decoded and read whole. A stream with CR line ends (legal in
 * SSE, sent by no server the gateway knows) is read as text by eventsource-parser instead.
 *
 * The caller's side takes the chunks pushed (pipe: writes as they come, the upstream paused while
 * the caller's socket is full) or pulled (read: one chunk per call, for web streams and tests).
 */

export interface RelayErrors {
  /** The upstream connection failed or went silent mid-stream. */
  transport(err: unknown): ProxyError;
  /** The upstream ended without the dialect's last event. */
  broken(): ProxyError;
  /** An event the reader cannot read. */
  unreadable(): ProxyError;
}

export interface RelayDialect {
  reader: StreamReader;
  /** The dialect's error event, for an error after the stream began. */
  streamError(err: ProxyError): string;
  /** What ends the dialect's stream after an error ([DONE] for OpenAI's), if anything. */
  streamEnd?: string;
}

/** How long the caller's response waits, after the last event, for the upstream's body to end. */
const RELEASE_WAIT_MS = 1_000;
/** An event larger than this is not an LLM's: the stream is ended as unreadable, not buffered without end. */
const MAX_EVENT_BYTES = 4 * 1024 * 1024;
const LF = 10;
const CR = 13;
const BLANK_LINE = Buffer.from('\n\n');
const DATA_PREFIX = Buffer.from('data: {');
const EVENT_PREFIX = Buffer.from('event: ');
/** Longer than any event name a dialect has: a longer first line is not looked at. */
const MAX_NAME = 64;

/** Whether `raw` holds `prefix` at `at`: compared in place, no native call for a few bytes. */
function startsAt(raw: Buffer, prefix: Buffer, at: number): boolean {
  if (raw.length <= at + prefix.length) return false;
  for (let i = 0; i < prefix.length; i++) if (raw[at + i] !== prefix[i]) return false;
  return true;
}

/**
 * The frames most of a stream is made of, as the reader would write them again: `data: {...}`
 * and its blank line (OpenAI's chunks), or that line named by an `event: name` line before it
 * (Responses' and Messages' deltas). The name (undefined for none), or null for any other frame.
 */
function plainFrame(raw: Buffer): string | undefined | null {
  let dataAt = 0;
  let name: string | undefined;
  if (startsAt(raw, EVENT_PREFIX, 0)) {
    const nl = raw.indexOf(LF, EVENT_PREFIX.length);
    if (nl === -1 || nl > EVENT_PREFIX.length + MAX_NAME) return null;
    name = raw.toString('latin1', EVENT_PREFIX.length, nl);
    dataAt = nl + 1;
  }
  if (!startsAt(raw, DATA_PREFIX, dataAt) || raw.length <= dataAt + DATA_PREFIX.length + 2) return null;
  return raw.indexOf(LF, dataAt) === raw.length - 2 ? name : null;
}

export class SseRelay implements ChunkSource {
  private readonly outcome: StreamOutcome = {};
  private readonly out: Uint8Array[] = [];
  private carry: Buffer | undefined;
  /** The keys of the event being read, looked for only if its reader asks (one for every event). */
  private readonly keys = new FrameKeys();
  /** Set once CR line ends appear: the rest is parsed as text. */
  private text: { decoder: TextDecoder; pending: number } | undefined;
  private sawEnd = false;
  private finished = false;
  private ended = false;
  private delivered = 0;
  /** The caller's socket in push mode; the upstream paused while it is full. */
  private readonly pusher = new SinkPusher(
    () => this.upstream.pause(),
    () => this.upstream.resume(),
  );
  private settle: (o: StreamOutcome) => void = () => {};
  /** Resolved once the upstream exchange is over (its connection back in the pool, or dropped). */
  private released: Promise<void> | undefined;
  /** An edit of the events it wants (editEvents), on the values the reader parsed. */
  private edit: EventEdit | undefined;
  /** Nothing goes out until this settled (an edit's `before`). */
  private holding: Promise<unknown> | undefined;
  /** How the stream ended, once the last byte went to the caller (or the caller left). */
  readonly settled: Promise<StreamOutcome>;

  constructor(
    private readonly upstream: StreamedBody,
    private readonly dialect: RelayDialect,
    private readonly errors: RelayErrors,
    /** performance.now() when the call began: first-token time counts from it. */
    private readonly started: number,
    /** The caller's: once it aborts, the upstream's failure that follows is the caller leaving, not an error. */
    private readonly callerSignal?: AbortSignal,
  ) {
    this.settled = new Promise((r) => {
      this.settle = r;
    });
  }

  // ------------------------------------------------------------------------------------ events

  /** One complete event, as bytes (its blank line included). */
  private event(raw: Buffer): void {
    const reader = this.dialect.reader;
    // A single `data: {...}` line, named or not, that the reader passes unchanged: forwarded as the bytes it is.
    if (reader.fast) {
      const name = plainFrame(raw);
      const fast = name === null || this.edit?.wants(name) ? undefined : reader.fast(raw, name, this.keys.of(raw));
      if (fast) {
        if (fast.token) this.token();
        this.out.push(raw);
        return;
      }
    }
    // The rest (usage, the end, named events): read by eventsource-parser, whole, as text.
    this.parser().feed(raw.toString('utf8'));
  }

  private sse: EventSourceParser | undefined;

  private parser(): EventSourceParser {
    this.sse ??= createParser({
      onEvent: (e) => {
        if (this.text) this.text.pending = 0;
        // JSON sent on several data lines (pretty-printed) comes joined by newlines (the SSE spec's
        // rule), which JSON reads as whitespace (a string cannot hold a raw one): on one line it is the
        // same value, in the one-line frame the conformance and an edit parse.
        this.readEvent(e.event, e.data.includes('\n') ? e.data.replaceAll('\n', ' ') : e.data);
      },
    });
    return this.sse;
  }

  /** One event by name and data: what the dialect's reader makes of it. */
  private readEvent(name: string | undefined, data: string): void {
    if (this.finished) return;
    const r = this.dialect.reader.read(name, data);
    if (!r) {
      this.finish(this.errors.unreadable());
      return;
    }
    if (r.token) this.token();
    if (r.usage) this.outcome.usage = r.usage;
    const out = this.edited(name, r);
    if (out) this.out.push(Buffer.from(out, 'utf8'));
    if (r.last) {
      this.sawEnd = true;
      this.finish();
    }
  }

  /**
   * An event's frame after the edit (editEvents), where it wants the event: made from the value the
   * reader parsed, so a frame the reader changed too is written once.
   */
  private edited(name: string | undefined, r: ReadEvent): string {
    if (!this.edit?.wants(name)) return r.out;
    // A dropped event ('' out) carries no value.
    const data = r.data ?? (r.out === '' ? undefined : frameValue(r.out));
    if (!data) return r.out;
    const e = this.edit.edit(name, data);
    if (e.before) this.hold(e.before);
    return e.data === data ? r.out : sseFrame(JSON.stringify(e.data), name);
  }

  /** Holds what is ready, and what follows, until `before` settled. */
  private hold(before: Promise<unknown>): void {
    // Settles either way (a save never throws; a failed one must not hold the stream for ever).
    const held = Promise.all([this.holding, before]).then(
      () => {},
      () => {},
    );
    this.holding = held;
    void held.then(() => {
      if (this.holding !== held) return;
      this.holding = undefined;
      this.flush();
    });
  }

  /**
   * Its events edited where they are read, before they go out (stored Responses' stamp): true.
   * Asked before the stream is read.
   */
  editEvents(edit: EventEdit): boolean {
    this.edit = edit;
    return true;
  }

  private token(): void {
    // One token per event (Ollama): what the caller received, should the usage never come.
    this.delivered++;
    if (this.outcome.firstTokenMs === undefined) this.outcome.firstTokenMs = performance.now() - this.started;
  }

  /** Bytes from the upstream: complete events handed on, a partial one kept for the next chunk. */
  private feed(chunk: Buffer): void {
    if (this.finished) return;
    if (this.text) {
      // Bytes since the last event: the parser would hold a line without end for ever.
      this.text.pending += chunk.length;
      if (this.text.pending > MAX_EVENT_BYTES) {
        this.finish(this.errors.unreadable());
        return;
      }
      this.parser().feed(this.text.decoder.decode(chunk, { stream: true }));
      return;
    }
    const buf = this.carry ? Buffer.concat([this.carry, chunk]) : chunk;
    this.carry = undefined;
    if (buf.includes(CR)) {
      this.toText(buf);
      return;
    }
    // The usual chunk: one event, one line (a native search for its only LF, no loop).
    if (
      buf.length > 2 &&
      buf[buf.length - 1] === LF &&
      buf[buf.length - 2] === LF &&
      buf.indexOf(LF) === buf.length - 2
    ) {
      this.event(buf);
      return;
    }
    const before = this.out.length;
    let start = 0;
    for (let i = buf.indexOf(BLANK_LINE); i !== -1 && !this.finished; i = buf.indexOf(BLANK_LINE, start)) {
      this.event(buf.subarray(start, i + 2));
      start = i + 2;
    }
    if (start < buf.length && !this.finished) {
      if (buf.length - start > MAX_EVENT_BYTES) {
        this.finish(this.errors.unreadable());
        return;
      }
      this.carry = Buffer.from(buf.subarray(start));
    }
    // The usual chunk, one event or several passed unchanged: the buffer itself, not its pieces.
    if (start === buf.length && this.out.length > before + 1) {
      let whole = true;
      let at = 0;
      for (let k = before; k < this.out.length && whole; k++) {
        const piece = this.out[k] as Uint8Array;
        whole = piece.buffer === buf.buffer && piece.byteOffset === buf.byteOffset + at;
        at += piece.length;
      }
      if (whole && at === buf.length) this.out.splice(before, this.out.length - before, buf);
    }
  }

  /** CR line ends: the rest of the stream, this chunk included, is parsed as text. */
  private toText(buf: Buffer): void {
    this.text = { decoder: new TextDecoder(), pending: 0 };
    this.parser().feed(this.text.decoder.decode(buf, { stream: true }));
  }

  /** The upstream's body ended. */
  private upstreamEnded(): void {
    if (this.text) this.parser().feed(this.text.decoder.decode());
    else if (this.carry) {
      // A last event without its blank line: SSE drops it, as eventsource-parser does.
      this.carry = undefined;
    }
    if (!this.sawEnd) this.finish(this.errors.broken());
  }

  private finish(error?: ProxyError): void {
    if (this.finished) return;
    this.finished = true;
    if (error) {
      this.outcome.error = error;
      // The stream already began: the error travels as an event of the caller's dialect, then the stream ends properly.
      this.out.push(Buffer.from(this.dialect.streamError(error), 'utf8'));
    }
    if (this.dialect.streamEnd) this.out.push(Buffer.from(this.dialect.streamEnd, 'utf8'));
  }

  /** Once: the upstream's connection released (or dropped) and the outcome settled. */
  private end(): void {
    if (this.ended) return;
    this.ended = true;
    // After the last event only the end of the chunked body is left: read it so the keep-alive
    // connection goes back to the pool. Destroying it would cost a new connection per stream
    // (and an abort error built with its stack). A broken stream is dropped.
    // The caller's response ends only then: a caller that sends its next request at once finds the
    // connection free for it rather than making the gateway open another (a new connection per
    // stream under load, and the time to first event of each).
    if (this.sawEnd && !this.outcome.clientAborted) {
      this.released = new Promise<void>((resolve) => {
        const timer = setTimeout(() => {
          this.upstream.destroy();
          resolve();
        }, RELEASE_WAIT_MS);
        timer.unref();
        this.upstream.discard(64 * 1024, () => {
          clearTimeout(timer);
          resolve();
        });
      });
    } else this.upstream.destroy();
    // A stream cut before its usage still used the tokens it delivered: bill those, marked as counted.
    if (!this.outcome.usage && this.delivered > 0)
      this.outcome.usage = { promptTokens: 0, completionTokens: this.delivered, counted: true };
    this.settle(this.outcome);
  }

  // ------------------------------------------------------------------------------------ pull

  async read(): Promise<Uint8Array | undefined> {
    // Read from the upstream only when the caller is ready for more: backpressure end to end.
    while (this.out.length === 0 && !this.finished) {
      let chunk: Buffer | undefined;
      try {
        chunk = await this.upstream.next();
      } catch (err) {
        if (this.callerSignal?.aborted) {
          this.cancel();
          return undefined;
        }
        this.finish(this.errors.transport(err));
        break;
      }
      if (chunk === undefined) {
        this.upstreamEnded();
        break;
      }
      this.feed(chunk);
    }
    while (this.holding) await this.holding;
    if (this.outcome.clientAborted) return undefined;
    const chunk = this.take();
    if (this.finished && this.out.length === 0) {
      this.end();
      if (chunk === undefined) await this.released;
    }
    return chunk;
  }

  private take(): Uint8Array | undefined {
    if (this.out.length === 0) return undefined;
    if (this.out.length === 1) return this.out.pop();
    return Buffer.concat(this.out.splice(0));
  }

  // ------------------------------------------------------------------------------------ push

  pipe(sink: ChunkSink): void {
    this.pusher.attach(sink);
    this.upstream.listen({
      data: (chunk) => {
        this.feed(chunk);
        this.flush();
      },
      end: () => {
        this.upstreamEnded();
        this.flush();
      },
      error: (err) => {
        if (this.callerSignal?.aborted) return this.cancel();
        this.finish(this.errors.transport(err));
        this.flush();
      },
    });
  }

  /** Pushes what is ready; pauses the upstream while the caller's socket is full. */
  private flush(): void {
    if (!this.pusher.attached || this.outcome.clientAborted || this.holding) return;
    this.pusher.push(this.take(), this.finished);
    if (this.finished) {
      this.end();
      // The caller's stream ends once the upstream connection is back in the pool (or dropped).
      if (this.released) void this.released.then(() => this.pusher.end());
      else this.pusher.end();
    }
  }

  cancel(): void {
    // The caller went away: stop generating upstream.
    if (this.ended) return;
    this.outcome.clientAborted = true;
    this.finished = true;
    this.end();
    this.pusher.end();
  }
}
