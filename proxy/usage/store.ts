import { rfc3339 } from '../../crds/meta.js';
import type { Tag } from '../endpoints/tags.js';
import type { UsageRecord } from './record.js';

/**
 * The usage store contract, and what both implementations share: the record and query types,
 * the rollup arithmetic (one row for all requests and one per tag, per hour, model and
 * provider; latency as a fixed-bucket histogram) and how report rows become a report. Two
 * stores implement it: SQLite (embedded, the default: `sqlite-store.ts`) and PostgreSQL
 * (shared by replicas across nodes: `postgres-store.ts`). The same test suite runs against both.
 */

export interface UsageStore {
  /** Writes a batch atomically: its records, their tags and the rollup increments, or nothing. */
  insert(records: StoredUsage[]): Promise<void>;
  /**
   * Deletes raw records older than `before` and, when given, rollup hours older than
   * `rollupsBefore` (rollups answer long-range reports, so they usually live longer).
   */
  prune(before: Date, rollupsBefore?: Date): Promise<void>;
  /** Raw records held. */
  count(): Promise<number>;
  usage(q: UsageQuery): Promise<Report<UsageNumbers>>;
  analytics(q: UsageQuery): Promise<Report<AnalyticsNumbers>>;
  /**
   * Known tags whose "key:value" contains `search`, most used first, at most `limit` (<= 50);
   * of one team's requests when `team` is given.
   */
  tags(search: string, limit?: number, team?: string): Promise<TagCount[]>;
  /** USD spent since each scope's start: by an ApiKey (by name), or by requests carrying a tag. */
  spend(scopes: SpendScope[]): Promise<number[]>;
  close(): Promise<void>;
}

/** What a budget counts: an ApiKey's requests, or every request carrying a tag, since a time (whole hours). */
export type SpendScope = { apiKey: string; since: Date } | { tag: Tag; since: Date };

/** What the stores keep: the proxy's usage record as it is. */
export type StoredUsage = UsageRecord;

export type Granularity = 'hour' | 'day';

export interface UsageQuery {
  from: Date;
  to: Date;
  granularity: Granularity;
  /** model, provider, endpoint, or a tag key. */
  groupBy: string;
  /** All must be present on a request (AND). */
  tags: Tag[];
  /** Most groups reported by name (most requests first); the rest are summed as OTHER_GROUP. */
  limit?: number;
  /** Only this team's requests (a User key's reads); every team's when absent. */
  team?: string;
}

/** The group the groups past a report's limit are summed into. */
export const OTHER_GROUP = '_other';
export const DEFAULT_GROUP_LIMIT = 20;
export const MAX_GROUP_LIMIT = 100;
/** The model of requests no model answered, in the rollups (callers choose the names they send). */
const UNROUTED_MODEL = '(unrouted)';

export interface UsageNumbers {
  requests: number;
  inputTokens: number;
  outputTokens: number;
  costUsd: number;
  savingsUsd: number;
}

export interface AnalyticsNumbers {
  requests: number;
  errors: number;
  errorRate: number;
  costUsd: number;
  latencyMs: { p50: number; p95: number; p99: number };
}

export interface Report<T> {
  from: string;
  to: string;
  granularity: Granularity;
  groupBy: string;
  totals: T;
  series: Array<T & { time: string; group: string }>;
  groups: Array<T & { group: string }>;
  /** How many groups were summed into OTHER_GROUP (0: every group has its own row). */
  otherGroups: number;
}

export interface TagCount {
  key: string;
  value: string;
  requests: number;
}

/** Upper bounds (ms) of the latency histogram buckets; the last one is open. */
export const LATENCY_BUCKETS_MS = [
  1,
  2.5,
  5,
  10,
  25,
  50,
  100,
  250,
  500,
  1000,
  2500,
  5000,
  10000,
  30000,
  60000,
  Infinity,
];
export const BUCKET_COLUMNS = LATENCY_BUCKETS_MS.map((_, i) => `b${i}`);

export const HOUR = 3_600_000;
export const DAY = 24 * HOUR;
const NO_GROUP = '(none)';

function bucketOf(ms: number): number {
  return LATENCY_BUCKETS_MS.findIndex((bound) => ms <= bound);
}

/** A percentile from histogram counts: the upper bound of the bucket holding it (finite). */
export function percentileFromHistogram(counts: number[], p: number): number {
  const total = counts.reduce((a, b) => a + b, 0);
  if (total === 0) return 0;
  const rank = Math.ceil((p / 100) * total);
  let seen = 0;
  for (const [i, n] of counts.entries()) {
    seen += n;
    if (seen >= rank) {
      const bound = LATENCY_BUCKETS_MS[i] ?? Infinity;
      return Number.isFinite(bound) ? bound : (LATENCY_BUCKETS_MS.at(-2) ?? 0);
    }
  }
  return 0;
}

