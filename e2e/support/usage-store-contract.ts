import { describe, expect, it } from 'vitest';
import type { Tag } from '../../proxy/endpoints/tags.js';
import { MAX_PAYLOAD_BYTES, PAYLOAD_CUT } from '../../proxy/usage/record-columns.js';
import { HOUR, percentileFromHistogram } from '../../proxy/usage/rollups.js';
import type { GpuTimeRow, RoutingReport, StoredUsage, ToolQuery, UsageStore } from '../../proxy/usage/store.js';

/**
 * The UsageStore contract: what every implementation reports from the same records. The unit
 * tier runs it on SQLite (proxy/usage/store.test.ts), the e2e tier on a real PostgreSQL server
 * (e2e/no-cluster/usage-store-postgres.e2e.test.ts).
 */

export const T0 = Date.parse('2026-11-20T10:00:00Z');

export function rec(o: Partial<StoredUsage> & { at: number; tags?: Tag[] }): StoredUsage {
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
    ...(o.endpoint !== undefined ? { endpoint: o.endpoint } : {}),
    ...(o.requestedModel !== undefined ? { requestedModel: o.requestedModel } : {}),
    ...(o.routingPolicy !== undefined ? { routingPolicy: o.routingPolicy } : {}),
    ...(o.routingReason !== undefined ? { routingReason: o.routingReason } : {}),
    ...(o.escalations !== undefined ? { escalations: o.escalations } : {}),
    ...(o.counterfactualCostUsd !== undefined ? { counterfactualCostUsd: o.counterfactualCostUsd } : {}),
    ...(o.delivered === false ? { delivered: false, errorType: o.errorType ?? 'gateway_restarted' } : {}),
    ...(o.deprecated ? { deprecated: true } : {}),
    ...(o.findings ? { findings: o.findings } : {}),
    ...(o.cache ? { cache: o.cache, cacheSavingsUsd: o.cacheSavingsUsd ?? 0 } : {}),
  };
}

/** A request a RoutingPolicy routed: asked for gpt-4o, sent by policy `cheap` to the cheapest model, not escalated. */
export function routed(o: Partial<StoredUsage> & { at: number; tags?: Tag[] }): StoredUsage {
  return rec({ requestedModel: 'gpt-4o', routingPolicy: 'cheap', routingReason: 'cheapest', escalations: 0, ...o });
}

/**
 * Two routed requests of team ml (counterfactual 1.0 at cost 0.1: saves 0.9; escalated once,
 * counterfactual 0.5 at cost 0.5: saves nothing) and one of team web that no policy routed.
 */
export function routedRecords(): StoredUsage[] {
  return [
    routed({
      at: T0,
      team: 'ml',
      tags: [tag('team', 'ml'), tag('project', 'a')],
      costUsd: 0.1,
      counterfactualCostUsd: 1,
    }),
    routed({
      at: T0 + HOUR,
      team: 'ml',
      model: 'qwen2.5:7b',
      provider: 'platform-llms/qwen',
      requestedModel: 'auto',
      routingReason: 'escalated',
      escalations: 1,
      tags: [tag('team', 'ml'), tag('project', 'b')],
      costUsd: 0.5,
      counterfactualCostUsd: 0.5,
    }),
    rec({ at: T0, team: 'web', tags: [tag('team', 'web')], costUsd: 0.3 }),
  ];
}
export const tag = (key: string, value: string): Tag => ({ key, value });

/** A tool call's record as proxy/mcp/ writes it: endpoint mcp, the McpServer as provider, the tool as model, no tokens. */
export function toolCall(o: {
  at: number;
  server?: string;
  tool?: string;
  tags?: Tag[];
  team?: string;
  status?: number;
  latencyMs?: number;
  bytesIn?: number;
  bytesOut?: number;
  payload?: string;
}): StoredUsage {
  return {
    ...rec({
      at: o.at,
      model: o.tool ?? 'echo',
      provider: o.server ?? 'everything',
      endpoint: 'mcp',
      promptTokens: 0,
      completionTokens: 0,
      costUsd: 0,
      ...(o.tags ? { tags: o.tags } : {}),
      ...(o.team !== undefined ? { team: o.team } : {}),
      ...(o.status !== undefined ? { status: o.status } : {}),
      ...(o.latencyMs !== undefined ? { latencyMs: o.latencyMs } : {}),
    }),
    bytesIn: o.bytesIn ?? 100,
    bytesOut: o.bytesOut ?? 200,
    ...(o.payload !== undefined ? { payload: o.payload } : {}),
  };
}

/**
 * GPU minutes as a proxy's ledger writes them: `count` minutes from `start`, `replicas` up at
 * `usdPerHour` each, busy or not (a function of the minute's index for a mix).
 */
function gpuMinutes(
  start: number,
  count: number,
  o: { deployment?: string; replicas?: number; usdPerHour?: number; busy?: boolean | ((i: number) => boolean) } = {},
): GpuTimeRow[] {
  const replicas = o.replicas ?? 1;
  return Array.from({ length: count }, (_, i) => ({
    deployment: o.deployment ?? 'platform-llms/llama',
    model: 'llama3.1:8b',
    minute: start + i * 60_000,
    gpuSeconds: 60 * replicas,
    usd: (60 * replicas * (o.usdPerHour ?? 1)) / 3600,
    busy: typeof o.busy === 'function' ? o.busy(i) : (o.busy ?? true),
  }));
}
export const range = { from: new Date(T0 - HOUR), to: new Date(T0 + 48 * HOUR) };

/**
 * A store upgraded from before routing, holding one old (unrouted) request of team ml: routedRecords()
 * written after the upgrade report as on a new store, through the rollups and the raw records.
 */
