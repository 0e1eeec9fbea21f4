import { rfc3339 } from '../../crds/meta.js';
import { BUCKET_COLUMNS, NO_GROUP, percentileFromHistogram, type RollupRow, round } from './rollups.js';
import {
  type AnalyticsNumbers,
  DEFAULT_GROUP_LIMIT,
  type DeploymentCost,
  MAX_GROUP_LIMIT,
  OTHER_GROUP,
  POLICY_GROUP,
  type Report,
  type RoutingNumbers,
  type RoutingReport,
  type UsageNumbers,
  type UsageQuery,
} from './store.js';

/** How either store's report rows become a usage, analytics or routing report. */

/** A report's rows, and how many groups were folded into OTHER_GROUP to keep it bounded. */
export interface ReportRows {
  rows: RollupRow[];
  folded: number;
  deployments: DeploymentCost[];
}

/** The groups a report may name: at most MAX_GROUP_LIMIT, DEFAULT_GROUP_LIMIT unless asked. */
export const groupLimit = (q: UsageQuery): number =>
  Math.min(MAX_GROUP_LIMIT, Math.max(1, q.limit ?? DEFAULT_GROUP_LIMIT));

/** What a report groups by besides tag keys: columns of every record (a tag key of the same name cannot be grouped). */
const RECORD_DIMENSIONS: ReadonlySet<string> = new Set(['model', 'provider', 'endpoint']);

/** Whether a routing report groups by RoutingPolicy (POLICY_GROUP): a column of the raw records only. */
export const groupsByPolicy = (q: UsageQuery, routing: boolean): boolean => routing && q.groupBy === POLICY_GROUP;

/** Whether a query groups by a tag key (not by model, provider or endpoint; nor, in a routing report, policy). */
export const groupsByTag = (q: UsageQuery, routing = false): boolean =>
  !RECORD_DIMENSIONS.has(q.groupBy) && !groupsByPolicy(q, routing);

/**
 * Which rows answer a query: the rollups when at most one tag filters and that tag is the
 * grouped key (or nothing is grouped by tag), the raw records (exact AND) otherwise, and for a
 * routing report by policy.
 */
export function answeredByRollups(q: UsageQuery, routing = false): boolean {
  if (q.tags.length > 1 || groupsByPolicy(q, routing)) return false;
  const filter = q.tags[0];
  return !(groupsByTag(q) && filter && filter.key !== q.groupBy);
}

/** A report from its rows (time bucket x group), with totals and per-group sums. */
export function assembleReport<T>(
  q: UsageQuery,
  { rows, folded, deployments }: ReportRows,
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
    deployments,
  };
}

/** Rows of stores from before the column have none: they were all counted as served. */
const undeliveredOf = (rows: RollupRow[]): number => rows.reduce((n, r) => n + (Number(r.undelivered) || 0), 0);
/** Likewise for deprecated models: rows of before counted none. */
const deprecatedOf = (rows: RollupRow[]): number => rows.reduce((n, r) => n + (Number(r.deprecated) || 0), 0);

export function usageNumbers(rows: RollupRow[]): UsageNumbers {
  const routing = routingNumbers(rows);
  return {
    requests: rows.reduce((n, r) => n + r.requests, 0),
    undeliveredRequests: undeliveredOf(rows),
    deprecatedRequests: deprecatedOf(rows),
    inputTokens: rows.reduce((n, r) => n + r.prompt, 0),
    outputTokens: rows.reduce((n, r) => n + r.completion, 0),
    costUsd: round(rows.reduce((n, r) => n + r.cost, 0)),
    actualCostUsd: round(rows.reduce((n, r) => n + r.actual, 0)),
    savingsUsd: round(rows.reduce((n, r) => n + r.savings, 0)),
    routingSavingsUsd: routing.routingSavingsUsd,
    routedRequests: routing.routedRequests,
    escalationRate: routing.escalationRate,
    cacheHits: rows.reduce((n, r) => n + (Number(r.cache_hits) || 0), 0),
    cacheSavingsUsd: round(rows.reduce((n, r) => n + (Number(r.cache_savings) || 0), 0)),
  };
}

/** Routing figures of rows; `share` is set by assembleRoutingReport, which knows what it is a share of. */
function routingNumbers(rows: RollupRow[]): RoutingNumbers {
  // Rows of stores that predate the routing counters have none: they routed nothing.
  const sum = (f: (r: RollupRow) => number) => rows.reduce((n, r) => n + (Number(f(r)) || 0), 0);
  const routed = sum((r) => r.routed);
  const escalated = sum((r) => r.escalated);
  const cost = sum((r) => r.routed_cost);
  const counterfactual = sum((r) => r.counterfactual);
  return {
    routedRequests: routed,
    escalatedRequests: escalated,
    escalationRate: routed ? round(escalated / routed, 4) : 0,
    share: 0,
    routedCostUsd: round(cost),
    counterfactualCostUsd: round(counterfactual),
    routingSavingsUsd: round(counterfactual - cost),
  };
}

const shareOf = (part: number, whole: number): number => (whole > 0 ? round(part / whole, 4) : 0);

/**
 * A routing report from its rows (already filtered to routed ones and folded past the limit):
 * each group's share of the routed requests (of the bucket's, in the series), groups with the
 * most routed requests first, OTHER_GROUP last.
 */
export function assembleRoutingReport(q: UsageQuery, rows: Omit<ReportRows, 'deployments'>): RoutingReport {
  const { deployments: _none, ...report } = assembleReport(q, { ...rows, deployments: [] }, routingNumbers);
  const all = report.totals.routedRequests;
  const inBucket = new Map<string, number>();
  for (const s of report.series) inBucket.set(s.time, (inBucket.get(s.time) ?? 0) + s.routedRequests);
  const isOther = (g: { group: string }) => Number(g.group === OTHER_GROUP);
  return {
    ...report,
    totals: { ...report.totals, share: all > 0 ? 1 : 0 },
    series: report.series.map((s) => ({ ...s, share: shareOf(s.routedRequests, inBucket.get(s.time) ?? 0) })),
    groups: report.groups
      .map((g) => ({ ...g, share: shareOf(g.routedRequests, all) }))
      .sort(
        (a, b) =>
          isOther(a) - isOther(b) ||
          b.routedRequests - a.routedRequests ||
          (a.group < b.group ? -1 : a.group > b.group ? 1 : 0),
      ),
  };
}

export function analyticsNumbers(rows: RollupRow[]): AnalyticsNumbers {
  const routing = routingNumbers(rows);
  const requests = rows.reduce((n, r) => n + r.requests, 0);
  const errors = rows.reduce((n, r) => n + r.errors, 0);
  const hist = BUCKET_COLUMNS.map((c) => rows.reduce((n, r) => n + (r[c as `b${number}`] ?? 0), 0));
  return {
    requests,
    undeliveredRequests: undeliveredOf(rows),
    deprecatedRequests: deprecatedOf(rows),
    errors,
    errorRate: requests ? round(errors / requests, 4) : 0,
    costUsd: round(rows.reduce((n, r) => n + r.cost, 0)),
    actualCostUsd: round(rows.reduce((n, r) => n + r.actual, 0)),
    latencyMs: {
      p50: percentileFromHistogram(hist, 50),
      p95: percentileFromHistogram(hist, 95),
      p99: percentileFromHistogram(hist, 99),
    },
    routedRequests: routing.routedRequests,
    escalationRate: routing.escalationRate,
  };
}
