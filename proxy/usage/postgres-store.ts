import pg from 'pg';
import {
  ACTUAL_COST_SQL,
  DEPLOYMENT_COSTS_SQL,
  deploymentCost,
  gpuCostCtes,
  gpuRowsInOrder,
  gpuWindow,
} from './gpu-cost.js';
import { assembleGuardrailReport, type FindingRow, findingsColumn } from './guardrail-report.js';
import {
  boundPayload,
  byteCount,
  CACHE_RAW_SUMS,
  cacheOf,
  cacheRollupSums,
  cacheSavingsOf,
  counterfactualOf,
  escalationCount,
  ROUTED_RECORD_SQL,
  ROUTED_ROLLUP_SQL,
  ROUTING_RAW_SUMS,
  routingRollupSums,
  routingText,
  TOOL_ENDPOINT,
  TOOL_ERROR_SQL,
} from './record-columns.js';
import {
  analyticsNumbers,
  answeredByRollups,
  assembleReport,
  assembleRoutingReport,
  groupLimit,
  groupsByPolicy,
  groupsByTag,
  type ReportRows,
  usageNumbers,
} from './report-assembly.js';
import {
  allocateCredits,
  BUCKET_COLUMNS,
  creditProviders,
  DAY,
  HOUR,
  keySpendDeltas,
  LATENCY_BUCKETS_MS,
  latencyBucketSums,
  type RollupRow,
  rollupDeltas,
  spendSince,
} from './rollups.js';
import {
  type AnalyticsNumbers,
  type DeploymentCost,
  type GpuTimeRow,
  type GuardrailQuery,
  type GuardrailReport,
  MAX_GUARDRAIL_RECORDS,
  OTHER_GROUP,
  type Report,
  type RoutingReport,
  type SpendScope,
  type StoredUsage,
  type TagCount,
  type ToolCall,
  type ToolCallQuery,
  type ToolQuery,
  type ToolReport,
  type UsageNumbers,
  type UsageQuery,
  type UsageStore,
} from './store.js';
import {
  assembleToolReport,
  type ToolRow,
  toolCallLimit,
  toolCallOf,
  toolGroupKey,
  toolGroupLimit,
  toolsFromRollups,
} from './tool-report.js';

/**
 * The usage store on PostgreSQL, shared by proxy replicas on any node.
 *
 * Built for volume: raw records live in daily range partitions of `usage_requests` (retention
 * drops whole partitions, never deletes rows), with a GIN index on the tag array for multi-tag
 * AND queries; hourly rollups are upserted once per (hour, model, provider, tag) per batch, in
 * key order so that replicas writing the same rows cannot deadlock. A batch is one
 * transaction and idempotent: raw records are keyed by request id, and rollups are incremented
 * only for the records the batch actually inserted, so a batch retried after a lost commit
 * acknowledgement counts once. Migrations are versioned and applied at start under an
 * advisory lock, so replicas starting together do not race.
 *
 * Driver: pg (node-postgres) with its pool, pure JavaScript. postgres.js was tried first (it is
 * faster on paper), but the gateway's own fault test found it crashing the process when the
 * server drops a connection while a small write is queued (porsager/postgres#1154, #1208, open
 * in 3.4.9); node-postgres reports such losses as errors of the query or the pool, which the
 * store turns into a failed batch that the recorder holds and retries.
 */

type Client = pg.PoolClient;
type Read = <R extends pg.QueryResultRow>(text: string, params: unknown[]) => Promise<R[]>;

