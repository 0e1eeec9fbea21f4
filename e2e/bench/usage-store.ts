import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Tag } from '../../proxy/endpoints/tags.js';
import { PostgresUsageStore } from '../../proxy/usage/postgres-store.js';
import { SqliteUsageStore } from '../../proxy/usage/sqlite-store.js';
import type { StoredUsage, UsageStore } from '../../proxy/usage/store.js';
import { type Postgres, startPostgres } from '../postgres/server.js';

/**
 * Usage stores at scale, both on this machine in one run: write throughput of batched inserts
 * (the recorder's path, 3 tags per record) and the report queries at N stored records over 30
 * days (default 10M), then retention of the oldest month. PostgreSQL is a throwaway server of
 * Debian's package (e2e/postgres/server.ts), durability settings as in the tests.
 * Run: npx tsx e2e/bench/usage-store.ts [records] [--store sqlite|postgres]
 */

const N = Number(process.argv.find((a) => /^\d+$/.test(a)) ?? 10_000_000);
const only = process.argv.includes('--store') ? process.argv[process.argv.indexOf('--store') + 1] : undefined;
const BATCH = 2_000;
const teams = ['ml', 'web', 'data', 'search', 'infra'];
const projects = Array.from({ length: 20 }, (_, i) => `p${i}`);
const models = ['llama3.1:8b', 'qwen2.5:7b', 'anthropic.claude-3-haiku-20240307-v1:0', 'amazon.nova-lite-v1:0'];
// Two months: the oldest one is what retention removes at the end.
const start = Date.parse('2026-09-22T00:00:00Z');
const span = 60 * 86_400_000;
const DAY = 86_400_000;

function record(i: number): StoredUsage {
  const tags: Tag[] = [
    { key: 'team', value: teams[i % teams.length] ?? 'ml' },
    { key: 'project', value: projects[i % projects.length] ?? 'p0' },
    { key: 'environment', value: i % 3 === 0 ? 'prod' : 'dev' },
  ];
  return {
    time: new Date(start + Math.floor((i / N) * span)).toISOString(),
    requestId: `req_${i}`,
    keyHashPrefix: 'abcdef012345',
    model: models[i % models.length] ?? 'llama3.1:8b',
    provider: i % 2 ? 'platform-llms/llama' : 'platform-agent/bedrock',
    tags,
    promptTokens: 100 + (i % 50),
    completionTokens: 200 + (i % 70),
    costUsd: 0.0001,
    savingsUsd: 0,
    latencyMs: 50 + (i % 1000),
    status: i % 100 === 0 ? 500 : 200,
    stream: i % 2 === 0,
  };
}

/** The gateway's peak request rate from the last `npm run bench` (its best "ours" row), if there is one. */
function gatewayPeak(): number | undefined {
  const latest = 'e2e/bench/out/latest.json';
  if (!existsSync(latest)) return undefined;
  const run = JSON.parse(readFileSync(latest, 'utf8')) as {
    sections?: { gateways?: { result?: { rows?: Array<{ target: string; rps: number }> } } };
  };
  const rates = (run.sections?.gateways?.result?.rows ?? []).filter((r) => r.target === 'ours').map((r) => r.rps);
  return rates.length > 0 ? Math.max(...rates) : undefined;
}

interface Result {
  store: string;
  query: string;
  p50Ms: number;
  target: string;
}

