import { mkdirSync } from 'node:fs';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { serve } from '@hono/node-server';
import { Hono } from 'hono';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { pagesRoutes } from '../../proxy/pages/pages.js';
import { launchChromium } from '../support/browser.js';

/**
 * The Usage and Analytics pages in a real browser (Debian's Chromium, driven by playwright-core),
 * against a stand-in for the data APIs that returns fixed numbers and records what it was asked.
 * Screenshots go to .ci/out/ as CI artifacts.
 */

const KEY = 'sk-ui-test-key';
const OUT = fileURLToPath(new URL('../../.ci/out/', import.meta.url));

// Bucket times inside the pages' default range (the last 24 hours), on the hour as the API sends them.
const HOUR = 3_600_000;
const hourAgo = (n: number) => new Date(Math.floor(Date.now() / HOUR) * HOUR - n * HOUR).toISOString();

const USAGE = {
  granularity: 'hour',
  groupBy: 'model',
  totals: {
    requests: 10,
    undeliveredRequests: 3,
    inputTokens: 1200,
    outputTokens: 845,
    costUsd: 0.0123,
    actualCostUsd: 0.0107,
    savingsUsd: 0.0045,
    routingSavingsUsd: 0.0312,
    routedRequests: 4,
    escalationRate: 0.25,
  },
  series: [
    {
      time: hourAgo(22),
      group: 'llama3.1:8b',
      requests: 2,
      inputTokens: 200,
      outputTokens: 150,
      costUsd: 0.0011,
      savingsUsd: 0.001,
    },
    {
      time: hourAgo(14),
      group: 'llama3.1:8b',
      requests: 1,
      inputTokens: 100,
      outputTokens: 95,
      costUsd: 0.0009,
      savingsUsd: 0.0015,
    },
    {
      time: hourAgo(14),
      group: 'claude-3-haiku',
      requests: 4,
      inputTokens: 500,
      outputTokens: 300,
      costUsd: 0.006,
      savingsUsd: 0,
    },
    {
      time: hourAgo(5),
      group: 'claude-3-haiku',
      requests: 3,
      inputTokens: 400,
      outputTokens: 300,
      costUsd: 0.0043,
      savingsUsd: 0.002,
    },
  ],
  groups: [
    {
      group: 'claude-3-haiku',
      requests: 7,
      inputTokens: 900,
      outputTokens: 600,
      costUsd: 0.0103,
      actualCostUsd: 0.0103,
      savingsUsd: 0.002,
      routingSavingsUsd: 0,
      routedRequests: 1,
      escalationRate: 0,
    },
    {
      group: 'llama3.1:8b',
      requests: 3,
      inputTokens: 300,
      outputTokens: 245,
      costUsd: 0.002,
      actualCostUsd: 0.0004,
      savingsUsd: 0.0025,
      routingSavingsUsd: 0.0312,
      routedRequests: 3,
      escalationRate: 1 / 3,
    },
  ],
  deployments: [
    {
      deployment: 'platform-llms/llama',
      model: 'llama3.1:8b',
      gpuSeconds: 5400,
      gpuCostUsd: 0.0031,
      idleCostUsd: 0.0027,
    },
  ],
};

const u = (requests: number) => ({
  requests,
  inputTokens: requests * 10,
  outputTokens: requests * 5,
  costUsd: 0,
  actualCostUsd: 0,
  savingsUsd: 0,
  routingSavingsUsd: 0,
});
const BY_ENDPOINT = {
  granularity: 'hour',
  groupBy: 'endpoint',
  totals: u(10),
  series: [
    { time: hourAgo(2), group: 'messages', ...u(6) },
    { time: hourAgo(2), group: 'responses', ...u(3) },
    { time: hourAgo(3), group: '', ...u(1) },
  ],
  groups: [
    { group: 'messages', ...u(6) },
    { group: 'responses', ...u(3) },
    { group: '', ...u(1) },
  ],
};

