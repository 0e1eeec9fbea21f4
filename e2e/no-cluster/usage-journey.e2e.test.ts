import { mkdirSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SqliteUsageStore } from '../../proxy/usage/sqlite-store.js';
import { type OllamaDouble, startOllamaDouble } from '../doubles/ollama.js';
import { startPostgres } from '../postgres/server.js';
import { launchChromium } from '../support/browser.js';
import { type ProxyProcess, standaloneFiles, startProxyProcess } from '../support/proxy-process.js';

/**
 * Usage end to end with the real proxy process: tagged traffic shows up in /v1/usage and
 * /v1/analytics with exact token and cost sums, survives a restart, filters by tag, renders
 * in the Usage page in a real browser, and a hard crash loses at most the recorder's last
 * flush interval.
 */

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const KEY = 'sk-usage-journey';
// llama3.2:3b on Ollama at its 4 default slots: T4 at $0.526/h generating 142 tokens/s -> $1.0290
// per 1M tokens (crds/catalog/models.yaml).
const PER_TOKEN = 1.029 / 1_000_000;
let double: OllamaDouble;
let dir: string;

/** The flags naming the standalone config and keys files. */
let files: string[] = [];

const startProxy = (usageDb = join(dir, 'usage.db')) => startProxyProcess([...files, '--usage-db', usageDb]);

