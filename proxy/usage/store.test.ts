import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Counter, Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { foundationModelOf } from '../../crds/bedrock-prices.js';
import { loadCatalog } from '../../crds/catalog/catalog.js';
import { type Postgres, startPostgres } from '../../e2e/postgres/server.js';
import { CostMeter, loadBedrockPrices, mergePrices, parseBedrockPrices } from '../cost.js';
import { ProxyError } from '../errors.js';
import type { BedrockRoute, OpenAICompatibleRoute } from '../routing.js';
import type { Tag } from '../tags.js';
import { parseUsageQuery } from '../usage-api.js';
import { UsageRecorder } from '../usage-recorder.js';
import { MIGRATIONS, PostgresUsageStore } from './postgres-store.js';
import { SqliteUsageStore } from './sqlite-store.js';
import { percentileFromHistogram, type StoredUsage, type UsageStore } from './store.js';

const T0 = Date.parse('2026-11-20T10:00:00Z');
const HOUR = 3_600_000;

function rec(o: Partial<StoredUsage> & { at: number; tags?: Tag[] }): StoredUsage {
  return {
    time: new Date(o.at).toISOString(),
    requestId: `req_${Math.random()}`,
    keyHashPrefix: 'abc123def456',
    model: o.model ?? 'llama3.1:8b',
    provider: o.provider ?? 'platform-llms/llama',
    tags: o.tags ?? [],
    promptTokens: o.promptTokens ?? 10,
    completionTokens: o.completionTokens ?? 20,
    costUsd: o.costUsd ?? 0.001,
    savingsUsd: o.savingsUsd ?? 0,
    latencyMs: o.latencyMs ?? 40,
    status: o.status ?? 200,
    stream: false,
    ...(o.team !== undefined ? { team: o.team } : {}),
    ...(o.apiKey !== undefined ? { apiKey: o.apiKey } : {}),
  };
}
const tag = (key: string, value: string): Tag => ({ key, value });
const range = { from: new Date(T0 - HOUR), to: new Date(T0 + 48 * HOUR) };
const dbFile = () => join(mkdtempSync(join(tmpdir(), 'usage-')), 'usage.db');

/**
 * One contract, two implementations: every store test runs against SQLite and against a real
 * PostgreSQL server (one per run of this file, a fresh database per store).
 */
let pg: Postgres | undefined;
let databases = 0;
beforeAll(async () => {
  pg = await startPostgres();
}, 60_000);
afterAll(async () => {
  await pg?.destroy();
});

interface Opened {
  store: UsageStore;
  /** Another connection to the same data (a restart, or a second replica). */
  reopen(): Promise<UsageStore>;
}
const KINDS: Array<[string, () => Promise<Opened>]> = [
  [
    'SQLite',
    async () => {
      const file = dbFile();
      return { store: new SqliteUsageStore(file), reopen: async () => new SqliteUsageStore(file) };
    },
  ],
  [
    'PostgreSQL',
    async () => {
      const name = `usage_${++databases}`;
      pg?.psql(`CREATE DATABASE ${name}`);
      const url = pg?.url.replace(/\/postgres$/, `/${name}`) ?? '';
      return { store: await PostgresUsageStore.open(url), reopen: () => PostgresUsageStore.open(url) };
    },
  ],
];

async function seeded(open: () => Promise<Opened>): Promise<Opened> {
  const opened = await open();
  await opened.store.insert([
    rec({
      at: T0,
      tags: [tag('team', 'ml'), tag('project', 'chat')],
      promptTokens: 100,
      completionTokens: 50,
      costUsd: 0.5,
    }),
    rec({
      at: T0 + 10 * 60_000,
      tags: [tag('team', 'ml'), tag('project', 'search')],
      promptTokens: 10,
      completionTokens: 5,
      costUsd: 0.05,
      latencyMs: 300,
    }),
    rec({
      at: T0 + HOUR,
      tags: [tag('team', 'web')],
      model: 'qwen2.5:7b',
      provider: 'platform-llms/qwen',
      promptTokens: 7,
      completionTokens: 3,
      costUsd: 0.01,
      status: 502,
    }),
    rec({
      at: T0 + 26 * HOUR,
      provider: 'platform-agent/bedrock',
      model: 'amazon.nova-lite-v1:0',
      promptTokens: 1000,
      completionTokens: 1000,
      costUsd: 0.3,
      savingsUsd: 0.3,
    }),
  ]);
  return opened;
}

