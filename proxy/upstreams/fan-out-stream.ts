import { ProxyError } from '../endpoints/errors.js';
import { openAIUsage } from '../translators/chat-completion.js';
import { type ChunkSource, chunksOf } from './chunk-source.js';
import { type Part, sumUsage } from './fan-out.js';
import { sseData } from './stream-reader.js';
import type { StreamOutcome, UpstreamCall, UpstreamResult } from './upstream.js';

/**
 * The streams of a fanned-out request (fan-out.ts) as one OpenAI chat or completions stream: each
 * call's chunks re-indexed to the request's choice and stamped with the first chunk's id and
 * created, as they come (no call waits for another); their usage chunks and [DONE]s held back;
 * once every call ended, one usage chunk (summed, where the caller asked for it) and one [DONE].
 * At most `parallel` calls stream at once; the next opens as one ends. The answer starts once the
 * first call streams: a call failing before that is the request's error (the rest cancelled); a
 * later one failing is an error event, as a relay's own, and ends the stream.
 */

type Call = Omit<UpstreamCall, 'route' | 'dialect'>;
type Json = Record<string, unknown>;

/** Chunks waiting for the caller past which the calls stop reading their upstreams. */
const HIGH_WATER = 64;
const encoder = new TextEncoder();
const DONE = encoder.encode('data: [DONE]\n\n');

interface Open {
  part: Part;
  source: ChunkSource;
  outcome: Promise<StreamOutcome>;
}

export async function mergedStream(
  parts: readonly Part[],
  call: Call,
  send: (call: Call) => Promise<UpstreamResult>,
  parallel: number,
): Promise<UpstreamResult> {
  const merge = new Merge(parts, call, send, parallel);
  await merge.start();
  return { kind: 'stream', body: merge, outcome: merge.outcome };
}

class Merge implements ChunkSource {
  private readonly out: Uint8Array[] = [];
  private readonly cancelCalls = new AbortController();
  private readonly signal: AbortSignal;
  private readonly outcomes: Promise<StreamOutcome>[] = [];
  private readonly sources = new Set<ChunkSource>();
  private next = 0;
  /** Calls opening or streaming. */
  private running = 0;
  /** No more calls are opened or read: a call failed, or the caller left. */
  private stopped = false;
  /** The last chunk is queued: read() ends once the queue is empty. */
  private ended = false;
  private finishing = false;
  private error: ProxyError | undefined;
  private head: Json | undefined;
  private wakeReader: (() => void) | undefined;
  private wakeWriters: Array<() => void> = [];
  private settle!: (o: StreamOutcome) => void;
  readonly outcome = new Promise<StreamOutcome>((resolve) => {
    this.settle = resolve;
  });

  constructor(
    private readonly parts: readonly Part[],
    private readonly call: Call,
    private readonly send: (call: Call) => Promise<UpstreamResult>,
    private readonly parallel: number,
  ) {
    this.signal = AbortSignal.any([call.signal, this.cancelCalls.signal]);
  }

  /**
   * Opens the first calls and resolves once one of them streams (the answer starts then: a server
   * that queues calls opens the next only after the first ended, so waiting for all could wait on
   * a stream nobody reads); rejects with the failure of a call that failed before that.
   */
  start(): Promise<void> {
    const first = Math.min(this.parallel, this.parts.length);
    return new Promise<void>((resolve, reject) => {
      let started = false;
      for (let i = 0; i < first; i++) {
        this.running += 1;
        this.open(this.next++).then(
          (open) => {
            void this.pump(open);
            if (!started) {
              started = true;
              resolve();
            }
          },
          (err: unknown) => {
            this.running -= 1;
            if (started) this.fail(err);
            else {
              started = true;
              this.stop();
              reject(err);
            }
          },
        );
      }
    });
  }

  private async open(at: number): Promise<Open> {
    const part = this.parts[at] as Part;
    const result = await this.send({ ...this.call, body: part.body, signal: this.signal });
    if (result.kind !== 'stream') throw new Error('a fanned-out stream call answered whole');
    this.outcomes.push(result.outcome);
    return { part, source: chunksOf(result.body), outcome: result.outcome };
  }

