import { HOUR, round } from './rollups.js';
import type { DeploymentCost, GpuTimeRow, UsageQuery } from './store.js';

/** GPU time's cost in reports: the minutes kept, the hours written, the SQL both stores run over them. */

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