describe.each(KINDS)('UsageStore on %s', (_kind, open) => {
  it('sums exactly, in total and per model', async () => {
    const { store } = await seeded(open);
    const r = await store.usage({ ...range, granularity: 'day', groupBy: 'model', tags: [] });
    expect(r.totals).toEqual({ requests: 4, inputTokens: 1117, outputTokens: 1058, costUsd: 0.86, savingsUsd: 0.3 });
    expect(r.groups.find((g) => g.group === 'llama3.1:8b')).toEqual({
      group: 'llama3.1:8b',
      requests: 2,
      inputTokens: 110,
      outputTokens: 55,
      costUsd: 0.55,
      savingsUsd: 0,
    });
    expect(r.series.map((s) => [s.time, s.group])).toEqual([
      ['2026-11-20T00:00:00Z', 'llama3.1:8b'],
      ['2026-11-20T00:00:00Z', 'qwen2.5:7b'],
      ['2026-11-21T00:00:00Z', 'amazon.nova-lite-v1:0'],
    ]);
  });

  it('filters by one tag (rollups) and by several tags (AND, raw records)', async () => {
    const { store } = await seeded(open);
    const ml = await store.usage({ ...range, granularity: 'hour', groupBy: 'provider', tags: [tag('team', 'ml')] });
    expect(ml.totals).toMatchObject({ requests: 2, inputTokens: 110, costUsd: 0.55 });
    const both = await store.usage({
      ...range,
      granularity: 'hour',
      groupBy: 'model',
      tags: [tag('team', 'ml'), tag('project', 'search')],
    });
    expect(both.totals).toMatchObject({ requests: 1, inputTokens: 10, outputTokens: 5, costUsd: 0.05 });
    const none = await store.usage({ ...range, granularity: 'hour', groupBy: 'model', tags: [tag('team', 'nobody')] });
    expect(none.totals.requests).toBe(0);
  });

  it('groups by a tag key, with or without a filter on another key', async () => {
    const { store } = await seeded(open);
    const byTeam = await store.usage({ ...range, granularity: 'day', groupBy: 'team', tags: [] });
    expect(byTeam.groups.map((g) => [g.group, g.requests])).toEqual([
      ['ml', 2],
      ['web', 1],
    ]);
    const projectsOfMl = await store.usage({
      ...range,
      granularity: 'day',
      groupBy: 'project',
      tags: [tag('team', 'ml')],
    });
    expect(projectsOfMl.groups.map((g) => [g.group, g.requests]).sort()).toEqual([
      ['chat', 1],
      ['search', 1],
    ]);
    // Records without the key still count, in a group of their own.
    const projectsOfWeb = await store.usage({
      ...range,
      granularity: 'day',
      groupBy: 'project',
      tags: [tag('team', 'web')],
    });
    expect(projectsOfWeb.totals.requests).toBe(1);
    expect(projectsOfWeb.groups.map((g) => [g.group, g.requests])).toEqual([['(none)', 1]]);
  });

  it('reports error rate and latency percentiles', async () => {
    const { store } = await open();
    await store.insert(
      Array.from({ length: 100 }, (_, i) => rec({ at: T0, latencyMs: i < 90 ? 20 : 800, status: i < 5 ? 500 : 200 })),
    );
    const a = await store.analytics({ ...range, granularity: 'hour', groupBy: 'model', tags: [] });
    expect(a.totals).toMatchObject({
      requests: 100,
      errors: 5,
      errorRate: 0.05,
      latencyMs: { p50: 25, p95: 1000, p99: 1000 },
    });
    expect(percentileFromHistogram([0, 0, 3, 1], 50)).toBe(5);
  });

  it('lists known tags matching a search, most used first, at most 50', async () => {
    const { store } = await seeded(open);
    expect(await store.tags('te')).toEqual([
      { key: 'team', value: 'ml', requests: 2 },
      { key: 'team', value: 'web', requests: 1 },
    ]);
    const { store: many } = await open();
    await many.insert(Array.from({ length: 60 }, (_, i) => rec({ at: T0, tags: [tag('run', `r${i}`)] })));
    expect(await many.tags('run')).toHaveLength(50);
  });

  it('keeps records across a restart, and pruning raw records keeps the rollups', async () => {
    const seededStore = await seeded(open);
    await seededStore.store.close();
    const reopened = await seededStore.reopen();
    expect(await reopened.count()).toBe(4);
    expect((await reopened.usage({ ...range, granularity: 'day', groupBy: 'model', tags: [] })).totals.requests).toBe(
      4,
    );
    // Retention at a day boundary (PostgreSQL drops whole daily partitions).
    await reopened.prune(new Date('2026-11-21T00:00:00Z'));
    expect(await reopened.count()).toBe(1);
    expect(
      (await reopened.usage({ ...range, granularity: 'day', groupBy: 'model', tags: [tag('team', 'ml')] })).totals
        .requests,
    ).toBe(2);
    const byProvider = await reopened.usage({ ...range, granularity: 'day', groupBy: 'provider', tags: [] });
    expect(byProvider.groups.find((g) => g.group === 'platform-agent/bedrock')?.savingsUsd).toBeCloseTo(0.3);
    await reopened.close();
  });

  it('counts a batch written twice once (a retry after a lost commit acknowledgement)', async () => {
    const { store } = await open();
    const batch = [rec({ at: T0, tags: [tag('team', 'ml')] }), rec({ at: T0 + 1000, tags: [tag('team', 'ml')] })];
    await store.insert(batch);
    await store.insert(batch);
    await store.insert([...batch, rec({ at: T0 + 2000, tags: [tag('team', 'ml')] })]);
    expect(await store.count()).toBe(3);
    const r = await store.usage({ ...range, granularity: 'day', groupBy: 'team', tags: [] });
    expect(r.groups).toMatchObject([{ group: 'ml', requests: 3 }]);
    await store.close();
  });
});

