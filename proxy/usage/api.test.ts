import { Hono } from 'hono';
import { afterEach, describe, expect, it } from 'vitest';
import { routed, routedRecords, T0, tag, toolCall } from '../../e2e/support/usage-store-contract.js';
import { ProxyError } from '../endpoints/errors.js';
import { usageRoutes } from './api.js';
import { inThreadReports } from './reports.js';
import { SqliteUsageStore } from './sqlite-store.js';
import type { Report, RoutingReport, StoredUsage, ToolCall, ToolReport, UsageNumbers } from './store.js';

/** The tool report routes over a real (in-memory) store: the query string, the caller's team scope, the answers. */
const stores: SqliteUsageStore[] = [];
afterEach(async () => {
  for (const s of stores.splice(0)) await s.close();
});

const TOOL_CALLS = [
  toolCall({ at: T0, team: 'ml', tags: [tag('team', 'ml')], payload: '{"arguments":{}}' }),
  toolCall({ at: T0 + 1000, team: 'ml', tool: 'add', status: 500, bytesIn: 1, bytesOut: 2 }),
  toolCall({ at: T0 + 2000, team: 'web', server: 'memory', tool: 'read_graph' }),
];

async function app(records: StoredUsage[] = TOOL_CALLS): Promise<Hono> {
  const store = new SqliteUsageStore(':memory:');
  stores.push(store);
  await store.insert(records);
  const hono = new Hono();
  hono.onError((err, c) =>
    err instanceof ProxyError
      ? c.json({ error: { message: err.message, param: err.param } }, err.status)
      : c.text('', 500),
  );
  // A User key reads its team's calls; no header: an Admin key, every team's.
  usageRoutes(hono, inThreadReports(store), async (headers) => {
    const team = headers.get('x-team');
    return team === null ? {} : { team };
  });
  return hono;
}

const window = `from=${new Date(T0 - 3_600_000).toISOString()}&to=${new Date(T0 + 3_600_000).toISOString()}`;

describe('GET /v1/usage/tools', () => {
  it('reports calls by server and tool, by server, and a team only its own', async () => {
    const hono = await app();
    const all = (await (await hono.request(`/v1/usage/tools?${window}`)).json()) as ToolReport;
    expect(all).toMatchObject({ granularity: 'hour', groupBy: 'tool', otherGroups: 0 });
    expect(all.groups.map((g) => [g.server, g.tool, g.calls, g.errors])).toEqual([
      ['everything', 'add', 1, 1],
      ['everything', 'echo', 1, 0],
      ['memory', 'read_graph', 1, 0],
    ]);
    expect(all.totals).toMatchObject({ calls: 3, errors: 1, bytesIn: 201, bytesOut: 402 });
    const byServer = (await (await hono.request(`/v1/usage/tools?${window}&groupBy=server`)).json()) as ToolReport;
    expect(byServer.groups.map((g) => [g.server, g.calls])).toEqual([
      ['everything', 2],
      ['memory', 1],
    ]);
    const ofWeb = (await (
      await hono.request(`/v1/usage/tools?${window}`, { headers: { 'x-team': 'web' } })
    ).json()) as ToolReport;
    expect(ofWeb.groups.map((g) => g.tool)).toEqual(['read_graph']);
    const bad = await hono.request(`/v1/usage/tools?${window}&groupBy=model`);
    expect(bad.status).toBe(400);
    expect(await bad.json()).toMatchObject({ error: { param: 'groupBy' } });
  });
});

describe('GET /v1/usage/tools/calls', () => {
  it("lists the calls newest first, a team's own only, filtered by server, tool and tag", async () => {
    const hono = await app();
    const list = async (query: string, team?: string) =>
      (await (
        await hono.request(`/v1/usage/tools/calls?${window}${query}`, team ? { headers: { 'x-team': team } } : {})
      ).json()) as { from: string; to: string; data: ToolCall[] };
    const all = await list('');
    expect(all.from).toBe(new Date(T0 - 3_600_000).toISOString());
    expect(all.data.map((c) => c.tool)).toEqual(['read_graph', 'add', 'echo']);
    expect(all.data[2]).toMatchObject({ server: 'everything', team: 'ml', payload: '{"arguments":{}}' });
    expect((await list('', 'ml')).data.map((c) => c.tool)).toEqual(['add', 'echo']);
    expect((await list('&server=memory', 'ml')).data).toEqual([]);
    expect((await list('&tool=add&limit=1')).data.map((c) => c.status)).toEqual([500]);
    expect((await list('&tag=team:ml')).data.map((c) => c.tool)).toEqual(['echo']);
    expect((await hono.request(`/v1/usage/tools/calls?limit=5000`)).status).toBe(400);
  });
});

