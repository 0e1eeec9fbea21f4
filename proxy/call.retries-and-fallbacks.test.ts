import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { ModelDeployment } from '../crds/model-deployment.js';
import { type OllamaDouble, startOllamaDouble } from '../e2e/doubles/ollama.js';
import { startGateway, type TestGateway } from '../e2e/support/gateway.js';
import { ApiKeys } from './access/auth.js';
import { buildRoutes, RouteTable } from './serving/routes.js';
import { ProxyMetrics } from './telemetry/metrics.js';
import { OpenAICompatibleUpstream } from './upstreams/openai-compatible.js';
import { MemoryUsage } from './usage/record.js';

/**
 * The call stage's retries and fallbacks through the whole gateway, over real sockets, against
 * a model server that fails on purpose and the Ollama double.
 */

/** A model server that answers the first `failures` chat requests with `status`, then like Ollama. */
interface Flaky {
  url: string;
  hits: number;
  failures: number;
  status: number;
  retryAfter?: string;
  server: Server;
}

async function startFlaky(double: OllamaDouble): Promise<Flaky> {
  const state: Flaky = { url: '', hits: 0, failures: 0, status: 503, server: createServer() };
  state.server.on('request', async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    state.hits++;
    if (state.hits <= state.failures) {
      res.writeHead(state.status, {
        'content-type': 'application/json',
        ...(state.retryAfter ? { 'retry-after': state.retryAfter } : {}),
      });
      res.end(JSON.stringify({ error: { message: 'model is overloaded', type: 'api_error' } }));
      return;
    }
    const upstream = await fetch(`${double.url}${req.url}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: Buffer.concat(chunks),
    });
    res.writeHead(upstream.status, { 'content-type': upstream.headers.get('content-type') ?? 'application/json' });
    res.end(Buffer.from(await upstream.arrayBuffer()));
  });
  await new Promise<void>((r) => state.server.listen(0, '127.0.0.1', r));
  state.url = `http://127.0.0.1:${(state.server.address() as AddressInfo).port}`;
  return state;
}

const KEY = 'sk-resilience';
let double: OllamaDouble;
let flaky: Flaky;
let usage: MemoryUsage;
let metrics: ProxyMetrics;

function md(
  name: string,
  model: string,
  endpoint: string | undefined,
  fallback?: string[],
  status?: ModelDeployment['status'],
): ModelDeployment {
  return {
    apiVersion: 'ai.platform/v1beta1',
    kind: 'ModelDeployment',
    metadata: { name, namespace: 'platform-llms' },
    spec: {
      model,
      serviceName: name,
      port: 11434,
      replicas: 1,
      ...(endpoint ? { endpoint } : {}),
      ...(fallback ? { fallback } : {}),
    },
    ...(status ? { status } : {}),
  };
}

const started: TestGateway[] = [];

async function appWith(
  mds: ModelDeployment[],
  opts: { standalone?: boolean; rateLimit?: { rps: number; burst: number } } = {},
) {
  const routes = new RouteTable();
  routes.set(buildRoutes(mds, { standalone: opts.standalone ?? true }));
  usage = new MemoryUsage();
  metrics = new ProxyMetrics();
  const gateway = await startGateway(
    {
      retry: { retries: 2, backoffMs: 10, maxBackoffMs: 1500 },
      ...(opts.rateLimit ? { rateLimit: { requestsPerSecond: opts.rateLimit.rps, burst: opts.rateLimit.burst } } : {}),
    },
    {
      keys: ApiKeys.fromKeys([KEY, 'sk-other']),
      routes,
      // In cluster mode every Service name resolves to the double.
      inCluster: new OpenAICompatibleUpstream({
        resolve: (u) => (u.includes('.svc.cluster.local') ? double.url : u),
        timeouts: { connectMs: 1000, firstByteMs: 2000, responseMs: 2000, idleMs: 500 },
      }),
      usage,
      metrics,
    },
  );
  started.push(gateway);
  return gateway;
}

const chat = (app: TestGateway, model: string, extra: object = {}, key = KEY) =>
  app.request('/openai/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': key },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi there' }], ...extra }),
  });

const metricValue = async (name: string, labels: Record<string, string>) => {
  const m = (await metrics.registry.getSingleMetric(name)?.get())?.values ?? [];
  return m
    .filter((v) => Object.entries(labels).every(([k, val]) => v.labels[k] === val))
    .reduce((a, v) => a + v.value, 0);
};

beforeAll(async () => {
  double = await startOllamaDouble();
  flaky = await startFlaky(double);
});
afterAll(async () => {
  for (const g of started) await g.stop();
  flaky.server.closeAllConnections();
  await new Promise((r) => flaky.server.close(r));
  await double.close();
});
beforeEach(() => {
  double.reset();
  Object.assign(flaky, { hits: 0, failures: 0, status: 503 });
  delete flaky.retryAfter;
});