describe.each(KINDS)('UsageStore on %s spending free credits', (_kind, open) => {
  const credited = (i: number, writer: string) =>
    ({
      ...rec({ at: T0 + i * 1000, provider: 'platform-agent/bedrock', costUsd: 0.3 }),
      requestId: `${writer}-${i}`,
      creditsUsd: 1,
    }) as StoredUsage;

  it('spends them in order until they run out, and a retried batch spends nothing twice', async () => {
    const { store } = await open();
    const batch = [credited(0, 'a'), credited(1, 'a'), credited(2, 'a'), credited(3, 'a')];
    await store.insert(batch);
    await store.insert(batch.map((r) => ({ ...r })));
    expect(batch.map((r) => r.savingsUsd)).toEqual([0.3, 0.3, 0.3, expect.closeTo(0.1, 9)]);
    const r = await store.usage({ ...range, granularity: 'day', groupBy: 'provider', tags: [] });
    expect(r.groups.find((g) => g.group === 'platform-agent/bedrock')?.savingsUsd).toBeCloseTo(1, 9);
    expect(r.totals).toMatchObject({ requests: 4, costUsd: 1.2, savingsUsd: 1 });
    await store.close();
  });

  it('spends them once across two writers (replicas) writing at the same time', async () => {
    const first = await open();
    const second = await first.reopen();
    await Promise.all(
      [first.store, second].map(async (s, w) => {
        for (let i = 0; i < 20; i++) await s.insert([credited(i, `w${w}`)]);
      }),
    );
    const r = await first.store.usage({ ...range, granularity: 'day', groupBy: 'provider', tags: [] });
    expect(r.totals.requests).toBe(40);
    expect(r.totals.savingsUsd).toBeCloseTo(1, 9);
    await Promise.all([first.store.close(), second.close()]);
  });
});