const MIGRATION_LOCK = 0x7061_6f75; // "paou": one number for every replica of this product
/** Versioned schema changes, applied in order; exported for the upgrade tests. */
export const MIGRATIONS: string[] = [
  // 1: raw records by day, tags as an array, rollups by hour.
  `CREATE TABLE usage_requests (
     ts bigint NOT NULL,
     request_id text NOT NULL,
     key_prefix text NOT NULL,
     model text NOT NULL,
     provider text NOT NULL,
     tags text[] NOT NULL,
     prompt integer NOT NULL,
     completion integer NOT NULL,
     cost double precision NOT NULL,
     savings double precision NOT NULL,
     latency_ms double precision NOT NULL,
     ttft_ms double precision,
     status smallint NOT NULL,
     error_type text,
     stream boolean NOT NULL,
     tokens_counted boolean NOT NULL,
     unpriced boolean NOT NULL,
     PRIMARY KEY (request_id, ts)
   ) PARTITION BY RANGE (ts);
   CREATE INDEX usage_requests_ts ON usage_requests (ts);
   CREATE INDEX usage_requests_tags ON usage_requests USING gin (tags);
   CREATE TABLE usage_rollup (
     hour bigint NOT NULL,
     model text NOT NULL,
     provider text NOT NULL,
     tag_key text NOT NULL,
     tag_value text NOT NULL,
     requests bigint NOT NULL,
     errors bigint NOT NULL,
     prompt bigint NOT NULL,
     completion bigint NOT NULL,
     cost double precision NOT NULL,
     savings double precision NOT NULL,
     ${BUCKET_COLUMNS.map((c) => `${c} bigint NOT NULL DEFAULT 0`).join(',\n     ')},
     PRIMARY KEY (hour, model, provider, tag_key, tag_value)
   );
   CREATE INDEX usage_rollup_tag ON usage_rollup (tag_key, tag_value, hour);
   CREATE TABLE usage_credits (provider text PRIMARY KEY, used double precision NOT NULL);`,
  // 2: teams and keys. Records and rollups carry the team (a User key reads its own); spend per
  // ApiKey per hour answers key budgets. Adding a column with a constant default rewrites nothing.
  `ALTER TABLE usage_requests ADD COLUMN team text NOT NULL DEFAULT '';
   ALTER TABLE usage_requests ADD COLUMN api_key text NOT NULL DEFAULT '';
   ALTER TABLE usage_rollup ADD COLUMN team text NOT NULL DEFAULT '';
   ALTER TABLE usage_rollup DROP CONSTRAINT usage_rollup_pkey;
   ALTER TABLE usage_rollup ADD PRIMARY KEY (hour, model, provider, team, tag_key, tag_value);
   CREATE TABLE usage_key_spend (
     api_key text NOT NULL,
     hour bigint NOT NULL,
     cost double precision NOT NULL,
     PRIMARY KEY (api_key, hour)
   );`,
  // 3: endpoints. Records and rollups carry the endpoint (chat, responses, messages, ...): reports
  // split by it. Rows of before keep ''.
  `ALTER TABLE usage_requests ADD COLUMN endpoint text NOT NULL DEFAULT '';
   ALTER TABLE usage_rollup ADD COLUMN endpoint text NOT NULL DEFAULT '';
   ALTER TABLE usage_rollup DROP CONSTRAINT usage_rollup_pkey;
   ALTER TABLE usage_rollup ADD PRIMARY KEY (hour, model, endpoint, provider, team, tag_key, tag_value);`,
  // 4: GPU time of in-cluster deployments (actual cost): per minute as the proxies measure it
  // (upserted keeping the largest figures), folded into hours after a day.
  `CREATE TABLE usage_gpu_time (
     deployment text NOT NULL,
     minute bigint NOT NULL,
     model text NOT NULL,
     gpu_seconds double precision NOT NULL,
     usd double precision NOT NULL,
     busy smallint NOT NULL DEFAULT 0,
     PRIMARY KEY (deployment, minute)
   );
   CREATE INDEX usage_gpu_time_minute ON usage_gpu_time (minute);
   CREATE TABLE usage_gpu_hour (
     deployment text NOT NULL,
     hour bigint NOT NULL,
     model text NOT NULL,
     gpu_seconds double precision NOT NULL,
     usd double precision NOT NULL,
     busy_usd double precision NOT NULL,
     PRIMARY KEY (deployment, hour)
   );`,
  // 5: tool calls through the MCP routes (endpoint 'mcp'). Records carry the sizes of the JSON-RPC
  // request and answer and, for keys that opt in, the call's arguments and result (cut at 16 KiB);
  // none for model requests and rows of before. Rollups sum the sizes for the tool report.
  `ALTER TABLE usage_requests ADD COLUMN bytes_in bigint, ADD COLUMN bytes_out bigint, ADD COLUMN payload text;
   ALTER TABLE usage_rollup ADD COLUMN bytes_in bigint NOT NULL DEFAULT 0,
     ADD COLUMN bytes_out bigint NOT NULL DEFAULT 0;`,
  // 6: routed requests (RoutingPolicy). Records carry the model asked for, the policy, its reason,
  // the cascade's escalations and the counterfactual cost (none for requests not routed and rows
  // of before). Rollups count routed and escalated requests, and sum the cost and counterfactual
  // of those that carry one, so routing savings by any rollup dimension are counterfactual - routed_cost.
  `ALTER TABLE usage_requests ADD COLUMN requested_model text, ADD COLUMN routing_policy text,
     ADD COLUMN routing_reason text, ADD COLUMN escalations integer, ADD COLUMN counterfactual double precision;
   ALTER TABLE usage_rollup ADD COLUMN routed bigint NOT NULL DEFAULT 0, ADD COLUMN escalated bigint NOT NULL DEFAULT 0,
     ADD COLUMN routed_cost double precision NOT NULL DEFAULT 0,
     ADD COLUMN counterfactual double precision NOT NULL DEFAULT 0;`,
  // 7: whether a whole answer reached its caller (UsageRecord.delivered; rows of before: as far
  // as anyone knew, yes). Rollups count served requests and errors as before and undelivered ones apart.
  `ALTER TABLE usage_requests ADD COLUMN delivered boolean NOT NULL DEFAULT true;
   ALTER TABLE usage_rollup ADD COLUMN undelivered bigint NOT NULL DEFAULT 0;`,
  // 8: served by a model its provider has deprecated (UsageRecord.deprecated; rows of before: no).
  `ALTER TABLE usage_requests ADD COLUMN deprecated boolean NOT NULL DEFAULT false;
   ALTER TABLE usage_rollup ADD COLUMN deprecated bigint NOT NULL DEFAULT 0;`,
  // 9: guardrail findings (proxy/guardrails/), as JSON; none for requests without and rows of before.
  'ALTER TABLE usage_requests ADD COLUMN findings text;',
  // 10: answers from the response cache (proxy/cache/) and what they saved; rollups count them.
  `ALTER TABLE usage_requests ADD COLUMN cache text, ADD COLUMN cache_savings double precision;
   ALTER TABLE usage_rollup ADD COLUMN cache_hits bigint NOT NULL DEFAULT 0,
     ADD COLUMN cache_savings double precision NOT NULL DEFAULT 0;`,
];

/** A LIMIT known to be a small whole number (a bound, never caller text). */
const groupLimitLiteral = (n: number): string => String(Math.max(1, Math.trunc(n)));

const GPU_TABLES = { gpuTime: 'usage_gpu_time', gpuHour: 'usage_gpu_hour', rollup: 'usage_rollup' };

/** ($1, $2, ...), (...) for `rows` rows of `columns` values each. */
function placeholders(rows: number, columns: number): string {
  return Array.from(
    { length: rows },
    (_, r) => `(${Array.from({ length: columns }, (_, c) => `$${r * columns + c + 1}`).join(', ')})`,
  ).join(', ');
}

const partitionName = (day: number) => `usage_requests_${new Date(day).toISOString().slice(0, 10).replaceAll('-', '')}`;

/** A query under construction: SQL text with typed $n placeholders and their values. */
class Query {
  readonly params: Array<string | number | string[]> = [];
  bind(value: string | number | string[]): string {
    this.params.push(value);
    const type = typeof value === 'number' ? 'bigint' : typeof value === 'string' ? 'text' : 'text[]';
    return `$${this.params.length}::${type}`;
  }
}

