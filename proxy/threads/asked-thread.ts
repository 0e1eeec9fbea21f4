import { Worker } from 'node:worker_threads';

/** What a thread is asked and answers: numbered, so answers may come back in any order. */
export type Numbered<T> = T & { id: number };
export type ThreadAnswer = { id: number; result: unknown } | { id: number; error: string };

/** A request before it is numbered (Omit applied to each member of a union). */
export type Unnumbered<T> = T extends unknown ? Omit<T, 'id'> : never;

/**
 * A worker thread asked by message, each question answered once: how SQLite work leaves the
 * request thread (its own connection to the same file; WAL lets it write while the request
 * thread reads). The thread holds the process open only while it owes an answer. Should it die,
 * every question it owes fails with why, and `dead` says so to callers that have a fallback.
 */
export class AskedThread<Req> {
  private readonly worker: Worker;
  private nextId = 0;
  private readonly pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  protected dead: Error | undefined;
  /** Called when the last answer owed arrives (close waits for it). */
  private drained: (() => void) | undefined;
  /**
   * Questions asked in this event-loop turn, posted together once it ends: a message to a thread
   * costs the request thread a serialization and a wake-up each (9.5 % of its CPU on stored
   * Responses, one row a request: e2e/bench/RESULTS.md 28), and concurrent requests ask in the
   * same turn.
   */
  private outbox: Array<Numbered<Unnumbered<Req>>> = [];

  /** `entry`: the worker module beside the caller, as a `.ts` URL when run from source. */
  constructor(entry: URL, workerData: unknown, name: string) {
    // Built (dist/), the worker is a .js file; run from source (tsx), a thread does not inherit
    // tsx's loader, so a two-line bootstrap registers it before importing the .ts file.
    this.worker = entry.href.endsWith('.ts')
      ? new Worker(
          `import('tsx/esm/api').then((tsx) => { tsx.register(); return import(${JSON.stringify(entry.href)}); });`,
          { eval: true, workerData },
        )
      : new Worker(entry, { workerData });
    this.worker.unref();
    this.worker.on('message', (answers: ThreadAnswer[]) => {
      for (const m of answers) this.answered(m);
    });
    this.worker.on('error', (err) => this.failAll(err));
    this.worker.on('exit', (code) => this.failAll(new Error(`${name} thread exited (${code})`)));
  }

  private answered(m: ThreadAnswer): void {
    const p = this.pending.get(m.id);
    if (!p) return;
    this.pending.delete(m.id);
    if (this.pending.size === 0) {
      this.worker.unref();
      this.drained?.();
    }
    if ('error' in m) p.reject(new Error(m.error));
    else p.resolve(m.result);
  }

  private readonly post = (): void => {
    const batch = this.outbox;
    this.outbox = [];
    // A thread that died meanwhile has failed these already (failAll).
    if (!this.dead) this.worker.postMessage(batch);
  };

  private failAll(err: Error): void {
    this.dead = err;
    for (const p of this.pending.values()) p.reject(err);
    this.pending.clear();
    this.drained?.();
  }

  protected ask<T>(req: Unnumbered<Req>): Promise<T> {
    const id = this.nextId++;
    if (this.dead) return Promise.reject(this.dead);
    // Held while it owes an answer: a shutdown awaiting the last batch must not exit under it.
    if (this.pending.size === 0) this.worker.ref();
    return new Promise<T>((resolve, reject) => {
      this.pending.set(id, { resolve: resolve as (v: unknown) => void, reject });
      this.outbox.push({ ...req, id });
      if (this.outbox.length === 1) setImmediate(this.post);
    });
  }

  /**
   * Stops the thread once it has answered what it owes (a write it was handed is committed, not
   * cut off), or after `graceMs` where it does not.
   */
  async close(graceMs = 5_000): Promise<void> {
    if (this.pending.size > 0 && !this.dead) {
      const answered = new Promise<void>((resolve) => {
        this.drained = resolve;
      });
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([answered, new Promise((r) => (timer = setTimeout(r, graceMs)))]);
      clearTimeout(timer);
    }
    await this.worker.terminate();
  }
}

/** The module's own file beside `importMetaUrl`: `.ts` from source, `.js` built. */
export function besideThis(importMetaUrl: string, name: string): URL {
  return new URL(`./${name}.${importMetaUrl.endsWith('.ts') ? 'ts' : 'js'}`, importMetaUrl);
}