describe.each(KINDS)('UsageStore on %s under poisoning', (_kind, open) => {
  it('reports at most `limit` groups by name, the rest summed as _other, totals exact', async () => {
    const { store } = await open();
    const records: StoredUsage[] = [];
    // Team t0 has the most requests, t1 the next, ...: 60 teams.
    for (let t = 0; t < 60; t++) {
      for (let i = 0; i < 60 - t; i++) records.push(rec({ at: T0 + i * 1000, tags: [tag('team', `t${t}`)] }));
    }
    await store.insert(records);
    const q = { ...range, granularity: 'day' as const, groupBy: 'team', tags: [], limit: 5 };
    const r = await store.usage(q);
    expect(r.groups.map((g) => g.group).sort()).toEqual(['_other', 't0', 't1', 't2', 't3', 't4']);
    expect(r.otherGroups).toBe(55);
    expect(r.groups.find((g) => g.group === 't0')?.requests).toBe(60);
    expect(r.groups.find((g) => g.group === '_other')?.requests).toBe(records.length - (60 + 59 + 58 + 57 + 56));
    expect(r.totals.requests).toBe(records.length);
    expect(new Set(r.series.map((s) => s.group)).size).toBe(6);
    // Under the limit nothing is folded.
    expect((await store.usage({ ...q, limit: 100 })).otherGroups).toBe(0);
    // The raw-record path (two tag filters) folds the same way.
    const raw = await store.analytics({
      ...q,
      groupBy: 'model',
      tags: [tag('team', 't1'), tag('team', 't1')],
      limit: 1,
    });
    expect(raw.totals.requests).toBe(59);
  });

  it('refused requests (no model answered) add no rollup rows per tag value', async () => {
    const { store } = await open();
    await store.insert(
      Array.from({ length: 2000 }, (_, i) =>
        rec({ at: T0, provider: '', status: 404, model: 'made-up', tags: [tag('junk', `v${i}`)] }),
      ),
    );
    await store.insert([rec({ at: T0, tags: [tag('team', 'ml')] })]);
    const byJunk = await store.usage({ ...range, granularity: 'day', groupBy: 'junk', tags: [] });
    expect(byJunk.groups).toEqual([]);
    const byModel = await store.usage({ ...range, granularity: 'day', groupBy: 'model', tags: [] });
    expect(byModel.totals.requests).toBe(2001);
    // Nor a row per made-up model name: one for all of them.
    expect(byModel.groups.map((g) => [g.group, g.requests])).toEqual([
      ['(unrouted)', 2000],
      ['llama3.1:8b', 1],
    ]);
    expect(await store.tags('junk')).toEqual([]);
    expect((await store.tags('team')).map((t) => t.value)).toEqual(['ml']);
  });

  it('prunes rollup hours past their own retention', async () => {
    const { store } = await seeded(open);
    const q = { ...range, granularity: 'day' as const, groupBy: 'model', tags: [] };
    await store.prune(new Date(T0 + 2 * HOUR));
    expect((await store.usage(q)).totals.requests).toBe(4);
    await store.prune(new Date(T0 + 2 * HOUR), new Date(T0 + 2 * HOUR));
    expect((await store.usage(q)).totals.requests).toBe(1);
  });
});

describe('PostgreSQL schema', () => {
  it('a database of the first version gets teams and keeps its records', async () => {
    pg?.psql('CREATE DATABASE migrate_v1');
    pg?.psql(
      `CREATE TABLE usage_migrations (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now());
      ${MIGRATIONS[0]}; INSERT INTO usage_migrations (version) VALUES (1);
      CREATE TABLE usage_requests_20261120 PARTITION OF usage_requests
        FOR VALUES FROM (${Date.parse('2026-11-20T00:00:00Z')}) TO (${Date.parse('2026-11-21T00:00:00Z')});
      INSERT INTO usage_requests (ts, request_id, key_prefix, model, provider, tags, prompt, completion, cost, savings,
        latency_ms, status, stream, tokens_counted, unpriced)
        VALUES (${T0}, 'old', 'k', 'llama3.1:8b', 'platform-llms/llama', '{team:ml,project:a}', 1, 2, 0.5, 0, 40, 200, false, false, false);
      INSERT INTO usage_rollup (hour, model, provider, tag_key, tag_value, requests, errors, prompt, completion, cost, savings, b4)
        VALUES (${T0}, 'llama3.1:8b', 'platform-llms/llama', '', '', 1, 0, 1, 2, 0.5, 0, 1),
               (${T0}, 'llama3.1:8b', 'platform-llms/llama', 'team', 'ml', 1, 0, 1, 2, 0.5, 0, 1);`,
      'migrate_v1',
    );
    const store = await PostgresUsageStore.open(pg?.url.replace(/\/postgres$/, '/migrate_v1') ?? '');
    await store.insert([rec({ at: T0 + 60_000, team: 'ml', apiKey: 'k1', tags: [tag('team', 'ml')] })]);
    const q = { ...range, granularity: 'day' as const, groupBy: 'model', tags: [] as Tag[] };
    expect((await store.usage(q)).totals.requests).toBe(2);
    expect((await store.usage({ ...q, tags: [tag('team', 'ml')] })).totals.requests).toBe(2);
    // Records from before teams belong to no team.
    expect((await store.usage({ ...q, team: 'ml' })).totals.requests).toBe(1);
    expect((await store.usage({ ...q, team: '' })).totals.requests).toBe(1);
    expect((await store.usage({ ...q, tags: [tag('team', 'ml'), tag('project', 'a')] })).totals.requests).toBe(1);
    await store.close();
  });

  it('replicas starting together apply each migration once (advisory lock), into daily partitions', async () => {
    pg?.psql('CREATE DATABASE migrate_race');
    const url = pg?.url.replace(/\/postgres$/, '/migrate_race') ?? '';
    const stores = await Promise.all(Array.from({ length: 4 }, () => PostgresUsageStore.open(url)));
    expect(
      pg?.psql("SELECT string_agg(version::text, ',' ORDER BY version) FROM usage_migrations", 'migrate_race').trim(),
    ).toBe(MIGRATIONS.map((_, i) => i + 1).join(','));
    // Concurrent writers of the same new day create its partition once between them.
    await Promise.all(stores.map((s, i) => s.insert([{ ...rec({ at: T0 }), requestId: `r${i}` }])));
    expect(
      pg?.psql("SELECT count(*) FROM pg_inherits WHERE inhparent = 'usage_requests'::regclass", 'migrate_race').trim(),
    ).toBe('1');
    expect(await stores[0]?.count()).toBe(4);
    await Promise.all(stores.map((s) => s.close()));
  });
});

