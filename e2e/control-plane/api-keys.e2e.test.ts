import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ApiKey } from '../../crds/api-key.js';
import type { Budget } from '../../crds/budget.js';
import { Operator } from '../../operator/operator.js';
import { buildRoutes } from '../../proxy/serving/routes.js';
import { ProxyMetrics } from '../../proxy/telemetry/metrics.js';
import { OpenAICompatibleUpstream } from '../../proxy/upstreams/openai-compatible.js';
import { type OllamaDouble, startOllamaDouble } from '../doubles/ollama.js';
import { capturedLogger } from '../support/capture.js';
import { startGateway, type TestGateway } from '../support/gateway.js';
import { eventually, kubeConfig, kubectl, kubectlOk } from '../support/kube.js';

/**
 * ApiKeys and Budgets on the real control plane: the operator issues a key into its Secret and
 * publishes the digest; the proxy (cluster mode) authenticates from the digest within seconds
 * of every change: create, rotate, expire, delete. The proxy writes spend into status; the
 * operator turns an exhausted budget into a condition and an Event.
 */

const NS = 'platform-agent';
let operator: Operator;
let double: OllamaDouble;
let app: TestGateway;

const apply = (obj: object) => kubectlOk(['apply', '-f', '-'], JSON.stringify(obj));
const get = <T>(kind: string, name: string): T | undefined => {
  const r = kubectl(['get', kind, name, '-n', NS, '-o', 'json']);
  return r.code === 0 ? (JSON.parse(r.stdout) as T) : undefined;
};
const secretKey = (name: string) => {
  const r = kubectl(['get', 'secret', `apikey-${name}`, '-n', NS, '-o', 'jsonpath={.data.key}']);
  return r.code === 0 && r.stdout ? Buffer.from(r.stdout, 'base64').toString('utf8') : undefined;
};
const condition = (
  obj: { status?: { conditions?: Array<{ type: string; status: string }> } } | undefined,
  type: string,
) => obj?.status?.conditions?.find((c) => c.type === type)?.status;
const chat = (key: string, tags = '') =>
  app.request('/openai/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': key, ...(tags ? { 'x-tags': tags } : {}) },
    body: JSON.stringify({ model: 'llama3.1:8b', messages: [{ role: 'user', content: 'hi' }] }),
  });
/**
 * Sends until refused with the proxy's figures settled. Its budget check counts a batch of
 * records written while it re-read the store twice until the next read (erring on the budget's
 * side), so a first 429 can come a request before the store's spend reaches the budget: that one
 * is sent again once the records are written and read back twice. `allOk`: every other answer
 * must be a 200.
 */
async function spendUntilRefused(send: () => Promise<Response>, allOk = false): Promise<Response> {
  for (let i = 0; i < 100; i++) {
    const res = await send();
    if (res.status !== 429) {
      if (allOk) expect(res.status).toBe(200);
      continue;
    }
    await app.stack?.recorder.flush();
    await app.budgets?.refresh();
    await app.budgets?.refresh();
    const again = await send();
    if (again.status === 429) return again;
    if (allOk) expect(again.status).toBe(200);
  }
  throw new Error('never refused in 100 requests');
}

/** The status a request with `key` gets, once the proxy has seen the latest change (polled). */
const becomes = (what: string, key: string, status: number, ms = 10_000) =>
  eventually(what, ms, async () => ((await chat(key)).status === status ? true : undefined));

/** Waits for an Event: the operator writes status first and records the Event after it. */
const eventRecorded = (name: string, reason: string) =>
  eventually(`${reason} Event for ${name}`, 15_000, () =>
    kubectlOk(['get', 'events', '-n', NS, '--field-selector', `involvedObject.name=${name}`]).includes(reason)
      ? true
      : undefined,
  );

function apiKey(name: string, spec: Partial<ApiKey['spec']>): object {
  return {
    apiVersion: 'ai.platform/v1beta1',
    kind: 'ApiKey',
    metadata: { name, namespace: NS },
    spec: { team: 'ml', ...spec },
  };
}

