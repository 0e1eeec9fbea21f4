import { randomUUID } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import { errorAnswer, isObject, type RequestId, RPC, RpcError } from './json-rpc.js';
import { type SessionSealer, sessionDigest } from './session.js';

/**
 * A call's own answer stream (the SSE answer to a POST of the session revisions) that outlives its
 * connection, as Streamable HTTP allows: each event carries an id, and a client whose connection
 * broke before the answer sends GET with the Last-Event-ID it had; the gateway writes what came
 * after it and goes on with the call's events until its answer. A broken connection is not a
 * cancellation (the spec says a client cancels with notifications/cancelled): the call goes on,
 * its events kept, for RESUME_MS; a client that does not come back by then has left, and the call
 * is cancelled at its server. Kept on the replica that serves the call, bounded per stream and
 * in number.
 */

/** How long a stream whose connection broke waits for its client, and an ended one is kept to be read again. */
export const RESUME_MS = 60_000;
/** The recent events a stream keeps to write again: a resumption from before them is refused. */
const KEPT_EVENTS = 64;
const KEPT_BYTES = 64 * 1024;
/** Streams kept on a replica, and of one key; past either a new stream carries no ids (it cannot be resumed). */
const MAX_STREAMS = 1_000;
const MAX_STREAMS_PER_KEY = 64;

export class CallStream {
  private seq = 0;
  private kept: Array<{ seq: number; chunk: string; bytes: number }> = [];
  private keptBytes = 0;
  private ended = false;
  private timer: NodeJS.Timeout | undefined;
  /** Called when the client did not come back in time. */
  private abandon: (() => void) | undefined;

  constructor(
    private readonly token: string,
    private res: ServerResponse | undefined,
    private readonly forget: () => void,
  ) {
    this.watch(res);
  }

  /** One event: to the client if connected, and kept to be written again. */
  write(data: string): number {
    const seq = ++this.seq;
    const chunk = `id: ${this.token}.${seq}\nevent: message\ndata: ${data}\n\n`;
    const bytes = Buffer.byteLength(chunk);
    this.kept.push({ seq, chunk, bytes });
    this.keptBytes += bytes;
    // Bounded: an event larger than the bound alone is not kept either (a resumption before it is refused).
    while (this.kept.length > KEPT_EVENTS || this.keptBytes > KEPT_BYTES) {
      this.keptBytes -= this.kept.shift()?.bytes ?? 0;
    }
    if (this.res && !this.res.destroyed) this.res.write(chunk);
    return bytes;
  }

  /** The answer was the last event: the connection ends; the events are kept a while for a client that lost them. */
  end(): void {
    this.ended = true;
    if (this.res && !this.res.destroyed) this.res.end();
    this.res = undefined;
    this.expireIn(RESUME_MS, undefined);
  }

  /** What to do if the client does not come back after its connection broke. */
  onAbandon(f: () => void): void {
    this.abandon = f;
  }

  /**
   * A client back with the id of the last event it had: what came after, then the rest as it
   * comes. False when that event is older than what is kept (the caller refuses the GET).
   */
  attach(res: ServerResponse, after: number, headers: Record<string, string>): boolean {
    const oldest = this.kept[0]?.seq ?? this.seq + 1;
    if (after + 1 < oldest || after > this.seq) return false;
    clearTimeout(this.timer);
    this.res?.destroy();
    res.writeHead(200, { ...headers, 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    for (const e of this.kept) if (e.seq > after) res.write(e.chunk);
    if (this.ended) {
      res.end();
      this.expireIn(RESUME_MS, undefined);
      return true;
    }
    this.res = res;
    this.watch(res);
    return true;
  }

  private watch(res: ServerResponse | undefined): void {
    res?.once('close', () => {
      if (this.res !== res || res.writableFinished) return;
      this.res = undefined;
      if (!this.ended) this.expireIn(RESUME_MS, () => this.abandon?.());
    });
  }

  private expireIn(ms: number, then: (() => void) | undefined): void {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.forget();
      then?.();
    }, ms);
    this.timer.unref();
  }
}

/** The call streams of this replica, by id, each opened for one session. */
export class CallStreams {
  private readonly streams = new Map<string, CallStream>();
  private readonly perKey = new Map<string, number>();

  /** `replica`: this replica's address for its peers (proxy/mcp/replica-forward.ts), sealed into each stream's ids. */
  constructor(
    private readonly sealer: SessionSealer,
    private readonly replica?: string,
  ) {}

  /**
   * A stream for the call `requestId` of the session (of `key`) on `res`; none past the bounds (the
   * answer then goes without ids).
   */
  open(res: ServerResponse, sessionId: string, requestId: RequestId, key: string): CallStream | undefined {
    const held = this.perKey.get(key) ?? 0;
    if (this.streams.size >= MAX_STREAMS || held >= MAX_STREAMS_PER_KEY) return undefined;
    this.perKey.set(key, held + 1);
    const id = randomUUID();
    const token = this.sealer.sealValue({
      s: sessionDigest(sessionId),
      c: id,
      r: requestId,
      ...(this.replica ? { a: this.replica } : {}),
    });
    const stream = new CallStream(token, res, () => {
      if (!this.streams.delete(id)) return;
      const left = (this.perKey.get(key) ?? 1) - 1;
      if (left > 0) this.perKey.set(key, left);
      else this.perKey.delete(key);
    });
    this.streams.set(id, stream);
    return stream;
  }

  /**
   * A GET of the session with the Last-Event-ID of a call's stream, served: what came after it and
   * the rest as it comes. Where this replica does not keep that stream (it ended over RESUME_MS
   * ago, its events were too many, another replica serves the call), the call is answered with an
   * error at once, so that its client does not wait for an answer that cannot come. False for an
   * id that is not a call stream's (the servers' stream's, or none); the replica that serves the
   * call, for a stream of another replica's (unless this request was passed on by one already).
   */
  resume(
    lastEventId: string | undefined,
    sessionId: string,
    res: ServerResponse,
    headers: Record<string, string>,
    passedOn = false,
  ): boolean | { replica: string; requestId: unknown } {
    const dot = lastEventId?.lastIndexOf('.') ?? -1;
    if (!lastEventId || dot < 0) return false;
    const sealed = this.sealer.openValue(lastEventId.slice(0, dot));
    if (!isObject(sealed) || typeof sealed.c !== 'string' || sealed.s !== sessionDigest(sessionId)) return false;
    const after = Number(lastEventId.slice(dot + 1));
    const stream = this.streams.get(sealed.c);
    if (stream && Number.isSafeInteger(after) && stream.attach(res, after, headers)) return true;
    if (!stream && !passedOn && typeof sealed.a === 'string' && sealed.a !== this.replica) {
      return { replica: sealed.a, requestId: sealed.r };
    }
    this.refuse(res, headers, sealed.r);
    return true;
  }

  /** The call's error, at once: its stream cannot be taken up here. */
  refuse(res: ServerResponse, headers: Record<string, string>, requestId: unknown): void {
    const id = typeof requestId === 'string' || typeof requestId === 'number' ? requestId : null;
    const why = new RpcError(
      RPC.gateway,
      'The answer stream of this call cannot be resumed here: it ended over a minute ago, it lost events past what is kept, or the replica that served the call is gone',
    );
    res.writeHead(200, { ...headers, 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    res.end(`event: message\ndata: ${JSON.stringify(errorAnswer(id, why))}\n\n`);
  }

  get size(): number {
    return this.streams.size;
  }
}