describe('UsageRecorder', () => {
  it('writes batches off the request path and drops (counting) when its queue is full', async () => {
    const store = new SqliteUsageStore(':memory:');
    const registry = new Registry();
    const dropped = new Counter({ name: 'dropped', help: 'x', registers: [registry] });
    const recorder = new UsageRecorder({ store, maxQueue: 3, flushMs: 60_000, dropped });
    for (let i = 0; i < 5; i++) recorder.record(rec({ at: T0 }));
    expect(await store.count()).toBe(0);
    expect(recorder.pending).toBe(3);
    await recorder.close();
    expect(await store.count()).toBe(3);
    expect((await dropped.get()).values[0]?.value).toBe(2);
  });
});

describe('CostMeter', () => {
  const catalog = loadCatalog();
  const ollama: OpenAICompatibleRoute = {
    kind: 'openai-compatible',
    model: 'llama3.1:8b',
    baseUrl: 'x',
    provider: 'p',
  };
  const bedrockRoute = (model: string, region: string, freeCredits?: number, baseModel?: string): BedrockRoute => ({
    kind: 'bedrock',
    model,
    region,
    provider: 'platform-agent/bedrock',
    modelType: 'text',
    streaming: true,
    baseModel: baseModel ?? foundationModelOf(model),
    auth: { method: 'IAMRole', roleArn: 'r' },
    version: '1',
    ...(freeCredits ? { freeCredits } : {}),
  });

  it('prices in-cluster tokens at the catalog price per 1M tokens', () => {
    const meter = new CostMeter(catalog, loadBedrockPrices());
    // llama3.1:8b: $4.9691 per 1M tokens (L4 at $0.805/h, 45 tokens/s).
    expect(meter.charge(ollama, { promptTokens: 600_000, completionTokens: 400_000 }).costUsd).toBeCloseTo(4.9691, 4);
  });

  it('prices Bedrock by model, region override and inference profile, with free credits paying first', () => {
    const meter = new CostMeter(catalog, loadBedrockPrices());
    const usage = { promptTokens: 1_000_000, completionTokens: 1_000_000 };
    expect(meter.charge(bedrockRoute('amazon.nova-lite-v1:0', 'us-east-1'), usage).costUsd).toBeCloseTo(0.3);
    expect(meter.charge(bedrockRoute('amazon.nova-lite-v1:0', 'eu-central-1'), usage).costUsd).toBeCloseTo(0.39);
    expect(
      meter.charge(bedrockRoute('us.anthropic.claude-3-7-sonnet-20250219-v1:0', 'us-east-1'), usage).costUsd,
    ).toBeCloseTo(18);
    // A provider with credits: the charge names them; the store spends them (next test group).
    const route = bedrockRoute('amazon.nova-lite-v1:0', 'us-east-1', 1);
    expect(meter.charge(route, usage)).toEqual({ costUsd: 0.3, creditsUsd: 1 });
    expect(meter.charge(bedrockRoute('amazon.nova-lite-v1:0', 'us-east-1'), usage)).toEqual({ costUsd: 0.3 });
  });

  it('prices global profiles as AWS does (Claude 4.5: global 10% below geographic) and application profiles by their model', () => {
    const meter = new CostMeter(catalog, loadBedrockPrices());
    const usage = { promptTokens: 1_000_000, completionTokens: 1_000_000 };
    const sonnet = 'anthropic.claude-sonnet-4-5-20250929-v1:0';
    expect(meter.charge(bedrockRoute(`global.${sonnet}`, 'us-east-1'), usage).costUsd).toBeCloseTo(18);
    expect(meter.charge(bedrockRoute(`us.${sonnet}`, 'us-east-1'), usage).costUsd).toBeCloseTo(19.8);
    expect(meter.charge(bedrockRoute(`jp.${sonnet}`, 'ap-northeast-1'), usage).costUsd).toBeCloseTo(19.8);
    // Older models cost the same whichever way they are routed.
    const haiku = 'anthropic.claude-3-5-haiku-20241022-v1:0';
    expect(meter.charge(bedrockRoute(`global.${haiku}`, 'us-east-1'), usage).costUsd).toBeCloseTo(4.8);
    // An application profile's opaque id is priced as the model discovery found behind it.
    expect(meter.charge(bedrockRoute('a1b2c3d4e5f6', 'us-east-1', undefined, haiku), usage).costUsd).toBeCloseTo(4.8);
    expect(meter.charge(bedrockRoute('a1b2c3d4e5f6', 'us-east-1'), usage)).toEqual({ costUsd: 0, unpriced: true });
  });

  it('prices prompt-cache reads and writes apart from fresh prompt tokens', () => {
    const meter = new CostMeter(catalog, loadBedrockPrices());
    // Claude 3.7 Sonnet: input 3, cache read 0.3, cache write 3.75, output 15 per 1M.
    const route = bedrockRoute('us.anthropic.claude-3-7-sonnet-20250219-v1:0', 'us-east-1');
    const usage = {
      promptTokens: 3_000_000,
      cachedTokens: 1_000_000,
      cacheWriteTokens: 1_000_000,
      completionTokens: 1_000_000,
    };
    expect(meter.charge(route, usage).costUsd).toBeCloseTo(3 + 0.3 + 3.75 + 15);
    // Without cache prices (Llama) cached tokens cost the input price.
    const llama = bedrockRoute('meta.llama3-1-8b-instruct-v1:0', 'us-east-1');
    expect(meter.charge(llama, { ...usage, completionTokens: 0 }).costUsd).toBeCloseTo(3 * 0.22);
  });

  it('refuses a malformed price table with the entry at fault', () => {
    expect(() => parseBedrockPrices('models:\n  x: {input: -1, output: 2}\n')).toThrow(
      /models\.x\.input must be a number >= 0/,
    );
    expect(() => parseBedrockPrices('models: [1, 2]\n')).toThrow(/models must be a map/);
    expect(() => parseBedrockPrices('global:\n  x: {input: 1}\n')).toThrow(/global\.x\.output/);
  });

  it('takes overrides over the shipped table', () => {
    const prices = mergePrices(
      loadBedrockPrices(),
      parseBedrockPrices('models:\n  amazon.nova-lite-v1:0: {input: 1, output: 2}\n'),
    );
    const meter = new CostMeter(catalog, prices);
    expect(
      meter.charge(bedrockRoute('amazon.nova-lite-v1:0', 'us-east-1'), { promptTokens: 1_000_000, completionTokens: 0 })
        .costUsd,
    ).toBe(1);
    expect(
      meter.charge(bedrockRoute('unknown.model-v1:0', 'us-east-1'), { promptTokens: 5, completionTokens: 5 }).costUsd,
    ).toBe(0);
  });
});

