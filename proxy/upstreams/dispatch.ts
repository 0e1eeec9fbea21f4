import { type Dispatcher, errors } from 'undici';

/**
 * HTTP exchanges on undici's dispatch API. undici's request() wraps every answer in a Readable
 * (its handler, the stream, an async iterator or a consumer on top): the profile of the
 * gateway's request path showed them as its largest share after the sockets' own syscalls
 * (e2e/bench/RESULTS.md 11). Here the answer is collected whole, or handed over chunk by chunk
 * with backpressure (the socket is paused while the reader is behind). Timeouts and errors are
 * undici's own (UND_ERR_HEADERS_TIMEOUT, UND_ERR_BODY_TIMEOUT, ...), as with request(); the
 * caller's signal aborts the exchange.
 */

const { RequestAbortedError } = errors;

export interface WholeAnswer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
}

/** Wires `signal` to the exchange's controller, whenever each arrives; returns the detach. */
function abortable(signal: AbortSignal): {
  attach(c: Dispatcher.DispatchController): void;
  detach(): void;
} {
  let controller: Dispatcher.DispatchController | undefined;
  const onAbort = () => controller?.abort(new RequestAbortedError());
  signal.addEventListener('abort', onAbort, { once: true });
  return {
    attach: (c) => {
      controller = c;
      if (signal.aborted) c.abort(new RequestAbortedError());
    },
    detach: () => signal.removeEventListener('abort', onAbort),
  };
}

const utf8 = (chunks: Buffer[]) =>
  chunks.length === 1 ? (chunks[0] as Buffer).toString('utf8') : Buffer.concat(chunks).toString('utf8');

export function exchangeWhole(
  agent: Dispatcher,
  opts: Dispatcher.DispatchOptions,
  signal: AbortSignal,
): Promise<WholeAnswer> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) {
      reject(new RequestAbortedError());
      return;
    }
    const abort = abortable(signal);
    let status = 0;
    let headers: WholeAnswer['headers'] = {};
    const chunks: Buffer[] = [];
    agent.dispatch(opts, {
      onRequestStart: (c) => abort.attach(c),
      onResponseStart(_c, statusCode, h) {
        status = statusCode;
        headers = h;
      },
      onResponseData(_c, chunk) {
        chunks.push(chunk);
      },
      onResponseEnd() {
        abort.detach();
        resolve({ status, headers, text: utf8(chunks) });
      },
      onResponseError(_c, err) {
        abort.detach();
        reject(err);
      },
    });
  });
}

/** Chunks buffered before the socket is paused. */
const HIGH_WATER = 16;

/** A streamed answer's body: its chunks in order, then undefined; the exchange's error, if it fails. */
export class StreamedBody {
  private readonly queue: Buffer[] = [];
  private ended = false;
  private error: Error | undefined;
  private waiter: { resolve: (c: Buffer | undefined) => void; reject: (e: Error) => void } | undefined;
  private paused = false;
  /** Bytes still to be read and dropped once the reader is done (discard()). */
  private discarding: number | undefined;
  /** Called once the discarded rest is gone (read to its end, or the exchange dropped). */
  private discarded: (() => void) | undefined;
  /** Push mode (listen()): chunks, the end and the error are handed over as they arrive. */
  private listener: BodyListener | undefined;

  constructor(private readonly controller: () => Dispatcher.DispatchController | undefined) {}

  push(chunk: Buffer): void {
    if (this.discarding !== undefined) {
      this.discarding -= chunk.length;
      if (this.discarding < 0) this.destroy();
      return;
    }
    if (this.listener) {
      this.listener.data(chunk);
      return;
    }
    const w = this.waiter;
    if (w) {
      this.waiter = undefined;
      w.resolve(chunk);
      return;
    }
    this.queue.push(chunk);
    if (this.queue.length >= HIGH_WATER && !this.paused) {
      this.paused = true;
      this.controller()?.pause();
    }
  }

  end(): void {
    this.ended = true;
    if (this.discarding !== undefined) {
      this.afterDiscard();
      return;
    }
    if (this.listener) {
      if (this.discarding === undefined) this.listener.end();
      return;
    }
    const w = this.waiter;
    this.waiter = undefined;
    w?.resolve(undefined);
  }

