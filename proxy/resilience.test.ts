import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Agent, request } from 'undici';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { ModelDeployment } from '../crds/model-deployment.js';
import { type OllamaDouble, startOllamaDouble } from '../e2e/doubles/ollama.js';
import { startGateway, type TestGateway } from '../e2e/support/gateway.js';
import { ApiKeys } from './access/auth.js';
import { KeyRateLimiter } from './access/rate-limit.js';
import { ProxyError } from './endpoints/errors.js';
import { buildRoutes, RouteTable } from './routing/routes.js';
import { ProxyMetrics } from './telemetry/metrics.js';
import { OpenAICompatibleUpstream } from './upstreams/openai-compatible.js';
import {
  backoffMs,
  isRetryable,
  type RetryPolicy,
  retryAfterMs,
  shouldFallBack,
  withRetries,
} from './upstreams/resilience.js';
import { MemoryUsage } from './usage/record.js';

/**
 * Retries, fallbacks and the per-key rate limit: the pure rules, then the app over real
 * sockets against a server that fails on purpose and the Ollama double.
 */

const err = (status: 400 | 429 | 502 | 503 | 504, code: string, headers: Record<string, string> = {}) =>
  new ProxyError(status, status === 400 ? 'invalid_request_error' : 'api_error', code, 'x', null, headers);
const policy: RetryPolicy = { retries: 2, backoffMs: 100, maxBackoffMs: 2000 };

describe('retry rules', () => {
  it('retries what a second try can fix, and nothing the request or a timeout caused', () => {
    expect(isRetryable(err(502, 'upstream_unreachable'))).toBe(true);
    expect(isRetryable(err(502, 'upstream_stream_broken'))).toBe(true);
    expect(isRetryable(err(502, 'upstream_error'))).toBe(true);
    expect(isRetryable(err(503, 'upstream_unavailable'))).toBe(true);
    expect(isRetryable(err(429, 'upstream_rate_limited'))).toBe(true);
    expect(isRetryable(err(504, 'upstream_timeout'))).toBe(false);
    expect(isRetryable(err(400, 'upstream_rejected'))).toBe(false);
    expect(isRetryable(err(503, 'model_deploying'))).toBe(false);
  });

  it('falls back on failures of the model, not of the request', () => {
    expect(shouldFallBack(err(504, 'upstream_timeout'))).toBe(true);
    expect(shouldFallBack(err(503, 'model_deploying'))).toBe(true);
    expect(shouldFallBack(err(400, 'upstream_rejected'))).toBe(false);
    expect(shouldFallBack(err(400, 'bedrock_model_not_enabled'))).toBe(true);
  });

  it('backs off exponentially with jitter, capped, honouring a short Retry-After and refusing a long one', () => {
    const e = err(502, 'upstream_error');
    expect(backoffMs(0, policy, e, () => 0)).toBe(50);
    expect(backoffMs(0, policy, e, () => 1)).toBe(100);
    expect(backoffMs(3, policy, e, () => 1)).toBe(800);
    expect(backoffMs(10, policy, e, () => 1)).toBe(2000);
    expect(backoffMs(0, policy, err(429, 'upstream_rate_limited', { 'Retry-After': '1' }), () => 0)).toBe(1000);
    expect(backoffMs(0, policy, err(429, 'upstream_rate_limited', { 'Retry-After': '30' }))).toBeUndefined();
    expect(retryAfterMs('Wed, 21 Oct 2015 07:28:05 GMT', Date.parse('Wed, 21 Oct 2015 07:28:00 GMT'))).toBe(5000);
    expect(retryAfterMs('soon')).toBeUndefined();
  });

  it('stops at the first success, at a failure retries cannot fix, or when the caller leaves', async () => {
    const waits: number[] = [];
    const hooks = { wait: async (ms: number) => void waits.push(ms), random: () => 1 };
    let calls = 0;
    const flaky = async () => {
      calls++;
      if (calls < 3) throw err(503, 'upstream_unavailable');
      return 'ok';
    };
    expect(await withRetries(flaky, policy, new AbortController().signal, hooks)).toBe('ok');
    expect([calls, waits]).toEqual([3, [100, 200]]);

    calls = 0;
    const bad = async () => {
      calls++;
      throw err(400, 'upstream_rejected');
    };
    await expect(withRetries(bad, policy, new AbortController().signal, hooks)).rejects.toMatchObject({
      code: 'upstream_rejected',
    });
    expect(calls).toBe(1);

    calls = 0;
    const gone = new AbortController();
    const leaving = async () => {
      calls++;
      gone.abort();
      throw err(502, 'upstream_unreachable');
    };
    await expect(withRetries(leaving, policy, gone.signal, hooks)).rejects.toMatchObject({
      code: 'upstream_unreachable',
    });
    expect(calls).toBe(1);
  });
});