export interface PostgresStoreOptions {
  /** Connections in the pool (writes and reports). */
  max?: number;
  /** Seconds to wait for a connection before a query fails (the recorder then holds its batch). */
  connectTimeoutSeconds?: number;
}

export class PostgresUsageStore implements UsageStore {
  private readonly partitions = new Set<number>();
  private schema: Promise<void> | undefined;

  /** `pool`: also the stored Responses' (proxy/stored-responses/), whose table is in the same database. */
  private constructor(readonly pool: pg.Pool) {
    // An idle pooled connection that breaks (server restart, failover) must not take the
    // process down: it is dropped from the pool, and the next query connects again.
    pool.on('error', () => {});
    // pg emits a connection's errors on its client, and the pool listens only while the client
    // is idle in it: an error that arrives while it is checked out, or after a broken one was
    // released and is being ended (a fast shutdown terminates every backend at once), would be
    // unhandled and end the process. Each client gets a listener for its whole life; the query
    // that was running fails on its own.
    pool.on('connect', (client) => client.on('error', () => {}));
  }

  private static pool(url: string, opts: PostgresStoreOptions): pg.Pool {
    return new pg.Pool({
      connectionString: url,
      max: opts.max ?? 10,
      connectionTimeoutMillis: (opts.connectTimeoutSeconds ?? 5) * 1000,
      idleTimeoutMillis: 60_000,
    });
  }

  /** One transaction on one pooled connection; a connection that failed is discarded, not reused. */
  private async transaction<T>(work: (client: Client) => Promise<T>): Promise<T> {
    const client = await this.pool.connect();
    let broken: Error | undefined;
    try {
      await client.query('BEGIN');
      const result = await work(client);
      await client.query('COMMIT');
      return result;
    } catch (err) {
      broken = err instanceof Error ? err : new Error(String(err));
      await client.query('ROLLBACK').catch(() => {});
      throw err;
    } finally {
      client.release(broken);
    }
  }

  private async query<R extends pg.QueryResultRow>(text: string, params: unknown[] = []): Promise<R[]> {
    return (await this.pool.query<R>(text, params)).rows;
  }

  /** Connects and brings the schema up to date; fails if the database cannot be reached. */
  static async open(url: string, opts: PostgresStoreOptions = {}): Promise<PostgresUsageStore> {
    const store = new PostgresUsageStore(PostgresUsageStore.pool(url, opts));
    try {
      await store.ensureSchema();
    } catch (err) {
      await store.close();
      throw err;
    }
    return store;
  }

  /**
   * A store that connects when first used: a gateway starting while its database is down
   * serves traffic anyway (the recorder holds the records) and migrates once it answers.
   */
  static connect(url: string, opts: PostgresStoreOptions = {}): PostgresUsageStore {
    return new PostgresUsageStore(PostgresUsageStore.pool(url, opts));
  }

  /** Applies the migrations once per process; a failed attempt is retried by the next caller. */
  ensureSchema(): Promise<void> {
    this.schema ??= this.migrate().catch((err: unknown) => {
      this.schema = undefined;
      throw err;
    });
    return this.schema;
  }

  private async migrate(): Promise<void> {
    await this.transaction(async (tx) => {
      await tx.query('SELECT pg_advisory_xact_lock($1)', [MIGRATION_LOCK]);
      await tx.query(
        'CREATE TABLE IF NOT EXISTS usage_migrations (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())',
      );
      const { rows } = await tx.query<{ v: number | null }>('SELECT max(version)::int AS v FROM usage_migrations');
      for (let v = (rows[0]?.v ?? 0) + 1; v <= MIGRATIONS.length; v++) {
        await tx.query(MIGRATIONS[v - 1] as string);
        await tx.query('INSERT INTO usage_migrations (version) VALUES ($1)', [v]);
      }
    });
  }

  /** Creates the daily partitions a batch needs (concurrent replicas may create the same one). */
  private async ensurePartitions(records: StoredUsage[]): Promise<void> {
    const days = new Set(records.map((r) => Math.floor(Date.parse(r.time) / DAY) * DAY));
    for (const day of days) {
      if (this.partitions.has(day)) continue;
      try {
        await this.pool.query(
          `CREATE TABLE IF NOT EXISTS ${partitionName(day)} PARTITION OF usage_requests FOR VALUES FROM (${day}) TO (${day + DAY})`,
        );
      } catch (err) {
        // Another replica created it between our check and create: 42P07 or a catalog unique violation.
        const code = (err as { code?: string }).code;
        if (code !== '42P07' && code !== '23505') throw err;
      }
      this.partitions.add(day);
    }
  }

  async insert(records: StoredUsage[]): Promise<void> {
    if (records.length === 0) return;
    await this.ensureSchema();
    await this.ensurePartitions(records);
    await this.transaction(async (tx) => {
      await this.spendCredits(tx, records);
      await this.write(tx, records);
    }).catch((err: unknown) => {
      // No partition for a row (dropped, or a failover to a server that lacks it): make them again next time.
      if ((err as { code?: string }).code === '23514') this.partitions.clear();
      throw err;
    });
  }

