import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import Database from 'better-sqlite3';
import {
  ACTUAL_COST_SQL,
  DEPLOYMENT_COSTS_SQL,
  deploymentCost,
  gpuCostCtes,
  gpuRowsInOrder,
  gpuWindow,
} from './gpu-cost.js';
import { assembleGuardrailReport, findingsColumn } from './guardrail-report.js';
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
 * The embedded usage store: one SQLite file in WAL mode. Raw records are kept for the
 * retention period (default 30 days) for exact multi-tag queries; hourly rollups keep reports
 * fast at millions of requests. Proxy replicas on one node may share the file (SQLite locks
 * the writers); replicas on several nodes need the PostgreSQL store.
 */

/** The tables and indexes of a new file; older files are brought up to it by migrate(). */
const SCHEMA = `
      CREATE TABLE IF NOT EXISTS requests (
        id INTEGER PRIMARY KEY,
        ts INTEGER NOT NULL,
        request_id TEXT NOT NULL,
        key_prefix TEXT NOT NULL,
        model TEXT NOT NULL,
        provider TEXT NOT NULL,
        tags TEXT NOT NULL,
        prompt INTEGER NOT NULL,
        completion INTEGER NOT NULL,
        cost REAL NOT NULL,
        savings REAL NOT NULL,
        latency_ms REAL NOT NULL,
        ttft_ms REAL,
        status INTEGER NOT NULL,
        error_type TEXT,
        stream INTEGER NOT NULL,
        tokens_counted INTEGER NOT NULL DEFAULT 0,
        unpriced INTEGER NOT NULL DEFAULT 0,
        deprecated INTEGER NOT NULL DEFAULT 0,
        team TEXT NOT NULL DEFAULT '',
        api_key TEXT NOT NULL DEFAULT '',
        endpoint TEXT NOT NULL DEFAULT '',
        bytes_in INTEGER,
        bytes_out INTEGER,
        payload TEXT,
        requested_model TEXT,
        routing_policy TEXT,
        routing_reason TEXT,
        escalations INTEGER,
        counterfactual REAL,
        delivered INTEGER NOT NULL DEFAULT 1,
        findings TEXT,
        cache TEXT,
        cache_savings REAL
      );
      CREATE INDEX IF NOT EXISTS requests_ts ON requests(ts);
      CREATE TABLE IF NOT EXISTS request_tags (
        request INTEGER NOT NULL,
        tag TEXT NOT NULL,
        ts INTEGER NOT NULL
      );
      CREATE INDEX IF NOT EXISTS request_tags_tag ON request_tags(tag, ts, request);
      CREATE INDEX IF NOT EXISTS request_tags_request ON request_tags(request);
      CREATE TABLE IF NOT EXISTS rollup (
        hour INTEGER NOT NULL,
        model TEXT NOT NULL,
        endpoint TEXT NOT NULL DEFAULT '',
        provider TEXT NOT NULL,
        team TEXT NOT NULL DEFAULT '',
        tag_key TEXT NOT NULL,
        tag_value TEXT NOT NULL,
        requests INTEGER NOT NULL,
        errors INTEGER NOT NULL,
        prompt INTEGER NOT NULL,
        completion INTEGER NOT NULL,
        cost REAL NOT NULL,
        savings REAL NOT NULL,
        bytes_in INTEGER NOT NULL DEFAULT 0,
        bytes_out INTEGER NOT NULL DEFAULT 0,
        routed INTEGER NOT NULL DEFAULT 0,
        escalated INTEGER NOT NULL DEFAULT 0,
        routed_cost REAL NOT NULL DEFAULT 0,
        counterfactual REAL NOT NULL DEFAULT 0,
        undelivered INTEGER NOT NULL DEFAULT 0,
        deprecated INTEGER NOT NULL DEFAULT 0,
        cache_hits INTEGER NOT NULL DEFAULT 0,
        cache_savings REAL NOT NULL DEFAULT 0,
        ${BUCKET_COLUMNS.map((c) => `${c} INTEGER NOT NULL DEFAULT 0`).join(',\n        ')},
        PRIMARY KEY (hour, model, endpoint, provider, team, tag_key, tag_value)
      );
      CREATE TABLE IF NOT EXISTS key_spend (
        api_key TEXT NOT NULL,
        hour INTEGER NOT NULL,
        cost REAL NOT NULL,
        PRIMARY KEY (api_key, hour)
      );
      CREATE TABLE IF NOT EXISTS gpu_time (
        deployment TEXT NOT NULL,
        minute INTEGER NOT NULL,
        model TEXT NOT NULL,
        gpu_seconds REAL NOT NULL,
        usd REAL NOT NULL,
        busy INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (deployment, minute)
      );
      CREATE INDEX IF NOT EXISTS gpu_time_minute ON gpu_time(minute);
      CREATE TABLE IF NOT EXISTS gpu_hour (
        deployment TEXT NOT NULL,
        hour INTEGER NOT NULL,
        model TEXT NOT NULL,
        gpu_seconds REAL NOT NULL,
        usd REAL NOT NULL,
        busy_usd REAL NOT NULL,
        PRIMARY KEY (deployment, hour)
      );
`;