beforeAll(async () => {
  double = await startOllamaDouble({ models: ['llama3.1:8b'] });
  operator = new Operator({
    kubeConfig: kubeConfig(),
    cluster: { organizationId: 'acme', clusterId: 'c1', cloud: 'aws', region: 'us-east-1' },
    images: { Ollama: 'ollama/ollama:test' },
    port: 0,
    resyncMs: 0,
    leaderElection: false,
    logger: capturedLogger('operator-api-keys'),
  });
  await operator.start();
  app = await startGateway(
    {
      source: { kind: 'cluster', kubeConfig: kubeConfig() },
      usage: { db: join(mkdtempSync(join(tmpdir(), 'api-keys-')), 'usage.db') },
      budgetRefreshMs: 200,
      logger: capturedLogger('proxy-api-keys'),
    },
    { inCluster: new OpenAICompatibleUpstream(), metrics: new ProxyMetrics() },
  );
  // Standalone-style route to the double: the routes under test here are the keys.
  app.routes.set(
    buildRoutes(
      [
        {
          apiVersion: 'ai.platform/v1beta1',
          kind: 'ModelDeployment',
          metadata: { name: 'llama', namespace: 'platform-llms' },
          spec: { model: 'llama3.1:8b', serviceName: 'llama', port: 11434, replicas: 1, endpoint: double.url },
        },
      ],
      { standalone: true },
    ),
  );
}, 60_000);

afterAll(async () => {
  kubectl(['delete', 'apikeys,budgets', '--all', '-n', NS, '--ignore-not-found']);
  await operator?.stop();
  await app?.stop();
  await double?.close();
});

