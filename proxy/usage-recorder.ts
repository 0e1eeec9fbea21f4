import type { Counter } from 'prom-client';
import type { UsageRecord, UsageSink } from './usage.js';
import type { UsageStore } from './usage-store.js';

/**
 * Records usage off the hot path: record() only appends to a bounded in-memory queue; a timer
 * writes the queue to the store in one transaction every `flushMs` (so a crash loses at most
 * that much). When the queue is full a record is dropped and counted, never blocking or
 * failing the request that produced it.
 */
export interface UsageRecorderOptions {
  store: UsageStore;
  maxQueue?: number;
  flushMs?: number;
  dropped?: Counter;
  onError?: (err: unknown) => void;
}

export class UsageRecorder implements UsageSink {
  private queue: UsageRecord[] = [];
  private readonly timer: NodeJS.Timeout;
  private readonly max: number;
  /** Records written to the store since start. */
  written = 0;

  constructor(private readonly opts: UsageRecorderOptions) {
    this.max = opts.maxQueue ?? 10_000;
    this.timer = setInterval(() => this.flush(), opts.flushMs ?? 250);
    this.timer.unref();
  }

  record(rec: UsageRecord): void {
    if (this.queue.length >= this.max) {
      this.opts.dropped?.inc();
      return;
    }
    this.queue.push(rec);
  }

  get pending(): number {
    return this.queue.length;
  }

  flush(): void {
    if (this.queue.length === 0) return;
    const batch = this.queue;
    this.queue = [];
    try {
      this.opts.store.insert(batch);
      this.written += batch.length;
    } catch (err) {
      // The store refused the batch (disk full, locked): count it as dropped, keep serving.
      this.opts.dropped?.inc(batch.length);
      this.opts.onError?.(err);
    }
  }

  /** Writes what is queued and stops the timer (shutdown). */
  close(): void {
    clearInterval(this.timer);
    this.flush();
  }
}
