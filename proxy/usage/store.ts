import type { Tag } from '../endpoints/tags.js';
import type { UsageRecord } from './record.js';

/**
 * The usage store contract: what a store keeps and answers (the record, the queries, the reports'
 * shapes). Two stores implement it: SQLite (embedded, the default: `sqlite-store.ts`) and
 * PostgreSQL (shared by replicas across nodes: `postgres-store.ts`); the same test suite runs
 * against both. What they share beside the contract lives with its concept: the record's columns
 * (record-columns.ts), the rollups (rollups.ts), report rows made reports (report-assembly.ts,
 * tool-report.ts) and GPU time's cost (gpu-cost.ts).
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
  /** Guardrail findings of requests in the window, by guardrail, category, action and place, grouped (GuardrailQuery). */
  guardrails(q: GuardrailQuery): Promise<GuardrailReport>;
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

export interface UsageNumbers {
  /** Served requests: answered, their answers delivered (UsageRecord.delivered). */
  requests: number;
  /**
   * Requests whose answers never reached their callers whole (a crash cut them, or the caller
   * left first): not served, but their tokens and cost are in the cost figures.
   */
  undeliveredRequests: number;
  /** Requests a model its provider has deprecated served (UsageRecord.deprecated): what still has to move. */
  deprecatedRequests: number;
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
  /** Requests answered from the response cache (proxy/cache/): no upstream call, no cost. */
  cacheHits: number;
  /** What those answers cost when they were made: the cache's savings, apart from routing's and free credits'. */
  cacheSavingsUsd: number;
}

export interface AnalyticsNumbers {
  /** Served requests (see UsageNumbers); errors and errorRate are of them. */
  requests: number;
  undeliveredRequests: number;
  deprecatedRequests: number;
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
export const POLICY_GROUP = 'policy';

export interface RoutingNumbers {
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

export interface ToolNumbers {
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
export interface ToolGroup {
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

/** What GET /v1/usage/guardrails reads: requests with findings in a window, grouped. */
export interface GuardrailQuery {
  from: Date;
  to: Date;
  /** guardrail (default), team, category, or a tag key. */
  groupBy: string;
  /** All must be present on a request (AND). */
  tags: Tag[];
  /** Only this team's requests (a User key's reads). */
  team?: string;
}

/** Findings of one (group, guardrail, category, action, place): how many, in how many requests. */
export interface GuardrailRow {
  group: string;
  guardrail: string;
  category: string;
  action: string;
  where: string;
  requests: number;
  findings: number;
}

export interface GuardrailReport {
  from: string;
  to: string;
  groupBy: string;
  totals: { requests: number; findings: number; blocked: number };
  /** Most findings first; at most MAX_GUARDRAIL_ROWS. */
  data: GuardrailRow[];
  /** More than MAX_GUARDRAIL_RECORDS requests had findings: the report is of the newest. */
  truncated: boolean;
}

/** The newest records with findings a guardrail report reads (findings are the rare case; this bounds a report's cost). */
export const MAX_GUARDRAIL_RECORDS = 100_000;

export const MAX_GUARDRAIL_ROWS = 500;