export interface RollupRow {
  bucket: number;
  grp: string | null;
  requests: number;
  errors: number;
  prompt: number;
  completion: number;
  cost: number;
  savings: number;
  [bucketColumn: `b${number}`]: number;
}

// Nano-dollar precision: a single small request costs fractions of a cent.
const round = (n: number, d = 9) => Math.round(n * 10 ** d) / 10 ** d;

/** Sums of one rollup row's counters over a batch; bucket columns by name. */
export interface RollupDelta {
  hour: number;
  model: string;
  endpoint: string;
  provider: string;
  team: string;
  tagKey: string;
  tagValue: string;
  requests: number;
  error: number;
  prompt: number;
  completion: number;
  cost: number;
  savings: number;
  [bucket: string]: number | string;
}

/** A report's rows, and how many groups were folded into OTHER_GROUP to keep it bounded. */
export interface ReportRows {
  rows: RollupRow[];
  folded: number;
}

/**
 * The rollup increments of a batch, summed per row in memory first: a batch of a busy hour is
 * one upsert per (hour, model, provider, tag), not one per record and tag. One row for all
 * requests, one per tag: a single-tag filter or a tag grouping reads its rows. A request no
 * model answered (no provider) adds no tag rows and counts under UNROUTED_MODEL: refused
 * requests cost the caller nothing, so they must not grow the rollups by inventing tag values
 * or model names (the raw record keeps what was asked).
 */
export function rollupDeltas(records: StoredUsage[]): RollupDelta[] {
  const rollups = new Map<string, RollupDelta>();
  // Runs over every batch the recorder writes: keys are joined strings, not serialized arrays.
  const add = (r: StoredUsage, hour: number, model: string, team: string, tagKey: string, tagValue: string) => {
    const endpoint = r.endpoint ?? '';
    const key = `${hour}\u0000${model}\u0000${endpoint}\u0000${r.provider}\u0000${team}\u0000${tagKey}\u0000${tagValue}`;
    let d = rollups.get(key);
    if (!d) {
      d = {
        hour,
        model,
        endpoint,
        provider: r.provider,
        team,
        tagKey,
        tagValue,
        requests: 0,
        error: 0,
        prompt: 0,
        completion: 0,
        cost: 0,
        savings: 0,
        ...Object.fromEntries(BUCKET_COLUMNS.map((c) => [c, 0])),
      };
      rollups.set(key, d);
    }
    d.requests += 1;
    d.error += r.status >= 400 ? 1 : 0;
    d.prompt += r.promptTokens;
    d.completion += r.completionTokens;
    d.cost += r.costUsd;
    d.savings += r.savingsUsd;
    const bucket = BUCKET_COLUMNS[bucketOf(r.latencyMs)];
    if (bucket) d[bucket] = Number(d[bucket] ?? 0) + 1;
  };
  for (const r of records) {
    const hour = Math.floor(Date.parse(r.time) / HOUR) * HOUR;
    const model = r.provider ? r.model : UNROUTED_MODEL;
    const team = r.team ?? '';
    add(r, hour, model, team, '', '');
    if (r.provider) for (const t of r.tags) add(r, hour, model, team, t.key, t.value);
  }
  return [...rollups.values()];
}

/** Hour, key and cost (after free credits) to add to the per-key spend rows, summed per (key, hour); records of no ApiKey add none. */
export function keySpendDeltas(records: StoredUsage[]): Array<{ apiKey: string; hour: number; cost: number }> {
  const sums = new Map<string, { apiKey: string; hour: number; cost: number }>();
  for (const r of records) {
    // What the team pays: the list price less the provider's free credits.
    const cost = r.costUsd - r.savingsUsd;
    if (!r.apiKey || cost <= 0) continue;
    const hour = Math.floor(Date.parse(r.time) / HOUR) * HOUR;
    const k = `${r.apiKey}\u0000${hour}`;
    const d = sums.get(k);
    if (d) d.cost += cost;
    else sums.set(k, { apiKey: r.apiKey, hour, cost });
  }
  return [...sums.values()].sort((a, b) => (a.apiKey < b.apiKey ? -1 : a.apiKey > b.apiKey ? 1 : a.hour - b.hour));
}