const chat = (base: string, tags: string, content: string) =>
  fetch(`${base}/openai/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': KEY, 'x-tags': tags },
    body: JSON.stringify({ model: 'llama3.2:3b', messages: [{ role: 'user', content }] }),
  });

const get = async <T>(base: string, path: string): Promise<T> => {
  const res = await fetch(`${base}${path}`, { headers: { authorization: `Bearer ${KEY}` } });
  expect(res.status).toBe(200);
  return (await res.json()) as T;
};

interface UsageBody {
  totals: { requests: number; inputTokens: number; outputTokens: number; costUsd: number };
  groups: Array<{ group: string; requests: number }>;
}

beforeAll(async () => {
  double = await startOllamaDouble({ models: ['llama3.2:3b'] });
  dir = mkdtempSync(join(tmpdir(), 'usage-journey-'));
  files = standaloneFiles(
    dir,
    [
      `apiVersion: ai.platform/v1beta1\nkind: ModelDeployment\nmetadata: {name: local}\nspec: {model: "llama3.2:3b", serviceName: local, endpoint: "${double.url}"}\n`,
    ],
    `${KEY}\n`,
  );
});

afterAll(async () => {
  await double.close();
});

/** The report APIs over one usage store through the proxy process: exact sums, by tag, after a restart. */
async function reportsExactly(usageDb: string): Promise<ProxyProcess> {
  let proxy = await startProxy(usageDb);
  // 3 requests of team:ml (prompts of 2, 3 and 4 words), 2 of team:web; 8 completion tokens each.
  for (const [tags, content] of [
    ['team:ml,project:chat', 'one two'],
    ['team:ml,project:search', 'one two three'],
    ['team:ml,project:chat', 'one two three four'],
    ['team:web', 'a b'],
    ['team:web,project:chat', 'a b c d e'],
  ] as const) {
    expect((await chat(proxy.base, tags, content)).status).toBe(200);
  }
  await new Promise((r) => setTimeout(r, 600));
  const ml = await get<UsageBody>(proxy.base, '/v1/usage?tag=team:ml');
  expect(ml.totals).toMatchObject({ requests: 3, inputTokens: 9, outputTokens: 24 });
  expect(ml.totals.costUsd).toBeCloseTo(33 * PER_TOKEN, 9);
  const chatOfMl = await get<UsageBody>(proxy.base, '/v1/usage?tag=team:ml&tag=project:chat');
  expect(chatOfMl.totals).toMatchObject({ requests: 2, inputTokens: 6, outputTokens: 16 });
  const byTeam = await get<UsageBody>(proxy.base, '/v1/usage?groupBy=team');
  expect(byTeam.groups.map((g) => [g.group, g.requests])).toEqual([
    ['ml', 3],
    ['web', 2],
  ]);
  const analytics = await get<{ totals: { requests: number; errorRate: number; latencyMs: { p99: number } } }>(
    proxy.base,
    '/v1/analytics',
  );
  expect(analytics.totals.requests).toBe(5);
  expect(analytics.totals.errorRate).toBe(0);
  expect(analytics.totals.latencyMs.p99).toBeGreaterThan(0);
  const tags = await get<{ data: Array<{ key: string; value: string; requests: number }> }>(
    proxy.base,
    '/v1/tags?search=proj',
  );
  expect(tags.data).toEqual([
    { key: 'project', value: 'chat', requests: 3 },
    { key: 'project', value: 'search', requests: 1 },
  ]);

  await proxy.stop('SIGTERM');
  proxy = await startProxy(usageDb);
  const after = await get<UsageBody>(proxy.base, '/v1/usage');
  expect(after.totals).toMatchObject({ requests: 5, inputTokens: 16, outputTokens: 40 });
  return proxy;
}

describe('usage through the proxy process', () => {
  let proxy: ProxyProcess | undefined;
  afterAll(async () => {
    await proxy?.stop('SIGKILL');
  });

  it('reports tagged traffic with exact sums, by tag, and after a restart (SQLite)', async () => {
    proxy = await reportsExactly(join(dir, 'usage.db'));
  }, 30_000);

  it('reports the same through PostgreSQL', async () => {
    const pg = await startPostgres();
    try {
      const other = await reportsExactly(pg.url);
      await other.stop('SIGTERM');
    } finally {
      await pg.destroy();
    }
  }, 60_000);

  it('shows the same numbers on the Usage page in a real browser', async () => {
    if (!proxy) throw new Error('the proxy of the first test is not running');
    const browser = await launchChromium();
    try {
      const page = await browser.newPage();
      await page.goto(`${proxy.base}/ui/usage`);
      await page.getByTestId('api-key').fill(KEY);
      await page.getByTestId('tag-filter').fill('team:ml');
      await page.getByTestId('apply').click();
      await expect.poll(() => page.getByTestId('total-requests').textContent(), { timeout: 10_000 }).toContain('3');
      expect(await page.getByTestId('total-input-tokens').textContent()).toContain('9');
      expect(await page.getByTestId('total-output-tokens').textContent()).toContain('24');
      mkdirSync(join(ROOT, '.ci/out'), { recursive: true });
      await page.screenshot({ path: join(ROOT, '.ci/out/ui-usage-live.png'), fullPage: true });
    } finally {
      await browser.close();
    }
  }, 60_000);

  it('loses at most the last flush interval of records on a hard crash', async () => {
    if (!proxy) throw new Error('the proxy of the first test is not running');
    const running = proxy;
    const before = new SqliteUsageStore(join(dir, 'usage.db'));
    const stored = await before.count();
    await before.close();
    const sent: number[] = [];
    const until = Date.now() + 1500;
    while (Date.now() < until) {
      if ((await chat(running.base, 'team:crash', 'x')).status === 200) sent.push(Date.now());
    }
    const killedAt = Date.now();
    await running.stop('SIGKILL');
    const store = new SqliteUsageStore(join(dir, 'usage.db'));
    const kept = (await store.count()) - stored;
    await store.close();
    const lost = sent.length - kept;
    // Lost records are the newest ones; they all fall within the last flush interval (250 ms).
    const lostWindowMs = lost > 0 ? killedAt - (sent[sent.length - lost] ?? killedAt) : 0;
    console.log(`[usage] crash: sent ${sent.length}, kept ${kept}, lost ${lost} (newest ${lostWindowMs} ms)`);
    expect(lost).toBeGreaterThanOrEqual(0);
    expect(lostWindowMs).toBeLessThanOrEqual(1000);
  }, 30_000);
});