describe('ApiKeys on the real control plane', () => {
  let first = '';

  it('create: the operator issues the key into its Secret, status shows only digest and hint, the proxy takes it', async () => {
    apply(apiKey('ml-team', { tags: { 'cost-center': '42' } }));
    first = await eventually('key issued', 15_000, () => secretKey('ml-team'));
    expect(first).toMatch(/^sk-[A-Za-z0-9_-]{43}$/);
    const ak = await eventually('status', 10_000, () => {
      const o = get<ApiKey>('apikey', 'ml-team');
      return o?.status?.digest && condition(o, 'Ready') === 'True' ? o : undefined;
    });
    expect(ak.status?.keyHint).toBe(`${first.slice(0, 7)}...${first.slice(-4)}`);
    expect(JSON.stringify(ak)).not.toContain(first);
    const secret = JSON.parse(kubectlOk(['get', 'secret', 'apikey-ml-team', '-n', NS, '-o', 'json'])) as {
      metadata: { ownerReferences: Array<{ kind: string; name: string; controller: boolean }> };
    };
    expect(secret.metadata.ownerReferences).toEqual([
      expect.objectContaining({ kind: 'ApiKey', name: 'ml-team', controller: true }),
    ]);
    await becomes('the new key accepted', first, 200);
    await eventRecorded('ml-team', 'KeyIssued');
  });

  it('rotate: a new key works and the old one is refused within seconds', async () => {
    kubectlOk(['patch', 'apikey', 'ml-team', '-n', NS, '--type=merge', '-p', '{"spec":{"rotation":1}}']);
    const second = await eventually('rotated', 15_000, () => {
      const k = secretKey('ml-team');
      return k && k !== first ? k : undefined;
    });
    const t0 = Date.now();
    await becomes('the old key refused', first, 401);
    await becomes('the rotated key accepted', second, 200);
    expect(Date.now() - t0).toBeLessThan(10_000);
    expect(get<ApiKey>('apikey', 'ml-team')?.status?.rotation).toBe(1);
    first = second;
  });

  it('expire: refused with expired_api_key, Expired condition and Event', async () => {
    const soon = new Date(Date.now() + 3_000).toISOString().replace(/\.\d+Z$/, 'Z');
    kubectlOk([
      'patch',
      'apikey',
      'ml-team',
      '-n',
      NS,
      '--type=merge',
      '-p',
      JSON.stringify({ spec: { expiresAt: soon } }),
    ]);
    await becomes('expired', first, 401, 15_000);
    const res = await chat(first);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('expired_api_key');
    await eventually('Expired condition', 15_000, () =>
      condition(get<ApiKey>('apikey', 'ml-team'), 'Expired') === 'True' ? true : undefined,
    );
    expect(condition(get<ApiKey>('apikey', 'ml-team'), 'Ready')).toBe('False');
  });

  it("the operator's Secret verbs return no Secret data (why create and delete are all it gets)", () => {
    const value = Buffer.from('not-for-the-operator').toString('base64');
    const created = kubectlOk(
      ['create', '--raw', `/api/v1/namespaces/${NS}/secrets`, '-f', '-'],
      JSON.stringify({ apiVersion: 'v1', kind: 'Secret', metadata: { name: 'verb-probe' }, data: { k: value } }),
    );
    // Create answers with what was sent (the operator's own new key), never someone else's.
    expect(created).toContain(value);
    // Create of an existing name: a Status, no data.
    const again = kubectl(
      ['create', '--raw', `/api/v1/namespaces/${NS}/secrets`, '-f', '-'],
      JSON.stringify({ apiVersion: 'v1', kind: 'Secret', metadata: { name: 'verb-probe' }, data: { k: 'eA==' } }),
    );
    expect(again.code).not.toBe(0);
    expect(again.stdout + again.stderr).not.toContain(value);
    const deleted = kubectlOk(['delete', '--raw', `/api/v1/namespaces/${NS}/secrets/verb-probe`]);
    expect(deleted).not.toContain(value);
  });

  it('delete: refused within seconds, and the key Secret is collected with the ApiKey', async () => {
    apply(apiKey('web-team', { team: 'web' }));
    const key = await eventually('web key issued', 15_000, () => secretKey('web-team'));
    await becomes('web key accepted', key, 200);
    kubectlOk(['delete', 'apikey', 'web-team', '-n', NS]);
    const t0 = Date.now();
    await becomes('deleted key refused', key, 401);
    expect(Date.now() - t0).toBeLessThan(10_000);
    await eventually('Secret collected', 30_000, () => (secretKey('web-team') === undefined ? true : undefined));
  });

  it("budgets: spend reaches status, the key's and the tag's budgets refuse with 429 insufficient_quota, conditions and Events follow", async () => {
    apply(apiKey('spender', { team: 'data', budget: { usd: 0.002, period: 'Daily' } }));
    apply({
      apiVersion: 'ai.platform/v1beta1',
      kind: 'Budget',
      metadata: { name: 'project-x', namespace: NS },
      spec: { tag: 'project:x', usd: 0.001, period: 'Monthly' },
    });
    const key = await eventually('spender issued', 15_000, () => secretKey('spender'));
    await becomes('spender accepted', key, 200);
    await eventually('Budget seen by the proxy', 10_000, () =>
      (app.budgets?.tagBudgetList() ?? []).length > 0 ? true : undefined,
    );
    // Tagged project:x until its budget is spent.
    const refused = await spendUntilRefused(() => chat(key, 'project:x'), true);
    expect(((await refused.json()) as { error: { code: string; message: string } }).error).toMatchObject({
      code: 'insufficient_quota',
      message: expect.stringContaining('project:x'),
    });
    // Untagged requests go on, until the key's own budget is spent.
    const keyRefused = await spendUntilRefused(() => chat(key));
    expect(((await keyRefused.json()) as { error: { message: string } }).error.message).toContain("API key's budget");
    await app.stack?.recorder.flush();
    await app.statusWriter?.write();
    const budget = await eventually('Budget exhausted', 15_000, () => {
      const b = get<Budget>('budget', 'project-x');
      if (condition(b, 'BudgetExhausted') === 'True') return b;
      throw new Error(JSON.stringify({ usage: b?.status?.usage, conditions: b?.status?.conditions }));
    });
    expect(budget.status?.usage?.spendUsd).toBeGreaterThanOrEqual(0.001);
    const spender = await eventually('key exhausted', 15_000, () => {
      const k = get<ApiKey>('apikey', 'spender');
      if (condition(k, 'BudgetExhausted') === 'True') return k;
      // Said if it times out: the spend the proxy wrote and what the operator made of it.
      throw new Error(JSON.stringify({ usage: k?.status?.usage, conditions: k?.status?.conditions }));
    });
    expect(spender.status?.usage).toMatchObject({
      period: 'Daily',
      spendUsd: expect.any(Number),
      lastUsed: expect.any(String),
    });
    await eventRecorded('spender', 'BudgetExhausted');
    // The operator's own status writes leave the proxies' usage alone.
    operator.resyncAll();
    await new Promise((r) => setTimeout(r, 500));
    expect(get<ApiKey>('apikey', 'spender')?.status?.usage?.spendUsd).toBe(spender.status?.usage?.spendUsd);
  });
});
