import { EventStreamCodec } from '@smithy/eventstream-codec';
import { fromUtf8, toUtf8 } from '@smithy/util-utf8';
import type { ProxyError } from '../endpoints/errors.js';
import { type ChunkSink, type ChunkSource, SinkPusher } from './chunk-source.js';
import { StreamedBody } from './dispatch.js';
import type { StreamOutcome, Usage } from './upstream.js';

/**
 * An AWS event stream (application/vnd.amazon.eventstream: Bedrock's ConverseStream and
 * InvokeModelWithResponseStream) relayed to the caller from its bytes.
 *
 * LLM streams are long and their cost is per event (e2e/bench/streams.ts holds thousands): each
 * message is framed by its length prelude, decoded and checked (both CRCs) by
 * @smithy/eventstream-codec, its payload parsed once, and the event handed, as that parsed
 * object, to the per-event function of what the caller speaks (StreamEvents). For Converse that
 * is the translator's (proxy/translators/openai-chat_bedrock-converse-stream.ts), installed by
 * the translator through `through()`: the events reach it as values, never re-serialized as SSE
 * text to be parsed again on the other side of the translator, as the translators of SSE
 * dialects must. A dialect Bedrock only frames this way (Anthropic's Messages) has a
 * pass-through of its own. The chunks go to the caller's socket as they come (push mode), the
 * upstream's socket paused while the caller's is full.
 */

/** What one event stream's events become for the caller. */
export interface StreamEvents {
  /** The caller's bytes (text) for one event, '' for none; undefined for an event it cannot read. */
  push(type: string, payload: Record<string, unknown>): string | undefined;
  /** After the last event: why the stream is incomplete ("it finished (no messageStop)"), or nothing. */
  cut(): string | undefined;
  usage(): Usage | undefined;
  firstContentSeen(): boolean;
  /** The caller's dialect's error event, for an error after the stream began. */
  errorEvent(err: ProxyError): string;
  /** What ends the caller's stream ([DONE]). */
  end: string;
}

export interface EventStreamErrors {
  /** An exception message (`:message-type: exception`) of the stream. */
  exception(type: string, message: string): ProxyError;
  /** The connection failed or went silent mid-stream. */
  transport(err: unknown): ProxyError;
  /** The stream ended early: `why` says before what. */
  cut(why: string): ProxyError;
  /** Bytes that are not an event stream, or an event the caller's side cannot read. */
  malformed(): ProxyError;
  /** No per-event function was given: a dialect the caller cannot get (the gateway's bug). */
  unread(): ProxyError;
}

const codec = new EventStreamCodec(toUtf8, fromUtf8);

const MAX_MESSAGE_BYTES = 16 * 1024 * 1024;

export class EventStreamRelay implements ChunkSource {
  private readonly outcome: StreamOutcome = {};
  private readonly out: string[] = [];
  private events: StreamEvents | undefined;
  private carry: Buffer | undefined;
  private finished = false;
  private settled = false;
  /** The caller's socket in push mode; the upstream paused while it is full. */
  private readonly pusher = new SinkPusher(
    () => this.raw.pause(),
    () => this.raw.resume(),
  );
  private settle: (o: StreamOutcome) => void = () => {};
  /** How the stream ended, once the last byte went to the caller (or the caller left). */
  readonly settledOutcome: Promise<StreamOutcome>;

  constructor(
    private readonly raw: StreamedBody,
    private readonly errors: EventStreamErrors,
    /** performance.now() when the call began: first-token time counts from it. */
    private readonly started: number,
    /** The events are a whole answer's (eventsOfAnswer): complete by construction, nothing to cut. */
    private readonly whole = false,
  ) {
    this.settledOutcome = new Promise((r) => {
      this.settle = r;
    });
  }

  /**
   * The events go to `events`, the caller dialect's per-event function, before the first read:
   * a translator's (Converse) or the dialect's own pass-through.
   */
  through(events: StreamEvents): this {
    this.events = events;
    return this;
  }

  /** Events made here (a whole answer as its stream) as a relay like any other. */
  static of(
    events: ReadonlyArray<readonly [string, Record<string, unknown>]>,
    errors: EventStreamErrors,
    started: number,
  ): EventStreamRelay {
    const body = new StreamedBody(() => undefined);
    for (const [type, payload] of events) body.push(Buffer.from(encodeEvent(type, payload)));
    body.end();
    return new EventStreamRelay(body, errors, started, true);
  }

  /** Bytes from the upstream: complete messages handed on, a partial one kept for the next chunk. */
  private feed(chunk: Buffer): void {
    if (this.finished) return;
    let buf = this.carry ? Buffer.concat([this.carry, chunk]) : chunk;
    this.carry = undefined;
    // Each message: a 4-byte big-endian total length, then the rest of it.
    while (buf.length >= 4 && !this.finished) {
      const length = buf.readUInt32BE(0);
      // A prelude, headers and two CRCs at least; at most what Bedrock's events come near (a hostile
      // length must not make the gateway buffer gigabytes waiting for the rest).
      if (length < 16 || length > MAX_MESSAGE_BYTES) {
        this.fail(this.errors.malformed());
        return;
      }
      if (buf.length < length) break;
      this.message(buf.subarray(0, length));
      buf = buf.subarray(length);
    }
    if (buf.length > 0 && !this.finished) this.carry = Buffer.from(buf);
  }

