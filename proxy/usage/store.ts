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
   * `rollupsBefore` (rollups answer long-range reports, so they usually live longer). GPU minutes
   * of whole hours before `gpuMinutesBefore` (default `before`) are folded into hour rows, which
   * live as long as the rollups.
   */
  prune(before: Date, rollupsBefore?: Date, gpuMinutesBefore?: Date): Promise<void>;
  /** Raw records held. */
  count(): Promise<number>;
  usage(q: UsageQuery): Promise<Report<UsageNumbers>>;
  analytics(q: UsageQuery): Promise<Report<AnalyticsNumbers>>;
  /**
   * Known tags whose "key:value" contains `search`, most used first, at most `limit` (<= 50);
   * of one team's requests when `team` is given.
   */
  tags(search: string, limit?: number, team?: string): Promise<TagCount[]>;
  /**
   * Requests routed by a RoutingPolicy, grouped as a usage report is (model: the served model) or
   * by POLICY_GROUP: how many, each group's share of them, escalations, routing savings.
   */
  routing(q: UsageQuery): Promise<RoutingReport>;
  /** Tool calls (endpoint TOOL_ENDPOINT) by MCP server and tool: calls, errors, latency, bytes. */
  tools(q: ToolQuery): Promise<ToolReport>;
  /** The tool calls themselves, newest first, at most MAX_TOOL_CALLS: who called what, and (keys that opted in) with what. */
  toolCalls(q: ToolCallQuery): Promise<ToolCall[]>;
  /** USD spent since each scope's start: by an ApiKey (by name), or by requests carrying a tag. */
  spend(scopes: SpendScope[]): Promise<number[]>;
  /**
   * Writes GPU minutes of in-cluster deployments (proxy/usage/gpu-time.ts). Idempotent and safe
   * for several writers: a (deployment, minute) keeps the largest figures any writer sent, since
   * every proxy replica measures the same replicas (summing them would count a minute once per proxy).
   */
  recordGpuTime(rows: GpuTimeRow[]): Promise<void>;
  close(): Promise<void>;
}

/** One in-cluster deployment's GPU time in one minute, as one proxy measured it. */
export interface GpuTimeRow {
  /** The ModelDeployment's namespace/name: the `provider` of the usage records it served. */
  deployment: string;
  model: string;
  /** Start of the minute, epoch ms. */
  minute: number;
  /** Replica-seconds up in that minute (two replicas for the whole minute: 120). */
  gpuSeconds: number;
  /** What those replica-seconds cost at the model's GPU price per replica-hour. */
  usd: number;
  /** A request of this deployment that used tokens was in flight during the minute. */
  busy: boolean;
}

/** A deployment's GPU time over a report's window (whole hours), what it cost, and the part no request used. */
export interface DeploymentCost {
  deployment: string;
  model: string;
  gpuSeconds: number;
  gpuCostUsd: number;
  /** GPU cost of minutes (or, where no proxy marked minutes, hours) in which it served no tokens: not attributed to any request. */
  idleCostUsd: number;
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
  /** Served requests: answered, their answers delivered (UsageRecord.delivered). */
  requests: number;
  /**
   * Requests whose answers never reached their callers whole (a crash cut them, or the caller
   * left first): not served, but their tokens and cost are in the cost figures.
   */
  undeliveredRequests: number;
  inputTokens: number;
  outputTokens: number;
  /** List price: tokens at the catalog's or the provider's price. */
  costUsd: number;
  /**
   * What the requests really cost: in-cluster tokens carry their share of their deployment's GPU
   * time (see gpuCostCtes); everything else, and in-cluster hours with no GPU time measured, its list price.
   */
  actualCostUsd: number;
  /** The part of costUsd paid by providers' free credits. */
  savingsUsd: number;
  /**
   * What routing saved, apart from the free credits: the requests' counterfactual cost (on the
   * model asked for) less what they cost, over the requests that carry one (counterfactualOf).
   */
  routingSavingsUsd: number;
  /** Requests a RoutingPolicy routed. */
  routedRequests: number;
  /** Routed requests the cascade escalated, over routed requests (0 when none was routed). */
  escalationRate: number;
}

