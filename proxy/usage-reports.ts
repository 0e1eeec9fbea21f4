import { Worker } from 'node:worker_threads';
import type { AnalyticsNumbers, Report, TagCount, UsageNumbers, UsageQuery, UsageStore } from './usage/store.js';

/**
 * The report queries behind /v1/usage, /v1/analytics and /v1/tags. Answered on the request thread
 * they hold chat traffic for as long as SQLite takes; answered by a worker thread with its own
 * connection to the same file (WAL: readers never block the writer), chat only pays for the
 * HTTP exchange. In-memory stores (tests) cannot be shared with a thread and answer in place;
 * so does PostgreSQL, whose queries run in the database, not on this thread.
 */
export interface UsageReports {
  usage(q: UsageQuery): Promise<Report<UsageNumbers>>;
  analytics(q: UsageQuery): Promise<Report<AnalyticsNumbers>>;
  tags(search: string, limit: number, team?: string): Promise<TagCount[]>;
  close(): Promise<void>;
}

export function inThreadReports(store: UsageStore): UsageReports {
  return {
    usage: (q) => store.usage(q),
    analytics: (q) => store.analytics(q),
    tags: (search, limit, team) => store.tags(search, limit, team),
    close: async () => {},
  };
}

/** What the worker is asked: one report, by id. Dates travel as epoch ms. */
export type ReportRequest =
  | { id: number; kind: 'usage' | 'analytics'; query: Omit<UsageQuery, 'from' | 'to'> & { from: number; to: number } }
  | { id: number; kind: 'tags'; search: string; limit: number; team?: string };

/** A request before it is numbered (Omit applied to each member of the union). */
type Unnumbered<T> = T extends unknown ? Omit<T, 'id'> : never;

export type ReportResponse = { id: number; result: unknown } | { id: number; error: string };

export class WorkerReports implements UsageReports {
  private readonly worker: Worker;
  private nextId = 0;
  private readonly pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();

  constructor(path: string) {
    // Built (dist/), the worker is a .js file; run from source (tsx), a thread does not inherit
    // tsx's loader, so a two-line bootstrap registers it before importing the .ts file.
    const fromSource = import.meta.url.endsWith('.ts');
    const entry = new URL(`./usage-report-worker.${fromSource ? 'ts' : 'js'}`, import.meta.url);
    this.worker = fromSource
      ? new Worker(
          `import('tsx/esm/api').then((tsx) => { tsx.register(); return import(${JSON.stringify(entry.href)}); });`,
          { eval: true, workerData: { path } },
        )
      : new Worker(entry, { workerData: { path } });
    this.worker.unref();
    this.worker.on('message', (m: ReportResponse) => {
      const p = this.pending.get(m.id);
      if (!p) return;
      this.pending.delete(m.id);
      if ('error' in m) p.reject(new Error(m.error));
      else p.resolve(m.result);
    });
    this.worker.on('error', (err) => this.failAll(err));
    this.worker.on('exit', (code) => this.failAll(new Error(`report worker exited (${code})`)));
  }

  private dead: Error | undefined;

  private failAll(err: Error): void {
    this.dead = err;
    for (const p of this.pending.values()) p.reject(err);
    this.pending.clear();
  }

  private ask<T>(req: Unnumbered<ReportRequest>): Promise<T> {
    const id = this.nextId++;
    if (this.dead) return Promise.reject(this.dead);
    return new Promise<T>((resolve, reject) => {
      this.pending.set(id, { resolve: resolve as (v: unknown) => void, reject });
      this.worker.postMessage({ ...req, id });
    });
  }

  private query(q: UsageQuery) {
    return { ...q, from: q.from.getTime(), to: q.to.getTime() };
  }

  usage(q: UsageQuery): Promise<Report<UsageNumbers>> {
    return this.ask({ kind: 'usage', query: this.query(q) });
  }

  analytics(q: UsageQuery): Promise<Report<AnalyticsNumbers>> {
    return this.ask({ kind: 'analytics', query: this.query(q) });
  }

  tags(search: string, limit: number, team?: string): Promise<TagCount[]> {
    return this.ask({ kind: 'tags', search, limit, ...(team !== undefined ? { team } : {}) });
  }

  async close(): Promise<void> {
    await this.worker.terminate();
  }
}