  private message(bytes: Buffer): void {
    const events = this.events;
    if (!events) {
      this.fail(this.errors.unread());
      return;
    }
    let kind: unknown;
    let type: unknown;
    let payload: Record<string, unknown>;
    try {
      const m = codec.decode(bytes);
      kind = m.headers[':message-type']?.value;
      type = m.headers[':event-type']?.value ?? m.headers[':exception-type']?.value;
      // The payload read where it lies, not copied first.
      const body = Buffer.from(m.body.buffer, m.body.byteOffset, m.body.byteLength);
      payload = body.length > 0 ? (JSON.parse(body.toString('utf8')) as Record<string, unknown>) : {};
    } catch {
      this.fail(this.errors.malformed());
      return;
    }
    if (kind === 'exception' || kind === 'error') {
      const message = typeof payload.message === 'string' ? payload.message : String(type);
      this.fail(this.errors.exception(typeof type === 'string' ? type : 'internalServerException', message));
      return;
    }
    if (kind !== 'event' || typeof type !== 'string') return;
    const text = events.push(type, payload);
    if (text === undefined) {
      this.fail(this.errors.malformed());
      return;
    }
    if (this.outcome.firstTokenMs === undefined && events.firstContentSeen()) {
      this.outcome.firstTokenMs = performance.now() - this.started;
    }
    if (text) this.out.push(text);
  }

  private ended(): void {
    if (this.finished) return;
    if (this.carry) {
      this.fail(this.errors.malformed());
      return;
    }
    const why = this.whole ? undefined : this.events?.cut();
    if (why) this.fail(this.errors.cut(why));
    else this.finish('');
  }

  private fail(err: ProxyError): void {
    if (this.finished) return;
    this.outcome.error = err;
    this.finish(this.events?.errorEvent(err) ?? '');
  }

  private finish(tail: string): void {
    if (this.finished) return;
    this.finished = true;
    this.out.push(tail + (this.events?.end ?? ''));
    const usage = this.events?.usage();
    if (usage) this.outcome.usage = usage;
    this.raw.destroy();
  }

  private settleOnce(): void {
    if (this.settled) return;
    this.settled = true;
    this.settle(this.outcome);
  }

  private take(): Uint8Array | undefined {
    if (this.out.length === 0) return undefined;
    const text = this.out.length === 1 ? (this.out.pop() as string) : this.out.splice(0).join('');
    return Buffer.from(text, 'utf8');
  }

  // ------------------------------------------------------------------------------------ push

  pipe(sink: ChunkSink): void {
    this.pusher.attach(sink);
    this.raw.listen({
      data: (chunk) => {
        this.feed(chunk);
        this.flush();
      },
      end: () => {
        this.ended();
        this.flush();
      },
      error: (err) => {
        this.fail(this.errors.transport(err));
        this.flush();
      },
    });
  }

  /** Pushes what is ready; pauses the upstream while the caller's socket is full. */
  private flush(): void {
    if (!this.pusher.attached || this.outcome.clientAborted) return;
    this.pusher.push(this.take(), this.finished);
    if (this.finished) {
      this.settleOnce();
      this.pusher.end();
    }
  }

  // ------------------------------------------------------------------------------------ pull

  async read(): Promise<Uint8Array | undefined> {
    // Read from the upstream only when the caller is ready for more: backpressure end to end.
    while (this.out.length === 0 && !this.finished) {
      let chunk: Buffer | undefined;
      try {
        chunk = await this.raw.next();
      } catch (err) {
        if (this.outcome.clientAborted) return undefined;
        this.fail(this.errors.transport(err));
        break;
      }
      if (chunk === undefined) this.ended();
      else this.feed(chunk);
    }
    if (this.outcome.clientAborted) return undefined;
    const chunk = this.take();
    if (chunk === undefined) this.settleOnce();
    return chunk;
  }

  cancel(): void {
    if (this.settled) return;
    this.outcome.clientAborted = true;
    const usage = this.events?.usage();
    if (usage) this.outcome.usage = usage;
    this.finished = true;
    this.raw.destroy();
    this.settleOnce();
    this.pusher.end();
  }
}

/** One event message, as an event stream carries it. */
function encodeEvent(type: string, payload: Record<string, unknown>): Uint8Array {
  return codec.encode({
    headers: {
      ':event-type': { type: 'string', value: type },
      ':content-type': { type: 'string', value: 'application/json' },
      ':message-type': { type: 'string', value: 'event' },
    },
    body: fromUtf8(JSON.stringify(payload)),
  });
}