  /**
   * Free credits, spent once across replicas: the providers' rows are locked (in name order, so
   * two replicas cannot deadlock) for the rest of the transaction, and only records not yet
   * stored spend them.
   */
  private async spendCredits(tx: Client, records: StoredUsage[]): Promise<void> {
    const providers = creditProviders(records);
    if (providers.length === 0) return;
    await tx.query('INSERT INTO usage_credits (provider, used) SELECT unnest($1::text[]), 0 ON CONFLICT DO NOTHING', [
      providers,
    ]);
    const { rows: locked } = await tx.query<{ provider: string; used: number }>(
      'SELECT provider, used FROM usage_credits WHERE provider = ANY($1::text[]) ORDER BY provider FOR UPDATE',
      [providers],
    );
    const used = new Map(locked.map((r) => [r.provider, r.used]));
    const candidates = records.filter((r) => r.creditsUsd !== undefined);
    const { rows: stored } = await tx.query<{ id: string }>(
      "SELECT request_id || '|' || ts AS id FROM usage_requests WHERE request_id = ANY($1::text[])",
      [candidates.map((r) => r.requestId)],
    );
    const seen = new Set(stored.map((r) => r.id));
    allocateCredits(
      candidates.filter((r) => !seen.has(`${r.requestId}|${Date.parse(r.time)}`)),
      used,
    );
    for (const [provider, u] of used) {
      await tx.query('UPDATE usage_credits SET used = $1 WHERE provider = $2', [u, provider]);
    }
  }

  private async write(tx: Client, records: StoredUsage[]): Promise<void> {
    const inserted = new Set<string>();
    // Multi-row inserts of at most 1000 rows (30 parameters each, under the 65535 limit).
    for (let i = 0; i < records.length; i += 1000) {
      const chunk = records.slice(i, i + 1000);
      const values = chunk.map((r) => [
        Date.parse(r.time),
        r.requestId,
        r.keyHashPrefix,
        r.model,
        r.provider,
        r.tags.map((t) => `${t.key}:${t.value}`),
        r.promptTokens,
        r.completionTokens,
        r.costUsd,
        r.savingsUsd,
        r.latencyMs,
        r.firstTokenMs ?? null,
        r.status,
        r.errorType ?? null,
        r.stream,
        r.tokensCounted ?? false,
        r.unpriced ?? false,
        r.team ?? '',
        r.apiKey ?? '',
        r.endpoint ?? '',
        byteCount(r.bytesIn),
        byteCount(r.bytesOut),
        r.payload === undefined ? null : boundPayload(r.payload),
        routingText(r.requestedModel),
        routingText(r.routingPolicy),
        routingText(r.routingReason),
        escalationCount(r.escalations),
        counterfactualOf(r),
        r.delivered !== false,
        r.deprecated ?? false,
        findingsColumn(r),
        cacheOf(r),
        cacheSavingsOf(r),
      ]);
      const { rows } = await tx.query<{ request_id: string; ts: string }>(
        `INSERT INTO usage_requests (ts, request_id, key_prefix, model, provider, tags, prompt, completion, cost,
           savings, latency_ms, ttft_ms, status, error_type, stream, tokens_counted, unpriced, team, api_key, endpoint,
           bytes_in, bytes_out, payload, requested_model, routing_policy, routing_reason, escalations, counterfactual,
           delivered, deprecated, findings, cache, cache_savings)
         VALUES ${placeholders(values.length, 33)} ON CONFLICT DO NOTHING RETURNING request_id, ts::text`,
        values.flat(),
      );
      for (const d of rows) inserted.add(`${d.request_id}|${d.ts}`);
    }
    const fresh = records.filter((r) => inserted.has(`${r.requestId}|${Date.parse(r.time)}`));
    await this.addRollups(tx, fresh);
    const spend = keySpendDeltas(fresh);
    if (spend.length > 0) {
      await tx.query(
        `INSERT INTO usage_key_spend (api_key, hour, cost)
         SELECT * FROM unnest($1::text[], $2::bigint[], $3::float8[])
         ON CONFLICT (api_key, hour) DO UPDATE SET cost = usage_key_spend.cost + excluded.cost`,
        [spend.map((d) => d.apiKey), spend.map((d) => d.hour), spend.map((d) => d.cost)],
      );
    }
  }

  /** The rollup increments of the records a batch inserted, upserted in key order (replicas cannot deadlock). */
  private async addRollups(tx: Client, fresh: StoredUsage[]): Promise<void> {
    const deltas = rollupDeltas(fresh).sort((a, b) =>
      a.hour !== b.hour
        ? a.hour - b.hour
        : `${a.model}\u0000${a.endpoint}\u0000${a.provider}\u0000${a.team}\u0000${a.tagKey}\u0000${a.tagValue}`.localeCompare(
            `${b.model}\u0000${b.endpoint}\u0000${b.provider}\u0000${b.team}\u0000${b.tagKey}\u0000${b.tagValue}`,
          ),
    );
    const columns = [
      'hour',
      'model',
      'endpoint',
      'provider',
      'team',
      'tag_key',
      'tag_value',
      'requests',
      'errors',
      'prompt',
      'completion',
      'cost',
      'savings',
      'bytes_in',
      'bytes_out',
      'routed',
      'escalated',
      'routed_cost',
      'counterfactual',
      'undelivered',
      'deprecated',
      'cache_hits',
      'cache_savings',
      ...BUCKET_COLUMNS,
    ];
    for (let i = 0; i < deltas.length; i += 500) {
      const values = deltas
        .slice(i, i + 500)
        .map((d) => [
          d.hour,
          d.model,
          d.endpoint,
          d.provider,
          d.team,
          d.tagKey,
          d.tagValue,
          d.requests,
          d.error,
          d.prompt,
          d.completion,
          d.cost,
          d.savings,
          d.bytesIn,
          d.bytesOut,
          d.routed,
          d.escalated,
          d.routedCost,
          d.counterfactual,
          d.undelivered,
          d.deprecated,
          d.cacheHits,
          d.cacheSavings,
          ...BUCKET_COLUMNS.map((c) => Number(d[c] ?? 0)),
        ]);
      await tx.query(
        `INSERT INTO usage_rollup (${columns.join(', ')}) VALUES ${placeholders(values.length, columns.length)}
         ON CONFLICT (hour, model, endpoint, provider, team, tag_key, tag_value) DO UPDATE SET
           ${columns
             .slice(7)
             .map((c) => `${c} = usage_rollup.${c} + excluded.${c}`)
             .join(', ')}`,
        values.flat(),
      );
    }
  }

