import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import Database from 'better-sqlite3';
import { rfc3339 } from '../crds/meta.js';
import type { Tag } from './tags.js';
import type { UsageRecord } from './usage.js';

/**
 * The durable usage store: an embedded SQLite file in WAL mode. Raw records are kept for the
 * retention period (default 30 days) for exact multi-tag queries; hourly rollups per (model,
 * provider, tag) keep reports fast at millions of requests, including latency percentiles
 * from a fixed-bucket histogram kept per rollup row.
 */

export interface StoredUsage extends UsageRecord {
  costUsd: number;
  savingsUsd: number;
}

export type Granularity = 'hour' | 'day';

export interface UsageQuery {
  from: Date;
  to: Date;
  granularity: Granularity;
  /** model, provider, or a tag key. */
  groupBy: string;
  /** All must be present on a request (AND). */
  tags: Tag[];
  /** Most groups reported by name (most requests first); the rest are summed as OTHER_GROUP. */
  limit?: number;
}

/** The group the groups past a report's limit are summed into. */
export const OTHER_GROUP = '_other';
export const DEFAULT_GROUP_LIMIT = 20;
export const MAX_GROUP_LIMIT = 100;
/** The model of requests no model answered, in the rollups (callers choose the names they send). */
export const UNROUTED_MODEL = '(unrouted)';

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
const BUCKET_COLUMNS = LATENCY_BUCKETS_MS.map((_, i) => `b${i}`);

const HOUR = 3_600_000;
const DAY = 24 * HOUR;
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

interface RollupRow {
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
interface RollupDelta {
  hour: number;
  model: string;
  provider: string;
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
interface ReportRows {
  rows: RollupRow[];
  folded: number;
}

export class UsageStore {
  private readonly db: Database.Database;
  private readonly insertRaw: Database.Statement;
  private readonly insertTag: Database.Statement;
  private readonly upsertRollup: Database.Statement;
  private readonly insertMany: (records: StoredUsage[]) => void;

  constructor(path: string) {
    if (path !== ':memory:') mkdirSync(dirname(path), { recursive: true });
    this.db = new Database(path);
    // WAL: readers (reports) never block the writer; NORMAL sync is durable across process crashes.
    this.db.pragma('journal_mode = WAL');
    this.db.pragma('synchronous = NORMAL');
    // Proxy replicas on one node share the file: a writer waits for another's transaction.
    this.db.pragma('busy_timeout = 5000');
    this.db.exec(`
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
        unpriced INTEGER NOT NULL DEFAULT 0
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
        provider TEXT NOT NULL,
        tag_key TEXT NOT NULL,
        tag_value TEXT NOT NULL,
        requests INTEGER NOT NULL,
        errors INTEGER NOT NULL,
        prompt INTEGER NOT NULL,
        completion INTEGER NOT NULL,
        cost REAL NOT NULL,
        savings REAL NOT NULL,
        ${BUCKET_COLUMNS.map((c) => `${c} INTEGER NOT NULL DEFAULT 0`).join(',\n        ')},
        PRIMARY KEY (hour, model, provider, tag_key, tag_value)
      );
    `);
    // Files written before these columns existed get them (SQLite has no ADD COLUMN IF NOT EXISTS).
    const columns = new Set(
      (this.db.prepare('PRAGMA table_info(requests)').all() as Array<{ name: string }>).map((c) => c.name),
    );
    for (const column of ['tokens_counted', 'unpriced']) {
      if (!columns.has(column)) this.db.exec(`ALTER TABLE requests ADD COLUMN ${column} INTEGER NOT NULL DEFAULT 0`);
    }
    this.insertRaw = this.db.prepare(
      `INSERT INTO requests (ts, request_id, key_prefix, model, provider, tags, prompt, completion, cost, savings,
        latency_ms, ttft_ms, status, error_type, stream, tokens_counted, unpriced)
       VALUES (@ts, @requestId, @keyPrefix, @model, @provider, @tags, @prompt, @completion, @cost, @savings,
        @latency, @ttft, @status, @errorType, @stream, @tokensCounted, @unpriced)`,
    );
    this.insertTag = this.db.prepare('INSERT INTO request_tags (request, tag, ts) VALUES (?, ?, ?)');
    this.upsertRollup = this.db.prepare(
      `INSERT INTO rollup (hour, model, provider, tag_key, tag_value, requests, errors, prompt, completion, cost, savings, ${BUCKET_COLUMNS.join(', ')})
       VALUES (@hour, @model, @provider, @tagKey, @tagValue, @requests, @error, @prompt, @completion, @cost, @savings, ${BUCKET_COLUMNS.map((c) => `@${c}`).join(', ')})
       ON CONFLICT (hour, model, provider, tag_key, tag_value) DO UPDATE SET
         requests = requests + excluded.requests, errors = errors + excluded.errors, prompt = prompt + excluded.prompt,
         completion = completion + excluded.completion, cost = cost + excluded.cost, savings = savings + excluded.savings,
         ${BUCKET_COLUMNS.map((c) => `${c} = ${c} + excluded.${c}`).join(', ')}`,
    );
    this.insertMany = this.db.transaction((records: StoredUsage[]) => {
      // Rollups are summed per group in memory first: a batch of a busy hour is one upsert per
      // (model, provider, tag), not one per record and tag.
      const rollups = new Map<string, RollupDelta>();
      for (const r of records) this.insertOne(r, rollups);
      for (const delta of rollups.values()) this.upsertRollup.run(delta);
    });
  }