describe('retries through the app', () => {
  it('retries a 503 from the model server and answers 200; the caller sees one request, usage one record', async () => {
    const app = await appWith([md('llama', 'llama3.1:8b', flaky.url)]);
    flaky.failures = 2;
    const res = await chat(app, 'llama3.1:8b');
    expect(res.status).toBe(200);
    expect(flaky.hits).toBe(3);
    expect(usage.records).toHaveLength(1);
    expect(usage.records[0]).toMatchObject({ status: 200, model: 'llama3.1:8b', completionTokens: 8 });
    expect(await metricValue('pao_gateway_upstream_retries_total', { code: 'upstream_error' })).toBe(2);
  });

  it('gives up after the configured retries with the upstream error, recorded as such', async () => {
    const app = await appWith([md('llama', 'llama3.1:8b', flaky.url)]);
    flaky.failures = 10;
    flaky.status = 500;
    const res = await chat(app, 'llama3.1:8b', { stream: true });
    expect(res.status).toBe(502);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('upstream_error');
    expect(flaky.hits).toBe(3);
    expect(usage.records[0]).toMatchObject({ status: 502, errorType: 'upstream_error' });
  });

  it('does not retry a request the model server rejected', async () => {
    const app = await appWith([md('llama', 'llama3.1:8b', flaky.url)]);
    flaky.failures = 1;
    flaky.status = 400;
    expect((await chat(app, 'llama3.1:8b')).status).toBe(400);
    expect(flaky.hits).toBe(1);
  });

  it('waits out a short Retry-After on 429 but passes a long one to the caller', async () => {
    const app = await appWith([md('llama', 'llama3.1:8b', flaky.url)]);
    flaky.failures = 1;
    flaky.status = 429;
    flaky.retryAfter = '1';
    const started = performance.now();
    expect((await chat(app, 'llama3.1:8b')).status).toBe(200);
    expect(performance.now() - started).toBeGreaterThanOrEqual(990);
    expect(flaky.hits).toBe(2);

    Object.assign(flaky, { hits: 0, failures: 5, retryAfter: '60' });
    const res = await chat(app, 'llama3.1:8b');
    expect(res.status).toBe(429);
    expect(res.headers.get('retry-after')).toBe('60');
    expect(flaky.hits).toBe(1);
  });
});

describe('fallbacks', () => {
  it('serves with the first fallback that works when the model server is unreachable, and says so', async () => {
    const app = await appWith([
      md('primary', 'gemma2:9b', 'http://127.0.0.1:1', ['mistral:7b', 'llama3.1:8b']),
      md('down-too', 'mistral:7b', 'http://127.0.0.1:1'),
      md('llama', 'llama3.1:8b', double.url),
    ]);
    const res = await chat(app, 'gemma2:9b', { tags: ['team:a'] });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-gateway-fallback')).toBe('llama3.1:8b');
    expect(((await res.json()) as { model: string }).model).toBe('llama3.1:8b');
    expect(double.requests[0]?.body).toMatchObject({ model: 'llama3.1:8b' });
    expect(usage.records).toHaveLength(1);
    expect(usage.records[0]).toMatchObject({ status: 200, model: 'llama3.1:8b', provider: 'platform-llms/llama' });
    expect(await metricValue('pao_gateway_fallbacks_total', { model: 'gemma2:9b', fallback: 'mistral:7b' })).toBe(1);
    expect(await metricValue('pao_gateway_fallbacks_total', { model: 'gemma2:9b', fallback: 'llama3.1:8b' })).toBe(1);
  });

  it('streams from the fallback too', async () => {
    const app = await appWith([
      md('primary', 'gemma2:9b', 'http://127.0.0.1:1', ['llama3.1:8b']),
      md('llama', 'llama3.1:8b', double.url),
    ]);
    const res = await chat(app, 'gemma2:9b', { stream: true });
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(text).toContain('tok0');
    expect(text.trimEnd().endsWith('data: [DONE]')).toBe(true);
  });

  it('serves a model that is still deploying with its fallback (cluster mode)', async () => {
    const running = { phase: 'Running' as const, endpoint: 'http://llama.platform-llms.svc.cluster.local:11434' };
    const app = await appWith(
      [
        md('big', 'llama3.1:70b', undefined, ['llama3.1:8b'], { phase: 'Deploying' }),
        md('llama', 'llama3.1:8b', undefined, undefined, running),
      ],
      { standalone: false },
    );
    const res = await chat(app, 'llama3.1:70b');
    expect(res.status).toBe(200);
    expect(res.headers.get('x-gateway-fallback')).toBe('llama3.1:8b');
  });

  it("answers with the requested model's error, naming the fallbacks that failed too", async () => {
    const app = await appWith([
      md('primary', 'gemma2:9b', 'http://127.0.0.1:1', ['mistral:7b', 'not-routable:1b']),
      md('down-too', 'mistral:7b', 'http://127.0.0.1:1'),
    ]);
    const res = await chat(app, 'gemma2:9b');
    expect(res.status).toBe(502);
    const body = (await res.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe('upstream_unreachable');
    expect(body.error.message).toMatch(/fallbacks failed too: mistral:7b \(upstream_unreachable\)/);
    expect(usage.records[0]).toMatchObject({ status: 502, model: 'gemma2:9b' });
  });

  it('does not fall back when the request itself was rejected', async () => {
    const app = await appWith([
      md('primary', 'gemma2:9b', flaky.url, ['llama3.1:8b']),
      md('llama', 'llama3.1:8b', double.url),
    ]);
    flaky.failures = 1;
    flaky.status = 400;
    expect((await chat(app, 'gemma2:9b')).status).toBe(400);
    expect(double.requests).toHaveLength(0);
  });
});