const lat = (p50: number, p95: number, p99: number) => ({ p50, p95, p99 });
const ANALYTICS = {
  granularity: 'hour',
  groupBy: 'team',
  totals: {
    requests: 10,
    undeliveredRequests: 2,
    errors: 1,
    errorRate: 0.1,
    costUsd: 0.0012,
    actualCostUsd: 0.001,
    latencyMs: lat(120, 400, 900),
    routedRequests: 4,
    escalationRate: 0.25,
  },
  series: [
    {
      time: hourAgo(22),
      group: 'ml',
      requests: 3,
      errors: 0,
      errorRate: 0,
      costUsd: 0.0004,
      latencyMs: lat(100, 300, 300),
    },
    {
      time: hourAgo(10),
      group: 'ml',
      requests: 4,
      errors: 1,
      errorRate: 0.25,
      costUsd: 0.0005,
      latencyMs: lat(140, 450, 900),
    },
    {
      time: hourAgo(10),
      group: 'search',
      requests: 3,
      errors: 0,
      errorRate: 0,
      costUsd: 0.0003,
      latencyMs: lat(110, 380, 420),
    },
  ],
  groups: [
    {
      group: 'ml',
      requests: 7,
      errors: 1,
      errorRate: 1 / 7,
      costUsd: 0.0009,
      actualCostUsd: 0.0007,
      latencyMs: lat(125, 430, 900),
      routedRequests: 3,
      escalationRate: 1 / 3,
    },
    {
      group: 'search',
      requests: 3,
      errors: 0,
      errorRate: 0,
      costUsd: 0.0003,
      actualCostUsd: 0.0003,
      latencyMs: lat(110, 380, 420),
      routedRequests: 1,
      escalationRate: 0,
    },
  ],
};

/** Requests routed by a RoutingPolicy by served model, as /v1/usage/routing answers. */
const ROUTING = {
  granularity: 'hour',
  groupBy: 'model',
  totals: {
    routedRequests: 4,
    escalatedRequests: 1,
    escalationRate: 0.25,
    share: 1,
    routedCostUsd: 0.0021,
    counterfactualCostUsd: 0.0333,
    routingSavingsUsd: 0.0312,
  },
  series: [],
  groups: [
    {
      group: 'llama3.1:8b',
      routedRequests: 3,
      escalatedRequests: 1,
      escalationRate: 1 / 3,
      share: 0.75,
      routedCostUsd: 0.0008,
      counterfactualCostUsd: 0.032,
      routingSavingsUsd: 0.0312,
    },
    {
      group: 'claude-3-haiku',
      routedRequests: 1,
      escalatedRequests: 0,
      escalationRate: 0,
      share: 0.25,
      routedCostUsd: 0.0013,
      counterfactualCostUsd: 0.0013,
      routingSavingsUsd: 0,
    },
  ],
  otherGroups: 0,
};

/** Tool calls through /mcp by server and tool, as /v1/usage/tools answers. */
const TOOLS = {
  granularity: 'hour',
  groupBy: 'tool',
  totals: { calls: 12, errors: 1, errorRate: 1 / 12, latencyMs: lat(30, 250, 250), bytesIn: 3584, bytesOut: 1_572_864 },
  series: [],
  groups: [
    {
      server: 'everything',
      tool: 'echo',
      calls: 9,
      errors: 0,
      errorRate: 0,
      latencyMs: lat(25, 50, 50),
      bytesIn: 2048,
      bytesOut: 1_572_000,
    },
    {
      server: 'memory',
      tool: 'read_graph',
      calls: 3,
      errors: 1,
      errorRate: 1 / 3,
      latencyMs: lat(100, 250, 250),
      bytesIn: 1536,
      bytesOut: 864,
    },
  ],
  otherGroups: 0,
};

const TAGS = {
  data: [
    { key: 'team', value: 'ml', requests: 12 },
    { key: 'team', value: 'search', requests: 3 },
  ],
};

interface Seen {
  path: string;
  query: URLSearchParams;
  authorization: string | undefined;
}

