import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ApiKey, ApiKeySpec } from '../../crds/api-key.js';
import type { ModelDeployment } from '../../crds/model-deployment.js';
import { type OllamaDouble, startOllamaDouble } from '../../e2e/doubles/ollama.js';
import { startGateway, type TestGateway } from '../../e2e/support/gateway.js';
import { buildRoutes, RouteTable } from '../serving/routes.js';
import { ProxyMetrics } from '../telemetry/metrics.js';
import { OpenAICompatibleUpstream } from '../upstreams/openai-compatible.js';
import type { UsageRecord } from '../usage/record.js';
import { inThreadReports } from '../usage/reports.js';
import { SqliteUsageStore } from '../usage/sqlite-store.js';
import { ApiKeys, policyOf, sha256, standaloneKeys } from './auth.js';
import { BudgetGuard } from './budgets.js';

/**
 * Two teams on one gateway, through the app: each key's enforced tags, model allow-list,
 * expiry, own rate, budget, and reads scoped to its team. Records go straight into a real
 * SQLite store so the reads are what a caller would get.
 */

const ML = 'sk-ml-team-key-0000000000000000000000000000';
const WEB = 'sk-web-team-key-000000000000000000000000000';
const ADMIN = 'sk-admin-key-00000000000000000000000000000';
const OLD = 'sk-legacy-key';

function apiKey(name: string, key: string, spec: Partial<ApiKeySpec>): ApiKey {
  return {
    apiVersion: 'ai.platform/v1beta1',
    kind: 'ApiKey',
    metadata: { name, namespace: 'platform-agent' },
    spec: { team: 'ml', role: 'User', rotation: 0, ...spec },
    status: { digest: `sha256:${sha256(key).toString('hex')}` },
  };
}

function md(name: string, model: string, endpoint: string): ModelDeployment {
  return {
    apiVersion: 'ai.platform/v1beta1',
    kind: 'ModelDeployment',
    metadata: { name, namespace: 'platform-llms' },
    spec: { model, serviceName: name, port: 11434, replicas: 1, endpoint },
  };
}

let double: OllamaDouble;
let store: SqliteUsageStore;
let gateway: TestGateway;
let app: TestGateway;
let keys: ApiKeys;
let budgets: BudgetGuard;
let metrics: ProxyMetrics;
// The budgets' clock starts at the real time, to the second: the gateway stamps its records with
// the real time, and a budget counts the records of its own period. The month's end is the reset.
const started = new Date();
const NEXT_MONTH = Date.UTC(started.getUTCFullYear(), started.getUTCMonth() + 1, 1);
let now = Math.floor(started.getTime() / 1000) * 1000;

beforeAll(async () => {
  double = await startOllamaDouble();
  store = new SqliteUsageStore(':memory:');
  keys = ApiKeys.fromKeys([OLD]);
  keys.setManaged(
    [
      apiKey('ml-team', ML, {
        team: 'ml',
        tags: { 'cost-center': '42' },
        models: ['llama3.1:8b'],
        rateLimit: { requestsPerSecond: 0.001, burst: 4 },
        budget: { usd: 1, period: 'Monthly' },
      }),
      apiKey('web-team', WEB, { team: 'web' }),
      apiKey('admin', ADMIN, { team: 'platform', role: 'Admin' }),
      apiKey('gone', 'sk-expired', { team: 'web', expiresAt: '2026-11-01T00:00:00Z' }),
      { ...apiKey('pending', 'sk-pending', { team: 'web' }), status: {} },
    ].flatMap((ak) => policyOf(ak) ?? []),
  );
  const routes = new RouteTable();
  routes.set(
    buildRoutes([md('llama', 'llama3.1:8b', double.url), md('qwen', 'qwen2.5:0.5b', double.url)], {
      standalone: true,
    }),
  );
  metrics = new ProxyMetrics();
  budgets = new BudgetGuard(store, () => keys.policies(), { now: () => now });
  budgets.setTagBudgets([{ name: 'web-monthly', tag: { key: 'team', value: 'web' }, usd: 0.005, period: 'Monthly' }]);
  gateway = await startGateway(
    {},
    {
      keys,
      routes,
      inCluster: new OpenAICompatibleUpstream(),
      // Straight into the store, so reads see every record at once.
      usage: { record: (r: UsageRecord) => void store.insert([r]).then(() => budgets.written([r])) },
      reports: inThreadReports(store),
      metrics,
      budgets,
    },
  );
  app = gateway;
});