describe('parseUsageQuery', () => {
  const now = new Date('2026-11-21T12:00:00Z');
  it('defaults to the last 7 days by day, grouped by model', () => {
    const q = parseUsageQuery(new URLSearchParams(), now);
    expect(q).toEqual({
      from: new Date('2026-11-14T12:00:00Z'),
      to: now,
      granularity: 'day',
      groupBy: 'model',
      tags: [],
      limit: 20,
    });
    expect(parseUsageQuery(new URLSearchParams('limit=5'), now)).toMatchObject({ limit: 5 });
    for (const bad of ['0', '101', '2.5', 'x']) {
      expect(parseUsageQuery(new URLSearchParams(`limit=${bad}`), now)).toMatchObject({ status: 400, param: 'limit' });
    }
  });

  it('reads repeated tags and rejects bad parameters with 400', () => {
    const q = parseUsageQuery(
      new URLSearchParams('tag=team:ml&tag=project:x&groupBy=team&from=2026-11-21T00:00:00Z'),
      now,
    );
    expect(q instanceof ProxyError ? q.message : q.tags).toEqual([tag('team', 'ml'), tag('project', 'x')]);
    for (const bad of [
      'from=yesterday',
      'granularity=week',
      'groupBy=a%20b',
      'tag=nocolon',
      'from=2026-11-22T00:00:00Z',
    ]) {
      const r = parseUsageQuery(new URLSearchParams(bad), now);
      expect(r, bad).toBeInstanceOf(ProxyError);
      expect(r instanceof ProxyError && r.status).toBe(400);
    }
  });
});