  async spend(scopes: SpendScope[]): Promise<number[]> {
    if (scopes.length === 0) return [];
    await this.ensureSchema();
    // One query for all scopes: each is a (kind, id, since) row joined to what it counts.
    const kinds = scopes.map((s) => ('apiKey' in s ? 'key' : 'tag'));
    const ids = scopes.map((s) => ('apiKey' in s ? s.apiKey : `${s.tag.key}:${s.tag.value}`));
    const since = scopes.map(spendSince);
    const rows = await this.query<{ i: number; usd: number }>(
      `SELECT s.i::int AS i, COALESCE(
         CASE WHEN s.kind = 'key'
           THEN (SELECT SUM(cost) FROM usage_key_spend k WHERE k.api_key = s.id AND k.hour >= s.since)
           ELSE (SELECT SUM(cost - savings) FROM usage_rollup r
                 WHERE r.tag_key = split_part(s.id, ':', 1) AND r.tag_value = substr(s.id, strpos(s.id, ':') + 1)
                   AND r.hour >= s.since)
         END, 0)::float8 AS usd
       FROM unnest($1::text[], $2::text[], $3::bigint[]) WITH ORDINALITY AS s(kind, id, since, i)`,
      [kinds, ids, since],
    );
    const out = scopes.map(() => 0);
    for (const r of rows) out[r.i - 1] = r.usd;
    return out;
  }

  async prune(before: Date, rollupsBefore?: Date, gpuMinutesBefore = before): Promise<void> {
    await this.ensureSchema();
    // Whole days only: a partition goes once all of its day is past retention.
    const cutoff = Math.floor(before.getTime() / DAY) * DAY;
    const parts = await this.query<{ name: string; bound: string }>(
      `SELECT c.relname AS name, pg_get_expr(c.relpartbound, c.oid) AS bound
       FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
       WHERE i.inhparent = 'usage_requests'::regclass`,
    );
    for (const p of parts) {
      const to = Number(/TO \('?(\d+)'?\)/.exec(p.bound)?.[1] ?? Number.NaN);
      if (Number.isFinite(to) && to <= cutoff) {
        await this.pool.query(`DROP TABLE IF EXISTS ${p.name}`);
        this.partitions.delete(to - DAY);
      }
    }
    if (rollupsBefore) {
      await this.pool.query('DELETE FROM usage_rollup WHERE hour < $1', [rollupsBefore.getTime()]);
      await this.pool.query('DELETE FROM usage_key_spend WHERE hour < $1', [rollupsBefore.getTime()]);
    }
    await this.foldGpuMinutes(Math.floor(gpuMinutesBefore.getTime() / HOUR) * HOUR, rollupsBefore);
  }

  /**
   * GPU minutes of whole hours before `hour` become one row per (deployment, hour), in one
   * transaction (as in the SQLite store: an hour row is 1/60 of the minutes' volume and keeps
   * what reports read). Replicas pruning at once fold each minute once: the minutes are
   * deleted with RETURNING under their row locks, and only what a transaction deleted is added.
   */
  private async foldGpuMinutes(hour: number, rollupsBefore: Date | undefined): Promise<void> {
    await this.transaction(async (tx) => {
      await tx.query(
        `WITH gone AS (DELETE FROM usage_gpu_time WHERE minute < $1 RETURNING *)
         INSERT INTO usage_gpu_hour (deployment, hour, model, gpu_seconds, usd, busy_usd)
         SELECT deployment, minute - (minute % ${HOUR}) AS h, MAX(model), SUM(gpu_seconds), SUM(usd),
           SUM(CASE WHEN busy > 0 THEN usd ELSE 0 END)
         FROM gone GROUP BY deployment, h ORDER BY deployment, h
         ON CONFLICT (deployment, hour) DO UPDATE SET gpu_seconds = usage_gpu_hour.gpu_seconds + excluded.gpu_seconds,
           usd = usage_gpu_hour.usd + excluded.usd, busy_usd = usage_gpu_hour.busy_usd + excluded.busy_usd`,
        [hour],
      );
      if (rollupsBefore) await tx.query('DELETE FROM usage_gpu_hour WHERE hour < $1', [rollupsBefore.getTime()]);
    });
  }

  async recordGpuTime(rows: GpuTimeRow[]): Promise<void> {
    if (rows.length === 0) return;
    await this.ensureSchema();
    const ordered = gpuRowsInOrder(rows);
    // One statement, rows in key order: replicas writing the same minutes lock them in the same order.
    await this.pool.query(
      `INSERT INTO usage_gpu_time (deployment, minute, model, gpu_seconds, usd, busy)
       SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::float8[], $5::float8[], $6::smallint[])
       ON CONFLICT (deployment, minute) DO UPDATE SET model = excluded.model,
         gpu_seconds = GREATEST(usage_gpu_time.gpu_seconds, excluded.gpu_seconds),
         usd = GREATEST(usage_gpu_time.usd, excluded.usd), busy = GREATEST(usage_gpu_time.busy, excluded.busy)`,
      [
        ordered.map((r) => r.deployment),
        ordered.map((r) => r.minute),
        ordered.map((r) => r.model),
        ordered.map((r) => r.gpuSeconds),
        ordered.map((r) => r.usd),
        ordered.map((r) => (r.busy ? 1 : 0)),
      ],
    );
  }

  async count(): Promise<number> {
    await this.ensureSchema();
    const [row] = await this.query<{ n: number }>('SELECT count(*)::float8 AS n FROM usage_requests');
    return row?.n ?? 0;
  }