export interface AnalyticsNumbers {
  /** Served requests (see UsageNumbers); errors and errorRate are of them. */
  requests: number;
  undeliveredRequests: number;
  errors: number;
  errorRate: number;
  costUsd: number;
  actualCostUsd: number;
  latencyMs: { p50: number; p95: number; p99: number };
  routedRequests: number;
  escalationRate: number;
}

/**
 * The routing report's own grouping besides those of the usage reports: by RoutingPolicy. The
 * rollups are not keyed by policy (a dimension more would multiply their rows), so it is answered
 * from the raw records, bounded by the report's time range and the raw retention (30 days by
 * default). A tag key of this name cannot be grouped by in the routing report.
 */
const POLICY_GROUP = 'policy';

interface RoutingNumbers {
  /** Requests a RoutingPolicy routed. */
  routedRequests: number;
  /** Of them, those the cascade escalated (escalations > 0). */
  escalatedRequests: number;
  escalationRate: number;
  /**
   * The group's part of the routed requests: of the whole report's in `groups`, of its time
   * bucket's in `series`; 1 in `totals` (0 when nothing was routed).
   */
  share: number;
  /** What the requests that carry a counterfactual cost (escalated-from answers included). */
  routedCostUsd: number;
  /** What the same tokens would have cost on the model asked for (or the policy's baseline). */
  counterfactualCostUsd: number;
  /** counterfactualCostUsd - routedCostUsd: negative where escalations cost more than they saved. */
  routingSavingsUsd: number;
}

/** Requests routed by a RoutingPolicy, as a usage report is grouped (no GPU time: see the usage report). */
export interface RoutingReport {
  from: string;
  to: string;
  granularity: Granularity;
  groupBy: string;
  totals: RoutingNumbers;
  /** Per time bucket and group, in time order. */
  series: Array<RoutingNumbers & { time: string; group: string }>;
  /** Most routed requests first; OTHER_GROUP last. */
  groups: Array<RoutingNumbers & { group: string }>;
  otherGroups: number;
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
  /**
   * In-cluster deployments' GPU time in the window, whatever the tag filters: what the platform
   * paid, of which idle. Empty in a team's report (a deployment is shared by every team).
   */
  deployments: DeploymentCost[];
}

export interface TagCount {
  key: string;
  value: string;
  requests: number;
}

/**
 * The endpoint of tool calls through the gateway's MCP routes (proxy/mcp/): their records name the
 * McpServer as `provider` and the tool, as its server names it, as `model`. The model reports
 * (/v1/usage, /v1/analytics) leave them out: a tool is not a model, and its calls have no tokens
 * or cost. The tool report (`UsageStore.tools`) is made of them alone.
 */
export const TOOL_ENDPOINT = 'mcp';

/**
 * Most bytes (UTF-8) of a record's `payload` kept: the stores and the recorder (before the spool,
 * whose records must stay far under its 1 MiB bound) cut a longer one to this, ending it with
 * PAYLOAD_CUT. The producer (proxy/mcp/) is expected to cut first, keeping what it finds most
 * useful; this bound holds whatever it sends.
 */
export const MAX_PAYLOAD_BYTES = 16 * 1024;
export const PAYLOAD_CUT = '…[truncated]';

/**
 * Whether a record counts as an error: status >= 400; for a tool call, also a tool that ran and
 * reported its own failure (`isError`: status 200 with an errorType). TOOL_ERROR_SQL says the same
 * of a stored tool call.
 */
function failed(r: Pick<UsageRecord, 'status' | 'endpoint' | 'errorType'>): boolean {
  return r.status >= 400 || (r.endpoint === TOOL_ENDPOINT && r.errorType !== undefined);
}
export const TOOL_ERROR_SQL = 'status >= 400 OR error_type IS NOT NULL';