describe.each(KINDS)('UsageStore on %s with teams and keys', (_kind, open) => {
  async function teams(): Promise<UsageStore> {
    const { store } = await open();
    await store.insert([
      rec({ at: T0, team: 'ml', apiKey: 'ml-key', tags: [tag('team', 'ml'), tag('project', 'a')], costUsd: 0.5 }),
      rec({
        at: T0 + HOUR,
        team: 'ml',
        apiKey: 'ml-key',
        tags: [tag('team', 'ml'), tag('project', 'b')],
        costUsd: 0.25,
      }),
      rec({ at: T0, team: 'web', apiKey: 'web-key', tags: [tag('team', 'web'), tag('project', 'a')], costUsd: 2 }),
      // An admin's request billed to ml by tag: ml's tag budget counts it, ml's reads do not.
      rec({ at: T0, team: 'platform', apiKey: 'admin', tags: [tag('team', 'ml')], costUsd: 1 }),
      // A key of no team (a keys file).
      rec({ at: T0, tags: [tag('project', 'a')], costUsd: 4 }),
    ]);
    return store;
  }

  it("scopes every report and the tag list to one team's requests", async () => {
    const store = await teams();
    const q = { ...range, granularity: 'day' as const, groupBy: 'model', tags: [] as Tag[] };
    expect((await store.usage(q)).totals.requests).toBe(5);
    expect((await store.usage({ ...q, team: 'ml' })).totals).toMatchObject({ requests: 2, costUsd: 0.75 });
    expect((await store.usage({ ...q, team: 'web' })).totals).toMatchObject({ requests: 1, costUsd: 2 });
    expect((await store.usage({ ...q, team: 'nobody' })).totals.requests).toBe(0);
    // From the rollups: one tag, and grouped by a tag key.
    expect((await store.usage({ ...q, tags: [tag('project', 'a')], team: 'ml' })).totals.requests).toBe(1);
    const byProject = await store.usage({ ...q, groupBy: 'project', team: 'ml' });
    expect(byProject.groups.map((g) => [g.group, g.requests])).toEqual([
      ['a', 1],
      ['b', 1],
    ]);
    // From the raw records: two tags.
    const raw = await store.analytics({ ...q, tags: [tag('team', 'ml'), tag('project', 'a')], team: 'ml' });
    expect(raw.totals.requests).toBe(1);
    expect((await store.analytics({ ...q, tags: [tag('team', 'ml'), tag('project', 'a')] })).totals.requests).toBe(1);
    expect((await store.tags('', 50, 'web')).map((t) => `${t.key}:${t.value}`).sort()).toEqual([
      'project:a',
      'team:web',
    ]);
    expect((await store.tags('team', 50)).map((t) => `${t.key}:${t.value}`).sort()).toEqual(['team:ml', 'team:web']);
    await store.close();
  });

  it('sums spend by ApiKey and by tag since a time, after free credits', async () => {
    const store = await teams();
    const since = new Date(T0 + HOUR);
    expect(
      await store.spend([
        { apiKey: 'ml-key', since: new Date(T0) },
        { apiKey: 'ml-key', since },
        { tag: tag('team', 'ml'), since: new Date(T0) },
        { tag: tag('project', 'a'), since: new Date(T0) },
        { apiKey: 'nobody', since: new Date(T0) },
        { tag: tag('team', 'nobody'), since: new Date(T0) },
      ]),
    ).toEqual([0.75, 0.25, 1.75, 6.5, 0, 0]);
    expect(await store.spend([])).toEqual([]);
    // A retried batch counts once.
    const again = rec({ at: T0 + 2 * HOUR, team: 'ml', apiKey: 'ml-key', costUsd: 1 });
    await store.insert([again]);
    await store.insert([again]);
    expect(await store.spend([{ apiKey: 'ml-key', since }])).toEqual([1.25]);
    await store.close();
  });
});