  /**
   * A report's queries, in one transaction with JIT compilation off: a raw-record query spans up
   * to 30 partitions, and once autovacuum has analyzed them its estimated cost crosses the JIT
   * thresholds; compiling its expressions for every partition then took 11 s of CPU and made a
   * 0.8 s query take 4.7 s (EXPLAIN ANALYZE at 10M records). SET LOCAL, not a connection option,
   * so it also holds behind PgBouncer in transaction mode.
   */
  private async rows(q: UsageQuery, routing = false): Promise<ReportRows> {
    await this.ensureSchema();
    return this.transaction(async (tx) => {
      await tx.query('SET LOCAL jit = off');
      const read: Read = async (text, params) => (await tx.query(text, params)).rows;
      const rows = answeredByRollups(q, routing)
        ? await this.rollupRows(q, read, routing)
        : await this.rawRows(q, read, routing);
      // The routing report has no GPU figures (the usage report has them).
      return { ...rows, deployments: routing ? [] : await this.deployments(q, read) };
    });
  }

  /** The CTEs of gpu_rate and gpu_share over the report's whole hours, bound into `query`. */
  private gpuCtes(q: UsageQuery, query: Query): string {
    const w = gpuWindow(q);
    return gpuCostCtes(GPU_TABLES, query.bind(w.from), query.bind(w.to));
  }

  /** The deployments' GPU time and cost in the report's window; none in a team's report. */
  private async deployments(q: UsageQuery, read: Read): Promise<DeploymentCost[]> {
    if (q.team !== undefined) return [];
    const query = new Query();
    // Sums of double precision columns: numbers, not numeric strings.
    const rows = await read<Parameters<typeof deploymentCost>[0]>(
      `WITH ${this.gpuCtes(q, query)} ${DEPLOYMENT_COSTS_SQL}`,
      query.params,
    );
    return rows.map(deploymentCost);
  }

  /** `routing`: only rows with routed requests, groups ranked by them (as in the SQLite store). */
  private async rollupRows(q: UsageQuery, read: Read, routing: boolean): Promise<Omit<ReportRows, 'deployments'>> {
    const query = new Query();
    const size = q.granularity === 'day' ? DAY : HOUR;
    const where = [
      `hour >= ${query.bind(Math.floor(q.from.getTime() / HOUR) * HOUR)}`,
      `hour < ${query.bind(q.to.getTime())}`,
      // Tool calls are not model requests: the tool report has them (tools()).
      `endpoint != ${query.bind(TOOL_ENDPOINT)}`,
    ];
    if (q.team !== undefined) where.push(`team = ${query.bind(q.team)}`);
    const filter = q.tags[0];
    const byTag = groupsByTag(q);
    if (byTag) {
      where.push(`tag_key = ${query.bind(q.groupBy)}`);
      if (filter) where.push(`tag_value = ${query.bind(filter.value)}`);
    } else if (filter) {
      where.push(`tag_key = ${query.bind(filter.key)}`, `tag_value = ${query.bind(filter.value)}`);
    } else {
      where.push("tag_key = ''");
    }
    if (routing) where.push(ROUTED_ROLLUP_SQL);
    const group = byTag ? 'tag_value' : q.groupBy;
    const source = `FROM usage_rollup WHERE ${where.join(' AND ')}`;
    const rank = routing ? 'SUM(routed)' : 'SUM(requests)';
    const { named, folded } = await this.topGroups(q, query, group, rank, source, read);
    const sums = `SUM(requests)::float8 AS requests, SUM(errors)::float8 AS errors,
      SUM(undelivered)::float8 AS undelivered, SUM(deprecated)::float8 AS deprecated, SUM(prompt)::float8 AS prompt,
      SUM(completion)::float8 AS completion, SUM(cost)::float8 AS cost, SUM(${ACTUAL_COST_SQL})::float8 AS actual,
      SUM(savings)::float8 AS savings, ${routingRollupSums('::float8')}, ${cacheRollupSums('::float8')},
      ${BUCKET_COLUMNS.map((c) => `SUM(${c})::float8 AS ${c}`).join(', ')}`;
    const rows = await read<RollupRow>(
      `WITH ${this.gpuCtes(q, query)}
       SELECT (hour - (hour % ${size}))::float8 AS bucket, ${named} AS grp, ${sums}
       FROM usage_rollup LEFT JOIN gpu_rate ON rate_hour = usage_rollup.hour AND rate_provider = usage_rollup.provider
       WHERE ${where.join(' AND ')}
       GROUP BY 1, 2 ORDER BY 1, 2 NULLS FIRST`,
      query.params,
    );
    return { rows: [...rows], folded };
  }