/** `payload` within MAX_PAYLOAD_BYTES: cut on a character boundary, marked with PAYLOAD_CUT. */
export function boundPayload(payload: string): string {
  // A UTF-16 code unit is at most 3 bytes of UTF-8 (a surrogate pair, 2 units, is 4).
  if (payload.length * 3 <= MAX_PAYLOAD_BYTES) return payload;
  const bytes = Buffer.from(payload, 'utf8');
  if (bytes.length <= MAX_PAYLOAD_BYTES) return payload;
  let end = MAX_PAYLOAD_BYTES - Buffer.byteLength(PAYLOAD_CUT);
  // Not inside a character: back to the first byte of the one that would be split.
  while (end > 0 && ((bytes[end] ?? 0) & 0xc0) === 0x80) end--;
  return `${bytes.subarray(0, end).toString('utf8')}${PAYLOAD_CUT}`;
}

/** The record with its payload bounded (the same object when it needs no cut). */
export function boundRecord<T extends UsageRecord>(r: T): T {
  if (r.payload === undefined || r.payload.length * 3 <= MAX_PAYLOAD_BYTES) return r;
  return { ...r, payload: boundPayload(r.payload) };
}

/** A byte count as the stores keep it: a whole number >= 0; none (null) when not given. */
export function byteCount(n: number | undefined): number | null {
  return typeof n === 'number' && Number.isFinite(n) ? Math.max(0, Math.round(n)) : null;
}

/**
 * A record's escalations as the stores keep them: a whole number from 0 to 2^31 - 1 (PostgreSQL's
 * integer: a larger one would fail the whole batch, and no cascade is that long); none when not given.
 */
export function escalationCount(n: number | undefined): number | null {
  return typeof n === 'number' && Number.isFinite(n) ? Math.min(2 ** 31 - 1, Math.max(0, Math.round(n))) : null;
}

/** A record's counterfactual cost as the stores keep it: a finite number; none (null) when not given. */
export const counterfactualOf = (r: UsageRecord): number | null =>
  typeof r.counterfactualCostUsd === 'number' && Number.isFinite(r.counterfactualCostUsd)
    ? r.counterfactualCostUsd
    : null;

/** A routing text field (requestedModel, routingPolicy, routingReason) as the stores keep it; none when not given. */
export const routingText = (v: string | undefined): string | null => (typeof v === 'string' ? v : null);

/**
 * What a record adds to the routing counters of its rollup rows: routed when a policy routed it;
 * escalated when routed and the cascade moved past a model; its cost and counterfactual when it
 * carries a counterfactual, so that routing savings (counterfactual - routed_cost) are exactly
 * the sum of its records' counterfactualCostUsd - costUsd. ROUTING_RAW_SUMS says the same of raw records.
 */
function routingOf(r: UsageRecord): { routed: number; escalated: number; routedCost: number; counterfactual: number } {
  const routed = routingText(r.routingPolicy) !== null;
  const counterfactual = counterfactualOf(r);
  return {
    routed: routed ? 1 : 0,
    escalated: routed && (escalationCount(r.escalations) ?? 0) > 0 ? 1 : 0,
    routedCost: counterfactual === null ? 0 : r.costUsd,
    counterfactual: counterfactual ?? 0,
  };
}

/** The routing counters over raw records (either store's columns), as routingOf adds them to the rollups. */
export const ROUTING_RAW_SUMS = `SUM(CASE WHEN routing_policy IS NOT NULL THEN 1 ELSE 0 END) AS routed,
  SUM(CASE WHEN routing_policy IS NOT NULL AND escalations > 0 THEN 1 ELSE 0 END) AS escalated,
  SUM(CASE WHEN counterfactual IS NOT NULL THEN cost ELSE 0 END) AS routed_cost,
  COALESCE(SUM(counterfactual), 0) AS counterfactual`;

/** The routing counters over rollup rows (SUM of each; `cast` is the dialect's cast of a sum, or ''). */
export const routingRollupSums = (cast: string): string =>
  ['routed', 'escalated', 'routed_cost', 'counterfactual'].map((c) => `SUM(${c})${cast} AS ${c}`).join(', ');

/** Raw records a routing report counts: routed, or carrying a counterfactual (their savings count). */
export const ROUTED_RECORD_SQL = '(routing_policy IS NOT NULL OR counterfactual IS NOT NULL)';
/** Rollup rows a routing report counts: those with any routing counter. */
export const ROUTED_ROLLUP_SQL = '(routed > 0 OR routed_cost != 0 OR counterfactual != 0)';

