import { rfc3339 } from '../../crds/meta.js';
import type { Tag } from '../endpoints/tags.js';
import { BUCKET_COLUMNS, percentileFromHistogram, round } from './rollups.js';
import {
  DEFAULT_GROUP_LIMIT,
  DEFAULT_TOOL_CALLS,
  MAX_GROUP_LIMIT,
  MAX_TOOL_CALLS,
  OTHER_GROUP,
  type ToolCall,
  type ToolCallQuery,
  type ToolGroup,
  type ToolNumbers,
  type ToolQuery,
  type ToolReport,
} from './store.js';

/** How either store's tool-call rows become a tool report and a tool-call listing. */

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