const GPU_TABLES = { gpuTime: 'gpu_time', gpuHour: 'gpu_hour', rollup: 'rollup' };
const GPU_CTES = gpuCostCtes(GPU_TABLES, '@gfrom', '@gto');

/**
 * A connection to the usage file as every connection to it is made (the store's, its threads'),
 * and to the stored Responses' file beside it (proxy/stored-responses/open.ts): the directory
 * made, WAL, NORMAL sync, the busy wait.
 */
export function openUsageFile(path: string): Database.Database {
  if (path !== ':memory:') mkdirSync(dirname(path), { recursive: true });
  const db = new Database(path);
  // WAL: readers (reports) never block the writer; NORMAL sync is durable across process crashes.
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = NORMAL');
  // Proxy replicas on one node share the file: a writer waits for another's transaction.
  db.pragma('busy_timeout = 5000');
  return db;
}

export class SqliteUsageStore implements UsageStore {
  /** The file's connection: the stored Responses (proxy/stored-responses/) keep their table in it. */
  readonly db: Database.Database;
  private readonly insertRaw: Database.Statement;
  private readonly insertTag: Database.Statement;
  private readonly upsertRollup: Database.Statement;
  private readonly insertMany: (records: StoredUsage[]) => void;
  private readonly spendCredits: (records: StoredUsage[]) => void;

