import type { Readable } from 'node:stream';
import { Readable as NodeReadable } from 'node:stream';
import type { ConverseStreamCommand, ConverseStreamOutput } from '@aws-sdk/client-bedrock-runtime';
import { EventStreamCodec } from '@smithy/eventstream-codec';
import { fromUtf8, toUtf8 } from '@smithy/util-utf8';
import type { ProxyError } from '../endpoints/errors.js';
import { type ChunkSink, type ChunkSource, DrainGate } from './chunk-source.js';
import type { StreamOutcome } from './upstream.js';

/**
 * A ConverseStream answer relayed from its raw bytes (vnd.amazon.eventstream).
 *
 * The SDK still builds, signs and sends the call, retries it and maps its errors; only a 200's
 * body is taken from it (takeEventStream) before its deserializer reads it. The SDK decodes each
 * event through several async iterators and a schema-driven deserializer: on the stream-holding
 * bench that was most of the Bedrock route's CPU per event (e2e/bench/RESULTS.md). Here each
 * message is framed by its length prelude, decoded and checked (both CRCs) by
 * @smithy/eventstream-codec, its payload parsed once, and the event handed to the translator
 * as the SDK would have typed it; the chunks go to the caller's socket as they come, the body
 * paused while the socket is full.
 */

const codec = new EventStreamCodec(toUtf8, fromUtf8);

const MAX_MESSAGE_BYTES = 16 * 1024 * 1024;

/** The middleware's name on the command's stack. */
const TAKE = 'gatewayTakeEventStream';

interface RawResponse {
  statusCode: number;
  headers: Record<string, string>;
  body: unknown;
}

/**
 * Takes the body of the command's 200 event-stream answer for the caller of `body()` and gives
 * the SDK's deserializer an empty one in its place (its own iterator then ends at once, unread).
 * Errors (any other status) are left to the SDK.
 */
export function takeEventStream(command: ConverseStreamCommand): { body(): Readable | undefined } {
  let taken: Readable | undefined;
  command.middlewareStack.add(
    (next) => async (args) => {
      const out = await next(args);
      const res = out.response as RawResponse;
      const type = res.headers?.['content-type'] ?? '';
      if (res.statusCode === 200 && type.includes('eventstream') && res.body instanceof NodeReadable) {
        taken = res.body;
        res.body = NodeReadable.from([]);
      }
      return out;
    },
    // Low: inside the SDK's deserializer, so the answer is taken before it is read.
    { step: 'deserialize', name: TAKE, priority: 'low' },
  );
  return { body: () => taken };
}

export interface ConverseTranslation {
  /** The chunks (SSE text) one event becomes; throws what mapError maps. */
  push(event: ConverseStreamOutput): string;
  /** After the last event: the error to end with if the stream was cut short, or nothing. */
  cut(): ProxyError | undefined;
  usage(): StreamOutcome['usage'];
  firstContentSeen(): boolean;
  /** The dialect's error event. */
  errorEvent(err: ProxyError): string;
  /** What ends the caller's stream ([DONE]). */
  end: string;
}

/** An exception frame (`:message-type: exception`) as the SDK would have thrown it. */
class StreamException extends Error {
  constructor(name: string, message: string) {
    super(message);
    this.name = name;
  }
}

/** A payload as the SDK types it: blobs (base64 in the JSON) as bytes. */
function typed(eventType: string, payload: Record<string, unknown>): ConverseStreamOutput {
  if (eventType === 'contentBlockDelta') {
    const delta = payload.delta as { reasoningContent?: { redactedContent?: unknown } } | undefined;
    const redacted = delta?.reasoningContent?.redactedContent;
    if (typeof redacted === 'string') {
      (delta?.reasoningContent as { redactedContent: Uint8Array }).redactedContent = Buffer.from(redacted, 'base64');
    }
  }
  return { [eventType]: payload } as unknown as ConverseStreamOutput;
}

export class ConverseEventRelay implements ChunkSource {
  private readonly outcome: StreamOutcome = {};
  private readonly out: string[] = [];
  private carry: Buffer | undefined;
  private finished = false;
  private settled = false;
  private sink: ChunkSink | undefined;
  private sinkEnded = false;
  /** The body paused while the caller's socket is full. */
  private readonly gate = new DrainGate(
    () => this.raw.pause(),
    () => {
      if (!this.finished) this.raw.resume();
    },
  );
  private waiter: (() => void) | undefined;
  private settle: (o: StreamOutcome) => void = () => {};
  readonly outcomeSettled: Promise<StreamOutcome>;