/** The test's own stand-in for the data APIs: fixed answers, 401 in the gateway's error shape for a wrong key. */
function fakeApi(seen: Seen[]): Hono {
  const api = new Hono();
  api.use('/v1/*', async (c, next) => {
    const authorization = c.req.header('authorization');
    seen.push({ path: c.req.path, query: new URL(c.req.url).searchParams, authorization });
    if (authorization !== `Bearer ${KEY}`) {
      return c.json(
        { error: { message: 'invalid API key', type: 'authentication_error', param: null, code: 'invalid_api_key' } },
        401,
      );
    }
    await next();
  });
  const range = (c: { req: { query: (k: string) => string | undefined } }) => ({
    from: c.req.query('from'),
    to: c.req.query('to'),
  });
  api.get('/v1/usage', (c) =>
    c.json({ ...range(c), ...(c.req.query('groupBy') === 'endpoint' ? BY_ENDPOINT : USAGE) }),
  );
  api.get('/v1/analytics', (c) => c.json({ ...range(c), ...ANALYTICS }));
  // The tag tools:down makes the tool report fail while the model reports answer.
  api.get('/v1/usage/tools', (c) =>
    c.req.query('tag') === 'tools:down'
      ? c.json({ error: { message: 'tool report down', type: 'api_error', param: null, code: null } }, 503)
      : c.json({ ...range(c), ...TOOLS }),
  );
  // The tag routing:down makes the routing report fail while the others answer.
  api.get('/v1/usage/routing', (c) =>
    c.req.query('tag') === 'routing:down'
      ? c.json({ error: { message: 'routing report down', type: 'api_error', param: null, code: null } }, 503)
      : c.json({ ...range(c), ...ROUTING }),
  );
  api.get('/v1/tags', (c) => c.json(TAGS));
  return api;
}

let server: Server;
let base = '';
let browser: Browser;
const seen: Seen[] = [];

beforeAll(async () => {
  mkdirSync(OUT, { recursive: true });
  const app = new Hono();
  app.route('/', pagesRoutes());
  app.route('/', fakeApi(seen));
  await new Promise<void>((resolve) => {
    server = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, (info: AddressInfo) => {
      base = `http://127.0.0.1:${info.port}`;
      resolve();
    }) as Server;
  });
  browser = await launchChromium();
}, 30_000);

afterAll(async () => {
  await browser?.close();
  server?.close();
});

beforeEach(() => {
  seen.length = 0;
});

const contexts: BrowserContext[] = [];
afterAll(async () => {
  for (const c of contexts) await c.close();
});

/** Every URL the page asked for, to prove nothing left this server (no CDN), and its script or CSP errors. */
const requests = new WeakMap<Page, { urls: string[]; errors: string[] }>();

/** A fresh tab (fresh sessionStorage) with fixed locale and zone, recording every request it makes. */
async function openPage(path: string): Promise<Page> {
  const context = await browser.newContext({
    locale: 'en-US',
    timezoneId: 'UTC',
    viewport: { width: 1280, height: 900 },
  });
  contexts.push(context);
  const page = await context.newPage();
  const log = { urls: [] as string[], errors: [] as string[] };
  requests.set(page, log);
  page.on('request', (r) => log.urls.push(r.url()));
  page.on('pageerror', (e) => log.errors.push(e.message));
  page.on('console', (m) => {
    // A refused fetch logs a console error by itself; only script and CSP errors are page errors.
    if (m.type() === 'error' && !m.text().startsWith('Failed to load resource')) log.errors.push(m.text());
  });
  await page.goto(`${base}${path}`);
  return page;
}

const text = (page: Page, testId: string) => page.getByTestId(testId).textContent();

async function tableRows(page: Page): Promise<string[][]> {
  return page
    .getByTestId('group-table')
    .locator('tbody tr')
    .evaluateAll((rows) => rows.map((r) => [...r.children].map((c) => (c.textContent ?? '').trim())));
}