  constructor(path: string) {
    this.db = openUsageFile(path);
    this.db.exec(SCHEMA);
    this.migrate();
    const exists = this.db.prepare('SELECT 1 FROM requests WHERE request_id = ? AND ts = ?');
    const usedOf = this.db.prepare('SELECT used FROM credits WHERE provider = ?');
    const setUsed = this.db.prepare(
      'INSERT INTO credits (provider, used) VALUES (?, ?) ON CONFLICT (provider) DO UPDATE SET used = excluded.used',
    );
    this.spendCredits = (records) => {
      const providers = creditProviders(records);
      if (providers.length === 0) return;
      const used = new Map(providers.map((p) => [p, (usedOf.get(p) as { used: number } | undefined)?.used ?? 0]));
      allocateCredits(
        records.filter((r) => r.creditsUsd !== undefined && !exists.get(r.requestId, Date.parse(r.time))),
        used,
      );
      for (const [p, u] of used) setUsed.run(p, u);
    };
    // Positional parameters: binding by name looks every name up on an object per record, a
    // visible share of the write path at gateway rates.
    this.insertRaw = this.db.prepare(
      `INSERT OR IGNORE INTO requests (ts, request_id, key_prefix, model, provider, tags, prompt, completion, cost, savings,
        latency_ms, ttft_ms, status, error_type, stream, tokens_counted, unpriced, team, api_key, endpoint, bytes_in,
        bytes_out, payload, requested_model, routing_policy, routing_reason, escalations, counterfactual, delivered,
        deprecated, findings, cache, cache_savings)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    );
    const addSpend = this.db.prepare(
      `INSERT INTO key_spend (api_key, hour, cost) VALUES (@apiKey, @hour, @cost)
       ON CONFLICT (api_key, hour) DO UPDATE SET cost = cost + excluded.cost`,
    );
    this.insertTag = this.db.prepare('INSERT INTO request_tags (request, tag, ts) VALUES (?, ?, ?)');
    this.upsertRollup = this.db.prepare(
      `INSERT INTO rollup (hour, model, endpoint, provider, team, tag_key, tag_value, requests, errors, prompt, completion, cost, savings, bytes_in, bytes_out, routed, escalated, routed_cost, counterfactual, undelivered, deprecated, cache_hits, cache_savings, ${BUCKET_COLUMNS.join(', ')})
       VALUES (@hour, @model, @endpoint, @provider, @team, @tagKey, @tagValue, @requests, @error, @prompt, @completion, @cost, @savings, @bytesIn, @bytesOut, @routed, @escalated, @routedCost, @counterfactual, @undelivered, @deprecated, @cacheHits, @cacheSavings, ${BUCKET_COLUMNS.map((c) => `@${c}`).join(', ')})
       ON CONFLICT (hour, model, endpoint, provider, team, tag_key, tag_value) DO UPDATE SET
         requests = requests + excluded.requests, errors = errors + excluded.errors, prompt = prompt + excluded.prompt,
         completion = completion + excluded.completion, cost = cost + excluded.cost, savings = savings + excluded.savings,
         bytes_in = bytes_in + excluded.bytes_in, bytes_out = bytes_out + excluded.bytes_out,
         routed = routed + excluded.routed, escalated = escalated + excluded.escalated,
         routed_cost = routed_cost + excluded.routed_cost, counterfactual = counterfactual + excluded.counterfactual,
         undelivered = undelivered + excluded.undelivered, deprecated = deprecated + excluded.deprecated,
         cache_hits = cache_hits + excluded.cache_hits, cache_savings = cache_savings + excluded.cache_savings,
         ${BUCKET_COLUMNS.map((c) => `${c} = ${c} + excluded.${c}`).join(', ')}`,
    );
    this.insertMany = this.db.transaction((records: StoredUsage[]) => {
      // The transaction holds the file's write lock: credits are read and spent by one writer at a time.
      this.spendCredits(records);
      const fresh = records.filter((r) => this.insertOne(r));
      for (const delta of rollupDeltas(fresh)) this.upsertRollup.run(delta);
      for (const d of keySpendDeltas(fresh)) addSpend.run(d);
    });
  }

  /** Files written by older versions get what they lack, in place. */
  private migrate(): void {
    // Files written before these columns existed get them (SQLite has no ADD COLUMN IF NOT EXISTS).
    const columns = new Set(
      (this.db.prepare('PRAGMA table_info(requests)').all() as Array<{ name: string }>).map((c) => c.name),
    );
    for (const column of ['tokens_counted', 'unpriced', 'deprecated']) {
      if (!columns.has(column)) this.db.exec(`ALTER TABLE requests ADD COLUMN ${column} INTEGER NOT NULL DEFAULT 0`);
    }
    for (const column of ['team', 'api_key', 'endpoint']) {
      if (!columns.has(column)) this.db.exec(`ALTER TABLE requests ADD COLUMN ${column} TEXT NOT NULL DEFAULT ''`);
    }
    // Tool calls (proxy/mcp/): their sizes and, for keys that opt in, what was sent and answered.
    // None for the records of before, and for model requests.
    // Routed requests (proxy/routing-policy/): what was asked, by which policy, why, escalations,
    // the counterfactual cost. None for the records of before and for requests not routed.
    for (const [column, type] of [
      ['bytes_in', 'INTEGER'],
      ['bytes_out', 'INTEGER'],
      ['payload', 'TEXT'],
      ['requested_model', 'TEXT'],
      ['routing_policy', 'TEXT'],
      ['routing_reason', 'TEXT'],
      ['escalations', 'INTEGER'],
      ['counterfactual', 'REAL'],
      // Guardrail findings (proxy/guardrails/): none for requests without and records of before.
      ['findings', 'TEXT'],
      // Answers from the response cache (proxy/cache/) and what they saved.
      ['cache', 'TEXT'],
      ['cache_savings', 'REAL'],
    ] as const) {
      if (!columns.has(column)) this.db.exec(`ALTER TABLE requests ADD COLUMN ${column} ${type}`);
    }
    // Records of before were counted as served: delivered as far as anyone knows.
    if (!columns.has('delivered')) this.db.exec('ALTER TABLE requests ADD COLUMN delivered INTEGER NOT NULL DEFAULT 1');
    this.keyRollupsByEverything();
    const rollupColumns = new Set(
      (this.db.prepare('PRAGMA table_info(rollup)').all() as Array<{ name: string }>).map((c) => c.name),
    );
    // Hours of before routed nothing: 0 is what they have.
    for (const [column, type] of [
      ['bytes_in', 'INTEGER'],
      ['bytes_out', 'INTEGER'],
      ['routed', 'INTEGER'],
      ['escalated', 'INTEGER'],
      ['routed_cost', 'REAL'],
      ['counterfactual', 'REAL'],
      ['undelivered', 'INTEGER'],
      ['deprecated', 'INTEGER'],
      ['cache_hits', 'INTEGER'],
      ['cache_savings', 'REAL'],
    ] as const) {
      if (!rollupColumns.has(column))
        this.db.exec(`ALTER TABLE rollup ADD COLUMN ${column} ${type} NOT NULL DEFAULT 0`);
    }
    // Tag budgets read one tag's spend since the period's start.
    this.db.exec('CREATE INDEX IF NOT EXISTS rollup_tag ON rollup(tag_key, tag_value, hour)');
    // One row per request: a batch retried after an unacknowledged write counts once.
    this.db.exec('CREATE UNIQUE INDEX IF NOT EXISTS requests_request ON requests(request_id, ts)');
    // Free credits spent so far per provider (allocated as records are written).
    this.db.exec('CREATE TABLE IF NOT EXISTS credits (provider TEXT PRIMARY KEY, used REAL NOT NULL)');
  }

  /**
   * Files from before teams or endpoints: the rollup table gets those columns in its primary key,
   * which SQLite can only do by copying the table (in one transaction: all or nothing). Rows of
   * before keep '' in the new columns.
   */
  private keyRollupsByEverything(): void {
    const cols = (this.db.prepare('PRAGMA table_info(rollup)').all() as Array<{ name: string }>).map((c) => c.name);
    if (cols.includes('team') && cols.includes('endpoint')) return;
    const copy = cols.join(', ');
    this.db.transaction(() => {
      this.db.exec('ALTER TABLE rollup RENAME TO rollup_before');
      this.db.exec(`
        CREATE TABLE rollup (
          hour INTEGER NOT NULL, model TEXT NOT NULL, endpoint TEXT NOT NULL DEFAULT '', provider TEXT NOT NULL,
          team TEXT NOT NULL DEFAULT '', tag_key TEXT NOT NULL, tag_value TEXT NOT NULL, requests INTEGER NOT NULL,
          errors INTEGER NOT NULL, prompt INTEGER NOT NULL, completion INTEGER NOT NULL, cost REAL NOT NULL,
          savings REAL NOT NULL, bytes_in INTEGER NOT NULL DEFAULT 0, bytes_out INTEGER NOT NULL DEFAULT 0, ${BUCKET_COLUMNS.map((c) => `${c} INTEGER NOT NULL DEFAULT 0`).join(', ')},
          PRIMARY KEY (hour, model, endpoint, provider, team, tag_key, tag_value)
        )`);
      this.db.exec(`INSERT INTO rollup (${copy}) SELECT ${copy} FROM rollup_before`);
      this.db.exec('DROP TABLE rollup_before');
    })();
  }

  /** False when the request was already stored. */
  private insertOne(r: StoredUsage): boolean {
    const ts = Date.parse(r.time);
    const tags = r.tags.map((t) => `${t.key}:${t.value}`);
    const info = this.insertRaw.run(
      ts,
      r.requestId,
      r.keyHashPrefix,
      r.model,
      r.provider,
      JSON.stringify(tags),
      r.promptTokens,
      r.completionTokens,
      r.costUsd,
      r.savingsUsd,
      r.latencyMs,
      r.firstTokenMs ?? null,
      r.status,
      r.errorType ?? null,
      r.stream ? 1 : 0,
      r.tokensCounted ? 1 : 0,
      r.unpriced ? 1 : 0,
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
      r.delivered === false ? 0 : 1,
      r.deprecated ? 1 : 0,
      findingsColumn(r),
      cacheOf(r),
      cacheSavingsOf(r),
    );
    if (info.changes === 0) return false;
    for (const t of tags) this.insertTag.run(info.lastInsertRowid, t, ts);
    return true;
  }

  async insert(records: StoredUsage[]): Promise<void> {
    if (records.length > 0) this.insertMany(records);
  }

  async prune(before: Date, rollupsBefore?: Date, gpuMinutesBefore = before): Promise<void> {
    const ts = before.getTime();
    this.db.prepare('DELETE FROM request_tags WHERE ts < ?').run(ts);
    if (rollupsBefore) {
      this.db.prepare('DELETE FROM rollup WHERE hour < ?').run(rollupsBefore.getTime());
      this.db.prepare('DELETE FROM key_spend WHERE hour < ?').run(rollupsBefore.getTime());
    }
    this.db.prepare('DELETE FROM requests WHERE ts < ?').run(ts);
    this.foldGpuMinutes(Math.floor(gpuMinutesBefore.getTime() / HOUR) * HOUR, rollupsBefore);
  }

  /**
   * GPU minutes of whole hours before `hour` become one row per (deployment, hour), in one
   * transaction: reports aggregate minutes on every read, and a year of minutes is ~100 bytes x
   * 525,600 per deployment; an hour row is 1/60 of that and keeps what reports read (USD, seconds,
   * and the USD of busy minutes). The hour rows live as long as the rollups they are attributed over.
   */
  private foldGpuMinutes(hour: number, rollupsBefore: Date | undefined): void {
    this.db.transaction(() => {
      this.db
        .prepare(
          `INSERT INTO gpu_hour (deployment, hour, model, gpu_seconds, usd, busy_usd)
           SELECT deployment, minute - (minute % ${HOUR}) AS h, MAX(model), SUM(gpu_seconds), SUM(usd),
             SUM(CASE WHEN busy > 0 THEN usd ELSE 0 END)
           FROM gpu_time WHERE minute < ? GROUP BY deployment, h
           ON CONFLICT (deployment, hour) DO UPDATE SET gpu_seconds = gpu_seconds + excluded.gpu_seconds,
             usd = usd + excluded.usd, busy_usd = busy_usd + excluded.busy_usd`,
        )
        .run(hour);
      this.db.prepare('DELETE FROM gpu_time WHERE minute < ?').run(hour);
      if (rollupsBefore) this.db.prepare('DELETE FROM gpu_hour WHERE hour < ?').run(rollupsBefore.getTime());
    })();
  }

  async recordGpuTime(rows: GpuTimeRow[]): Promise<void> {
    if (rows.length === 0) return;
    const upsert = this.db.prepare(
      `INSERT INTO gpu_time (deployment, minute, model, gpu_seconds, usd, busy) VALUES (?, ?, ?, ?, ?, ?)
       ON CONFLICT (deployment, minute) DO UPDATE SET model = excluded.model,
         gpu_seconds = max(gpu_seconds, excluded.gpu_seconds), usd = max(usd, excluded.usd), busy = max(busy, excluded.busy)`,
    );
    this.db.transaction((ordered: GpuTimeRow[]) => {
      for (const r of ordered) upsert.run(r.deployment, r.minute, r.model, r.gpuSeconds, r.usd, r.busy ? 1 : 0);
    })(gpuRowsInOrder(rows));
  }

  async count(): Promise<number> {
    return (this.db.prepare('SELECT COUNT(*) AS n FROM requests').get() as { n: number }).n;
  }

  /**
   * Rows per (time bucket, group) for a query: from the rollups when at most one tag filters,
   * from the raw records (exact AND over several tags) otherwise. `routing`: only the routed
   * requests' rows, groups ranked by routed requests (the routing report), no GPU figures.
   */
  private rows(q: UsageQuery, routing = false): ReportRows {
    const size = q.granularity === 'day' ? DAY : HOUR;
    const sums = `SUM(requests) AS requests, SUM(errors) AS errors, SUM(undelivered) AS undelivered, SUM(deprecated) AS deprecated, SUM(prompt) AS prompt,
      SUM(completion) AS completion, SUM(cost) AS cost, SUM(savings) AS savings, ${routingRollupSums('')},
      ${cacheRollupSums('')},
      ${BUCKET_COLUMNS.map((c) => `SUM(${c}) AS ${c}`).join(', ')}`;
    const from = q.from.getTime();
    const to = q.to.getTime();
    const byTag = groupsByTag(q);
    const deployments = routing ? [] : this.deployments(q);
    if (answeredByRollups(q, routing)) {
      // The filter tag (or, grouping by a tag key, that key's rows) selects the rollup rows.
      const filter = q.tags[0];
      // Tool calls are not model requests: the tool report has them (tools()).
      const where: string[] = ['hour >= @from', 'hour < @to', 'endpoint != @tools'];
      const params: Record<string, string | number> = {
        from: Math.floor(from / HOUR) * HOUR,
        to,
        size,
        tools: TOOL_ENDPOINT,
      };
      if (q.team !== undefined) {
        where.push('team = @team');
        params.team = q.team;
      }
      if (byTag) {
        where.push('tag_key = @groupKey');
        params.groupKey = q.groupBy;
        if (filter) {
          where.push('tag_value = @tagValue');
          params.tagValue = filter.value;
        }
      } else if (filter) {
        where.push('tag_key = @tagKey', 'tag_value = @tagValue');
        params.tagKey = filter.key;
        params.tagValue = filter.value;
      } else {
        where.push("tag_key = ''");
      }
      if (routing) where.push(ROUTED_ROLLUP_SQL);
      const group = byTag ? 'tag_value' : q.groupBy;
      const source = `FROM rollup WHERE ${where.join(' AND ')}`;
      const { named, folded } = this.topGroups(q, group, routing ? 'SUM(routed)' : 'SUM(requests)', source, params);
      const rows = this.db
        .prepare(
          `WITH ${GPU_CTES}
           SELECT hour - (hour % @size) AS bucket, ${named} AS grp, ${sums}, SUM(${ACTUAL_COST_SQL}) AS actual
           FROM rollup LEFT JOIN gpu_rate ON rate_hour = rollup.hour AND rate_provider = rollup.provider
           WHERE ${where.join(' AND ')} GROUP BY bucket, grp ORDER BY bucket, grp`,
        )
        .all({ ...params, ...this.gpuParams(q) }) as RollupRow[];
      return { rows, folded, deployments };
    }
    return { ...this.rawRows(q, routing), deployments };
  }

  private gpuParams(q: UsageQuery): { gfrom: number; gto: number } {
    const w = gpuWindow(q);
    return { gfrom: w.from, gto: w.to };
  }

  /** The deployments' GPU time and cost in the report's window; none in a team's report. */
  private deployments(q: UsageQuery): DeploymentCost[] {
    if (q.team !== undefined) return [];
    const rows = this.db.prepare(`WITH ${GPU_CTES} ${DEPLOYMENT_COSTS_SQL}`).all(this.gpuParams(q)) as Array<
      Parameters<typeof deploymentCost>[0]
    >;
    return rows.map(deploymentCost);
  }

  private rawRows(q: UsageQuery, routing: boolean): Omit<ReportRows, 'deployments'> {
    const size = q.granularity === 'day' ? DAY : HOUR;
    const params: Record<string, string | number> = {
      from: q.from.getTime(),
      to: q.to.getTime(),
      size,
      tools: TOOL_ENDPOINT,
      ...this.gpuParams(q),
    };
    // The tag index narrows first: ids carrying every filter tag in the range, intersected.
    const tagged = q.tags.map((t, i) => {
      params[`t${i}`] = `${t.key}:${t.value}`;
      return `SELECT request FROM request_tags WHERE tag = @t${i} AND ts >= @from AND ts < @to`;
    });
    const conditions = tagged.length > 0 ? [`r.id IN (${tagged.join(' INTERSECT ')})`] : [];
    conditions.push('r.endpoint != @tools');
    if (routing) conditions.push(ROUTED_RECORD_SQL);
    if (q.team !== undefined) {
      conditions.push('r.team = @team');
      params.team = q.team;
    }
    const byTag = groupsByTag(q, routing);
    let group = groupsByPolicy(q, routing) ? 'r.routing_policy' : `r.${q.groupBy}`;
    if (byTag) {
      params.prefix = `${q.groupBy}:`;
      params.prefixLen = q.groupBy.length + 2;
      group = `(SELECT substr(rt.tag, @prefixLen) FROM request_tags rt WHERE rt.request = r.id AND substr(rt.tag, 1, length(@prefix)) = @prefix)`;
    }
    const buckets = LATENCY_BUCKETS_MS.map((bound, i) => {
      const lower = i === 0 ? -1 : (LATENCY_BUCKETS_MS[i - 1] ?? 0);
      return Number.isFinite(bound)
        ? `SUM(CASE WHEN latency_ms > ${lower} AND latency_ms <= ${bound} THEN 1 ELSE 0 END) AS b${i}`
        : `SUM(CASE WHEN latency_ms > ${lower} THEN 1 ELSE 0 END) AS b${i}`;
    });
    const filter = `WHERE ts >= @from AND ts < @to ${conditions.map((c) => `AND ${c}`).join(' ')}`;
    const source = `FROM requests r ${filter}`;
    const rank = routing ? 'SUM(CASE WHEN routing_policy IS NOT NULL THEN 1 ELSE 0 END)' : 'SUM(delivered)';
    const { named, folded } = this.topGroups(q, group, rank, source, params);
    const joined = `FROM requests r LEFT JOIN gpu_rate ON rate_hour = r.ts - (r.ts % ${HOUR}) AND rate_provider = r.provider ${filter}`;
    const rows = this.db
      .prepare(
        `WITH ${GPU_CTES}
         SELECT ts - (ts % @size) AS bucket, ${named} AS grp, SUM(delivered) AS requests,
          SUM(CASE WHEN status >= 400 AND delivered = 1 THEN 1 ELSE 0 END) AS errors, SUM(1 - delivered) AS undelivered,
          SUM(deprecated) AS deprecated,
          SUM(prompt) AS prompt, SUM(completion) AS completion,
          SUM(cost) AS cost, SUM(${ACTUAL_COST_SQL}) AS actual, SUM(savings) AS savings, ${ROUTING_RAW_SUMS},
          ${CACHE_RAW_SUMS},
          ${buckets.join(', ')}
         ${joined}
         GROUP BY bucket, grp ORDER BY bucket, grp`,
      )
      .all(params) as RollupRow[];
    return { rows, folded };
  }

  /**
   * The expression naming a row's group in a report: the group itself for the `limit` groups with
   * the most requests, OTHER_GROUP for the rest. A report has at most limit + 1 groups however
   * many tag values callers invented. `folded`: how many groups went into OTHER_GROUP. Adds the
   * top list to `params` for the query that uses the expression.
   */
  private topGroups(
    q: UsageQuery,
    group: string,
    count: string,
    source: string,
    params: Record<string, string | number>,
  ): { named: string; folded: number } {
    const limit = groupLimit(q);
    const ranked = this.db
      .prepare(
        `SELECT grp, COUNT(*) OVER () AS total FROM (SELECT ${group} AS grp, ${count} AS n ${source} GROUP BY grp)
         ORDER BY n DESC, grp LIMIT @limit`,
      )
      .all({ ...params, limit }) as Array<{ grp: string | null; total: number }>;
    const total = ranked[0]?.total ?? 0;
    const folded = Math.max(0, total - ranked.length);
    if (folded === 0) return { named: group, folded };
    params.top = JSON.stringify(ranked.map((r) => r.grp));
    params.other = OTHER_GROUP;
    return { named: `CASE WHEN ${group} IN (SELECT value FROM json_each(@top)) THEN ${group} ELSE @other END`, folded };
  }

  async usage(q: UsageQuery): Promise<Report<UsageNumbers>> {
    return assembleReport(q, this.rows(q), usageNumbers);
  }

  async analytics(q: UsageQuery): Promise<Report<AnalyticsNumbers>> {
    return assembleReport(q, this.rows(q), analyticsNumbers);
  }

  async routing(q: UsageQuery): Promise<RoutingReport> {
    return assembleRoutingReport(q, this.rows(q, true));
  }

  /** Known tags whose "key:value" contains `search`, most used first, at most `limit`. */
  async tags(search: string, limit = 50, team?: string): Promise<TagCount[]> {
    const rows = this.db
      .prepare(
        `SELECT tag_key AS key, tag_value AS value, SUM(requests) AS requests FROM rollup
         WHERE tag_key != '' AND instr(lower(tag_key || ':' || tag_value), lower(@search)) > 0
           AND (@team IS NULL OR team = @team)
         GROUP BY tag_key, tag_value ORDER BY requests DESC, key, value LIMIT @limit`,
      )
      .all({ search, limit: Math.min(limit, 50), team: team ?? null }) as TagCount[];
    return rows;
  }

  /** Tool calls of the raw records `r` matching a query (ts range in @from/@to); adds its parameters. */
  private toolFilter(
    q: Pick<ToolCallQuery, 'tags' | 'server' | 'tool' | 'team'>,
    params: Record<string, string | number>,
  ): string {
    const where = ['r.ts >= @from', 'r.ts < @to', 'r.endpoint = @tools'];
    params.tools = TOOL_ENDPOINT;
    const tagged = q.tags.map((t, i) => {
      params[`t${i}`] = `${t.key}:${t.value}`;
      return `SELECT request FROM request_tags WHERE tag = @t${i} AND ts >= @from AND ts < @to`;
    });
    if (tagged.length > 0) where.push(`r.id IN (${tagged.join(' INTERSECT ')})`);
    for (const [column, value] of [
      ['provider', q.server],
      ['model', q.tool],
      ['team', q.team],
    ] as const) {
      if (value === undefined) continue;
      where.push(`r.${column} = @${column}`);
      params[column] = value;
    }
    return where.join(' AND ');
  }

  /**
   * Tool calls by server and tool: from the rollups' tool rows (endpoint TOOL_ENDPOINT) when at
   * most one tag filters, from the raw records otherwise; the `limit` groups with most calls by
   * name, the rest summed as OTHER_GROUP.
   */
  async tools(q: ToolQuery): Promise<ToolReport> {
    const params: Record<string, string | number> = {
      size: q.granularity === 'day' ? DAY : HOUR,
      tools: TOOL_ENDPOINT,
      limit: toolGroupLimit(q),
    };
    let source: string;
    let time: string;
    let count: string;
    let sums: string;
    if (toolsFromRollups(q)) {
      params.from = Math.floor(q.from.getTime() / HOUR) * HOUR;
      params.to = q.to.getTime();
      const where = ['hour >= @from', 'hour < @to', 'endpoint = @tools'];
      const filter = q.tags[0];
      if (filter) {
        where.push('tag_key = @tagKey', 'tag_value = @tagValue');
        params.tagKey = filter.key;
        params.tagValue = filter.value;
      } else {
        where.push("tag_key = ''");
      }
      for (const [column, value] of [
        ['provider', q.server],
        ['model', q.tool],
        ['team', q.team],
      ] as const) {
        if (value === undefined) continue;
        where.push(`${column} = @${column}`);
        params[column] = value;
      }
      source = `FROM rollup WHERE ${where.join(' AND ')}`;
      time = 'hour';
      count = 'SUM(requests)';
      sums = `SUM(requests) AS requests, SUM(errors) AS errors, SUM(bytes_in) AS bytes_in, SUM(bytes_out) AS bytes_out,
        ${BUCKET_COLUMNS.map((c) => `SUM(${c}) AS ${c}`).join(', ')}`;
    } else {
      params.from = q.from.getTime();
      params.to = q.to.getTime();
      source = `FROM requests r WHERE ${this.toolFilter(q, params)}`;
      time = 'ts';
      count = 'COUNT(*)';
      sums = `COUNT(*) AS requests, SUM(CASE WHEN ${TOOL_ERROR_SQL} THEN 1 ELSE 0 END) AS errors,
        COALESCE(SUM(bytes_in), 0) AS bytes_in, COALESCE(SUM(bytes_out), 0) AS bytes_out,
        ${latencyBucketSums((c) => `SUM(CASE WHEN ${c} THEN 1 ELSE 0 END)`)}`;
    }
    const key = toolGroupKey(q, 'char(31)');
    const ranked = this.db
      .prepare(
        `SELECT k, COUNT(*) OVER () AS total FROM (SELECT ${key} AS k, ${count} AS n ${source} GROUP BY k)
         ORDER BY n DESC, k LIMIT @limit`,
      )
      .all(params) as Array<{ k: string; total: number }>;
    const folded = Math.max(0, (ranked[0]?.total ?? 0) - ranked.length);
    let server = 'provider';
    let tool = q.groupBy === 'server' ? "''" : 'model';
    if (folded > 0) {
      params.top = JSON.stringify(ranked.map((r) => r.k));
      params.other = OTHER_GROUP;
      const named = `${key} IN (SELECT value FROM json_each(@top))`;
      server = `CASE WHEN ${named} THEN provider ELSE @other END`;
      if (q.groupBy === 'tool') tool = `CASE WHEN ${named} THEN model ELSE @other END`;
    }
    const rows = this.db
      .prepare(
        `SELECT ${time} - (${time} % @size) AS bucket, ${server} AS server, ${tool} AS tool, ${sums}
         ${source} GROUP BY bucket, server, tool`,
      )
      .all(params) as ToolRow[];
    return assembleToolReport(q, rows, folded);
  }

  async toolCalls(q: ToolCallQuery): Promise<ToolCall[]> {
    const params: Record<string, string | number> = {
      from: q.from.getTime(),
      to: q.to.getTime(),
      limit: toolCallLimit(q),
    };
    const rows = this.db
      .prepare(
        `SELECT ts, request_id, key_prefix, model, provider, tags, status, error_type, latency_ms, team, api_key,
           bytes_in, bytes_out, payload
         FROM requests r WHERE ${this.toolFilter(q, params)} ORDER BY ts DESC, id DESC LIMIT @limit`,
      )
      .all(params) as Array<Omit<Parameters<typeof toolCallOf>[0], 'tags'> & { tags: string }>;
    return rows.map((r) => toolCallOf({ ...r, tags: JSON.parse(r.tags) as string[] }));
  }

  async guardrails(q: GuardrailQuery): Promise<GuardrailReport> {
    const params: Record<string, string | number> = { from: q.from.getTime(), to: q.to.getTime() };
    const where = ['r.ts >= @from', 'r.ts < @to', 'r.findings IS NOT NULL'];
    const tagged = q.tags.map((t, i) => {
      params[`t${i}`] = `${t.key}:${t.value}`;
      return `SELECT request FROM request_tags WHERE tag = @t${i} AND ts >= @from AND ts < @to`;
    });
    if (tagged.length > 0) where.push(`r.id IN (${tagged.join(' INTERSECT ')})`);
    if (q.team !== undefined) {
      where.push('r.team = @team');
      params.team = q.team;
    }
    const rows = this.db
      .prepare(
        `SELECT team, tags, findings FROM requests r WHERE ${where.join(' AND ')}
         ORDER BY ts DESC LIMIT ${MAX_GUARDRAIL_RECORDS + 1}`,
      )
      .all(params) as Array<{ team: string; tags: string; findings: string }>;
    return assembleGuardrailReport(
      q,
      rows.map((r) => ({ ...r, tags: JSON.parse(r.tags) as string[] })),
    );
  }

  async spend(scopes: SpendScope[]): Promise<number[]> {
    const byKey = this.db.prepare('SELECT SUM(cost) AS usd FROM key_spend WHERE api_key = ? AND hour >= ?');
    const byTag = this.db.prepare(
      'SELECT SUM(cost - savings) AS usd FROM rollup WHERE tag_key = ? AND tag_value = ? AND hour >= ?',
    );
    return scopes.map((s) => {
      const row = (
        'apiKey' in s ? byKey.get(s.apiKey, spendSince(s)) : byTag.get(s.tag.key, s.tag.value, spendSince(s))
      ) as { usd: number | null } | undefined;
      return row?.usd ?? 0;
    });
  }

  async close(): Promise<void> {
    this.db.close();
  }
}