describe('a SQLite usage file from before teams', () => {
  it('gets the team column in its rollups and keeps every row', async () => {
    const file = dbFile();
    const Database = (await import('better-sqlite3')).default;
    const old = new Database(file);
    old.exec(`CREATE TABLE rollup (hour INTEGER NOT NULL, model TEXT NOT NULL, provider TEXT NOT NULL,
      tag_key TEXT NOT NULL, tag_value TEXT NOT NULL, requests INTEGER NOT NULL, errors INTEGER NOT NULL,
      prompt INTEGER NOT NULL, completion INTEGER NOT NULL, cost REAL NOT NULL, savings REAL NOT NULL,
      b0 INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (hour, model, provider, tag_key, tag_value))`);
    old.exec(
      `INSERT INTO rollup VALUES (${T0}, 'llama3.1:8b', 'platform-llms/llama', '', '', 7, 0, 70, 140, 0.7, 0, 7)`,
    );
    old.close();
    const store = new SqliteUsageStore(file);
    await store.insert([rec({ at: T0, team: 'ml' })]);
    const r = await store.usage({ ...range, granularity: 'day', groupBy: 'model', tags: [] });
    expect(r.totals.requests).toBe(8);
    expect(
      (await store.usage({ ...range, granularity: 'day', groupBy: 'model', tags: [], team: 'ml' })).totals.requests,
    ).toBe(1);
    await store.close();
    // Opening it again changes nothing.
    const again = new SqliteUsageStore(file);
    expect((await again.usage({ ...range, granularity: 'day', groupBy: 'model', tags: [] })).totals.requests).toBe(8);
    await again.close();
  });
});

describe('two proxy processes sharing one usage file', () => {
  it('both write and every record counts (SQLite locking, busy timeout)', async () => {
    const file = dbFile();
    await new SqliteUsageStore(file).close();
    const script = `
      import { SqliteUsageStore } from './proxy/usage/sqlite-store.ts';
      const store = new SqliteUsageStore(${JSON.stringify(file)});
      for (let b = 0; b < 20; b++) {
        await store.insert(Array.from({ length: 100 }, (_, i) => ({
          time: new Date(${T0}).toISOString(), requestId: 'child-' + b + '-' + i, keyHashPrefix: 'k', model: 'm', provider: 'child',
          tags: [{ key: 'team', value: 'child' }], promptTokens: 1, completionTokens: 1, costUsd: 0, savingsUsd: 0,
          latencyMs: 1, status: 200, stream: false,
        })));
        await new Promise((r) => setTimeout(r, 2));
      }
      await store.close();
    `;
    const { spawn } = await import('node:child_process');
    const { fileURLToPath } = await import('node:url');
    const root = fileURLToPath(new URL('../..', import.meta.url));
    const child = spawn(join(root, 'node_modules/.bin/tsx'), ['--input-type=module', '-e', script], {
      cwd: root,
      stdio: 'inherit',
    });
    const done = new Promise<number | null>((resolve) => child.once('exit', resolve));
    const parent = new SqliteUsageStore(file);
    for (let b = 0; b < 20; b++) {
      await parent.insert(
        Array.from({ length: 100 }, () => rec({ at: T0, provider: 'parent', tags: [tag('team', 'parent')] })),
      );
      await new Promise((r) => setTimeout(r, 2));
    }
    expect(await done).toBe(0);
    expect(await parent.count()).toBe(4000);
    const byTeam = await parent.usage({ ...range, granularity: 'day', groupBy: 'team', tags: [] });
    expect(byTeam.groups.map((g) => [g.group, g.requests])).toEqual([
      ['child', 2000],
      ['parent', 2000],
    ]);
    await parent.close();
  }, 30_000);
});
