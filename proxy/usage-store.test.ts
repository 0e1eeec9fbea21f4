import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Counter, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { loadCatalog } from '../crds/catalog/catalog.js';
import type { ExternalProvider } from '../crds/external-provider.js';
import { CostMeter, loadBedrockPrices, mergePrices, parseBedrockPrices } from './cost.js';
import { ProxyError } from './errors.js';
import type { BedrockRoute, OpenAICompatibleRoute } from './routing.js';
import type { Tag } from './tags.js';
import { parseUsageQuery } from './usage-api.js';
import { UsageRecorder } from './usage-recorder.js';
import { percentileFromHistogram, type StoredUsage, UsageStore } from './usage-store.js';

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
  };
}
const tag = (key: string, value: string): Tag => ({ key, value });
const range = { from: new Date(T0 - HOUR), to: new Date(T0 + 48 * HOUR) };
const dbFile = () => join(mkdtempSync(join(tmpdir(), 'usage-')), 'usage.db');

function seeded(path = ':memory:') {
  const store = new UsageStore(path);
  store.insert([
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
  return store;
}

describe('UsageStore', () => {
  it('sums exactly, in total and per model', () => {
    const store = seeded();
    const r = store.usage({ ...range, granularity: 'day', groupBy: 'model', tags: [] });
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

  it('filters by one tag (rollups) and by several tags (AND, raw records)', () => {
    const store = seeded();
    const ml = store.usage({ ...range, granularity: 'hour', groupBy: 'provider', tags: [tag('team', 'ml')] });
    expect(ml.totals).toMatchObject({ requests: 2, inputTokens: 110, costUsd: 0.55 });
    const both = store.usage({
      ...range,
      granularity: 'hour',
      groupBy: 'model',
      tags: [tag('team', 'ml'), tag('project', 'search')],
    });
    expect(both.totals).toMatchObject({ requests: 1, inputTokens: 10, outputTokens: 5, costUsd: 0.05 });
    const none = store.usage({ ...range, granularity: 'hour', groupBy: 'model', tags: [tag('team', 'nobody')] });
    expect(none.totals.requests).toBe(0);
  });

  it('groups by a tag key, with or without a filter on another key', () => {
    const store = seeded();
    const byTeam = store.usage({ ...range, granularity: 'day', groupBy: 'team', tags: [] });
    expect(byTeam.groups.map((g) => [g.group, g.requests])).toEqual([
      ['ml', 2],
      ['web', 1],
    ]);
    const projectsOfMl = store.usage({ ...range, granularity: 'day', groupBy: 'project', tags: [tag('team', 'ml')] });
    expect(projectsOfMl.groups.map((g) => [g.group, g.requests]).sort()).toEqual([
      ['chat', 1],
      ['search', 1],
    ]);
  });

  it('reports error rate and latency percentiles', () => {
    const store = new UsageStore(':memory:');
    store.insert(
      Array.from({ length: 100 }, (_, i) => rec({ at: T0, latencyMs: i < 90 ? 20 : 800, status: i < 5 ? 500 : 200 })),
    );
    const a = store.analytics({ ...range, granularity: 'hour', groupBy: 'model', tags: [] });
    expect(a.totals).toMatchObject({
      requests: 100,
      errors: 5,
      errorRate: 0.05,
      latencyMs: { p50: 25, p95: 1000, p99: 1000 },
    });
    expect(percentileFromHistogram([0, 0, 3, 1], 50)).toBe(5);
  });

  it('lists known tags matching a search, most used first, at most 50', () => {
    const store = seeded();
    expect(store.tags('te')).toEqual([
      { key: 'team', value: 'ml', requests: 2 },
      { key: 'team', value: 'web', requests: 1 },
    ]);
    const many = new UsageStore(':memory:');
    many.insert(Array.from({ length: 60 }, (_, i) => rec({ at: T0, tags: [tag('run', `r${i}`)] })));
    expect(many.tags('run')).toHaveLength(50);
  });

  it('keeps records across a restart, and pruning raw records keeps the rollups', () => {
    const file = dbFile();
    seeded(file).close();
    const reopened = new UsageStore(file);
    expect(reopened.count()).toBe(4);
    expect(reopened.usage({ ...range, granularity: 'day', groupBy: 'model', tags: [] }).totals.requests).toBe(4);
    expect(reopened.prune(new Date(T0 + 2 * HOUR))).toBe(3);
    expect(reopened.count()).toBe(1);
    expect(
      reopened.usage({ ...range, granularity: 'day', groupBy: 'model', tags: [tag('team', 'ml')] }).totals.requests,
    ).toBe(2);
    expect(reopened.savingsByProvider().get('platform-agent/bedrock')).toBeCloseTo(0.3);
    reopened.close();
  });
});

describe('UsageStore under poisoning', () => {
  it('reports at most `limit` groups by name, the rest summed as _other, totals exact', () => {
    const store = new UsageStore(':memory:');
    const records: StoredUsage[] = [];
    // Team t0 has the most requests, t1 the next, ...: 60 teams.
    for (let t = 0; t < 60; t++) {
      for (let i = 0; i < 60 - t; i++) records.push(rec({ at: T0 + i * 1000, tags: [tag('team', `t${t}`)] }));
    }
    store.insert(records);
    const q = { ...range, granularity: 'day' as const, groupBy: 'team', tags: [], limit: 5 };
    const r = store.usage(q);
    expect(r.groups.map((g) => g.group).sort()).toEqual(['_other', 't0', 't1', 't2', 't3', 't4']);
    expect(r.otherGroups).toBe(55);
    expect(r.groups.find((g) => g.group === 't0')?.requests).toBe(60);
    expect(r.groups.find((g) => g.group === '_other')?.requests).toBe(records.length - (60 + 59 + 58 + 57 + 56));
    expect(r.totals.requests).toBe(records.length);
    expect(new Set(r.series.map((s) => s.group)).size).toBe(6);
    // Under the limit nothing is folded.
    expect(store.usage({ ...q, limit: 100 }).otherGroups).toBe(0);
    // The raw-record path (two tag filters) folds the same way.
    const raw = store.analytics({ ...q, groupBy: 'model', tags: [tag('team', 't1'), tag('team', 't1')], limit: 1 });
    expect(raw.totals.requests).toBe(59);
  });

  it('refused requests (no model answered) add no rollup rows per tag value', () => {
    const store = new UsageStore(':memory:');
    store.insert(
      Array.from({ length: 2000 }, (_, i) =>
        rec({ at: T0, provider: '', status: 404, model: 'made-up', tags: [tag('junk', `v${i}`)] }),
      ),
    );
    store.insert([rec({ at: T0, tags: [tag('team', 'ml')] })]);
    const byJunk = store.usage({ ...range, granularity: 'day', groupBy: 'junk', tags: [] });
    expect(byJunk.groups).toEqual([]);
    const byModel = store.usage({ ...range, granularity: 'day', groupBy: 'model', tags: [] });
    expect(byModel.totals.requests).toBe(2001);
    // Nor a row per made-up model name: one for all of them.
    expect(byModel.groups.map((g) => [g.group, g.requests])).toEqual([
      ['(unrouted)', 2000],
      ['llama3.1:8b', 1],
    ]);
    expect(store.tags('junk')).toEqual([]);
    expect(store.tags('team').map((t) => t.value)).toEqual(['ml']);
  });

  it('prunes rollup hours past their own retention', () => {
    const store = seeded();
    const q = { ...range, granularity: 'day' as const, groupBy: 'model', tags: [] };
    store.prune(new Date(T0 + 2 * HOUR));
    expect(store.usage(q).totals.requests).toBe(4);
    store.prune(new Date(T0 + 2 * HOUR), new Date(T0 + 2 * HOUR));
    expect(store.usage(q).totals.requests).toBe(1);
  });
});

describe('UsageRecorder', () => {
  it('writes batches off the request path and drops (counting) when its queue is full', () => {
    const store = new UsageStore(':memory:');
    const registry = new Registry();
    const dropped = new Counter({ name: 'dropped', help: 'x', registers: [registry] });
    const recorder = new UsageRecorder({ store, maxQueue: 3, flushMs: 60_000, dropped });
    for (let i = 0; i < 5; i++) recorder.record(rec({ at: T0 }));
    expect(store.count()).toBe(0);
    expect(recorder.pending).toBe(3);
    recorder.close();
    expect(store.count()).toBe(3);
    return dropped.get().then((m) => expect(m.values[0]?.value).toBe(2));
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
  const bedrockRoute = (model: string, region: string, freeCredits?: number): BedrockRoute => ({
    kind: 'bedrock',
    model,
    region,
    provider: 'platform-agent/bedrock',
    streaming: true,
    source: { spec: { freeCredits } } as unknown as ExternalProvider,
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
    const credited = new CostMeter(catalog, loadBedrockPrices(), new Map([['platform-agent/bedrock', 0.5]]));
    const route = bedrockRoute('amazon.nova-lite-v1:0', 'us-east-1', 1);
    expect(credited.charge(route, usage)).toEqual({ costUsd: 0.3, savingsUsd: 0.3 });
    const second = credited.charge(route, usage);
    expect(second.savingsUsd).toBeCloseTo(0.2);
    expect(credited.charge(route, usage).savingsUsd).toBe(0);
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

describe('two proxy processes sharing one usage file', () => {
  it('both write and every record counts (SQLite locking, busy timeout)', async () => {
    const file = dbFile();
    new UsageStore(file).close();
    const script = `
      import { UsageStore } from './proxy/usage-store.ts';
      const store = new UsageStore(${JSON.stringify(file)});
      for (let b = 0; b < 20; b++) {
        store.insert(Array.from({ length: 100 }, (_, i) => ({
          time: new Date(${T0}).toISOString(), requestId: 'child-' + b + '-' + i, keyHashPrefix: 'k', model: 'm', provider: 'child',
          tags: [{ key: 'team', value: 'child' }], promptTokens: 1, completionTokens: 1, costUsd: 0, savingsUsd: 0,
          latencyMs: 1, status: 200, stream: false,
        })));
        await new Promise((r) => setTimeout(r, 2));
      }
      store.close();
    `;
    const { spawn } = await import('node:child_process');
    const { fileURLToPath } = await import('node:url');
    const root = fileURLToPath(new URL('..', import.meta.url));
    const child = spawn(join(root, 'node_modules/.bin/tsx'), ['--input-type=module', '-e', script], {
      cwd: root,
      stdio: 'inherit',
    });
    const done = new Promise<number | null>((resolve) => child.once('exit', resolve));
    const parent = new UsageStore(file);
    for (let b = 0; b < 20; b++) {
      parent.insert(
        Array.from({ length: 100 }, () => rec({ at: T0, provider: 'parent', tags: [tag('team', 'parent')] })),
      );
      await new Promise((r) => setTimeout(r, 2));
    }
    expect(await done).toBe(0);
    expect(parent.count()).toBe(4000);
    const byTeam = parent.usage({ ...range, granularity: 'day', groupBy: 'team', tags: [] });
    expect(byTeam.groups.map((g) => [g.group, g.requests])).toEqual([
      ['child', 2000],
      ['parent', 2000],
    ]);
    parent.close();
  }, 30_000);
});
