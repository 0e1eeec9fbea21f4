import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Tag } from '../../proxy/tags.js';
import { type StoredUsage, UsageStore } from '../../proxy/usage-store.js';

/**
 * Usage store at scale: write throughput of batched inserts (the recorder's path) and report
 * latency at N stored records (default 1M) for the queries the APIs run.
 * Run: npx tsx e2e/bench/usage-store.ts [records]
 */

const N = Number(process.argv.find((a) => /^\d+$/.test(a)) ?? 1_000_000);
const BATCH = 500;
const dir = mkdtempSync(join(tmpdir(), 'usage-bench-'));
const store = new UsageStore(join(dir, 'usage.db'));
const teams = ['ml', 'web', 'data', 'search', 'infra'];
const projects = Array.from({ length: 20 }, (_, i) => `p${i}`);
const models = ['llama3.1:8b', 'qwen2.5:7b', 'anthropic.claude-3-haiku-20240307-v1:0', 'amazon.nova-lite-v1:0'];
const start = Date.parse('2026-10-22T00:00:00Z');
const span = 30 * 86_400_000;

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

const t0 = performance.now();
for (let i = 0; i < N; i += BATCH) {
  store.insert(Array.from({ length: Math.min(BATCH, N - i) }, (_, j) => record(i + j)));
}
const writeS = (performance.now() - t0) / 1000;
console.log(`written ${N} in ${writeS.toFixed(1)} s`);

const range = { from: new Date(start), to: new Date(start + span) };
const time = (name: string, fn: () => unknown) => {
  fn();
  const runs = 3;
  console.log(`query: ${name}`);
  const t = performance.now();
  for (let i = 0; i < runs; i++) fn();
  return { query: name, ms: +((performance.now() - t) / runs).toFixed(1) };
};
const results = [
  time('usage, 30 days by day, group by model', () =>
    store.usage({ ...range, granularity: 'day', groupBy: 'model', tags: [] }),
  ),
  time('usage, 30 days by hour, tag team:ml', () =>
    store.usage({ ...range, granularity: 'hour', groupBy: 'model', tags: [{ key: 'team', value: 'ml' }] }),
  ),
  time('usage, group by tag key project', () =>
    store.usage({ ...range, granularity: 'day', groupBy: 'project', tags: [] }),
  ),
  time('analytics p50/p95/p99, group by provider', () =>
    store.analytics({ ...range, granularity: 'day', groupBy: 'provider', tags: [] }),
  ),
  time('usage, 2 tags AND (raw records)', () =>
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
  time('tags search "pro"', () => store.tags('pro')),
];
console.log(`records: ${N}, write: ${writeS.toFixed(1)} s (${Math.round(N / writeS)} records/s, batches of ${BATCH})`);
console.table(results);
store.close();
rmSync(dir, { recursive: true, force: true });