  private async rawRows(q: UsageQuery, read: Read, routing: boolean): Promise<Omit<ReportRows, 'deployments'>> {
    const query = new Query();
    const size = q.granularity === 'day' ? DAY : HOUR;
    const where = [
      `ts >= ${query.bind(q.from.getTime())}`,
      `ts < ${query.bind(q.to.getTime())}`,
      `endpoint != ${query.bind(TOOL_ENDPOINT)}`,
    ];
    if (routing) where.push(ROUTED_RECORD_SQL);
    if (q.team !== undefined) where.push(`team = ${query.bind(q.team)}`);
    // The GIN index answers "carries every one of these tags" in one step.
    if (q.tags.length > 0) where.push(`tags @> ${query.bind(q.tags.map((t) => `${t.key}:${t.value}`))}`);
    const columns: Record<string, string> = { model: 'model', endpoint: 'endpoint', provider: 'provider' };
    let group = groupsByPolicy(q, routing) ? 'routing_policy' : (columns[q.groupBy] ?? 'provider');
    let from = `usage_requests r LEFT JOIN gpu_rate ON rate_hour = r.ts - (r.ts % ${HOUR}) AND rate_provider = r.provider`;
    if (groupsByTag(q, routing)) {
      // A lateral join rather than a subquery in the select list: the plan stays parallel (1.2 s
      // -> 0.75 s for two tags over 30 days at 10M records, grouped by a tag key).
      const prefix = query.bind(`${q.groupBy}:`);
      from += ` LEFT JOIN LATERAL (SELECT substr(t, length(${prefix}) + 1) AS value FROM unnest(r.tags) t
        WHERE starts_with(t, ${prefix}) LIMIT 1) tag ON true`;
      group = 'tag.value';
    }
    const buckets = LATENCY_BUCKETS_MS.map((bound, i) => {
      const lower = i === 0 ? -1 : (LATENCY_BUCKETS_MS[i - 1] ?? 0);
      return Number.isFinite(bound)
        ? `count(*) FILTER (WHERE latency_ms > ${lower} AND latency_ms <= ${bound})::float8 AS b${i}`
        : `count(*) FILTER (WHERE latency_ms > ${lower})::float8 AS b${i}`;
    });
    // One scan of the raw records: aggregate per (bucket, group) once, then rank the groups and
    // fold those past the limit from that aggregate (ranking with a second scan doubled the cost).
    const limit = query.bind(groupLimit(q));
    const other = query.bind(OTHER_GROUP);
    const sums = [
      'requests',
      'errors',
      'undelivered',
      'deprecated',
      'prompt',
      'completion',
      'cost',
      'actual',
      'savings',
      'routed',
    ];
    sums.push('escalated');
    sums.push('routed_cost', 'counterfactual', 'cache_hits', 'cache_savings', ...BUCKET_COLUMNS);
    // The routing report ranks groups by routed requests, the others by all requests.
    const rank = routing ? 'routed' : 'requests';
    const rows = await read<RollupRow & { groups: number }>(
      `WITH ${this.gpuCtes(q, query)},
       agg AS MATERIALIZED (
         SELECT ts - (ts % ${size}) AS bucket, ${group} AS grp, count(*) FILTER (WHERE delivered) AS requests,
           count(*) FILTER (WHERE status >= 400 AND delivered) AS errors,
           count(*) FILTER (WHERE NOT delivered) AS undelivered, count(*) FILTER (WHERE deprecated) AS deprecated,
           SUM(prompt) AS prompt, SUM(completion) AS completion,
           SUM(cost) AS cost, SUM(${ACTUAL_COST_SQL}) AS actual, SUM(savings) AS savings, ${ROUTING_RAW_SUMS},
           ${CACHE_RAW_SUMS},
           ${buckets.join(', ')}
         FROM ${from} WHERE ${where.join(' AND ')}
         GROUP BY 1, 2),
       ranked AS (SELECT grp, row_number() OVER (ORDER BY sum(${rank}) DESC, grp NULLS FIRST) AS rank,
                    count(*) OVER () AS groups
                  FROM agg GROUP BY grp)
       SELECT agg.bucket::float8 AS bucket,
         CASE WHEN ranked.groups <= ${limit} OR ranked.rank <= ${limit} THEN agg.grp ELSE ${other} END AS grp,
         ${sums.map((c) => `SUM(agg.${c})::float8 AS ${c}`).join(', ')}, max(ranked.groups)::float8 AS groups
       FROM agg JOIN ranked ON ranked.grp IS NOT DISTINCT FROM agg.grp
       GROUP BY 1, 2 ORDER BY 1, 2 NULLS FIRST`,
      query.params,
    );
    const groups = rows.reduce((n, r) => Math.max(n, r.groups), 0);
    return { rows: [...rows], folded: Math.max(0, groups - groupLimit(q)) };
  }

  /**
   * As in the SQLite store: the `limit` groups with most requests by name, the rest as
   * OTHER_GROUP (NULLS FIRST everywhere: the order SQLite gives, so both stores agree).
   */
  private async topGroups(
    q: UsageQuery,
    query: Query,
    group: string,
    count: string,
    source: string,
    read: Read,
  ): Promise<{ named: string; folded: number }> {
    const limit = groupLimit(q);
    const ranked = await read<{ grp: string | null; total: number }>(
      `SELECT grp, (count(*) OVER ())::float8 AS total FROM (SELECT ${group} AS grp, ${count} AS n ${source} GROUP BY 1) g
       ORDER BY n DESC, grp NULLS FIRST LIMIT ${limit}`,
      query.params,
    );
    const total = ranked[0]?.total ?? 0;
    const folded = Math.max(0, total - ranked.length);
    if (folded === 0) return { named: group, folded };
    const top = query.bind(ranked.flatMap((r) => (r.grp === null ? [] : [r.grp])));
    return {
      named: `CASE WHEN ${group} = ANY(${top}) THEN ${group} ELSE ${query.bind(OTHER_GROUP)} END`,
      folded,
    };
  }

  async usage(q: UsageQuery): Promise<Report<UsageNumbers>> {
    return assembleReport(q, await this.rows(q), usageNumbers);
  }

  async analytics(q: UsageQuery): Promise<Report<AnalyticsNumbers>> {
    return assembleReport(q, await this.rows(q), analyticsNumbers);
  }

  async routing(q: UsageQuery): Promise<RoutingReport> {
    return assembleRoutingReport(q, await this.rows(q, true));
  }

  /** Conditions on the raw records selecting the tool calls of a query, bound into `query`. */
  private toolFilter(
    q: Pick<ToolCallQuery, 'from' | 'to' | 'tags' | 'server' | 'tool' | 'team'>,
    query: Query,
  ): string[] {
    const where = [
      `ts >= ${query.bind(q.from.getTime())}`,
      `ts < ${query.bind(q.to.getTime())}`,
      `endpoint = ${query.bind(TOOL_ENDPOINT)}`,
    ];
    if (q.tags.length > 0) where.push(`tags @> ${query.bind(q.tags.map((t) => `${t.key}:${t.value}`))}`);
    if (q.server !== undefined) where.push(`provider = ${query.bind(q.server)}`);
    if (q.tool !== undefined) where.push(`model = ${query.bind(q.tool)}`);
    if (q.team !== undefined) where.push(`team = ${query.bind(q.team)}`);
    return where;
  }