/** A scope's start as the stores count it: the whole hour it falls in. */
export const spendSince = (s: SpendScope): number => Math.floor(s.since.getTime() / HOUR) * HOUR;

/**
 * Spends providers' free credits on the records of a batch, in order: a record whose provider
 * has credits (creditsUsd) gets as savings what is left of them, up to its cost. `used` holds
 * what each provider has spent so far (read under a lock by the store) and is updated. The
 * stores call it inside the write transaction, so that credits are spent once across
 * replicas; records without creditsUsd keep the savings they came with.
 */
export function allocateCredits(records: StoredUsage[], used: Map<string, number>): void {
  for (const r of records) {
    if (r.creditsUsd === undefined) continue;
    const spent = used.get(r.provider) ?? 0;
    r.savingsUsd = Math.max(0, Math.min(r.costUsd, r.creditsUsd - spent));
    used.set(r.provider, spent + r.savingsUsd);
  }
}

/** Providers whose credits a batch spends, in a fixed order (the order rows are locked in). */
export const creditProviders = (records: StoredUsage[]): string[] =>
  [...new Set(records.filter((r) => r.creditsUsd !== undefined).map((r) => r.provider))].sort();

/** The groups a report may name: at most MAX_GROUP_LIMIT, DEFAULT_GROUP_LIMIT unless asked. */
export const groupLimit = (q: UsageQuery): number =>
  Math.min(MAX_GROUP_LIMIT, Math.max(1, q.limit ?? DEFAULT_GROUP_LIMIT));

/** What a report groups by besides tag keys: columns of every record (a tag key of the same name cannot be grouped). */
const RECORD_DIMENSIONS: ReadonlySet<string> = new Set(['model', 'provider', 'endpoint']);

/** Whether a query groups by a tag key (not by model, provider or endpoint). */
export const groupsByTag = (q: UsageQuery): boolean => !RECORD_DIMENSIONS.has(q.groupBy);

/**
 * Which rows answer a query: the rollups when at most one tag filters and that tag is the
 * grouped key (or nothing is grouped by tag), the raw records (exact AND) otherwise.
 */
export function answeredByRollups(q: UsageQuery): boolean {
  if (q.tags.length > 1) return false;
  const filter = q.tags[0];
  return !(groupsByTag(q) && filter && filter.key !== q.groupBy);
}

/** A report from its rows (time bucket x group), with totals and per-group sums. */
export function assembleReport<T>(
  q: UsageQuery,
  { rows, folded }: ReportRows,
  numbers: (rows: RollupRow[]) => T,
): Report<T> {
  const series = rows.map((r) => ({ time: rfc3339(new Date(r.bucket)), group: r.grp ?? NO_GROUP, ...numbers([r]) }));
  const byGroup = new Map<string, RollupRow[]>();
  for (const r of rows) {
    const g = r.grp ?? NO_GROUP;
    const list = byGroup.get(g);
    if (list) list.push(r);
    else byGroup.set(g, [r]);
  }
  return {
    from: q.from.toISOString(),
    to: q.to.toISOString(),
    granularity: q.granularity,
    groupBy: q.groupBy,
    totals: numbers(rows),
    series,
    groups: [...byGroup.entries()].map(([group, rs]) => ({ group, ...numbers(rs) })),
    otherGroups: folded,
  };
}

export function usageNumbers(rows: RollupRow[]): UsageNumbers {
  return {
    requests: rows.reduce((n, r) => n + r.requests, 0),
    inputTokens: rows.reduce((n, r) => n + r.prompt, 0),
    outputTokens: rows.reduce((n, r) => n + r.completion, 0),
    costUsd: round(rows.reduce((n, r) => n + r.cost, 0)),
    savingsUsd: round(rows.reduce((n, r) => n + r.savings, 0)),
  };
}

export function analyticsNumbers(rows: RollupRow[]): AnalyticsNumbers {
  const requests = rows.reduce((n, r) => n + r.requests, 0);
  const errors = rows.reduce((n, r) => n + r.errors, 0);
  const hist = BUCKET_COLUMNS.map((c) => rows.reduce((n, r) => n + (r[c as `b${number}`] ?? 0), 0));
  return {
    requests,
    errors,
    errorRate: requests ? round(errors / requests, 4) : 0,
    costUsd: round(rows.reduce((n, r) => n + r.cost, 0)),
    latencyMs: {
      p50: percentileFromHistogram(hist, 50),
      p95: percentileFromHistogram(hist, 95),
      p99: percentileFromHistogram(hist, 99),
    },
  };
}