  fail(err: Error): void {
    if (this.ended) return;
    this.error = err;
    if (this.discarding !== undefined) {
      this.afterDiscard();
      return;
    }
    if (this.listener) {
      if (this.discarding === undefined) this.listener.error(err);
      return;
    }
    const w = this.waiter;
    this.waiter = undefined;
    w?.reject(err);
  }

  /**
   * Push mode, instead of next(): what is queued, then every chunk as it arrives, then the end or
   * the error. The reader applies backpressure with pause() and resume().
   */
  listen(listener: BodyListener): void {
    this.listener = listener;
    for (const chunk of this.queue.splice(0)) listener.data(chunk);
    if (this.error) listener.error(this.error);
    else if (this.ended) listener.end();
    else this.resume();
  }

  /** The reader is behind (push mode): the socket stops being read. */
  pause(): void {
    if (this.paused || this.done) return;
    this.paused = true;
    this.controller()?.pause();
  }

  resume(): void {
    if (!this.paused) return;
    this.paused = false;
    this.controller()?.resume();
  }

  get done(): boolean {
    return this.ended || this.error !== undefined;
  }

  next(): Promise<Buffer | undefined> {
    const chunk = this.queue.shift();
    if (this.paused && this.queue.length < HIGH_WATER / 2) {
      this.paused = false;
      this.controller()?.resume();
    }
    if (chunk) return Promise.resolve(chunk);
    if (this.error) return Promise.reject(this.error);
    if (this.ended) return Promise.resolve(undefined);
    return new Promise((resolve, reject) => {
      this.waiter = { resolve, reject };
    });
  }

  /**
   * The reader has what it needs: the rest is read and dropped, so the keep-alive connection goes
   * back to the pool (a destroyed one costs a new connection per stream); past `limit` bytes the
   * exchange is dropped instead. `done` is called once the rest is gone.
   */
  discard(limit: number, done?: () => void): void {
    this.discarded = done;
    if (this.done) {
      this.afterDiscard();
      return;
    }
    let queued = 0;
    for (const c of this.queue.splice(0)) queued += c.length;
    this.discarding = limit - queued;
    if (this.discarding < 0) {
      this.destroy();
      return;
    }
    if (this.paused) {
      this.paused = false;
      this.controller()?.resume();
    }
  }

  private afterDiscard(): void {
    const done = this.discarded;
    this.discarded = undefined;
    done?.();
  }

  /** Drops the exchange (and its connection) unless it already ended. */
  destroy(): void {
    if (this.done) return;
    this.controller()?.abort(new RequestAbortedError());
  }

  /** The rest of the body as text (error answers). */
  async text(): Promise<string> {
    const parts: Buffer[] = [];
    for (let c = await this.next(); c; c = await this.next()) parts.push(c);
    return utf8(parts);
  }
}

export interface BodyListener {
  data(chunk: Buffer): void;
  end(): void;
  error(err: Error): void;
}

export interface StreamedAnswer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: StreamedBody;
}

/** Resolves once the status and headers arrived; the body follows as the reader asks for it. */
export function exchangeStreamed(
  agent: Dispatcher,
  opts: Dispatcher.DispatchOptions,
  signal: AbortSignal,
): Promise<StreamedAnswer> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) {
      reject(new RequestAbortedError());
      return;
    }
    const abort = abortable(signal);
    let controller: Dispatcher.DispatchController | undefined;
    const body = new StreamedBody(() => controller);
    let started = false;
    agent.dispatch(opts, {
      onRequestStart(c) {
        controller = c;
        abort.attach(c);
      },
      onResponseStart(_c, statusCode, headers) {
        started = true;
        resolve({ status: statusCode, headers, body });
      },
      onResponseData(_c, chunk) {
        body.push(chunk);
      },
      onResponseEnd() {
        abort.detach();
        body.end();
      },
      onResponseError(_c, err) {
        abort.detach();
        if (started) body.fail(err);
        else reject(err);
      },
    });
  });
}