/** The Tools table's rows, body then footer (the total). */
async function toolRows(page: Page): Promise<string[][]> {
  return page
    .getByTestId('tool-table')
    .locator('tbody tr, tfoot tr')
    .evaluateAll((rows) => rows.map((r) => [...r.children].map((c) => (c.textContent ?? '').trim())));
}

/** The Routing table's rows, body then footer (the total). */
async function routingRows(page: Page): Promise<string[][]> {
  return page
    .getByTestId('routing-table')
    .locator('tbody tr, tfoot tr')
    .evaluateAll((rows) => rows.map((r) => [...r.children].map((c) => (c.textContent ?? '').trim())));
}

const ROUTING_ROWS = [
  ['llama3.1:8b', '3', '75.00%', '33.33%', '$0.0008', '$0.0312'],
  ['claude-3-haiku', '1', '25.00%', '0.00%', '$0.0013', '$0.0000'],
  ['Total', '4', '100.00%', '25.00%', '$0.0021', '$0.0312'],
];

const TOOL_ROWS = [
  ['everything', 'echo', '9', '0', '0.00%', '25 ms', '50 ms', '2 KiB', '1.5 MiB'],
  ['memory', 'read_graph', '3', '1', '33.33%', '100 ms', '250 ms', '1.5 KiB', '864 B'],
  ['Total', '', '12', '1', '8.33%', '30 ms', '250 ms', '3.5 KiB', '1.5 MiB'],
];

/** The page loaded its script and the chart library from this server and asked no other host. */
function expectOnlyThisServer(page: Page): void {
  const log = requests.get(page);
  if (!log) throw new Error('page not opened with openPage');
  expect(log.urls.some((u) => u.endsWith('/ui/assets/uPlot.esm.js'))).toBe(true);
  expect(log.urls.some((u) => u.endsWith('/ui/assets/app.js'))).toBe(true);
  expect([...new Set(log.urls.map((u) => new URL(u).origin))]).toEqual([base]);
  expect(log.errors).toEqual([]);
}

function last(path: string): Seen {
  const hit = seen.filter((s) => s.path === path).at(-1);
  if (!hit) throw new Error(`the fake API got no request for ${path}; it got ${seen.map((s) => s.path).join(', ')}`);
  return hit;
}

