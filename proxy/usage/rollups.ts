import { byteCount, cacheOf, cacheSavingsOf, failed, routingOf, UNROUTED_MODEL } from './record-columns.js';
import type { SpendScope, StoredUsage } from './store.js';

/**
 * The rollup arithmetic both stores share: one row for all requests and one per tag, per hour,
 * model and provider, latency as a fixed-bucket histogram; a batch's records summed into them.
 */

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

export const NO_GROUP = '(none)';

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
  /** Served requests, and their errors; undelivered ones apart (UsageRecord.delivered). */
  requests: number;
  errors: number;
  undelivered: number;
  /** Served by a deprecated model (UsageRecord.deprecated); absent from stores of before. */
  deprecated?: number;
  prompt: number;
  completion: number;
  cost: number;
  /** The rows' actual cost (see gpuCostCtes). */
  actual: number;
  savings: number;
  /** Routing counters (routingOf). */
  routed: number;
  escalated: number;
  routed_cost: number;
  counterfactual: number;
  /** Answers from the response cache, and what they saved (absent from stores of before). */
  cache_hits?: number;
  cache_savings?: number;
  [bucketColumn: `b${number}`]: number;
}

// Nano-dollar precision: a single small request costs fractions of a cent.
export const round = (n: number, d = 9) => Math.round(n * 10 ** d) / 10 ** d;

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
  bytesIn: number;
  bytesOut: number;
  routed: number;
  escalated: number;
  routedCost: number;
  counterfactual: number;
  undelivered: number;
  deprecated: number;
  cacheHits: number;
  cacheSavings: number;
  [bucket: string]: number | string;
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
        bytesIn: 0,
        bytesOut: 0,
        routed: 0,
        escalated: 0,
        routedCost: 0,
        counterfactual: 0,
        undelivered: 0,
        deprecated: 0,
        cacheHits: 0,
        cacheSavings: 0,
        ...Object.fromEntries(BUCKET_COLUMNS.map((c) => [c, 0])),
      };
      rollups.set(key, d);
    }
    // Served requests and their errors; an answer its caller never got apart, its cost counted all the same.
    const served = r.delivered !== false;
    d.requests += served ? 1 : 0;
    d.error += served && failed(r) ? 1 : 0;
    d.undelivered += served ? 0 : 1;
    d.deprecated += r.deprecated ? 1 : 0;
    d.prompt += r.promptTokens;
    d.completion += r.completionTokens;
    d.cost += r.costUsd;
    d.savings += r.savingsUsd;
    d.bytesIn += byteCount(r.bytesIn) ?? 0;
    d.bytesOut += byteCount(r.bytesOut) ?? 0;
    const routing = routingOf(r);
    d.routed += routing.routed;
    d.escalated += routing.escalated;
    d.routedCost += routing.routedCost;
    d.counterfactual += routing.counterfactual;
    d.cacheHits += cacheOf(r) === null ? 0 : 1;
    d.cacheSavings += cacheSavingsOf(r) ?? 0;
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

/**
 * Latency histogram columns over raw records, b0..b15: `countIf` is the dialect's count of rows
 * meeting a condition.
 */
export function latencyBucketSums(countIf: (condition: string) => string): string {
  return LATENCY_BUCKETS_MS.map((bound, i) => {
    const lower = i === 0 ? -1 : (LATENCY_BUCKETS_MS[i - 1] ?? 0);
    const condition = Number.isFinite(bound)
      ? `latency_ms > ${lower} AND latency_ms <= ${bound}`
      : `latency_ms > ${lower}`;
    return `${countIf(condition)} AS b${i}`;
  }).join(', ');
}