export interface ToolQuery {
  from: Date;
  to: Date;
  granularity: Granularity;
  /** 'tool': a group per (server, tool); 'server': a group per server, its tools together. */
  groupBy: 'tool' | 'server';
  /** All must be present on a call (AND). */
  tags: Tag[];
  /** Only this McpServer's calls. */
  server?: string;
  /** Only calls of tools of this name. */
  tool?: string;
  /** Most groups reported by name (most calls first); the rest are summed as OTHER_GROUP. */
  limit?: number;
  /** Only this team's calls. */
  team?: string;
}

interface ToolNumbers {
  calls: number;
  /**
   * Calls that failed: answered with a JSON-RPC error (status >= 400: the server's or the
   * gateway's), or run by a tool that reported its own failure (status 200, errorType tool_error).
   */
  errors: number;
  errorRate: number;
  latencyMs: { p50: number; p95: number; p99: number };
  /** Sizes of the JSON-RPC requests and of their answers. */
  bytesIn: number;
  bytesOut: number;
}

/** One group of a tool report: a server's tool, or (groupBy 'server') a server; OTHER_GROUP for those past the limit. */
interface ToolGroup {
  server: string;
  /** Absent when grouped by server. */
  tool?: string;
}

export interface ToolReport {
  from: string;
  to: string;
  granularity: Granularity;
  groupBy: 'tool' | 'server';
  totals: ToolNumbers;
  /** Per time bucket and group, in time order. */
  series: Array<ToolNumbers & ToolGroup & { time: string }>;
  /** Most calls first; OTHER_GROUP last. */
  groups: Array<ToolNumbers & ToolGroup>;
  /** How many groups were summed into OTHER_GROUP. */
  otherGroups: number;
}

export interface ToolCallQuery {
  from: Date;
  to: Date;
  tags: Tag[];
  server?: string;
  tool?: string;
  team?: string;
  /** At most MAX_TOOL_CALLS; DEFAULT_TOOL_CALLS unless asked. */
  limit?: number;
}

export const DEFAULT_TOOL_CALLS = 100;
export const MAX_TOOL_CALLS = 1000;

/** One tool call as the listing shows it. */
export interface ToolCall {
  time: string;
  requestId: string;
  server: string;
  tool: string;
  team: string;
  apiKey: string;
  keyHashPrefix: string;
  tags: Tag[];
  status: number;
  errorType?: string;
  latencyMs: number;
  bytesIn?: number;
  bytesOut?: number;
  /** Arguments and result (JSON, cut at MAX_PAYLOAD_BYTES): only calls of keys that opted in. */
  payload?: string;
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
  /** Served requests, and their errors; undelivered ones apart (UsageRecord.delivered). */
  requests: number;
  errors: number;
  undelivered: number;
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
  bytesIn: number;
  bytesOut: number;
  routed: number;
  escalated: number;
  routedCost: number;
  counterfactual: number;
  undelivered: number;
  [bucket: string]: number | string;
}

/** A report's rows, and how many groups were folded into OTHER_GROUP to keep it bounded. */
export interface ReportRows {
  rows: RollupRow[];
  folded: number;
  deployments: DeploymentCost[];
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
        ...Object.fromEntries(BUCKET_COLUMNS.map((c) => [c, 0])),
      };
      rollups.set(key, d);
    }
    // Served requests and their errors; an answer its caller never got apart, its cost counted all the same.
    const served = r.delivered !== false;
    d.requests += served ? 1 : 0;
    d.error += served && failed(r) ? 1 : 0;
    d.undelivered += served ? 0 : 1;
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

