import { AskedThread, besideThis } from '../threads/asked-thread.js';
import type {
  AnalyticsNumbers,
  GpuTimeRow,
  GuardrailQuery,
  GuardrailReport,
  Report,
  RoutingReport,
  StoredUsage,
  TagCount,
  ToolCall,
  ToolCallQuery,
  ToolQuery,
  ToolReport,
  UsageNumbers,
  UsageQuery,
  UsageStore,
} from './store.js';

/**
 * The report queries behind /v1/usage, /v1/analytics, /v1/usage/routing, /v1/tags, /v1/usage/tools and /v1/usage/guardrails. Answered on the request thread
 * they hold chat traffic for as long as SQLite takes; answered by a worker thread with its own
 * connection to the same file (WAL: readers never block the writer), chat only pays for the
 * HTTP exchange. In-memory stores (tests) cannot be shared with a thread and answer in place;
 * so does PostgreSQL, whose queries run in the database, not on this thread.
 */
export interface UsageReports {
  usage(q: UsageQuery): Promise<Report<UsageNumbers>>;
  analytics(q: UsageQuery): Promise<Report<AnalyticsNumbers>>;
  routing(q: UsageQuery): Promise<RoutingReport>;
  tags(search: string, limit: number, team?: string): Promise<TagCount[]>;
  tools(q: ToolQuery): Promise<ToolReport>;
  toolCalls(q: ToolCallQuery): Promise<ToolCall[]>;
  guardrails(q: GuardrailQuery): Promise<GuardrailReport>;
  close(): Promise<void>;
}

export function inThreadReports(store: UsageStore): UsageReports {
  return {
    usage: (q) => store.usage(q),
    analytics: (q) => store.analytics(q),
    routing: (q) => store.routing(q),
    tags: (search, limit, team) => store.tags(search, limit, team),
    tools: (q) => store.tools(q),
    toolCalls: (q) => store.toolCalls(q),
    guardrails: (q) => store.guardrails(q),
    close: async () => {},
  };
}

/** Dates as epoch ms: how a query travels to the worker. */
export type InMs<Q extends { from: Date; to: Date }> = Omit<Q, 'from' | 'to'> & { from: number; to: number };

/** What the worker is asked: one report, or one batch to write, by id. Dates travel as epoch ms. */
export type ReportRequest =
  | { id: number; kind: 'usage' | 'analytics' | 'routing'; query: InMs<UsageQuery> }
  | { id: number; kind: 'tags'; search: string; limit: number; team?: string }
  | { id: number; kind: 'tools'; query: InMs<ToolQuery> }
  | { id: number; kind: 'tool-calls'; query: InMs<ToolCallQuery> }
  | { id: number; kind: 'guardrails'; query: InMs<GuardrailQuery> }
  | { id: number; kind: 'insert'; records: StoredUsage[] }
  | { id: number; kind: 'gpu-time'; rows: GpuTimeRow[] };

/** A thread with its own connection to the usage file, asked by message (proxy/usage/report-worker.ts). */
class UsageThread extends AskedThread<ReportRequest> {
  constructor(path: string) {
    super(besideThis(import.meta.url, 'report-worker'), { path }, 'report worker');
  }
}

export class WorkerReports extends UsageThread implements UsageReports {
  /** A report still owed at shutdown is nobody's any more: not waited for. */
  override close(): Promise<void> {
    return super.close(0);
  }

  private query<Q extends { from: Date; to: Date }>(q: Q): InMs<Q> {
    return { ...q, from: q.from.getTime(), to: q.to.getTime() };
  }

  usage(q: UsageQuery): Promise<Report<UsageNumbers>> {
    return this.ask({ kind: 'usage', query: this.query(q) });
  }

  analytics(q: UsageQuery): Promise<Report<AnalyticsNumbers>> {
    return this.ask({ kind: 'analytics', query: this.query(q) });
  }

  routing(q: UsageQuery): Promise<RoutingReport> {
    return this.ask({ kind: 'routing', query: this.query(q) });
  }

  tags(search: string, limit: number, team?: string): Promise<TagCount[]> {
    return this.ask({ kind: 'tags', search, limit, ...(team !== undefined ? { team } : {}) });
  }

  tools(q: ToolQuery): Promise<ToolReport> {
    return this.ask({ kind: 'tools', query: this.query(q) });
  }

  toolCalls(q: ToolCallQuery): Promise<ToolCall[]> {
    return this.ask({ kind: 'tool-calls', query: this.query(q) });
  }

  guardrails(q: GuardrailQuery): Promise<GuardrailReport> {
    return this.ask({ kind: 'guardrails', query: this.query(q) });
  }
}

/**
 * The recorder's batches written by a thread of their own: SQLite's inserts (the raw record, its
 * tags, the rollups, each with its indexes) were the largest cost the request thread still paid
 * per request after the HTTP exchange (e2e/bench/RESULTS.md 11). A thread of its own, not the
 * report thread: a long report must not hold the writes up. Should the thread die, batches are
 * written in place (`fallback`), so no record is lost to it.
 */
export class WorkerInserts extends UsageThread implements Pick<UsageStore, 'insert' | 'recordGpuTime'> {
  constructor(
    path: string,
    private readonly fallback: Pick<UsageStore, 'insert' | 'recordGpuTime'>,
  ) {
    super(path);
  }

  insert(records: StoredUsage[]): Promise<void> {
    if (this.dead) return this.fallback.insert(records);
    return this.ask({ kind: 'insert', records });
  }

  /**
   * The GPU time ledger's minutes, by the same thread: written in place, a write that found the
   * file locked by this thread's batch would wait for it on the request thread.
   */
  recordGpuTime(rows: GpuTimeRow[]): Promise<void> {
    if (this.dead) return this.fallback.recordGpuTime(rows);
    return this.ask({ kind: 'gpu-time', rows });
  }
}