afterAll(async () => {
  await gateway.stop();
  await double.close();
  await store.close();
});

const chat = (key: string, body: Record<string, unknown>, headers: Record<string, string> = {}) =>
  app.request('/openai/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': key, ...headers },
    body: JSON.stringify({ messages: [{ role: 'user', content: 'hi' }], ...body }),
  });
const get = (key: string, path: string) => app.request(path, { headers: { 'x-api-key': key } });
const errorOf = async (res: Response) => ((await res.json()) as { error: { code: string; message: string } }).error;

describe('ApiKeys on one gateway', () => {
  it("apply the key's team and tags to every request, and refuse another team's tag naming it", async () => {
    const ok = await chat(ML, { model: 'llama3.1:8b' }, { 'x-tags': 'project:atlas' });
    expect(ok.status).toBe(200);
    const refused = await chat(ML, { model: 'llama3.1:8b' }, { 'x-tags': 'team:web' });
    expect(refused.status).toBe(400);
    const e = await errorOf(refused);
    expect(e.code).toBe('tag_not_allowed');
    expect(e.message).toContain('"team:web"');
    expect(e.message).toContain('team:ml');
    const same = await chat(ML, { model: 'llama3.1:8b', tags: ['team:ml', 'cost-center:42'] });
    expect(same.status).toBe(200);
    // The platform team's Admin key may attribute a request to any team.
    expect((await chat(ADMIN, { model: 'llama3.1:8b' }, { 'x-tags': 'team:web' })).status).toBe(200);
    const tags = await (await get(ADMIN, '/v1/tags?search=')).json();
    expect((tags as { data: Array<{ key: string; value: string }> }).data.map((t) => `${t.key}:${t.value}`)).toEqual(
      expect.arrayContaining(['team:ml', 'cost-center:42', 'project:atlas']),
    );
  });

  it('list and allow only the models of the allow-list', async () => {
    const listed = (await (await get(ML, '/openai/v1/models')).json()) as { data: Array<{ id: string }> };
    expect(listed.data.map((m) => m.id)).toEqual(['llama3.1:8b']);
    const all = (await (await get(WEB, '/openai/v1/models')).json()) as { data: Array<{ id: string }> };
    expect(all.data.map((m) => m.id).sort()).toEqual(['llama3.1:8b', 'qwen2.5:0.5b']);
    const denied = await chat(ML, { model: 'qwen2.5:0.5b' });
    expect(denied.status).toBe(403);
    expect((await errorOf(denied)).code).toBe('model_not_allowed');
    expect((await get(ML, '/openai/v1/models/qwen2.5:0.5b')).status).toBe(404);
  });

  it('refuse an expired key, and a key the operator has not issued yet', async () => {
    const expired = await chat('sk-expired', { model: 'llama3.1:8b' });
    expect(expired.status).toBe(401);
    expect((await errorOf(expired)).code).toBe('expired_api_key');
    expect((await chat('sk-pending', { model: 'llama3.1:8b' })).status).toBe(401);
  });

  it("let a User read its own team's usage and tags only, an Admin everyone's", async () => {
    await chat(WEB, { model: 'qwen2.5:0.5b' }, { 'x-tags': 'project:web-shop' });
    const q = '/v1/usage?from=2026-01-01T00:00:00Z&to=2027-01-01T00:00:00Z&groupBy=team';
    const groups = async (key: string) =>
      ((await (await get(key, q)).json()) as { groups: Array<{ group: string }> }).groups.map((g) => g.group).sort();
    expect(await groups(ML)).toEqual(['ml']);
    expect(await groups(WEB)).toEqual(['web']);
    expect(await groups(ADMIN)).toEqual(['ml', 'web']);
    // A key of the keys file (no ApiKey) reads everything, as before ApiKeys.
    expect(await groups(OLD)).toEqual(['ml', 'web']);
    const webTags = (await (await get(WEB, '/v1/tags?search=project')).json()) as { data: Array<{ value: string }> };
    expect(webTags.data.map((t) => t.value)).toEqual(['web-shop']);
    const analytics = await get(ML, '/v1/analytics?from=2026-01-01T00:00:00Z&to=2027-01-01T00:00:00Z&tag=team:web');
    expect(((await analytics.json()) as { totals: { requests: number } }).totals.requests).toBe(0);
  });

  it('limit a key at its own rate, by name (other keys unaffected)', async () => {
    // ml-team: burst 4, refilling once in 1000 s; the tests before used 4 (the 400 and 403 count too).
    const limited = await chat(ML, { model: 'llama3.1:8b' });
    expect(limited.status).toBe(429);
    expect((await errorOf(limited)).code).toBe('rate_limit_exceeded');
    expect((await chat(WEB, { model: 'llama3.1:8b' })).status).toBe(200);
  });

  it('refuse with 429 insufficient_quota once a budget is spent, Retry-After at the reset', async () => {
    // team:web may spend 0.005 USD a month; the double's answers are priced by the catalog.
    await budgets.refresh();
    let served = 0;
    while (served < 200 && budgets.spent('tag:team:web', 'Monthly') < 0.005) {
      expect((await chat(WEB, { model: 'llama3.1:8b' })).status).toBe(200);
      served++;
      // What the 2 s refresh does in production: the store's figure again.
      await new Promise((r) => setTimeout(r, 5));
      await budgets.refresh();
    }
    expect(budgets.spent('tag:team:web', 'Monthly')).toBeGreaterThanOrEqual(0.005);
    const refused = await chat(WEB, { model: 'llama3.1:8b' });
    expect(refused.status).toBe(429);
    expect(await errorOf(refused)).toMatchObject({ code: 'insufficient_quota', type: 'insufficient_quota' });
    expect(Number(refused.headers.get('retry-after'))).toBe((NEXT_MONTH - now) / 1000);
    // As the official SDK surfaces it: a RateLimitError whose code is insufficient_quota.
    const client = new OpenAI({
      baseURL: `${gateway.url}/openai/v1`,
      apiKey: WEB,
      maxRetries: 0,
    });
    const sdkError = await client.chat.completions
      .create({ model: 'llama3.1:8b', messages: [{ role: 'user', content: 'hi' }] })
      .catch((err: unknown) => err);
    expect(sdkError).toBeInstanceOf(OpenAI.RateLimitError);
    expect(sdkError).toMatchObject({ status: 429, code: 'insufficient_quota', type: 'insufficient_quota' });
    // The admin key is not tagged team:web: unaffected.
    expect((await chat(ADMIN, { model: 'llama3.1:8b' })).status).toBe(200);
    // The store agrees after a refresh; a new month starts from zero.
    await budgets.refresh();
    expect(budgets.spent('tag:team:web', 'Monthly')).toBeGreaterThanOrEqual(0.005);
    now = NEXT_MONTH + 1_000;
    await budgets.refresh();
    expect((await chat(WEB, { model: 'llama3.1:8b' })).status).toBe(200);
    expect(await metrics.registry.getSingleMetricAsString('pao_gateway_budget_exhausted_total')).toContain(
      'scope="tag"',
    );
  });
});

describe('standalone keys', () => {
  it('come from ApiKey documents by digest, or by name=key lines of the keys file', () => {
    const docs = [
      apiKey('by-digest', 'sk-a', { team: 'ml' }),
      { ...apiKey('by-file', 'sk-unused', { team: 'web' }), status: {} },
    ];
    const k = standaloneKeys(docs, '# keys\nby-file=sk-b\nsk-plain\nnobody=sk-c\n');
    expect(k.verify('sk-a')?.policy.team).toBe('ml');
    expect(k.verify('sk-b')?.policy).toMatchObject({ name: 'by-file', team: 'web', role: 'User' });
    expect(k.verify('sk-plain')?.policy).toMatchObject({ name: '', role: 'Admin' });
    // Not an ApiKey's name: the whole line is a key of its own.
    expect(k.verify('nobody=sk-c')?.policy.role).toBe('Admin');
    expect(k.verify('sk-unused')).toBeUndefined();
  });
});