export async function expectRoutedAfterUpgrade(store: UsageStore): Promise<void> {
  await store.insert(routedRecords());
  const q = { ...range, granularity: 'day' as const, groupBy: 'team', tags: [] as Tag[] };
  const byTeam = await store.usage(q);
  expect(
    byTeam.groups.map((g) => [g.group, g.requests, g.routedRequests, g.routingSavingsUsd, g.escalationRate]),
  ).toEqual([
    ['ml', 3, 2, 0.9, 0.5],
    ['web', 1, 0, 0, 0],
  ]);
  // Raw records (two tags) too: the record of before is no routed one.
  const raw = await store.usage({ ...q, groupBy: 'model', tags: [tag('team', 'ml'), tag('team', 'ml')] });
  expect(raw.totals).toMatchObject({ requests: 3, routedRequests: 2, routingSavingsUsd: 0.9 });
  expect((await store.routing({ ...q, groupBy: 'policy' })).groups.map((g) => [g.group, g.routedRequests])).toEqual([
    ['cheap', 2],
  ]);
}

export interface Opened {
  store: UsageStore;
  /** Another connection to the same data (a restart, or a second replica). */
  reopen(): Promise<UsageStore>;
}

export function usageStoreContract(KINDS: Array<[string, () => Promise<Opened>]>): void {
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
      // No GPU time measured: the actual cost is the list price.
      expect(r.totals).toEqual({
        requests: 4,
        undeliveredRequests: 0,
        deprecatedRequests: 0,
        inputTokens: 1117,
        outputTokens: 1058,
        costUsd: 0.86,
        actualCostUsd: 0.86,
        savingsUsd: 0.3,
        // Nothing was routed: no routing savings beside the free credits'.
        routingSavingsUsd: 0,
        routedRequests: 0,
        escalationRate: 0,
        cacheHits: 0,
        cacheSavingsUsd: 0,
      });
      expect(r.groups.find((g) => g.group === 'llama3.1:8b')).toEqual({
        group: 'llama3.1:8b',
        requests: 2,
        undeliveredRequests: 0,
        deprecatedRequests: 0,
        inputTokens: 110,
        outputTokens: 55,
        costUsd: 0.55,
        actualCostUsd: 0.55,
        savingsUsd: 0,
        routingSavingsUsd: 0,
        routedRequests: 0,
        escalationRate: 0,
        cacheHits: 0,
        cacheSavingsUsd: 0,
      });
      expect(r.deployments).toEqual([]);
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
      const none = await store.usage({
        ...range,
        granularity: 'hour',
        groupBy: 'model',
        tags: [tag('team', 'nobody')],
      });
      expect(none.totals.requests).toBe(0);
    });

    it('splits by endpoint, from the rollups and from the raw records alike', async () => {
      const { store } = await open();
      await store.insert([
        rec({ at: T0, endpoint: 'chat', tags: [tag('team', 'ml')] }),
        rec({ at: T0, endpoint: 'messages', tags: [tag('team', 'ml'), tag('agent', 'claude-code')] }),
        rec({ at: T0 + HOUR, endpoint: 'messages', tags: [tag('team', 'web'), tag('agent', 'claude-code')] }),
        rec({ at: T0 + HOUR, endpoint: 'responses', tags: [tag('team', 'ml'), tag('agent', 'codex')] }),
        // Written before records carried their endpoint.
        rec({ at: T0 }),
      ]);
      const byEndpoint = await store.usage({ ...range, granularity: 'day', groupBy: 'endpoint', tags: [] });
      expect(byEndpoint.groups.map((g) => [g.group, g.requests])).toEqual([
        ['', 1],
        ['chat', 1],
        ['messages', 2],
        ['responses', 1],
      ]);
      // One tag: the rollups; two tags: the raw records. Both name the same endpoints.
      const ofMl = await store.analytics({
        ...range,
        granularity: 'hour',
        groupBy: 'endpoint',
        tags: [tag('team', 'ml')],
      });
      expect(ofMl.groups.map((g) => g.group).sort()).toEqual(['chat', 'messages', 'responses']);
      const claudeOfMl = await store.usage({
        ...range,
        granularity: 'day',
        groupBy: 'endpoint',
        tags: [tag('team', 'ml'), tag('agent', 'claude-code')],
      });
      expect(claudeOfMl.groups.map((g) => [g.group, g.requests])).toEqual([['messages', 1]]);
      await store.close();
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

  routingContract(KINDS);

  describe.each(KINDS)('UsageStore on %s with tool calls (MCP)', (_kind, open) => {
    const day = { ...range, granularity: 'day' as const, groupBy: 'tool' as const, tags: [] as Tag[] };
    async function calls(): Promise<UsageStore> {
      const { store } = await open();
      await store.insert([
        toolCall({ at: T0, tags: [tag('team', 'ml'), tag('agent', 'claude-code')], team: 'ml', latencyMs: 20 }),
        toolCall({ at: T0 + 60_000, tags: [tag('team', 'ml')], team: 'ml', latencyMs: 20, bytesIn: 50 }),
        toolCall({
          at: T0 + HOUR,
          tool: 'add',
          tags: [tag('team', 'ml'), tag('agent', 'codex')],
          team: 'ml',
          status: 502,
          latencyMs: 800,
          bytesOut: 0,
        }),
        toolCall({ at: T0 + HOUR, server: 'memory', tool: 'read_graph', tags: [tag('team', 'web')], team: 'web' }),
        // A model request beside them: in neither tool report.
        rec({ at: T0, endpoint: 'chat', tags: [tag('team', 'ml')], team: 'ml' }),
      ]);
      return store;
    }

    it('reports calls, errors, latency and bytes per server and tool; model reports leave them out', async () => {
      const store = await calls();
      const r = await store.tools(day);
      expect(r.totals).toEqual({
        calls: 4,
        errors: 1,
        errorRate: 0.25,
        latencyMs: { p50: 25, p95: 1000, p99: 1000 },
        bytesIn: 350,
        bytesOut: 600,
      });
      expect(r.groups).toEqual([
        {
          server: 'everything',
          tool: 'echo',
          calls: 2,
          errors: 0,
          errorRate: 0,
          latencyMs: { p50: 25, p95: 25, p99: 25 },
          bytesIn: 150,
          bytesOut: 400,
        },
        {
          server: 'everything',
          tool: 'add',
          calls: 1,
          errors: 1,
          errorRate: 1,
          latencyMs: { p50: 1000, p95: 1000, p99: 1000 },
          bytesIn: 100,
          bytesOut: 0,
        },
        {
          server: 'memory',
          tool: 'read_graph',
          calls: 1,
          errors: 0,
          errorRate: 0,
          latencyMs: { p50: 50, p95: 50, p99: 50 },
          bytesIn: 100,
          bytesOut: 200,
        },
      ]);
      expect(r.otherGroups).toBe(0);
      expect(r.series.map((s) => [s.time, s.server, s.tool, s.calls])).toEqual([
        ['2026-11-20T00:00:00Z', 'everything', 'add', 1],
        ['2026-11-20T00:00:00Z', 'everything', 'echo', 2],
        ['2026-11-20T00:00:00Z', 'memory', 'read_graph', 1],
      ]);
      const hourly = await store.tools({ ...day, granularity: 'hour' });
      expect(hourly.series.map((s) => [s.time, s.tool, s.calls])).toEqual([
        ['2026-11-20T10:00:00Z', 'echo', 2],
        ['2026-11-20T11:00:00Z', 'add', 1],
        ['2026-11-20T11:00:00Z', 'read_graph', 1],
      ]);
      const byServer = await store.tools({ ...day, groupBy: 'server' });
      expect(byServer.groups.map((g) => ['tool' in g, g.server, g.calls, g.bytesIn])).toEqual([
        [false, 'everything', 3, 250],
        [false, 'memory', 1, 100],
      ]);
      // The model reports count model requests only, however grouped, from rollups or raw records.
      const model = { ...range, granularity: 'day' as const, tags: [] as Tag[] };
      expect((await store.usage({ ...model, groupBy: 'model' })).totals.requests).toBe(1);
      expect((await store.analytics({ ...model, groupBy: 'endpoint' })).groups.map((g) => g.group)).toEqual(['chat']);
      expect((await store.usage({ ...model, groupBy: 'provider', tags: [tag('team', 'ml')] })).totals.requests).toBe(1);
      expect(
        (await store.usage({ ...model, groupBy: 'team', tags: [tag('team', 'ml'), tag('team', 'ml')] })).totals
          .requests,
      ).toBe(1);
      await store.close();
    });

    it('filters by tag (rollups and raw records alike), server, tool and team', async () => {
      const store = await calls();
      const sum = async (q: Partial<ToolQuery>) => {
        const r = await store.tools({ ...day, ...q });
        return [r.totals.calls, r.totals.errors, r.totals.bytesIn, r.totals.bytesOut];
      };
      expect(await sum({ tags: [tag('team', 'ml')] })).toEqual([3, 1, 250, 400]);
      // Two tags: the raw records, same figures.
      expect(await sum({ tags: [tag('team', 'ml'), tag('agent', 'codex')] })).toEqual([1, 1, 100, 0]);
      expect(await sum({ tags: [tag('team', 'ml'), tag('team', 'ml')] })).toEqual([3, 1, 250, 400]);
      const raw = await store.tools({ ...day, tags: [tag('team', 'ml'), tag('team', 'ml')] });
      const rolled = await store.tools({ ...day, tags: [tag('team', 'ml')] });
      expect(raw.groups).toEqual(rolled.groups);
      expect(await sum({ server: 'memory' })).toEqual([1, 0, 100, 200]);
      expect(await sum({ tool: 'echo' })).toEqual([2, 0, 150, 400]);
      expect(await sum({ team: 'web' })).toEqual([1, 0, 100, 200]);
      expect(await sum({ team: 'nobody' })).toEqual([0, 0, 0, 0]);
      expect(await sum({ team: 'web', tags: [tag('team', 'ml'), tag('team', 'ml')] })).toEqual([0, 0, 0, 0]);
      const none = await store.tools({ ...day, server: 'nobody' });
      expect(none).toMatchObject({ groups: [], series: [], otherGroups: 0 });
      expect(none.totals.latencyMs).toEqual({ p50: 0, p95: 0, p99: 0 });
      await store.close();
    });

    it('keeps who called what, newest first, with payloads only where a key opted in, cut at 16 KiB', async () => {
      const { store } = await open();
      const big = JSON.stringify({ arguments: { text: 'é'.repeat(30_000) }, result: 'x' });
      await store.insert([
        toolCall({
          at: T0,
          tags: [tag('team', 'ml')],
          team: 'ml',
          payload: '{"arguments":{"text":"hi"},"result":"hi"}',
        }),
        toolCall({ at: T0 + 1000, tool: 'add', team: 'ml', payload: big }),
        { ...toolCall({ at: T0 + 2000, server: 'memory', team: 'web', status: 500 }), errorType: 'upstream_error' },
        rec({ at: T0 + 3000, endpoint: 'chat', team: 'ml' }),
      ]);
      const listed = await store.toolCalls({ ...range, tags: [] });
      expect(listed.map((c) => [c.server, c.tool, c.team, c.status])).toEqual([
        ['memory', 'echo', 'web', 500],
        ['everything', 'add', 'ml', 200],
        ['everything', 'echo', 'ml', 200],
      ]);
      const [memory, add, echo] = listed;
      expect(memory).toMatchObject({ errorType: 'upstream_error', bytesIn: 100, bytesOut: 200, latencyMs: 40 });
      expect(memory?.payload).toBeUndefined();
      expect(echo).toEqual({
        time: new Date(T0).toISOString(),
        requestId: expect.any(String),
        server: 'everything',
        tool: 'echo',
        team: 'ml',
        apiKey: '',
        keyHashPrefix: 'abc123def456',
        tags: [tag('team', 'ml')],
        status: 200,
        latencyMs: 40,
        bytesIn: 100,
        bytesOut: 200,
        payload: '{"arguments":{"text":"hi"},"result":"hi"}',
      });
      const cut = add?.payload ?? '';
      expect(Buffer.byteLength(cut)).toBeLessThanOrEqual(MAX_PAYLOAD_BYTES);
      expect(Buffer.byteLength(cut)).toBeGreaterThan(MAX_PAYLOAD_BYTES - 8);
      expect(cut.endsWith(PAYLOAD_CUT)).toBe(true);
      expect(big.startsWith(cut.slice(0, -PAYLOAD_CUT.length))).toBe(true);
      expect((await store.toolCalls({ ...range, tags: [], limit: 1 })).map((c) => c.server)).toEqual(['memory']);
      expect((await store.toolCalls({ ...range, tags: [], team: 'ml', tool: 'echo' })).length).toBe(1);
      expect((await store.toolCalls({ ...range, tags: [tag('team', 'ml')] })).map((c) => c.tool)).toEqual(['echo']);
      expect((await store.toolCalls({ ...range, tags: [], server: 'memory' })).map((c) => c.team)).toEqual(['web']);
      // A batch written again (a retry after a lost acknowledgement) adds no call.
      await store.insert([toolCall({ at: T0 + 4000, team: 'ml' })]);
      const again = await store.toolCalls({ ...range, tags: [] });
      await store.insert(
        again.slice(0, 1).map((c) => ({ ...toolCall({ at: T0 + 4000, team: 'ml' }), requestId: c.requestId })),
      );
      expect((await store.toolCalls({ ...range, tags: [] })).length).toBe(4);
      expect((await store.tools(day)).totals.calls).toBe(4);
      await store.close();
    });

    it('counts cache hits and their savings apart from routing and credits, by tag, from rollups and raw records alike', async () => {
      const { store } = await open();
      await store.insert([
        rec({ at: T0, tags: [tag('team', 'ml'), tag('env', 'ci')], costUsd: 0.5 }),
        rec({
          at: T0 + 1000,
          tags: [tag('team', 'ml'), tag('env', 'ci')],
          costUsd: 0,
          promptTokens: 0,
          completionTokens: 0,
          cache: 'exact',
          cacheSavingsUsd: 0.5,
        }),
        rec({
          at: T0 + 2000,
          tags: [tag('team', 'ml'), tag('env', 'dev')],
          costUsd: 0,
          promptTokens: 0,
          completionTokens: 0,
          cache: 'semantic',
          cacheSavingsUsd: 0.25,
        }),
      ]);
      const all = await store.usage({ ...day, groupBy: 'env', tags: [] });
      expect(all.totals).toMatchObject({
        requests: 3,
        costUsd: 0.5,
        cacheHits: 2,
        cacheSavingsUsd: 0.75,
        routingSavingsUsd: 0,
      });
      const ci = await store.usage({ ...day, groupBy: 'env', tags: [tag('env', 'ci')] });
      expect(ci.totals).toMatchObject({ cacheHits: 1, cacheSavingsUsd: 0.5 });
      // Two tags: the raw records answer, with the same figures.
      const raw = await store.usage({ ...day, groupBy: 'model', tags: [tag('team', 'ml'), tag('env', 'dev')] });
      expect(raw.totals).toMatchObject({ cacheHits: 1, cacheSavingsUsd: 0.25 });
      await store.close();
    });

    it('reports guardrail findings by guardrail, team and tag, without the text, scoped and filtered', async () => {
      const { store } = await open();
      const card = { guardrail: 'pii', category: 'PaymentCard', action: 'Redact' as const, where: 'request' as const };
      await store.insert([
        rec({ at: T0, team: 'ml', tags: [tag('team', 'ml'), tag('env', 'prod')], findings: [{ ...card, count: 2 }] }),
        rec({
          at: T0 + 1000,
          team: 'ml',
          tags: [tag('team', 'ml'), tag('env', 'dev')],
          findings: [
            { ...card, count: 1 },
            { guardrail: 'keys', category: 'PrivateKey', action: 'Block', where: 'request', count: 1 },
          ],
        }),
        rec({
          at: T0 + 2000,
          team: 'web',
          tags: [tag('team', 'web')],
          findings: [{ ...card, where: 'answer', count: 3 }],
        }),
        rec({ at: T0 + 3000, team: 'web', tags: [tag('team', 'web')] }),
      ]);
      const all = await store.guardrails({ ...range, groupBy: 'guardrail', tags: [] });
      expect(all.totals).toEqual({ requests: 3, findings: 7, blocked: 1 });
      expect(all.data).toEqual([
        {
          group: 'pii',
          guardrail: 'pii',
          category: 'PaymentCard',
          action: 'Redact',
          where: 'answer',
          requests: 1,
          findings: 3,
        },
        {
          group: 'pii',
          guardrail: 'pii',
          category: 'PaymentCard',
          action: 'Redact',
          where: 'request',
          requests: 2,
          findings: 3,
        },
        {
          group: 'keys',
          guardrail: 'keys',
          category: 'PrivateKey',
          action: 'Block',
          where: 'request',
          requests: 1,
          findings: 1,
        },
      ]);
      const byEnv = await store.guardrails({ ...range, groupBy: 'env', tags: [], team: 'ml' });
      expect(byEnv.data.map((r) => [r.group, r.category, r.findings])).toEqual([
        ['prod', 'PaymentCard', 2],
        ['dev', 'PrivateKey', 1],
        ['dev', 'PaymentCard', 1],
      ]);
      const prod = await store.guardrails({ ...range, groupBy: 'team', tags: [tag('env', 'prod')] });
      expect(prod.data.map((r) => [r.group, r.findings])).toEqual([['ml', 2]]);
      await store.close();
    });

    it('counts a tool that reported its own failure (isError) as an error, from rollups and raw records alike', async () => {
      const { store } = await open();
      await store.insert([
        toolCall({ at: T0, tags: [tag('team', 'ml')] }),
        { ...toolCall({ at: T0, tags: [tag('team', 'ml')] }), errorType: 'tool_error' },
        { ...toolCall({ at: T0, tags: [tag('team', 'ml')], status: 504 }), errorType: 'timeout' },
      ]);
      const rolled = await store.tools({ ...day, tags: [tag('team', 'ml')] });
      const raw = await store.tools({ ...day, tags: [tag('team', 'ml'), tag('team', 'ml')] });
      for (const r of [rolled, raw]) expect(r.totals).toMatchObject({ calls: 3, errors: 2, errorRate: 0.6667 });
      await store.close();
    });

    it('folds tools past the limit into _other, and calls no server took into (unrouted)', async () => {
      const { store } = await open();
      const records: StoredUsage[] = [];
      for (let t = 0; t < 8; t++) {
        for (let i = 0; i < 8 - t; i++) records.push(toolCall({ at: T0 + i * 1000, tool: `t${t}` }));
      }
      // Made-up tool names, refused: one row, no tag rows.
      for (let i = 0; i < 30; i++) {
        records.push(toolCall({ at: T0, server: '', tool: `junk${i}`, status: 404, tags: [tag('junk', `v${i}`)] }));
      }
      await store.insert(records);
      const r = await store.tools({ ...day, limit: 3 });
      expect(r.groups.map((g) => [g.server, g.tool, g.calls])).toEqual([
        ['', '(unrouted)', 30],
        ['everything', 't0', 8],
        ['everything', 't1', 7],
        ['_other', '_other', 21],
      ]);
      expect(r.otherGroups).toBe(6);
      expect(r.totals.calls).toBe(66);
      expect(r.totals.errors).toBe(30);
      expect((await store.tools({ ...day, limit: 100 })).otherGroups).toBe(0);
      expect(await store.tags('junk')).toEqual([]);
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
  describe.each(KINDS)('UsageStore on %s with GPU time (actual cost)', (_kind, open) => {
    const day = { ...range, granularity: 'day' as const, tags: [] as Tag[] };

    it('shares an hour of GPU cost by tokens: 3:1 tokens carry 3:1 of it; other providers keep their list price', async () => {
      const { store } = await open();
      // Two replicas at $3 an hour each, the whole hour: $6.
      await store.recordGpuTime(gpuMinutes(T0, 60, { replicas: 2, usdPerHour: 3 }));
      const a = [tag('team', 'a'), tag('env', 'prod')];
      await store.insert([
        rec({ at: T0 + 60_000, tags: a, promptTokens: 100, completionTokens: 50, costUsd: 0.01 }),
        rec({ at: T0 + 120_000, tags: a, promptTokens: 100, completionTokens: 50, costUsd: 0.01 }),
        rec({ at: T0 + 180_000, tags: [tag('team', 'b')], promptTokens: 60, completionTokens: 40, costUsd: 0.01 }),
        rec({ at: T0, tags: [tag('team', 'a')], provider: 'platform-agent/bedrock', model: 'nova', costUsd: 0.3 }),
      ]);
      const byTeam = await store.usage({ ...day, groupBy: 'team' });
      const of = (g: string) => byTeam.groups.find((x) => x.group === g);
      expect(of('a')?.actualCostUsd).toBeCloseTo(4.5 + 0.3, 9);
      expect(of('b')?.actualCostUsd).toBeCloseTo(1.5, 9);
      expect(of('a')?.costUsd).toBeCloseTo(0.32, 9);
      expect(byTeam.totals.actualCostUsd).toBeCloseTo(6.3, 9);
      // The raw records (two tags) attribute the same way.
      const raw = await store.usage({ ...day, groupBy: 'model', tags: a });
      expect(raw.totals.actualCostUsd).toBeCloseTo(4.5, 9);
      const analytics = await store.analytics({ ...day, groupBy: 'provider' });
      expect(analytics.groups.find((g) => g.group === 'platform-llms/llama')?.actualCostUsd).toBeCloseTo(6, 9);
      expect(byTeam.deployments).toEqual([
        { deployment: 'platform-llms/llama', model: 'llama3.1:8b', gpuSeconds: 7200, gpuCostUsd: 6, idleCostUsd: 0 },
      ]);
      // A team's report: its share over every team's tokens, and no deployment figures.
      const ofNoTeam = await store.usage({ ...day, groupBy: 'model', team: '' });
      expect(ofNoTeam.totals.actualCostUsd).toBeCloseTo(6.3, 9);
      expect(ofNoTeam.deployments).toEqual([]);
      await store.close();
    });

    it("reports GPU time no request used as the deployment's idle cost, on no tag", async () => {
      const { store } = await open();
      // $1.2 an hour. Hour 0: busy its first 15 minutes; hour 1: no request at all; hour 2:
      // requests, but no proxy marked a minute busy (the whole hour is theirs).
      await store.recordGpuTime([
        ...gpuMinutes(T0, 60, { usdPerHour: 1.2, busy: (i) => i < 15 }),
        ...gpuMinutes(T0 + HOUR, 60, { usdPerHour: 1.2, busy: false }),
        ...gpuMinutes(T0 + 2 * HOUR, 60, { usdPerHour: 1.2, busy: false }),
      ]);
      await store.insert([
        rec({ at: T0 + 5 * 60_000, tags: [tag('team', 'a')] }),
        rec({ at: T0 + 2 * HOUR + 60_000, tags: [tag('team', 'a')] }),
      ]);
      const r = await store.usage({ ...day, groupBy: 'team' });
      expect(r.totals.actualCostUsd).toBeCloseTo(0.3 + 1.2, 9);
      expect(r.groups.map((g) => g.group)).toEqual(['a']);
      const [d] = r.deployments;
      expect(d?.gpuSeconds).toBe(3 * 3600);
      expect(d?.gpuCostUsd).toBeCloseTo(3.6, 9);
      expect(d?.idleCostUsd).toBeCloseTo(0.9 + 1.2, 9);
      // Hourly series: each hour's requests carry that hour's served GPU cost.
      const hourly = await store.usage({ ...day, granularity: 'hour', groupBy: 'model' });
      expect(hourly.series.map((s) => [s.time, s.actualCostUsd])).toEqual([
        ['2026-11-20T10:00:00Z', expect.closeTo(0.3, 9)],
        ['2026-11-20T12:00:00Z', expect.closeTo(1.2, 9)],
      ]);
      await store.close();
    });

    it('costs nothing where no replica ran (scaled to zero), and keeps the list price where none was measured', async () => {
      const { store } = await open();
      // Hour 0 up, hour 1 scaled to zero (the ledger writes no minute), hour 2 a busy mark but no GPU time.
      await store.recordGpuTime([
        ...gpuMinutes(T0, 60),
        ...gpuMinutes(T0 + 2 * HOUR, 1).map((m) => ({ ...m, gpuSeconds: 0, usd: 0 })),
      ]);
      await store.insert([rec({ at: T0 + 2 * HOUR, costUsd: 0.002 })]);
      const r = await store.usage({ ...day, granularity: 'hour', groupBy: 'model' });
      expect(r.deployments).toEqual([
        { deployment: 'platform-llms/llama', model: 'llama3.1:8b', gpuSeconds: 3600, gpuCostUsd: 1, idleCostUsd: 1 },
      ]);
      expect(r.totals.actualCostUsd).toBeCloseTo(0.002, 9);
      const empty = await store.usage({
        ...day,
        groupBy: 'model',
        from: new Date(T0 + HOUR),
        to: new Date(T0 + 2 * HOUR),
      });
      expect(empty.deployments).toEqual([]);
      await store.close();
    });

    it('keeps the largest figures per minute: two writers (proxy replicas) count a minute once', async () => {
      const first = await open();
      const second = await first.reopen();
      const full = gpuMinutes(T0, 10, { replicas: 2, busy: false });
      await Promise.all([first.store.recordGpuTime(full), second.recordGpuTime(full)]);
      // A replica that started mid-minute saw less, and one marked a minute busy: max, and busy from either.
      await second.recordGpuTime(full.map((m, i) => ({ ...m, gpuSeconds: 30, usd: m.usd / 4, busy: i === 0 })));
      await first.store.recordGpuTime(full);
      await first.store.insert([rec({ at: T0 + 30_000 })]);
      const r = await first.store.usage({ ...day, groupBy: 'model' });
      expect(r.deployments[0]?.gpuSeconds).toBe(10 * 120);
      expect(r.deployments[0]?.gpuCostUsd).toBeCloseTo((10 * 120) / 3600, 9);
      // Only minute 0 was busy: one minute's cost is the request's, the other nine idle.
      expect(r.totals.actualCostUsd).toBeCloseTo(120 / 3600, 9);
      expect(r.deployments[0]?.idleCostUsd).toBeCloseTo((9 * 120) / 3600, 9);
      await Promise.all([first.store.close(), second.close()]);
    });

    it('folds GPU minutes into hours when pruning, reports unchanged; drops them with the rollups', async () => {
      const { store } = await open();
      await store.recordGpuTime([
        ...gpuMinutes(T0, 60, { usdPerHour: 1.2, busy: (i) => i < 15 }),
        ...gpuMinutes(T0 + HOUR, 30, { usdPerHour: 1.2, busy: false }),
      ]);
      await store.insert([rec({ at: T0 + 60_000, tags: [tag('team', 'a')] })]);
      const q = { ...day, groupBy: 'team' };
      const before = await store.usage(q);
      // Minutes fold sooner than raw records expire (reports aggregate them on every read).
      await store.prune(new Date(T0 - 240 * HOUR), undefined, new Date(T0 + 3 * HOUR));
      expect(await store.count()).toBe(1);
      // A minute of the folded hours written late (a slow replica) still counts.
      await store.recordGpuTime(gpuMinutes(T0 + HOUR + 30 * 60_000, 1, { usdPerHour: 1.2, busy: false }));
      const after = await store.usage(q);
      expect(after.totals.actualCostUsd).toBeCloseTo(before.totals.actualCostUsd, 9);
      expect(after.totals.actualCostUsd).toBeCloseTo(0.3, 9);
      expect(after.deployments[0]?.gpuSeconds).toBe(91 * 60);
      expect(after.deployments[0]?.idleCostUsd).toBeCloseTo(0.9 + 0.62, 9);
      await store.prune(new Date(T0 + 3 * HOUR), new Date(T0 + 3 * HOUR));
      expect((await store.usage(q)).deployments).toEqual([]);
      await store.close();
    });
  });
}

/** Routed requests (RoutingPolicy): routing savings beside free-credit savings, by every rollup dimension; the routing report. */
function routingContract(KINDS: Array<[string, () => Promise<Opened>]>): void {
  const day = { ...range, granularity: 'day' as const, groupBy: 'model', tags: [] as Tag[] };

  describe.each(KINDS)('UsageStore on %s with answers their callers never got', (_kind, open) => {
    it('counts served requests apart from undelivered ones, whose cost stays in the cost, from the rollups and from the raw records alike', async () => {
      const { store } = await open();
      const batch = [
        rec({ at: T0, tags: [tag('team', 'ml'), tag('project', 'a')], costUsd: 0.1 }),
        rec({ at: T0, tags: [tag('team', 'ml'), tag('project', 'a')], costUsd: 0.2, status: 429 }),
        // A crash cut its answer: the upstream's work was real.
        rec({ at: T0, tags: [tag('team', 'ml'), tag('project', 'a')], costUsd: 0.4, status: 502, delivered: false }),
        // Its caller left before the last byte: an error it already was stays one, undelivered.
        rec({ at: T0 + HOUR, tags: [tag('team', 'ml')], costUsd: 0.8, status: 504, delivered: false }),
      ];
      await store.insert(batch);
      // A replayed batch counts once.
      await store.insert(batch);
      const byModel = await store.usage(day);
      expect(byModel.totals).toMatchObject({ requests: 2, undeliveredRequests: 2, costUsd: 1.5, inputTokens: 40 });
      const analytics = await store.analytics(day);
      // Errors and the error rate are of the served requests.
      expect(analytics.totals).toMatchObject({ requests: 2, undeliveredRequests: 2, errors: 1, errorRate: 0.5 });
      // Two tags filter: answered from the raw records, the same way.
      const raw = await store.analytics({ ...day, tags: [tag('team', 'ml'), tag('project', 'a')] });
      expect(raw.totals).toMatchObject({ requests: 2, undeliveredRequests: 1, errors: 1, costUsd: 0.7 });
      const rawUsage = await store.usage({ ...day, tags: [tag('team', 'ml'), tag('project', 'a')] });
      expect(rawUsage.totals).toMatchObject({ requests: 2, undeliveredRequests: 1, costUsd: 0.7 });
      // By tag from the rollups.
      const byProject = await store.usage({ ...day, groupBy: 'project' });
      expect(byProject.groups.find((g) => g.group === 'a')).toMatchObject({ requests: 2, undeliveredRequests: 1 });
      await store.close();
    });
  });

  describe.each(KINDS)('UsageStore on %s with requests a deprecated model served', (_kind, open) => {
    it('counts them by model and in the totals, from the rollups and from the raw records alike', async () => {
      const { store } = await open();
      const old = 'claude-sonnet-4-5';
      await store.insert([
        rec({
          at: T0,
          model: old,
          provider: 'anthropic',
          tags: [tag('team', 'ml'), tag('project', 'a')],
          deprecated: true,
        }),
        rec({ at: T0, model: old, provider: 'anthropic', tags: [tag('team', 'ml')], deprecated: true, status: 429 }),
        rec({
          at: T0,
          model: 'claude-sonnet-5-5',
          provider: 'anthropic',
          tags: [tag('team', 'ml'), tag('project', 'a')],
        }),
      ]);
      const byModel = await store.usage(day);
      expect(byModel.totals).toMatchObject({ requests: 3, deprecatedRequests: 2 });
      expect(byModel.groups.find((g) => g.group === old)).toMatchObject({ requests: 2, deprecatedRequests: 2 });
      expect(byModel.groups.find((g) => g.group === 'claude-sonnet-5-5')).toMatchObject({ deprecatedRequests: 0 });
      expect((await store.analytics(day)).totals).toMatchObject({ deprecatedRequests: 2 });
      // Two tags filter: answered from the raw records.
      const raw = await store.usage({ ...day, tags: [tag('team', 'ml'), tag('project', 'a')] });
      expect(raw.totals).toMatchObject({ requests: 2, deprecatedRequests: 1 });
      await store.close();
    });
  });

  describe.each(KINDS)('UsageStore on %s with routed requests', (_kind, open) => {
    it('reports routing savings, routed requests and escalation rate beside free-credit savings, exactly, by any dimension', async () => {
      const { store } = await open();
      await store.insert(routedRecords());
      const byModel = await store.usage(day);
      expect(byModel.totals).toEqual({
        requests: 3,
        undeliveredRequests: 0,
        deprecatedRequests: 0,
        inputTokens: 30,
        outputTokens: 60,
        costUsd: 0.9,
        actualCostUsd: 0.9,
        savingsUsd: 0,
        routingSavingsUsd: 0.9,
        routedRequests: 2,
        escalationRate: 0.5,
        cacheHits: 0,
        cacheSavingsUsd: 0,
      });
      const figures = (r: { groups: Array<{ group: string; routingSavingsUsd: number; routedRequests: number }> }) =>
        r.groups.map((g) => [g.group, g.routingSavingsUsd, g.routedRequests]);
      // The served model: llama3.1:8b served the routed request and the one no policy routed.
      expect(figures(byModel)).toEqual([
        ['llama3.1:8b', 0.9, 1],
        ['qwen2.5:7b', 0, 1],
      ]);
      expect(byModel.groups.map((g) => g.escalationRate)).toEqual([0, 1]);
      const byTeam = await store.usage({ ...day, groupBy: 'team' });
      expect(figures(byTeam)).toEqual([
        ['ml', 0.9, 2],
        ['web', 0, 0],
      ]);
      expect(byTeam.groups.map((g) => [g.escalationRate, g.savingsUsd])).toEqual([
        [0.5, 0],
        [0, 0],
      ]);
      expect(figures(await store.usage({ ...day, groupBy: 'provider' }))).toEqual([
        ['platform-llms/llama', 0.9, 1],
        ['platform-llms/qwen', 0, 1],
      ]);
      // One tag: the rollups; two tags, or a tag key under another key's filter: the raw records. Same figures.
      expect((await store.usage({ ...day, tags: [tag('team', 'ml')] })).totals).toMatchObject({
        routingSavingsUsd: 0.9,
        routedRequests: 2,
        escalationRate: 0.5,
      });
      expect((await store.usage({ ...day, tags: [tag('team', 'ml'), tag('team', 'ml')] })).totals).toMatchObject({
        routingSavingsUsd: 0.9,
        routedRequests: 2,
        escalationRate: 0.5,
      });
      expect(figures(await store.usage({ ...day, groupBy: 'project', tags: [tag('team', 'ml')] }))).toEqual([
        ['a', 0.9, 1],
        ['b', 0, 1],
      ]);
      // Hourly series: each hour's own routed requests.
      const hourly = await store.usage({ ...day, granularity: 'hour', groupBy: 'team' });
      expect(hourly.series.map((s) => [s.time, s.group, s.routingSavingsUsd, s.routedRequests])).toEqual([
        ['2026-11-20T10:00:00Z', 'ml', 0.9, 1],
        ['2026-11-20T10:00:00Z', 'web', 0, 0],
        ['2026-11-20T11:00:00Z', 'ml', 0, 1],
      ]);
      // A team reads its own.
      expect((await store.usage({ ...day, team: 'web' })).totals).toMatchObject({ routedRequests: 0 });
      expect((await store.usage({ ...day, team: 'ml' })).totals).toMatchObject({ routingSavingsUsd: 0.9 });
      expect((await store.analytics({ ...day, groupBy: 'team' })).totals).toMatchObject({
        requests: 3,
        routedRequests: 2,
        escalationRate: 0.5,
      });
      await store.close();
    });

    it('the routing report: share of the routed traffic and escalations by served model, savings by tag and by policy', async () => {
      const { store } = await open();
      const batch = [
        ...routedRecords(),
        // Another policy, escalated twice, and no counterfactual known (an unpriced model asked for): no savings.
        routed({
          at: T0 + 2 * HOUR,
          team: 'web',
          routingPolicy: 'quality',
          model: 'amazon.nova-lite-v1:0',
          provider: 'platform-agent/bedrock',
          escalations: 2,
          tags: [tag('team', 'web')],
          costUsd: 0.2,
        }),
        // A tool call is no model request, whatever it carries.
        { ...toolCall({ at: T0, team: 'ml', tags: [tag('team', 'ml')] }), routingPolicy: 'cheap', escalations: 1 },
      ];
      await store.insert(batch);
      // A retried batch counts once.
      await store.insert(batch);
      const byModel = await store.routing(day);
      expect(byModel).toMatchObject({ groupBy: 'model', granularity: 'day', otherGroups: 0 });
      expect(byModel.totals).toEqual({
        routedRequests: 3,
        escalatedRequests: 2,
        escalationRate: 0.6667,
        share: 1,
        routedCostUsd: 0.6,
        counterfactualCostUsd: 1.5,
        routingSavingsUsd: 0.9,
      });
      expect(byModel.groups).toEqual([
        {
          group: 'amazon.nova-lite-v1:0',
          routedRequests: 1,
          escalatedRequests: 1,
          escalationRate: 1,
          share: 0.3333,
          routedCostUsd: 0,
          counterfactualCostUsd: 0,
          routingSavingsUsd: 0,
        },
        {
          group: 'llama3.1:8b',
          routedRequests: 1,
          escalatedRequests: 0,
          escalationRate: 0,
          share: 0.3333,
          routedCostUsd: 0.1,
          counterfactualCostUsd: 1,
          routingSavingsUsd: 0.9,
        },
        {
          group: 'qwen2.5:7b',
          routedRequests: 1,
          escalatedRequests: 1,
          escalationRate: 1,
          share: 0.3333,
          routedCostUsd: 0.5,
          counterfactualCostUsd: 0.5,
          routingSavingsUsd: 0,
        },
      ]);
      const pick = (r: RoutingReport) => r.groups.map((g) => [g.group, g.routedRequests, g.share, g.routingSavingsUsd]);
      expect(pick(await store.routing({ ...day, groupBy: 'team' }))).toEqual([
        ['ml', 2, 0.6667, 0.9],
        ['web', 1, 0.3333, 0],
      ]);
      const byPolicy = await store.routing({ ...day, groupBy: 'policy' });
      expect(pick(byPolicy)).toEqual([
        ['cheap', 2, 0.6667, 0.9],
        ['quality', 1, 0.3333, 0],
      ]);
      expect(byPolicy.groups.map((g) => g.escalationRate)).toEqual([0.5, 1]);
      expect(pick(await store.routing({ ...day, groupBy: 'policy', team: 'ml', tags: [tag('project', 'a')] }))).toEqual(
        [['cheap', 1, 1, 0.9]],
      );
      // Shares within each time bucket in the series.
      const hourly = await store.routing({ ...day, granularity: 'hour', groupBy: 'model' });
      expect(hourly.series.map((s) => [s.time, s.group, s.share])).toEqual([
        ['2026-11-20T10:00:00Z', 'llama3.1:8b', 1],
        ['2026-11-20T11:00:00Z', 'qwen2.5:7b', 1],
        ['2026-11-20T12:00:00Z', 'amazon.nova-lite-v1:0', 1],
      ]);
      // Filters: one tag (rollups), two tags (raw records), a team.
      expect(pick(await store.routing({ ...day, tags: [tag('team', 'ml')] }))).toEqual([
        ['llama3.1:8b', 1, 0.5, 0.9],
        ['qwen2.5:7b', 1, 0.5, 0],
      ]);
      expect(pick(await store.routing({ ...day, tags: [tag('team', 'ml'), tag('project', 'a')] }))).toEqual([
        ['llama3.1:8b', 1, 1, 0.9],
      ]);
      expect(pick(await store.routing({ ...day, team: 'web' }))).toEqual([['amazon.nova-lite-v1:0', 1, 1, 0]]);
      const none = await store.routing({ ...day, team: 'nobody' });
      expect(none).toMatchObject({ groups: [], series: [], otherGroups: 0 });
      expect(none.totals).toMatchObject({ routedRequests: 0, escalationRate: 0, share: 0, routingSavingsUsd: 0 });
      // Past the limit: the most routed by name, the rest as _other; totals exact.
      const one = await store.routing({ ...day, groupBy: 'team', limit: 1 });
      expect(pick(one)).toEqual([
        ['ml', 2, 0.6667, 0.9],
        ['_other', 1, 0.3333, 0],
      ]);
      expect(one.otherGroups).toBe(1);
      const onePolicy = await store.routing({ ...day, groupBy: 'policy', limit: 1 });
      expect(pick(onePolicy)).toEqual([
        ['cheap', 2, 0.6667, 0.9],
        ['_other', 1, 0.3333, 0],
      ]);
      expect(onePolicy.totals.routingSavingsUsd).toBe(0.9);
      await store.close();
    });
  });
}
