import type { Counter } from 'prom-client';
import type { UsageRecord, UsageSink } from './record.js';
import type { StoredUsage, UsageStore } from './store.js';

/**
 * Records usage off the hot path: record() only appends to a bounded in-memory buffer; a timer
 * writes what is buffered to the store in batches. A store that fails (the database is down,
 * restarting, failing over, out of disk) never fails or slows a request: the batch goes back
 * to the front of the buffer and is written once the store answers again, with backoff in
 * between. Only past the buffer's bound are records dropped, and then counted (metric) and
 * reported (onError, once per outage), never silently. Writes are idempotent per request id
 * in the stores, so a batch whose commit was not acknowledged can be retried without counting
 * twice.
 */
export interface UsageRecorderOptions {
  /** Only its writes: a thread may do them (proxy/usage/reports.ts WorkerInserts). */
  store: Pick<UsageStore, 'insert'>;
  /** Records held in memory at most (buffered while the store is down). */
  maxQueue?: number;
  /** Records per write. */
  batchSize?: number;
  flushMs?: number;
  /** Longest wait between retries while the store fails. */
  maxBackoffMs?: number;
  dropped?: Counter;
  onError?: (err: unknown) => void;
  /** Records were dropped (buffer full): said once until the store recovers, then counted there. */
  onDropping?: () => void;
  /** The store answers again after failing: how many records are held and how many were dropped meanwhile. */
  onRecovered?: (held: number, dropped: number) => void;
  /** A batch is in the store (budgets stop counting it as this replica's own). */
  onWritten?: (records: StoredUsage[]) => void;
}

export class UsageRecorder implements UsageSink {
  private queue: StoredUsage[] = [];
  private readonly timer: NodeJS.Timeout;
  private readonly max: number;
  private readonly batchSize: number;
  private readonly flushMs: number;
  private writing: Promise<void> | undefined;
  private failing = false;
  private retryAt = 0;
  private backoffMs = 0;
  /** Records written to the store since start. */
  written = 0;
  /** Records dropped since start (buffer full). */
  droppedCount = 0;

  constructor(private readonly opts: UsageRecorderOptions) {
    this.max = opts.maxQueue ?? 50_000;
    this.batchSize = opts.batchSize ?? 2_000;
    this.flushMs = opts.flushMs ?? 250;
    this.timer = setInterval(() => void this.flush(), this.flushMs);
    this.timer.unref();
  }

  record(rec: UsageRecord): void {
    if (this.queue.length >= this.max) {
      this.drop(1);
      return;
    }
    this.queue.push(rec);
  }

  get pending(): number {
    return this.queue.length;
  }

  private droppedInOutage = 0;

  private drop(n: number): void {
    if (this.droppedInOutage === 0) this.opts.onDropping?.();
    this.droppedInOutage += n;
    this.droppedCount += n;
    this.opts.dropped?.inc(n);
  }

  /** Writes what is buffered, batch by batch; resolves when done or when the store fails. */
  flush(): Promise<void> {
    if (this.writing) return this.writing;
    if (this.queue.length === 0 || Date.now() < this.retryAt) return Promise.resolve();
    this.writing = this.drain().finally(() => {
      this.writing = undefined;
    });
    return this.writing;
  }

  private async drain(): Promise<void> {
    while (this.queue.length > 0) {
      const batch = this.queue.slice(0, this.batchSize);
      try {
        await this.opts.store.insert(batch);
      } catch (err) {
        // Held for the next attempt; the buffer's bound still holds (the oldest go first).
        if (!this.failing) this.opts.onError?.(err);
        this.failing = true;
        this.backoffMs = Math.min(this.opts.maxBackoffMs ?? 5_000, Math.max(this.flushMs, this.backoffMs * 2));
        this.retryAt = Date.now() + this.backoffMs;
        const over = this.queue.length - this.max;
        if (over > 0) {
          this.queue.splice(0, over);
          this.drop(over);
        }
        return;
      }
      this.queue.splice(0, batch.length);
      this.written += batch.length;
      this.opts.onWritten?.(batch);
      if (this.failing) {
        this.failing = false;
        this.backoffMs = 0;
        this.retryAt = 0;
        this.opts.onRecovered?.(this.queue.length, this.droppedInOutage);
        this.droppedInOutage = 0;
      }
    }
  }

  /** Writes what is buffered (trying until `deadlineMs`) and stops the timer (shutdown). */
  async close(deadlineMs = 5_000): Promise<void> {
    clearInterval(this.timer);
    const until = Date.now() + deadlineMs;
    while (this.queue.length > 0 && Date.now() < until) {
      this.retryAt = 0;
      await this.flush();
      if (this.failing) await new Promise((r) => setTimeout(r, Math.min(250, Math.max(0, until - Date.now()))));
    }
    if (this.queue.length > 0) {
      this.drop(this.queue.length);
      this.queue = [];
    }
  }
}
