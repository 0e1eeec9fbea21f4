import type { EventEdit } from './stream-reader.js';

/**
 * A streamed answer's body, read chunk by chunk with backpressure: the next chunk is made only
 * when asked for. The OpenAI-compatible relay hands the node:http server (proxy/serve.ts) one of
 * these directly; a web ReadableStream costs its construction per stream (on Node 20 a
 * transferable wrapper, ~3 % of the streaming path's CPU in the profile of e2e/bench/RESULTS.md
 * 11) and a promise-queued read per chunk. Upstreams that make a ReadableStream anyway (Bedrock's
 * event stream) keep it; the Hono routes get a ReadableStream of either.
 */
export interface ChunkSource {
  /** The next chunk, undefined at the end. One read at a time. */
  read(): Promise<Uint8Array | undefined>;
  /** The reader left: stop producing (and release what the producer holds). */
  cancel(): void;
  /**
   * Push mode, instead of read(), where the source has it: chunks written to the sink as they
   * are made, with no promise per chunk (a long stream's cost is per event); the source stops
   * while the sink is full and resumes once it drained.
   */
  pipe?(sink: ChunkSink): void;
  /**
   * Where the source reads SSE events (a relay): `edit` applied to them before they go out, on
   * the values it parsed anyway; true where it took it. Asked before the first read.
   */
  editEvents?(edit: EventEdit): boolean;
}

/** Where a source in push mode writes: the caller's socket. */
export interface ChunkSink {
  /** false: the sink is full; the source waits for onceDrained. */
  write(chunk: Uint8Array): boolean;
  onceDrained(resume: () => void): void;
  /** Once, after the last chunk (or when the reader left). */
  end(): void;
}

/**
 * Holds a push-mode source's producer (its upstream) while the sink is full. One wait per full
 * sink: chunks already on their way while the producer is paused find it waiting and add no
 * drain listener of their own.
 */
class DrainGate {
  private waiting = false;

  constructor(
    private readonly pause: () => void,
    private readonly resume: () => void,
  ) {}

  /** The sink refused a write: pause the producer until it drained (once, however often told). */
  full(sink: ChunkSink): void {
    if (this.waiting) return;
    this.waiting = true;
    this.pause();
    sink.onceDrained(() => {
      this.waiting = false;
      this.resume();
    });
  }
}

/**
 * The push half every relay shares: what its source made ready goes to the sink, the producer
 * paused while the sink is full (DrainGate), and the sink ended once.
 */
export class SinkPusher {
  private sink: ChunkSink | undefined;
  private ended = false;
  private readonly gate: DrainGate;

  constructor(pause: () => void, resume: () => void) {
    this.gate = new DrainGate(pause, resume);
  }

  attach(sink: ChunkSink): void {
    this.sink = sink;
  }

  get attached(): boolean {
    return this.sink !== undefined;
  }

  /** Writes what is ready; unless the source is finished, a full sink pauses its producer. */
  push(chunk: Uint8Array | undefined, finished: boolean): void {
    const sink = this.sink;
    if (chunk && sink && !sink.write(chunk) && !finished) this.gate.full(sink);
  }

  end(): void {
    if (this.ended || !this.sink) return;
    this.ended = true;
    this.sink.end();
  }
}

export type StreamBody = ReadableStream<Uint8Array> | ChunkSource;

export function chunksOf(body: StreamBody): ChunkSource {
  if (!(body instanceof ReadableStream)) return body;
  const reader = body.getReader();
  return {
    read: async () => {
      const { done, value } = await reader.read();
      return done ? undefined : value;
    },
    cancel: () => void reader.cancel().catch(() => {}),
  };
}

export function webStream(body: StreamBody): ReadableStream<Uint8Array> {
  if (body instanceof ReadableStream) return body;
  return new ReadableStream<Uint8Array>({
    pull: async (controller) => {
      const value = await body.read();
      if (value === undefined) controller.close();
      else controller.enqueue(value);
    },
    cancel: () => body.cancel(),
  });
}