  constructor(
    private readonly raw: Readable,
    private readonly t: ConverseTranslation,
    private readonly mapError: (err: unknown) => ProxyError,
    private readonly started: number,
  ) {
    this.outcomeSettled = new Promise((r) => {
      this.settle = r;
    });
    raw.on('data', (chunk: Buffer) => this.feed(chunk));
    raw.once('end', () => this.ended());
    raw.on('error', (err) => this.fail(this.mapError(err)));
    // Nothing flows until a reader (pipe or read) asks.
    raw.pause();
  }

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
        this.fail(this.mapError(new Error('a malformed event-stream message')));
        return;
      }
      if (buf.length < length) break;
      this.message(buf.subarray(0, length));
      buf = buf.subarray(length);
    }
    if (buf.length > 0 && !this.finished) this.carry = Buffer.from(buf);
    this.flush();
  }

  private message(bytes: Buffer): void {
    let kind: string | undefined;
    let type: string | undefined;
    let payload: Record<string, unknown>;
    try {
      const m = codec.decode(bytes);
      kind = m.headers[':message-type']?.value as string | undefined;
      type = (m.headers[':event-type']?.value ?? m.headers[':exception-type']?.value) as string | undefined;
      // The payload read where it lies, not copied first.
      const body = Buffer.from(m.body.buffer, m.body.byteOffset, m.body.byteLength);
      payload = body.length > 0 ? (JSON.parse(body.toString('utf8')) as Record<string, unknown>) : {};
    } catch (err) {
      this.fail(this.mapError(err));
      return;
    }
    if (kind === 'exception' || kind === 'error') {
      const message = typeof payload.message === 'string' ? payload.message : String(type);
      this.fail(this.mapError(new StreamException(type ?? 'InternalServerException', message)));
      return;
    }
    if (kind !== 'event' || !type) return;
    let text: string;
    try {
      text = this.t.push(typed(type, payload));
    } catch (err) {
      this.fail(this.mapError(err));
      return;
    }
    if (this.outcome.firstTokenMs === undefined && this.t.firstContentSeen()) {
      this.outcome.firstTokenMs = performance.now() - this.started;
    }
    if (text) this.out.push(text);
  }

  private ended(): void {
    if (this.finished) return;
    const cut = this.t.cut();
    if (cut) this.fail(cut);
    else this.finish('');
  }

  private fail(err: ProxyError): void {
    if (this.finished) return;
    this.outcome.error = err;
    this.finish(this.t.errorEvent(err));
  }

  private finish(tail: string): void {
    if (this.finished) return;
    this.finished = true;
    this.out.push(tail + this.t.end);
    const usage = this.t.usage();
    if (usage) this.outcome.usage = usage;
    if (!this.raw.readableEnded) this.raw.destroy();
    this.flush();
  }

  private settleOnce(): void {
    if (this.settled) return;
    this.settled = true;
    this.settle(this.outcome);
  }

  /** Push mode: what is ready goes to the sink; the body pauses while the sink is full. */
  private flush(): void {
    const w = this.waiter;
    this.waiter = undefined;
    w?.();
    const sink = this.sink;
    if (!sink) return;
    if (this.out.length > 0) {
      const text = this.out.length === 1 ? (this.out.pop() as string) : this.out.splice(0).join('');
      if (!sink.write(Buffer.from(text, 'utf8')) && !this.finished) this.gate.full(sink);
    }
    if (this.finished) {
      this.settleOnce();
      this.endSink();
    }
  }

  private endSink(): void {
    if (this.sinkEnded || !this.sink) return;
    this.sinkEnded = true;
    this.sink.end();
  }

  pipe(sink: ChunkSink): void {
    this.sink = sink;
    this.flush();
    if (!this.finished) this.raw.resume();
  }

  async read(): Promise<Uint8Array | undefined> {
    while (this.out.length === 0 && !this.finished) {
      const more = new Promise<void>((r) => {
        this.waiter = r;
      });
      this.raw.resume();
      await more;
      this.raw.pause();
    }
    if (this.out.length === 0) {
      this.settleOnce();
      return undefined;
    }
    return Buffer.from(this.out.splice(0).join(''), 'utf8');
  }

  cancel(): void {
    if (this.settled) return;
    this.outcome.clientAborted = true;
    const usage = this.t.usage();
    if (usage) this.outcome.usage = usage;
    this.finished = true;
    this.raw.destroy();
    this.settleOnce();
    this.endSink();
  }
}