export function usageNumbers(rows: RollupRow[]): UsageNumbers {
  const routing = routingNumbers(rows);
  return {
    requests: rows.reduce((n, r) => n + r.requests, 0),
    undeliveredRequests: undeliveredOf(rows),
    inputTokens: rows.reduce((n, r) => n + r.prompt, 0),
    outputTokens: rows.reduce((n, r) => n + r.completion, 0),
    costUsd: round(rows.reduce((n, r) => n + r.cost, 0)),
    actualCostUsd: round(rows.reduce((n, r) => n + r.actual, 0)),
    savingsUsd: round(rows.reduce((n, r) => n + r.savings, 0)),
    routingSavingsUsd: routing.routingSavingsUsd,
    routedRequests: routing.routedRequests,
    escalationRate: routing.escalationRate,
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

/** A row of a tool report's query: sums per (time bucket, server, tool), histogram by bucket column. */
export interface ToolRow {
  bucket: number;
  server: string | null;
  tool: string | null;
  requests: number;
  errors: number;
  bytes_in: number;
  bytes_out: number;
  [bucketColumn: `b${number}`]: number;
}

/** The groups a tool report names: at most MAX_GROUP_LIMIT, DEFAULT_GROUP_LIMIT unless asked. */
export const toolGroupLimit = (q: ToolQuery): number =>
  Math.min(MAX_GROUP_LIMIT, Math.max(1, q.limit ?? DEFAULT_GROUP_LIMIT));

/** The listing's length: at most MAX_TOOL_CALLS, DEFAULT_TOOL_CALLS unless asked. */
export const toolCallLimit = (q: ToolCallQuery): number =>
  Math.min(MAX_TOOL_CALLS, Math.max(1, q.limit ?? DEFAULT_TOOL_CALLS));

/**
 * A tool report's rows come from the rollups (at most one tag filters it) or from the raw
 * records (several tags: exact AND), as the model reports do.
 */
export const toolsFromRollups = (q: ToolQuery): boolean => q.tags.length <= 1;

/**
 * A group's key in SQL: server and tool joined by the unit separator (neither a Kubernetes name
 * nor an MCP tool name has one), or the server alone. `sep` is the dialect's way of writing it.
 */
export const toolGroupKey = (q: ToolQuery, sep: string): string =>
  q.groupBy === 'server' ? 'provider' : `provider || ${sep} || model`;

function toolNumbers(rows: ToolRow[]): ToolNumbers {
  const calls = rows.reduce((n, r) => n + r.requests, 0);
  const errors = rows.reduce((n, r) => n + r.errors, 0);
  const hist = BUCKET_COLUMNS.map((c) => rows.reduce((n, r) => n + (r[c as `b${number}`] ?? 0), 0));
  return {
    calls,
    errors,
    errorRate: calls ? round(errors / calls, 4) : 0,
    latencyMs: {
      p50: percentileFromHistogram(hist, 50),
      p95: percentileFromHistogram(hist, 95),
      p99: percentileFromHistogram(hist, 99),
    },
    bytesIn: rows.reduce((n, r) => n + r.bytes_in, 0),
    bytesOut: rows.reduce((n, r) => n + r.bytes_out, 0),
  };
}

/** A tool report from its rows (already folded past the limit): totals, series in time order, groups by calls. */
export function assembleToolReport(q: ToolQuery, rows: ToolRow[], folded: number): ToolReport {
  const groupOf = (r: ToolRow): ToolGroup =>
    q.groupBy === 'server' ? { server: r.server ?? '' } : { server: r.server ?? '', tool: r.tool ?? '' };
  const keyOf = (g: ToolGroup) => `${g.server}\u0000${g.tool ?? ''}`;
  const byGroup = new Map<string, { group: ToolGroup; rows: ToolRow[] }>();
  for (const r of rows) {
    const group = groupOf(r);
    const k = keyOf(group);
    const had = byGroup.get(k);
    if (had) had.rows.push(r);
    else byGroup.set(k, { group, rows: [r] });
  }
  const isOther = (g: ToolGroup) => g.server === OTHER_GROUP && (g.tool === undefined || g.tool === OTHER_GROUP);
  const byKey = (a: ToolGroup, b: ToolGroup) => (keyOf(a) < keyOf(b) ? -1 : keyOf(a) > keyOf(b) ? 1 : 0);
  const groups = [...byGroup.values()]
    .map(({ group, rows: rs }) => ({ ...group, ...toolNumbers(rs) }))
    .sort((a, b) => Number(isOther(a)) - Number(isOther(b)) || b.calls - a.calls || byKey(a, b));
  const series = [...rows]
    .sort((a, b) => a.bucket - b.bucket || byKey(groupOf(a), groupOf(b)))
    .map((r) => ({ time: rfc3339(new Date(r.bucket)), ...groupOf(r), ...toolNumbers([r]) }));
  return {
    from: q.from.toISOString(),
    to: q.to.toISOString(),
    granularity: q.granularity,
    groupBy: q.groupBy,
    totals: toolNumbers(rows),
    series,
    groups,
    otherGroups: folded,
  };
}

/** "key:value" strings as the stores keep tags, back into tags. */
function parseStoredTags(tags: string[]): Tag[] {
  return tags.map((t) => {
    const at = t.indexOf(':');
    return { key: t.slice(0, at), value: t.slice(at + 1) };
  });
}

/** A raw record's row (either store's column names) as the tool-call listing shows it. */
export function toolCallOf(r: {
  ts: number;
  request_id: string;
  key_prefix: string;
  model: string;
  provider: string;
  tags: string[];
  status: number;
  error_type: string | null;
  latency_ms: number;
  team: string;
  api_key: string;
  bytes_in: number | null;
  bytes_out: number | null;
  payload: string | null;
}): ToolCall {
  return {
    time: new Date(Number(r.ts)).toISOString(),
    requestId: r.request_id,
    server: r.provider,
    tool: r.model,
    team: r.team,
    apiKey: r.api_key,
    keyHashPrefix: r.key_prefix,
    tags: parseStoredTags(r.tags),
    status: r.status,
    ...(r.error_type !== null ? { errorType: r.error_type } : {}),
    latencyMs: r.latency_ms,
    ...(r.bytes_in !== null ? { bytesIn: Number(r.bytes_in) } : {}),
    ...(r.bytes_out !== null ? { bytesOut: Number(r.bytes_out) } : {}),
    ...(r.payload !== null ? { payload: r.payload } : {}),
  };
}

/**
 * How long GPU minutes stay minutes before pruning folds them into hours. Reports aggregate the
 * minutes on every read (30 days of 5 deployments' minutes made a report 3-4x slower), and only
 * the last hours are still written: a ledger writes no minute older than GPU_WRITE_WINDOW_MS, so a
 * minute folded (then added, not maxed, to its hour) is never written again.
 */
export const GPU_MINUTES_KEPT_MS = 24 * HOUR;
export const GPU_WRITE_WINDOW_MS = 6 * HOUR;

/**
 * Actual cost of in-cluster models: what their GPUs cost, shared by the tokens they served.
 *
 * The proxies write each deployment's replica-seconds and their USD per minute (gpu_time rows,
 * folded into gpu_hour rows after a day, GPU_MINUTES_KEPT_MS). Per deployment and hour:
 *   - served USD: the USD of the minutes in which a proxy saw a request with tokens in flight
 *     (where no proxy marked any minute of the hour, the whole hour's USD), when the hour has
 *     tokens of that deployment at all;
 *   - idle USD: the rest, reported per deployment (`deployments`), never put on a tag;
 *   - rate: served USD / every team's tokens of that deployment in that hour (the rollups' all-
 *     requests rows), so that a request's share does not depend on who reads the report, and
 *     three times the tokens carry three times the cost.
 * A row's actual cost is its tokens x the rate of its (hour, provider), or its list cost where
 * there is no rate (external providers; hours of in-cluster models with no GPU time measured,
 * e.g. standalone servers whose replicas the proxy cannot see). Hours, not minutes, because the
 * rollups that reports read are hourly. The SQL is the same for both stores but for the
 * tables' names and the placeholders.
 */
export function gpuCostCtes(t: { gpuTime: string; gpuHour: string; rollup: string }, from: string, to: string): string {
  return `gpu_hours AS (
      SELECT g_hour, g_deployment, MAX(g_model) AS g_model, SUM(g_seconds) AS g_seconds, SUM(g_usd) AS g_usd,
        SUM(g_busy) AS g_busy
      FROM (
        SELECT hour AS g_hour, deployment AS g_deployment, model AS g_model, gpu_seconds AS g_seconds, usd AS g_usd,
          busy_usd AS g_busy
        FROM ${t.gpuHour} WHERE hour >= ${from} AND hour < ${to}
        UNION ALL
        SELECT minute - (minute % ${HOUR}), deployment, model, gpu_seconds, usd, CASE WHEN busy > 0 THEN usd ELSE 0 END
        FROM ${t.gpuTime} WHERE minute >= ${from} AND minute < ${to}
      ) g GROUP BY g_hour, g_deployment),
    gpu_tokens AS (
      SELECT hour AS t_hour, provider AS t_provider, CAST(SUM(prompt + completion) AS DOUBLE PRECISION) AS t_tokens
      FROM ${t.rollup}
      WHERE tag_key = '' AND tag_value = '' AND hour >= ${from} AND hour < ${to}
        AND provider IN (SELECT g_deployment FROM gpu_hours)
      GROUP BY hour, provider),
    gpu_share AS (
      SELECT g_hour, g_deployment, g_model, g_seconds, g_usd, t_tokens,
        CASE WHEN COALESCE(t_tokens, 0) = 0 THEN 0 WHEN g_busy > 0 THEN g_busy ELSE g_usd END AS g_served
      FROM gpu_hours LEFT JOIN gpu_tokens ON t_hour = g_hour AND t_provider = g_deployment),
    gpu_rate AS (
      SELECT g_hour AS rate_hour, g_deployment AS rate_provider, g_served / t_tokens AS rate
      FROM gpu_share WHERE g_usd > 0 AND t_tokens > 0)`;
}

/** A row's actual cost, over rows LEFT JOINed to gpu_rate on their hour and provider. */
export const ACTUAL_COST_SQL = 'CASE WHEN rate IS NULL THEN cost ELSE (prompt + completion) * rate END';

/** Per deployment over gpu_share: its GPU time, cost and idle cost. */
export const DEPLOYMENT_COSTS_SQL = `SELECT g_deployment AS deployment, MAX(g_model) AS model, SUM(g_seconds) AS gpu_seconds,
    SUM(g_usd) AS gpu_usd, SUM(g_usd - g_served) AS idle_usd
  FROM gpu_share GROUP BY g_deployment ORDER BY g_deployment`;

/** The whole hours a report's GPU figures span: those its rollup rows span. */
export function gpuWindow(q: Pick<UsageQuery, 'from' | 'to'>): { from: number; to: number } {
  return { from: Math.floor(q.from.getTime() / HOUR) * HOUR, to: Math.ceil(q.to.getTime() / HOUR) * HOUR };
}

/** A row of DEPLOYMENT_COSTS_SQL as the report shows it. */
export function deploymentCost(r: {
  deployment: string;
  model: string;
  gpu_seconds: number;
  gpu_usd: number;
  idle_usd: number;
}): DeploymentCost {
  return {
    deployment: r.deployment,
    model: r.model,
    gpuSeconds: round(r.gpu_seconds, 3),
    gpuCostUsd: round(r.gpu_usd),
    idleCostUsd: round(Math.max(0, r.idle_usd)),
  };
}

/**
 * GPU rows of a batch in a fixed order (deployment, minute), the last of duplicates merged by
 * max: writers upserting the same rows lock them in one order, so they cannot deadlock.
 */
export function gpuRowsInOrder(rows: GpuTimeRow[]): GpuTimeRow[] {
  const merged = new Map<string, GpuTimeRow>();
  for (const r of rows) {
    const k = `${r.deployment}\u0000${r.minute}`;
    const had = merged.get(k);
    merged.set(
      k,
      had
        ? {
            ...r,
            gpuSeconds: Math.max(had.gpuSeconds, r.gpuSeconds),
            usd: Math.max(had.usd, r.usd),
            busy: had.busy || r.busy,
          }
        : r,
    );
  }
  return [...merged.values()].sort((a, b) =>
    a.deployment < b.deployment ? -1 : a.deployment > b.deployment ? 1 : a.minute - b.minute,
  );
}
