/**
 * A work queue of reconcile keys with client-go's guarantees: a key waiting in the queue is
 * held once however often it is added; a key is never processed by two workers at once (a
 * key added while it is processed is queued again when that run ends); failures are retried
 * after a per-key exponential backoff; up to `concurrency` different keys run in parallel.
 */

export interface WorkQueueOptions {
  concurrency: number;
  baseDelayMs?: number;
  maxDelayMs?: number;
  /** Injectable timer so tests can drive delayed adds. */
  setTimer?: (fn: () => void, ms: number) => { cancel(): void };
  onError?: (key: string, err: unknown, attempt: number) => void;
  /** Told of every key that enters the queue and every retry (the workqueue metrics). */
  observer?: { added(): void; retried(): void };
}

// biome-ignore lint/suspicious/noConfusingVoidType: a reconciler that asks for no requeue just returns.
export type ReconcileResult = void | { requeueAfterMs: number };

const defaultTimer = (fn: () => void, ms: number) => {
  const t = setTimeout(fn, ms);
  t.unref();
  return { cancel: () => clearTimeout(t) };
};

export class WorkQueue {
  private readonly queue: string[] = [];
  private readonly dirty = new Set<string>();
  private readonly processing = new Set<string>();
  private readonly failures = new Map<string, number>();
  private readonly delayed = new Map<string, { at: number; cancel(): void }>();
  private waiters: Array<() => void> = [];
  private shuttingDown = false;
  private workers: Promise<void>[] = [];
  private readonly timer: NonNullable<WorkQueueOptions['setTimer']>;

  constructor(private readonly options: WorkQueueOptions) {
    this.timer = options.setTimer ?? defaultTimer;
  }

  /** Keys waiting (not counting those being processed or delayed). */
  get depth(): number {
    return this.queue.length;
  }

  get inFlight(): number {
    return this.processing.size;
  }

  add(key: string): void {
    if (this.shuttingDown || this.dirty.has(key)) return;
    this.dirty.add(key);
    // A key being processed is queued again by done(), never run twice at once.
    if (this.processing.has(key)) return;
    this.queue.push(key);
    this.options.observer?.added();
    this.wake();
  }

  /** Adds the key after `ms`; an earlier pending delayed add of the same key wins. */
  addAfter(key: string, ms: number): void {
    if (this.shuttingDown) return;
    if (ms <= 0) {
      this.add(key);
      return;
    }
    const at = Date.now() + ms;
    const pending = this.delayed.get(key);
    if (pending && pending.at <= at) return;
    pending?.cancel();
    const handle = this.timer(() => {
      this.delayed.delete(key);
      this.add(key);
    }, ms);
    this.delayed.set(key, { at, cancel: handle.cancel });
  }

  /** Delay before the next retry of a key that failed `attempt` times in a row. */
  backoffMs(attempt: number): number {
    const base = this.options.baseDelayMs ?? 200;
    const max = this.options.maxDelayMs ?? 60_000;
    return Math.min(max, base * 2 ** Math.max(0, attempt - 1));
  }

  private wake(): void {
    const w = this.waiters.shift();
    w?.();
  }

  private async next(): Promise<string | undefined> {
    while (this.queue.length === 0) {
      if (this.shuttingDown) return undefined;
      await new Promise<void>((resolve) => this.waiters.push(resolve));
    }
    const key = this.queue.shift() as string;
    this.dirty.delete(key);
    this.processing.add(key);
    return key;
  }

  private done(key: string): void {
    this.processing.delete(key);
    if (this.dirty.has(key)) {
      this.queue.push(key);
      this.wake();
    }
  }

  /** Starts the workers; each runs `reconcile` for one key at a time. */
  run(reconcile: (key: string) => Promise<ReconcileResult>): void {
    for (let i = 0; i < this.options.concurrency; i++) {
      this.workers.push(
        (async () => {
          for (;;) {
            const key = await this.next();
            if (key === undefined) return;
            try {
              const result = await reconcile(key);
              this.failures.delete(key);
              if (result && result.requeueAfterMs > 0) this.addAfter(key, result.requeueAfterMs);
            } catch (err) {
              const attempt = (this.failures.get(key) ?? 0) + 1;
              this.failures.set(key, attempt);
              this.options.onError?.(key, err, attempt);
              this.options.observer?.retried();
              this.done(key);
              this.addAfter(key, this.backoffMs(attempt));
              continue;
            }
            this.done(key);
          }
        })(),
      );
    }
  }

  /** Stops taking keys, lets running reconciles finish, and resolves when all workers exit. */
  async shutdown(): Promise<void> {
    this.shuttingDown = true;
    for (const d of this.delayed.values()) d.cancel();
    this.delayed.clear();
    this.queue.length = 0;
    this.dirty.clear();
    for (const w of this.waiters.splice(0)) w();
    await Promise.all(this.workers);
  }
}

/** Adds a key (namespace/name) to a controller's queue: what a controller's watches call. */
export type Enqueue = (key: string) => void;