  /** As in the SQLite store: the rollups' tool rows, or the raw records under several tags; folded past the limit. */
  async tools(q: ToolQuery): Promise<ToolReport> {
    await this.ensureSchema();
    const query = new Query();
    const size = q.granularity === 'day' ? DAY : HOUR;
    let source: string;
    let time: string;
    let count: string;
    let sums: string;
    if (toolsFromRollups(q)) {
      const where = [
        `hour >= ${query.bind(Math.floor(q.from.getTime() / HOUR) * HOUR)}`,
        `hour < ${query.bind(q.to.getTime())}`,
        `endpoint = ${query.bind(TOOL_ENDPOINT)}`,
      ];
      const filter = q.tags[0];
      if (filter) where.push(`tag_key = ${query.bind(filter.key)}`, `tag_value = ${query.bind(filter.value)}`);
      else where.push("tag_key = ''");
      if (q.server !== undefined) where.push(`provider = ${query.bind(q.server)}`);
      if (q.tool !== undefined) where.push(`model = ${query.bind(q.tool)}`);
      if (q.team !== undefined) where.push(`team = ${query.bind(q.team)}`);
      source = `FROM usage_rollup WHERE ${where.join(' AND ')}`;
      time = 'hour';
      count = 'SUM(requests)';
      sums = `SUM(requests)::float8 AS requests, SUM(errors)::float8 AS errors, SUM(bytes_in)::float8 AS bytes_in,
        SUM(bytes_out)::float8 AS bytes_out, ${BUCKET_COLUMNS.map((c) => `SUM(${c})::float8 AS ${c}`).join(', ')}`;
    } else {
      source = `FROM usage_requests WHERE ${this.toolFilter(q, query).join(' AND ')}`;
      time = 'ts';
      count = 'count(*)';
      sums = `count(*)::float8 AS requests, (count(*) FILTER (WHERE ${TOOL_ERROR_SQL}))::float8 AS errors,
        COALESCE(SUM(bytes_in), 0)::float8 AS bytes_in, COALESCE(SUM(bytes_out), 0)::float8 AS bytes_out,
        ${latencyBucketSums((c) => `(count(*) FILTER (WHERE ${c}))::float8`)}`;
    }
    const key = toolGroupKey(q, 'chr(31)');
    return this.transaction(async (tx) => {
      await tx.query('SET LOCAL jit = off');
      const ranked = (
        await tx.query<{ k: string; total: number }>(
          `SELECT k, (count(*) OVER ())::float8 AS total FROM (SELECT ${key} AS k, ${count} AS n ${source} GROUP BY 1) g
           ORDER BY n DESC, k LIMIT ${groupLimitLiteral(toolGroupLimit(q))}`,
          query.params,
        )
      ).rows;
      const folded = Math.max(0, (ranked[0]?.total ?? 0) - ranked.length);
      let server = 'provider';
      let tool = q.groupBy === 'server' ? "''" : 'model';
      if (folded > 0) {
        const named = `${key} = ANY(${query.bind(ranked.map((r) => r.k))})`;
        const other = query.bind(OTHER_GROUP);
        server = `CASE WHEN ${named} THEN provider ELSE ${other} END`;
        if (q.groupBy === 'tool') tool = `CASE WHEN ${named} THEN model ELSE ${other} END`;
      }
      const rows = (
        await tx.query<ToolRow>(
          `SELECT (${time} - (${time} % ${size}))::float8 AS bucket, ${server} AS server, ${tool} AS tool, ${sums}
           ${source} GROUP BY 1, 2, 3`,
          query.params,
        )
      ).rows;
      return assembleToolReport(q, rows, folded);
    });
  }

  async toolCalls(q: ToolCallQuery): Promise<ToolCall[]> {
    await this.ensureSchema();
    const query = new Query();
    const where = this.toolFilter(q, query);
    const rows = await this.query<Parameters<typeof toolCallOf>[0] & pg.QueryResultRow>(
      `SELECT ts::float8 AS ts, request_id, key_prefix, model, provider, tags, status, error_type, latency_ms, team,
         api_key, bytes_in::float8 AS bytes_in, bytes_out::float8 AS bytes_out, payload
       FROM usage_requests WHERE ${where.join(' AND ')}
       ORDER BY ts DESC, request_id DESC LIMIT ${groupLimitLiteral(toolCallLimit(q))}`,
      query.params,
    );
    return rows.map(toolCallOf);
  }

  async guardrails(q: GuardrailQuery): Promise<GuardrailReport> {
    await this.ensureSchema();
    const query = new Query();
    const where = [
      `ts >= ${query.bind(q.from.getTime())}`,
      `ts < ${query.bind(q.to.getTime())}`,
      'findings IS NOT NULL',
    ];
    if (q.tags.length > 0) where.push(`tags @> ${query.bind(q.tags.map((t) => `${t.key}:${t.value}`))}`);
    if (q.team !== undefined) where.push(`team = ${query.bind(q.team)}`);
    const rows = await this.query<FindingRow & pg.QueryResultRow>(
      `SELECT team, tags, findings FROM usage_requests WHERE ${where.join(' AND ')}
       ORDER BY ts DESC LIMIT ${groupLimitLiteral(MAX_GUARDRAIL_RECORDS + 1)}`,
      query.params,
    );
    return assembleGuardrailReport(q, rows);
  }

  async tags(search: string, limit = 50, team?: string): Promise<TagCount[]> {
    await this.ensureSchema();
    const rows = await this.query<TagCount & pg.QueryResultRow>(
      `SELECT tag_key AS key, tag_value AS value, SUM(requests)::float8 AS requests FROM usage_rollup
       WHERE tag_key != '' AND strpos(lower(tag_key || ':' || tag_value), lower($1)) > 0 AND ($3::text IS NULL OR team = $3)
       GROUP BY tag_key, tag_value ORDER BY requests DESC, key, value LIMIT $2`,
      [search, Math.min(limit, 50), team ?? null],
    );
    return [...rows];
  }

  async close(): Promise<void> {
    await this.pool.end();
  }
}