async function bench(
  name: string,
  store: UsageStore,
  settle: () => void = () => {},
): Promise<{ rate: number; results: Result[]; pruneMs: number }> {
  const t0 = performance.now();
  for (let i = 0; i < N; i += BATCH) {
    await store.insert(Array.from({ length: Math.min(BATCH, N - i) }, (_, j) => record(i + j)));
    if (i % (BATCH * 500) === 0 && i > 0) console.log(`[${name}] ${i} written`);
  }
  const writeS = (performance.now() - t0) / 1000;
  const rate = Math.round(N / writeS);
  console.log(`[${name}] records: ${N}, write: ${writeS.toFixed(1)} s (${rate} records/s, batches of ${BATCH})`);
  settle();

  // Reports over the newest 30 days (the raw records' retention), p50 of 5 runs after a warm-up.
  const range = { from: new Date(start + span - 30 * DAY), to: new Date(start + span) };
  const time = async (query: string, target: string, fn: () => Promise<unknown>): Promise<Result> => {
    await fn();
    const ms: number[] = [];
    for (let i = 0; i < 5; i++) {
      const t = performance.now();
      await fn();
      ms.push(performance.now() - t);
    }
    ms.sort((a, b) => a - b);
    return { store: name, query, p50Ms: +(ms[2] ?? 0).toFixed(1), target };
  };
  const results = [
    await time('usage, 30 days by day, group by model', '<= 100', () =>
      store.usage({ ...range, granularity: 'day', groupBy: 'model', tags: [] }),
    ),
    await time('usage, 30 days by hour, tag team:ml', '<= 100', () =>
      store.usage({ ...range, granularity: 'hour', groupBy: 'model', tags: [{ key: 'team', value: 'ml' }] }),
    ),
    await time('usage, group by tag key project', '<= 100', () =>
      store.usage({ ...range, granularity: 'day', groupBy: 'project', tags: [] }),
    ),
    await time('analytics p50/p95/p99, group by provider', '<= 100', () =>
      store.analytics({ ...range, granularity: 'day', groupBy: 'provider', tags: [] }),
    ),
    await time('tags search "pro"', '<= 100', () => store.tags('pro')),
    await time('usage, 2 tags AND over 30 days (raw records)', '<= 1000', () =>
      store.usage({
        ...range,
        granularity: 'day',
        groupBy: 'model',
        tags: [
          { key: 'team', value: 'ml' },
          { key: 'environment', value: 'prod' },
        ],
      }),
    ),
  ];
  const before = await store.count();
  const t1 = performance.now();
  await store.prune(new Date(start + 30 * DAY));
  const pruneMs = performance.now() - t1;
  console.log(
    `[${name}] retention of the oldest month: ${before - (await store.count())} records in ${pruneMs.toFixed(0)} ms`,
  );
  return { rate, results, pruneMs };
}

const peak = gatewayPeak();
const verdicts: string[] = [];
const all: Result[] = [];
let pg: Postgres | undefined;
const dir = mkdtempSync(join(tmpdir(), 'usage-bench-'));
try {
  for (const kind of ['sqlite', 'postgres'] as const) {
    if (only && only !== kind) continue;
    let store: UsageStore;
    if (kind === 'sqlite') store = new SqliteUsageStore(join(dir, 'usage.db'));
    else {
      pg = await startPostgres();
      store = await PostgresUsageStore.open(pg.url);
    }
    // Statistics as autovacuum leaves them shortly after each day's partition fills; taken at
    // once so the plans measured do not depend on where its schedule happens to be.
    const { rate, results, pruneMs } = await bench(kind, store, () => pg?.psql('ANALYZE usage_requests'));
    if (kind === 'postgres' && pg) {
      // What a record costs on disk after retention kept half: raw partitions with their indexes.
      const bytes = Number(
        pg.psql(
          "SELECT sum(pg_total_relation_size(inhrelid)) FROM pg_inherits WHERE inhparent = 'usage_requests'::regclass",
        ),
      );
      const rollup = Number(pg.psql("SELECT pg_total_relation_size('usage_rollup')"));
      console.log(
        `[postgres] disk: ${Math.round(bytes / (N / 2))} bytes per raw record (with indexes), rollups ${(rollup / 1e6).toFixed(1)} MB`,
      );
    }
    all.push(...results);
    for (const r of results) {
      const limit = Number(r.target.replace('<= ', ''));
      verdicts.push(
        `${r.p50Ms <= limit ? 'PASS' : 'FAIL'} ${kind}: ${r.query} p50 ${r.p50Ms} ms (target ${r.target} ms)`,
      );
    }
    verdicts.push(
      `${pruneMs < 1000 ? 'PASS' : 'FAIL'} ${kind}: retention of a month ${pruneMs.toFixed(0)} ms (target < 1000 ms)`,
    );
    if (kind === 'postgres') {
      verdicts.push(
        peak
          ? `${rate >= 3 * peak ? 'PASS' : 'FAIL'} postgres: insert ${rate} records/s >= 3x the gateway's peak ${Math.round(peak)} req/s`
          : `SKIP postgres: insert ${rate} records/s (no gateway peak on record: run npm run bench -- --only gateways first)`,
      );
    }
    await store.close();
  }
} finally {
  await pg?.destroy();
  rmSync(dir, { recursive: true, force: true });
}
console.table(all);
for (const v of verdicts) console.log(v);