describe('UI pages', () => {
  it('usage: totals, table, chart and tag suggestions from the API, with the key and the tag filter sent', async () => {
    const page = await openPage('/ui/usage');
    await page.getByTestId('api-key').fill(KEY);

    // Suggestions for the word being typed come from /v1/tags.
    await page.getByTestId('tag-filter').fill('te');
    await expect.poll(() => seen.some((s) => s.path === '/v1/tags' && s.query.get('search') === 'te')).toBe(true);
    expect(last('/v1/tags').authorization).toBe(`Bearer ${KEY}`);
    await expect
      .poll(() => page.locator('#tag-suggestions option').evaluateAll((os) => os.map((o) => o.getAttribute('value'))))
      .toEqual(['team:ml', 'team:search']);

    await page.getByLabel('Tags').fill('team:ml');
    await page.getByTestId('apply').click();
    await expect.poll(() => text(page, 'total-requests')).toBe('10');

    expect(await text(page, 'total-input-tokens')).toBe('1,200');
    expect(await text(page, 'total-output-tokens')).toBe('845');
    expect(await text(page, 'total-cost')).toBe('$0.0123');
    expect(await text(page, 'total-savings')).toBe('$0.0045');
    expect(await text(page, 'total-actual-cost')).toBe('$0.0107');
    // Routing savings beside the free credits' (never added to them), routed requests and their escalations.
    expect(await text(page, 'total-routing-savings')).toBe('$0.0312');
    expect(await text(page, 'total-routed')).toBe('4');
    expect(await text(page, 'total-escalation-rate')).toBe('25.00%');
    // Answers that never reached their callers, beside the served requests (not among them).
    expect(await text(page, 'total-undelivered')).toBe('3');
    expect(await tableRows(page)).toEqual([
      ['claude-3-haiku', '7', '900', '600', '$0.0103', '$0.0103', '$0.0020', '$0.0000'],
      ['llama3.1:8b', '3', '300', '245', '$0.0020', '$0.0004', '$0.0025', '$0.0312'],
    ]);
    // The in-cluster deployments' GPU time: what the platform paid, and the part no request used.
    expect(
      await page
        .getByTestId('deployment-table')
        .locator('tbody tr')
        .evaluateAll((rows) => rows.map((r) => [...r.children].map((c) => (c.textContent ?? '').trim()))),
    ).toEqual([['platform-llms/llama', 'llama3.1:8b', '1.50 h', '$0.0031', '$0.0027']]);
    expect(await page.locator('#deployments-empty').isVisible()).toBe(false);
    await expect.poll(() => page.getByTestId('error').isVisible()).toBe(false);
    // Tool calls by MCP server and tool, with the same window and tags, under the model figures.
    await expect.poll(() => toolRows(page)).toEqual(TOOL_ROWS);
    expect(await page.getByTestId('tools-empty').isVisible()).toBe(false);
    expect(last('/v1/usage/tools').query.getAll('tag')).toEqual(['team:ml']);
    // Each served model's share of the routed requests and its escalation rate, same window and tags.
    await expect.poll(() => routingRows(page)).toEqual(ROUTING_ROWS);
    expect(await page.getByTestId('routing-empty').isVisible()).toBe(false);
    const routing = last('/v1/usage/routing');
    expect(routing.authorization).toBe(`Bearer ${KEY}`);
    expect(routing.query.get('groupBy')).toBe('model');
    expect(routing.query.getAll('tag')).toEqual(['team:ml']);
    expect(routing.query.get('from')).toBe(last('/v1/usage').query.get('from'));

    const usage = last('/v1/usage');
    expect(usage.authorization).toBe(`Bearer ${KEY}`);
    expect(usage.query.getAll('tag')).toEqual(['team:ml']);
    expect(usage.query.get('groupBy')).toBe('model');
    expect(usage.query.get('granularity')).toBe('hour');
    const from = Date.parse(usage.query.get('from') ?? '');
    const to = Date.parse(usage.query.get('to') ?? '');
    // The last day (to rounded up a minute): an hour's traffic is a visible part of the chart, not an edge.
    expect((to - from) / 86_400_000).toBeCloseTo(1, 2);

    // One line per group, drawn by uPlot; the metric toggle redraws without a new request.
    const chart = page.getByTestId('chart');
    await expect.poll(() => chart.locator('canvas').count()).toBe(1);
    expect(await chart.locator('.u-legend .u-series:not(:first-child) .u-label').allTextContents()).toEqual([
      'claude-3-haiku',
      'llama3.1:8b',
    ]);
    expect(await chart.getAttribute('aria-label')).toBe('Cost (USD) over time, one line per model');
    const usageCalls = () => seen.filter((s) => s.path === '/v1/usage').length;
    const before = usageCalls();
    await page.getByLabel('Requests', { exact: true }).check();
    await expect.poll(() => chart.getAttribute('aria-label')).toBe('Requests over time, one line per model');
    expect(await chart.locator('canvas').count()).toBe(1);
    expect(usageCalls()).toBe(before);
    await page.getByLabel('Cost (USD)', { exact: true }).check();

    // Several tags are ANDed: one repeated tag= each, commas or spaces between them.
    await page.getByTestId('tag-filter').fill('team:ml, project:x  env:prod');
    await page.getByTestId('apply').click();
    await expect.poll(() => last('/v1/usage').query.getAll('tag')).toEqual(['team:ml', 'project:x', 'env:prod']);
    await page.getByTestId('tag-filter').fill('team:ml');
    await page.getByTestId('apply').click();
    await expect.poll(() => last('/v1/usage').query.getAll('tag')).toEqual(['team:ml']);
    await expect.poll(() => text(page, 'total-requests')).toBe('10');

    await page.screenshot({ path: `${OUT}ui-usage.png`, fullPage: true });
    expectOnlyThisServer(page);
  });

  it('analytics: keeps the key and filters from Usage, groups by a tag key, shows errors and latency', async () => {
    const page = await openPage('/ui/usage');
    await page.getByTestId('api-key').fill(KEY);
    await page.getByTestId('tag-filter').fill('team:ml');
    await page.getByTestId('apply').click();
    await expect.poll(() => text(page, 'total-requests')).toBe('10');

    await page.getByRole('link', { name: 'Analytics' }).click();
    await page.waitForURL(/\/ui\/analytics\?/);
    // Same tab: the key is still in sessionStorage and the filters came along in the URL.
    expect(await page.getByTestId('api-key').inputValue()).toBe(KEY);
    expect(await page.getByTestId('tag-filter').inputValue()).toBe('team:ml');

    await page.getByLabel('Group by').selectOption('tag');
    await page.getByLabel('Tag key').fill('team');
    await page.getByTestId('apply').click();
    await expect.poll(() => last('/v1/analytics').query.get('groupBy')).toBe('team');

    await expect.poll(() => text(page, 'total-error-rate')).toBe('10.00%');
    expect(await text(page, 'total-undelivered')).toBe('2');
    expect(await text(page, 'total-cost')).toBe('$0.0012');
    expect(await text(page, 'total-requests')).toBe('10');
    expect(await text(page, 'latency-p50')).toBe('120 ms');
    expect(await text(page, 'latency-p95')).toBe('400 ms');
    expect(await text(page, 'latency-p99')).toBe('900 ms');
    expect(await text(page, 'total-actual-cost')).toBe('$0.0010');
    expect(await text(page, 'total-escalation-rate')).toBe('25.00%');
    expect(await tableRows(page)).toEqual([
      ['ml', '7', '14.29%', '$0.0009', '$0.0007', '125 ms', '430 ms', '900 ms', '3', '33.33%'],
      ['search', '3', '0.00%', '$0.0003', '$0.0003', '110 ms', '380 ms', '420 ms', '1', '0.00%'],
    ]);
    await expect.poll(() => routingRows(page)).toEqual(ROUTING_ROWS);
    // Analytics has no GPU time table.
    expect(await page.getByTestId('deployment-table').count()).toBe(0);
    expect(await page.locator('#group-head').textContent()).toBe('Tag team');

    const analytics = last('/v1/analytics');
    expect(analytics.authorization).toBe(`Bearer ${KEY}`);
    expect(analytics.query.getAll('tag')).toEqual(['team:ml']);

    const chart = page.getByTestId('chart');
    await expect
      .poll(() => chart.locator('.u-legend .u-series:not(:first-child) .u-label').allTextContents())
      .toEqual(['ml', 'search']);
    await page.getByLabel('Latency p95', { exact: true }).check();
    await expect.poll(() => chart.getAttribute('aria-label')).toBe('Latency p95 over time, one line per tag team');
    expect(await chart.locator('canvas').count()).toBe(1);

    await page.screenshot({ path: `${OUT}ui-analytics.png`, fullPage: true });
    expectOnlyThisServer(page);
  });

  it('usage by endpoint: names every endpoint as users know it, records of before included', async () => {
    const page = await openPage('/ui/usage');
    expect(await page.locator('p.intro').textContent()).toContain(
      'every endpoint (chat completions, completions, embeddings, Responses and Anthropic Messages)',
    );
    await page.getByTestId('api-key').fill(KEY);
    await page.getByLabel('Group by').selectOption('endpoint');
    await page.getByTestId('apply').click();
    await expect.poll(() => last('/v1/usage').query.get('groupBy')).toBe('endpoint');
    await expect
      .poll(() => tableRows(page))
      .toEqual([
        ['Anthropic Messages', '6', '60', '30', '$0.0000', '$0.0000', '$0.0000', '$0.0000'],
        ['Responses', '3', '30', '15', '$0.0000', '$0.0000', '$0.0000', '$0.0000'],
        ['(not recorded)', '1', '10', '5', '$0.0000', '$0.0000', '$0.0000', '$0.0000'],
      ]);
    expect(await page.locator('#group-head').textContent()).toBe('Endpoint');
    // The view is in the URL: opened again, it groups by endpoint.
    const again = await openPage(`/ui/usage?${new URL(page.url()).searchParams}`);
    expect(await again.getByLabel('Group by').inputValue()).toBe('endpoint');
    expectOnlyThisServer(page);
  });

  it('tools and routing on Analytics too; a failing tool or routing report leaves the rest of the page alone', async () => {
    const page = await openPage('/ui/analytics');
    await page.getByTestId('api-key').fill(KEY);
    await page.getByTestId('apply').click();
    await expect.poll(() => toolRows(page)).toEqual(TOOL_ROWS);
    const tools = last('/v1/usage/tools');
    expect(tools.authorization).toBe(`Bearer ${KEY}`);
    expect(tools.query.get('granularity')).toBe('hour');
    // Same window as the model report.
    expect(tools.query.get('from')).toBe(last('/v1/analytics').query.get('from'));
    expect(tools.query.get('to')).toBe(last('/v1/analytics').query.get('to'));
    await page.screenshot({ path: `${OUT}ui-tools.png`, fullPage: true });

    await page.getByTestId('tag-filter').fill('tools:down');
    await page.getByTestId('apply').click();
    await expect
      .poll(() => page.getByTestId('tools-empty').textContent())
      .toBe('No tool report: /v1/usage/tools failed (HTTP 503): tool report down');
    expect(await toolRows(page)).toEqual([]);
    expect(await text(page, 'total-requests')).toBe('10');
    expect(await page.getByTestId('error').isVisible()).toBe(false);

    // A failing routing report empties its own table only.
    await page.getByTestId('tag-filter').fill('routing:down');
    await page.getByTestId('apply').click();
    await expect
      .poll(() => page.getByTestId('routing-empty').textContent())
      .toBe('No routing report: /v1/usage/routing failed (HTTP 503): routing report down');
    expect(await routingRows(page)).toEqual([]);
    await expect.poll(() => toolRows(page)).toEqual(TOOL_ROWS);
    expect(await text(page, 'total-requests')).toBe('10');
    expect(await page.getByTestId('error').isVisible()).toBe(false);
    expectOnlyThisServer(page);
  });

  it("shows the API's error message in the alert, and a malformed tag before any request", async () => {
    const page = await openPage('/ui/usage');
    const alert = page.getByRole('alert');

    await page.getByTestId('api-key').fill('sk-wrong');
    await page.getByTestId('apply').click();
    await expect.poll(() => alert.isVisible()).toBe(true);
    expect(await alert.textContent()).toBe('/v1/usage failed (HTTP 401): invalid API key');
    expect(await page.getByTestId('error').textContent()).toContain('invalid API key');
    expect(await text(page, 'total-requests')).toBe('–');
    expect(await page.getByTestId('tools-empty').textContent()).toBe('No data: see the error above.');
    expect(await toolRows(page)).toEqual([]);
    expect(await page.getByTestId('routing-empty').textContent()).toBe('No data: see the error above.');
    expect(await routingRows(page)).toEqual([]);
    expect(last('/v1/usage').authorization).toBe('Bearer sk-wrong');
    await page.screenshot({ path: `${OUT}ui-error.png` });

    const usageCalls = () => seen.filter((s) => s.path === '/v1/usage').length;
    const before = usageCalls();
    await page.getByTestId('api-key').fill(KEY);
    await page.getByTestId('tag-filter').fill('team');
    await page.getByTestId('apply').click();
    await expect.poll(() => alert.textContent()).toBe('Tag "team" is not of the form key:value.');
    expect(usageCalls()).toBe(before);

    await page.getByTestId('tag-filter').fill('team:ml');
    await page.getByTestId('apply').click();
    await expect.poll(() => text(page, 'total-requests')).toBe('10');
    expect(await alert.isVisible()).toBe(false);
    expectOnlyThisServer(page);
  });
});