  private insertOne(r: StoredUsage, rollups: Map<string, RollupDelta>): void {
    const ts = Date.parse(r.time);
    const tags = r.tags.map((t) => `${t.key}:${t.value}`);
    const info = this.insertRaw.run({
      ts,
      requestId: r.requestId,
      keyPrefix: r.keyHashPrefix,
      model: r.model,
      provider: r.provider,
      tags: JSON.stringify(tags),
      prompt: r.promptTokens,
      completion: r.completionTokens,
      cost: r.costUsd,
      savings: r.savingsUsd,
      latency: r.latencyMs,
      ttft: r.firstTokenMs ?? null,
      status: r.status,
      errorType: r.errorType ?? null,
      stream: r.stream ? 1 : 0,
      tokensCounted: r.tokensCounted ? 1 : 0,
      unpriced: r.unpriced ? 1 : 0,
    });
    for (const t of tags) this.insertTag.run(info.lastInsertRowid, t, ts);
    const hour = Math.floor(ts / HOUR) * HOUR;
    const bucket = BUCKET_COLUMNS[bucketOf(r.latencyMs)];
    // One row for all requests, one per tag: a single-tag filter or a tag grouping reads its rows.
    // A request no model answered (no provider) adds no tag rows: refused requests cost the caller
    // nothing, so they must not be able to grow the rollups by inventing tag values.
    // Likewise their model names: the raw record keeps what was asked, the rollup one row for all.
    const tagged = r.provider ? r.tags.map((t) => [t.key, t.value]) : [];
    const model = r.provider ? r.model : UNROUTED_MODEL;
    for (const [tagKey, tagValue] of [['', ''], ...tagged] as Array<[string, string]>) {
      const key = JSON.stringify([hour, model, r.provider, tagKey, tagValue]);
      let d = rollups.get(key);
      if (!d) {
        d = {
          hour,
          model,
          provider: r.provider,
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
      if (bucket) d[bucket] = Number(d[bucket] ?? 0) + 1;
    }
  }

  /** Writes a batch in one transaction. */
  insert(records: StoredUsage[]): void {
    if (records.length > 0) this.insertMany(records);
  }

  /** Deletes raw records older than `before`; rollups stay. */
  /**
   * Deletes raw records older than `before` and, when given, rollup hours older than
   * `rollupsBefore` (rollups answer long-range reports, so they usually live longer).
   */
  prune(before: Date, rollupsBefore?: Date): number {
    const ts = before.getTime();
    this.db.prepare('DELETE FROM request_tags WHERE ts < ?').run(ts);
    if (rollupsBefore) this.db.prepare('DELETE FROM rollup WHERE hour < ?').run(rollupsBefore.getTime());
    return this.db.prepare('DELETE FROM requests WHERE ts < ?').run(ts).changes;
  }

  /** Savings recorded so far per provider: free credits already used. */
  savingsByProvider(): Map<string, number> {
    const rows = this.db
      .prepare("SELECT provider, SUM(savings) AS s FROM rollup WHERE tag_key = '' GROUP BY provider")
      .all() as Array<{ provider: string; s: number }>;
    return new Map(rows.map((r) => [r.provider, r.s]));
  }

  count(): number {
    return (this.db.prepare('SELECT COUNT(*) AS n FROM requests').get() as { n: number }).n;
  }

  /**
   * Rows per (time bucket, group) for a query: from the rollups when at most one tag filters,
   * from the raw records (exact AND over several tags) otherwise.
   */
  private rows(q: UsageQuery): ReportRows {
    const size = q.granularity === 'day' ? DAY : HOUR;
    const sums = `SUM(requests) AS requests, SUM(errors) AS errors, SUM(prompt) AS prompt, SUM(completion) AS completion,
      SUM(cost) AS cost, SUM(savings) AS savings, ${BUCKET_COLUMNS.map((c) => `SUM(${c}) AS ${c}`).join(', ')}`;
    const from = q.from.getTime();
    const to = q.to.getTime();
    const byTag = q.groupBy !== 'model' && q.groupBy !== 'provider';
    if (q.tags.length <= 1) {
      // The filter tag (or, grouping by a tag key, that key's rows) selects the rollup rows.
      const filter = q.tags[0];
      if (byTag && filter && filter.key !== q.groupBy) return this.rawRows(q);
      const where: string[] = ['hour >= @from', 'hour < @to'];
      const params: Record<string, string | number> = { from: Math.floor(from / HOUR) * HOUR, to, size };
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
      const group = byTag ? 'tag_value' : q.groupBy;
      const source = `FROM rollup WHERE ${where.join(' AND ')}`;
      const { named, folded } = this.topGroups(q, group, 'SUM(requests)', source, params);
      const rows = this.db
        .prepare(
          `SELECT hour - (hour % @size) AS bucket, ${named} AS grp, ${sums} ${source} GROUP BY bucket, grp ORDER BY bucket, grp`,
        )
        .all(params) as RollupRow[];
      return { rows, folded };
    }
    return this.rawRows(q);
  }

  private rawRows(q: UsageQuery): ReportRows {
    const size = q.granularity === 'day' ? DAY : HOUR;
    const params: Record<string, string | number> = { from: q.from.getTime(), to: q.to.getTime(), size };
    // The tag index narrows first: ids carrying every filter tag in the range, intersected.
    const tagged = q.tags.map((t, i) => {
      params[`t${i}`] = `${t.key}:${t.value}`;
      return `SELECT request FROM request_tags WHERE tag = @t${i} AND ts >= @from AND ts < @to`;
    });
    const conditions = tagged.length > 0 ? [`r.id IN (${tagged.join(' INTERSECT ')})`] : [];
    const byTag = q.groupBy !== 'model' && q.groupBy !== 'provider';
    let group = `r.${q.groupBy}`;
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
    const source = `FROM requests r WHERE ts >= @from AND ts < @to ${conditions.map((c) => `AND ${c}`).join(' ')}`;
    const { named, folded } = this.topGroups(q, group, 'COUNT(*)', source, params);
    const rows = this.db
      .prepare(
        `SELECT ts - (ts % @size) AS bucket, ${named} AS grp, COUNT(*) AS requests,
          SUM(CASE WHEN status >= 400 THEN 1 ELSE 0 END) AS errors, SUM(prompt) AS prompt, SUM(completion) AS completion,
          SUM(cost) AS cost, SUM(savings) AS savings, ${buckets.join(', ')}
         ${source}
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
    const limit = Math.min(MAX_GROUP_LIMIT, Math.max(1, q.limit ?? DEFAULT_GROUP_LIMIT));
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

  private report<T>(q: UsageQuery, numbers: (rows: RollupRow[]) => T): Report<T> {
    const { rows, folded } = this.rows(q);
    const series = rows.map((r) => ({
      time: rfc3339(new Date(r.bucket)),
      group: r.grp ?? NO_GROUP,
      ...numbers([r]),
    }));
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

  usage(q: UsageQuery): Report<UsageNumbers> {
    return this.report(q, (rows) => ({
      requests: rows.reduce((n, r) => n + r.requests, 0),
      inputTokens: rows.reduce((n, r) => n + r.prompt, 0),
      outputTokens: rows.reduce((n, r) => n + r.completion, 0),
      costUsd: round(rows.reduce((n, r) => n + r.cost, 0)),
      savingsUsd: round(rows.reduce((n, r) => n + r.savings, 0)),
    }));
  }

  analytics(q: UsageQuery): Report<AnalyticsNumbers> {
    return this.report(q, (rows) => {
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
    });
  }

  /** Known tags whose "key:value" contains `search`, most used first, at most `limit`. */
  tags(search: string, limit = 50): TagCount[] {
    const rows = this.db
      .prepare(
        `SELECT tag_key AS key, tag_value AS value, SUM(requests) AS requests FROM rollup
         WHERE tag_key != '' AND instr(lower(tag_key || ':' || tag_value), lower(@search)) > 0
         GROUP BY tag_key, tag_value ORDER BY requests DESC, key, value LIMIT @limit`,
      )
      .all({ search, limit: Math.min(limit, 50) }) as TagCount[];
    return rows;
  }

  close(): void {
    this.db.close();
  }
}