describe('per-key rate limit', () => {
  it('lets a burst through, refuses the next with the wait, refills at the rate, and keeps keys apart', () => {
    let t = 0;
    const limiter = new KeyRateLimiter({ requestsPerSecond: 2, burst: 3 }, () => t);
    expect([1, 2, 3].map(() => limiter.take('a').ok)).toEqual([true, true, true]);
    expect(limiter.take('a')).toEqual({ ok: false, retryAfterSeconds: 1 });
    expect(limiter.take('b').ok).toBe(true);
    t = 499;
    expect(limiter.take('a').ok).toBe(false);
    t = 500;
    expect(limiter.take('a')).toEqual({ ok: true, remaining: 0 });
    t = 100_000;
    expect(limiter.take('a')).toEqual({ ok: true, remaining: 2 });
  });

  it('is off at 0 requests per second and refuses a nonsensical configuration', () => {
    const off = new KeyRateLimiter({ requestsPerSecond: 0, burst: 1 });
    expect(Array.from({ length: 100 }, () => off.take('a').ok).every(Boolean)).toBe(true);
    expect(() => new KeyRateLimiter({ requestsPerSecond: -1, burst: 1 })).toThrow(/requestsPerSecond/);
    expect(() => new KeyRateLimiter({ requestsPerSecond: 1, burst: 0 })).toThrow(/burst/);
  });
});

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

describe('rate limit through the app', () => {
  it('refuses a key over its budget with 429, Retry-After and OpenAI rate-limit headers; other keys go on', async () => {
    const app = await appWith([md('llama', 'llama3.1:8b', double.url)], { rateLimit: { rps: 1, burst: 2 } });
    const first = await chat(app, 'llama3.1:8b');
    expect(first.headers.get('x-ratelimit-limit-requests')).toBe('2');
    expect(first.headers.get('x-ratelimit-remaining-requests')).toBe('1');
    expect((await chat(app, 'llama3.1:8b')).status).toBe(200);
    const refused = await chat(app, 'llama3.1:8b');
    expect(refused.status).toBe(429);
    expect(refused.headers.get('retry-after')).toBe('1');
    expect(refused.headers.get('x-ratelimit-remaining-requests')).toBe('0');
    expect(((await refused.json()) as { error: { code: string; type: string } }).error).toMatchObject({
      code: 'rate_limit_exceeded',
      type: 'rate_limit_error',
    });
    expect((await chat(app, 'llama3.1:8b', {}, 'sk-other')).status).toBe(200);
    expect(double.requests).toHaveLength(3);
    expect(usage.records.map((r) => r.status)).toEqual([200, 200, 429, 200]);
  });
});

describe('a replica shutting down', () => {
  it('refuses the next request on a connection still open with 503 shutting_down and closes it', async () => {
    const routes = new RouteTable();
    routes.set(buildRoutes([md('llama', 'llama3.1:8b', double.url)], { standalone: true }));
    const gateway = await startGateway(
      { shutdown: { delayMs: 0, drainMs: 5_000 } },
      { keys: ApiKeys.fromKeys([KEY]), routes, usage: new MemoryUsage(), metrics: new ProxyMetrics() },
    );
    // A caller's connection busy with a slow answer when the replica starts shutting down, with
    // its next request already sent behind it (HTTP/1.1 pipelining).
    double.behave({ firstByteDelayMs: 300 });
    const agent = new Agent({ pipelining: 2, connections: 1 });
    const post = () =>
      request(`${gateway.url}/openai/v1/chat/completions`, {
        method: 'POST',
        dispatcher: agent,
        idempotent: true,
        headers: { 'content-type': 'application/json', 'x-api-key': KEY },
        body: JSON.stringify({ model: 'llama3.1:8b', messages: [{ role: 'user', content: 'hi there' }] }),
      });
    const busy = post();
    const next = post();
    await new Promise((r) => setTimeout(r, 100));
    const requestsBefore = double.requests.length;
    const closing = gateway.close();
    expect((await busy).statusCode).toBe(200);
    const res = await next;
    expect(res.statusCode).toBe(503);
    expect(res.headers.connection).toBe('close');
    expect(((await res.body.json()) as { error: { code: string } }).error.code).toBe('shutting_down');
    expect(double.requests).toHaveLength(requestsBefore);
    await closing;
    await agent.close();
  });
});