describe('routing savings in GET /v1/usage and GET /v1/usage/routing', () => {
  /** routedRecords (two routed requests of team ml: 1.0 at 0.1, escalated 0.5 at 0.5; one of web not routed) and one of web routed by another policy. */
  const records = [
    ...routedRecords(),
    routed({
      at: T0 + 2 * 3_600_000,
      team: 'web',
      routingPolicy: 'quality',
      tags: [tag('team', 'web')],
      costUsd: 0.2,
      counterfactualCostUsd: 0.6,
    }),
  ];
  // The records span three hours from T0, past the tool tests' window.
  const span = `from=${new Date(T0 - 3_600_000).toISOString()}&to=${new Date(T0 + 5 * 3_600_000).toISOString()}`;
  const get = async <T>(hono: Hono, path: string, team?: string): Promise<T> => {
    const res = await hono.request(`${path}${path.includes('?') ? '&' : '?'}${span}`, {
      headers: team ? { 'x-team': team } : {},
    });
    expect(res.status, path).toBe(200);
    return (await res.json()) as T;
  };

  it('reports routing savings by tag beside the free-credit savings, routed requests and escalation rate', async () => {
    const hono = await app(records);
    const byTeam = await get<Report<UsageNumbers>>(hono, '/v1/usage?groupBy=team');
    expect(byTeam.totals).toMatchObject({ savingsUsd: 0, routingSavingsUsd: 1.3, routedRequests: 3 });
    expect(byTeam.totals.escalationRate).toBe(0.3333);
    expect(
      byTeam.groups.map((g) => [g.group, g.savingsUsd, g.routingSavingsUsd, g.routedRequests, g.escalationRate]),
    ).toEqual([
      ['ml', 0, 0.9, 2, 0.5],
      ['web', 0, 0.4, 1, 0],
    ]);
    // A User key reads only its team's.
    const ofWeb = await get<Report<UsageNumbers>>(hono, '/v1/usage?groupBy=team', 'web');
    expect(ofWeb.groups.map((g) => [g.group, g.routingSavingsUsd])).toEqual([['web', 0.4]]);
  });

  it("reports by served model each one's share of the routed traffic and its escalation rate; by tag and policy, savings", async () => {
    const hono = await app(records);
    const byModel = await get<RoutingReport>(hono, '/v1/usage/routing');
    expect(byModel).toMatchObject({ groupBy: 'model', otherGroups: 0 });
    expect(byModel.groups.map((g) => [g.group, g.routedRequests, g.share, g.escalationRate])).toEqual([
      ['llama3.1:8b', 2, 0.6667, 0],
      ['qwen2.5:7b', 1, 0.3333, 1],
    ]);
    expect(byModel.totals).toEqual({
      routedRequests: 3,
      escalatedRequests: 1,
      escalationRate: 0.3333,
      share: 1,
      routedCostUsd: 0.8,
      counterfactualCostUsd: 2.1,
      routingSavingsUsd: 1.3,
    });
    const byTeam = await get<RoutingReport>(hono, '/v1/usage/routing?groupBy=team');
    expect(byTeam.groups.map((g) => [g.group, g.routingSavingsUsd])).toEqual([
      ['ml', 0.9],
      ['web', 0.4],
    ]);
    const byPolicy = await get<RoutingReport>(hono, '/v1/usage/routing?groupBy=policy&tag=team:ml');
    expect(byPolicy.groups.map((g) => [g.group, g.routedRequests, g.routingSavingsUsd])).toEqual([['cheap', 2, 0.9]]);
    // A User key: its team's routed requests only, shares among them.
    const ofMl = await get<RoutingReport>(hono, '/v1/usage/routing?groupBy=policy', 'ml');
    expect(ofMl.groups.map((g) => [g.group, g.share])).toEqual([['cheap', 1]]);
    const bad = await hono.request(`/v1/usage/routing?${span}&granularity=week`);
    expect(bad.status).toBe(400);
    expect(await bad.json()).toMatchObject({ error: { param: 'granularity' } });
  });

  it('a range with no routed request: zeros, as before routing', async () => {
    const hono = await app([...TOOL_CALLS, routedRecords()[2] as StoredUsage]);
    const usage = await get<Report<UsageNumbers>>(hono, '/v1/usage');
    expect(usage.totals).toMatchObject({ requests: 1, routingSavingsUsd: 0, routedRequests: 0, escalationRate: 0 });
    const routing = await get<RoutingReport>(hono, '/v1/usage/routing');
    expect(routing).toMatchObject({ groups: [], series: [], totals: { routedRequests: 0, share: 0 } });
  });
});
