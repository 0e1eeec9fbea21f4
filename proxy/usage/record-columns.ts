import type { UsageRecord } from './record.js';

/** A usage record's fields as both stores keep them in their columns: bounded, typed, counted. */

/** The model of requests no model answered, in the rollups (callers choose the names they send). */
export const UNROUTED_MODEL = '(unrouted)';

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
export function failed(r: Pick<UsageRecord, 'status' | 'endpoint' | 'errorType'>): boolean {
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
export function routingOf(r: UsageRecord): {
  routed: number;
  escalated: number;
  routedCost: number;
  counterfactual: number;
} {
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

/** A record's cache hit as the stores keep it ('exact' or 'semantic'); none for a request not answered from the cache. */
export const cacheOf = (r: UsageRecord): string | null =>
  r.cache === 'exact' || r.cache === 'semantic' ? r.cache : null;

/** What a cache hit saved, as the stores keep it: a finite number >= 0; none when not a hit. */
export const cacheSavingsOf = (r: UsageRecord): number | null =>
  cacheOf(r) !== null && typeof r.cacheSavingsUsd === 'number' && Number.isFinite(r.cacheSavingsUsd)
    ? Math.max(0, r.cacheSavingsUsd)
    : null;

/** The cache counters over raw records (either store's columns), as the rollups sum them. */
export const CACHE_RAW_SUMS = `SUM(CASE WHEN cache IS NOT NULL THEN 1 ELSE 0 END) AS cache_hits,
  COALESCE(SUM(cache_savings), 0) AS cache_savings`;

/** The cache counters over rollup rows (`cast`: the dialect's cast of a sum, or ''). */
export const cacheRollupSums = (cast: string): string =>
  ['cache_hits', 'cache_savings'].map((c) => `SUM(${c})${cast} AS ${c}`).join(', ');
