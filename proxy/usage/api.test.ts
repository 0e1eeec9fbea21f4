import { Hono } from 'hono';
import { afterEach, describe, expect, it } from 'vitest';
import { T0, tag, toolCall } from '../../e2e/support/usage-store-contract.js';
import { ProxyError } from '../endpoints/errors.js';
import { usageRoutes } from './api.js';
import { inThreadReports } from './reports.js';
import { SqliteUsageStore } from './sqlite-store.js';
import type { ToolCall, ToolReport } from './store.js';

/** The tool report routes over a real (in-memory) store: the query string, the caller's team scope, the answers. */
const stores: SqliteUsageStore[] = [];
afterEach(async () => {
  for (const s of stores.splice(0)) await s.close();
});

async function app(): Promise<Hono> {
  const store = new SqliteUsageStore(':memory:');
  stores.push(store);
  await store.insert([
    toolCall({ at: T0, team: 'ml', tags: [tag('team', 'ml')], payload: '{"arguments":{}}' }),
    toolCall({ at: T0 + 1000, team: 'ml', tool: 'add', status: 500, bytesIn: 1, bytesOut: 2 }),
    toolCall({ at: T0 + 2000, team: 'web', server: 'memory', tool: 'read_graph' }),
  ]);
  const hono = new Hono();
  hono.onError((err, c) =>
    err instanceof ProxyError
      ? c.json({ error: { message: err.message, param: err.param } }, err.status)
      : c.text('', 500),
  );
  // A User key reads its team's calls; no header: an Admin key, every team's.
  usageRoutes(hono, inThreadReports(store), (headers) => {
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
