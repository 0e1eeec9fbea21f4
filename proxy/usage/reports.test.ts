import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { routedRecords } from '../../e2e/support/usage-store-contract.js';
import { WorkerInserts, WorkerReports } from './reports.js';
import { SqliteUsageStore } from './sqlite-store.js';
import type { StoredUsage } from './store.js';

const T0 = Date.UTC(2026, 10, 20, 12);

const rec = (i: number, team: string): StoredUsage => ({
  time: new Date(T0 + i * 1000).toISOString(),
  requestId: `req_thread_${i}`,
  keyHashPrefix: 'abc123def456',
  model: 'llama3.1:8b',
  provider: 'platform-llms/llama',
  tags: [{ key: 'team', value: team }],
  promptTokens: 10,
  completionTokens: 20,
  costUsd: 0.001,
  savingsUsd: 0,
  latencyMs: 40,
  status: 200,
  stream: false,
});

const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const close of closers.splice(0)) await close();
});

function setUp() {
  const path = join(mkdtempSync(join(tmpdir(), 'usage-thread-')), 'usage.db');
  const store = new SqliteUsageStore(path);
  const inserts = new WorkerInserts(path, store);
  const reports = new WorkerReports(path);
  closers.push(
    () => inserts.close(),
    () => reports.close(),
    async () => store.close(),
  );
  return { store, inserts, reports };
}

describe('usage threads', () => {
  it('a batch written by the writer thread is in the file the request thread and the report thread read', async () => {
    const { store, inserts, reports } = setUp();
    await inserts.insert([rec(1, 'ml'), rec(2, 'ml'), rec(3, 'search')]);
    // A batch retried after an unacknowledged write counts once.
    await inserts.insert([rec(3, 'search')]);
    expect(await store.count()).toBe(3);
    const report = await reports.usage({
      from: new Date(T0 - 3_600_000),
      to: new Date(T0 + 3_600_000),
      granularity: 'hour',
      groupBy: 'team',
      tags: [],
    });
    expect(report.totals.requests).toBe(3);
    expect(Object.fromEntries(report.groups.map((g) => [g.group, g.requests]))).toEqual({ ml: 2, search: 1 });
  });

  it('once the writer thread is gone, batches are written in place: none is lost to it', async () => {
    const { store, inserts } = setUp();
    await inserts.insert([rec(1, 'ml')]);
    await inserts.close();
    await inserts.insert([rec(2, 'ml'), rec(3, 'ml')]);
    expect(await store.count()).toBe(3);
  });

  it("GPU time goes through the writer thread (in place once it is gone), and the report thread's reports carry it", async () => {
    const { inserts, reports } = setUp();
    const minute = (i: number) => ({
      deployment: 'platform-llms/llama',
      model: 'llama3.1:8b',
      minute: Math.floor(T0 / 3_600_000) * 3_600_000 + i * 60_000,
      gpuSeconds: 60,
      usd: 0.06,
      busy: true,
    });
    await inserts.recordGpuTime([minute(0), minute(1)]);
    await inserts.insert([rec(1, 'ml')]);
    await inserts.close();
    await inserts.recordGpuTime([minute(2)]);
    const report = await reports.usage({
      from: new Date(T0 - 3_600_000),
      to: new Date(T0 + 3_600_000),
      granularity: 'hour',
      groupBy: 'team',
      tags: [],
    });
    expect(report.deployments).toMatchObject([{ deployment: 'platform-llms/llama', gpuSeconds: 180 }]);
    expect(report.totals.actualCostUsd).toBeCloseTo(0.18, 9);
  });

  it('tool calls, written by the writer thread, are reported and listed by the report thread', async () => {
    const { inserts, reports } = setUp();
    const call = (i: number, tool: string): StoredUsage => ({
      ...rec(i, 'ml'),
      endpoint: 'mcp',
      provider: 'everything',
      model: tool,
      promptTokens: 0,
      completionTokens: 0,
      costUsd: 0,
      bytesIn: 10 * i,
      bytesOut: 100,
      payload: `{"i":${i}}`,
    });
    await inserts.insert([call(1, 'echo'), call(2, 'echo'), call(3, 'add'), rec(4, 'ml')]);
    const window = { from: new Date(T0 - 3_600_000), to: new Date(T0 + 3_600_000) };
    const report = await reports.tools({ ...window, granularity: 'hour', groupBy: 'tool', tags: [] });
    expect(report.groups.map((g) => [g.server, g.tool, g.calls, g.bytesIn, g.bytesOut])).toEqual([
      ['everything', 'echo', 2, 30, 200],
      ['everything', 'add', 1, 30, 100],
    ]);
    const calls = await reports.toolCalls({ ...window, tags: [], tool: 'echo' });
    expect(calls.map((c) => [c.requestId, c.payload])).toEqual([
      ['req_thread_2', '{"i":2}'],
      ['req_thread_1', '{"i":1}'],
    ]);
  });

  it('routed requests, written by the writer thread, are in the usage and routing reports of the report thread', async () => {
    const { inserts, reports } = setUp();
    await inserts.insert(routedRecords());
    const window = { from: new Date(Date.UTC(2026, 10, 20)), to: new Date(Date.UTC(2026, 10, 21)) };
    const usage = await reports.usage({ ...window, granularity: 'day', groupBy: 'team', tags: [] });
    expect(
      usage.groups.map((g) => [g.group, g.savingsUsd, g.routingSavingsUsd, g.routedRequests, g.escalationRate]),
    ).toEqual([
      ['ml', 0, 0.9, 2, 0.5],
      ['web', 0, 0, 0, 0],
    ]);
    const routing = await reports.routing({ ...window, granularity: 'day', groupBy: 'model', tags: [] });
    expect(routing.groups.map((g) => [g.group, g.share, g.escalationRate, g.routingSavingsUsd])).toEqual([
      ['llama3.1:8b', 0.5, 0, 0.9],
      ['qwen2.5:7b', 0.5, 1, 0],
    ]);
    const byPolicy = await reports.routing({ ...window, granularity: 'day', groupBy: 'policy', tags: [] });
    expect(byPolicy.groups.map((g) => [g.group, g.routedRequests])).toEqual([['cheap', 2]]);
  });

  it('a failing write rejects, so the recorder keeps the batch and retries it', async () => {
    const { inserts } = setUp();
    const broken = { ...rec(1, 'ml'), tags: null } as unknown as StoredUsage;
    await expect(inserts.insert([broken])).rejects.toThrow();
  });
});