  /** One call's stream into the merged one, then the next call opened in its place. */
  private async pump({ part, source }: Open): Promise<void> {
    this.sources.add(source);
    // One decoder per call: a character whose bytes two reads split is decoded once both came.
    const decoder = new TextDecoder();
    let pending = '';
    try {
      while (!this.stopped) {
        while (this.out.length >= HIGH_WATER && !this.stopped) await new Promise<void>((r) => this.wakeWriters.push(r));
        const chunk = this.stopped ? undefined : await source.read();
        if (chunk === undefined) break;
        pending += decoder.decode(chunk, { stream: true });
        for (let cut = pending.indexOf('\n\n'); cut !== -1; cut = pending.indexOf('\n\n')) {
          this.frame(pending.slice(0, cut), part);
          pending = pending.slice(cut + 2);
        }
      }
    } catch (err) {
      this.fail(err);
    } finally {
      this.sources.delete(source);
    }
    if (this.stopped) source.cancel();
    this.running -= 1;
    if (!this.stopped && this.next < this.parts.length) {
      this.running += 1;
      this.open(this.next++).then(
        (open) => void this.pump(open),
        (err: unknown) => {
          this.running -= 1;
          this.fail(err);
        },
      );
    }
    if (this.running === 0) void this.finish();
  }

  /** One SSE event of a call: re-indexed and passed on, or held back (usage, [DONE]), or an error. */
  private frame(event: string, part: Part): void {
    const data = sseData(event);
    if (data === '' || data === '[DONE]' || this.stopped) return;
    let chunk: Json;
    try {
      chunk = JSON.parse(data) as Json;
    } catch {
      return;
    }
    if ('error' in chunk) {
      // A call's relay already said why it ended, in the dialect's words: the request's stream ends with it.
      this.push(encoder.encode(`data: ${data}\n\n`));
      this.error ??= new ProxyError(502, 'api_error', 'upstream_error', 'a call of the request failed mid-stream');
      this.stop();
      return;
    }
    this.head ??= { id: chunk.id, object: chunk.object, created: chunk.created, model: chunk.model };
    if (this.head.id !== undefined) chunk.id = this.head.id;
    if (this.head.created !== undefined) chunk.created = this.head.created;
    delete chunk.usage;
    const choices = Array.isArray(chunk.choices) ? (chunk.choices as Json[]) : [];
    if (choices.length === 0) return;
    chunk.choices = choices.map((c) => ({ ...c, index: part.index(typeof c.index === 'number' ? c.index : 0) }));
    this.push(encoder.encode(`data: ${JSON.stringify(chunk)}\n\n`));
  }

  /** A call failed after the answer started: an error event, the rest cancelled. */
  private fail(err: unknown): void {
    if (this.stopped) return;
    const error =
      err instanceof ProxyError
        ? err
        : new ProxyError(502, 'api_error', 'upstream_error', 'a call of the request failed');
    this.error ??= error;
    this.push(encoder.encode(`data: ${JSON.stringify(error.toJSON())}\n\n`));
    this.stop();
  }

  /** No more calls: those streaming are cancelled; the stream ends after what it holds. */
  private stop(): void {
    if (this.stopped) return;
    this.stopped = true;
    this.cancelCalls.abort();
    for (const s of this.sources) s.cancel();
    for (const w of this.wakeWriters.splice(0)) w();
    void this.finish();
  }

  /** Every call ended (or was cancelled): the summed usage chunk where asked, [DONE], the outcome. */
  private async finish(): Promise<void> {
    if (this.finishing) return;
    this.finishing = true;
    const ended = await Promise.allSettled(this.outcomes);
    const outcomes = ended.flatMap((o) => (o.status === 'fulfilled' ? [o.value] : []));
    const usage = sumUsage(outcomes.map((o) => o.usage));
    const error = this.error ?? outcomes.find((o) => o.error)?.error;
    if (usage && this.call.clientWantsUsage && !error && this.head) {
      this.push(
        encoder.encode(`data: ${JSON.stringify({ ...this.head, choices: [], usage: openAIUsage(usage) })}\n\n`),
      );
    }
    this.push(DONE);
    this.ended = true;
    this.wakeReader?.();
    const firsts = outcomes.flatMap((o) => (o.firstTokenMs === undefined ? [] : [o.firstTokenMs]));
    this.settle({
      ...(usage ? { usage } : {}),
      ...(firsts.length ? { firstTokenMs: Math.min(...firsts) } : {}),
      ...(error ? { error } : {}),
      ...(this.call.signal.aborted || outcomes.some((o) => o.clientAborted) ? { clientAborted: true } : {}),
    });
  }

  private push(chunk: Uint8Array): void {
    if (this.ended) return;
    this.out.push(chunk);
    this.wakeReader?.();
  }

  async read(): Promise<Uint8Array | undefined> {
    for (;;) {
      const chunk = this.out.shift();
      if (chunk) {
        if (this.out.length < HIGH_WATER) for (const w of this.wakeWriters.splice(0)) w();
        return chunk;
      }
      if (this.ended) return undefined;
      await new Promise<void>((r) => {
        this.wakeReader = r;
      });
      this.wakeReader = undefined;
    }
  }

  /** The caller left. */
  cancel(): void {
    this.stop();
    this.out.length = 0;
  }
}
