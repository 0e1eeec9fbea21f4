import { Agent, request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type OllamaDouble, startOllamaDouble } from '../e2e/doubles/ollama.js';
import { startGateway, type TestGateway } from '../e2e/support/gateway.js';
import { ApiKeys } from './access/auth.js';
import { oneModelRoutes } from './routing/test-routes.js';
import { ProxyMetrics } from './telemetry/metrics.js';
import { MemoryUsage } from './usage/record.js';

/**
 * The admit stage through the whole gateway: a key over its rate is refused with OpenAI's rate
 * headers while other keys go on; a replica shutting down refuses what still arrives on open
 * connections. Over real sockets, against the Ollama double.
 */

const KEY = 'sk-admit';
let double: OllamaDouble;
let usage: MemoryUsage;
const started: TestGateway[] = [];

beforeAll(async () => {
  double = await startOllamaDouble();
});
afterAll(async () => {
  for (const g of started) await g.stop().catch(() => {});
  await double.close();
});

async function appWith(opts: { rateLimit?: { rps: number; burst: number } } = {}) {
  usage = new MemoryUsage();
  const gateway = await startGateway(
    opts.rateLimit ? { rateLimit: { requestsPerSecond: opts.rateLimit.rps, burst: opts.rateLimit.burst } } : {},
    {
      keys: ApiKeys.fromKeys([KEY, 'sk-other']),
      routes: oneModelRoutes('llama', 'llama3.1:8b', double.url),
      usage,
      metrics: new ProxyMetrics(),
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

describe('rate limit through the app', () => {
  it('refuses a key over its budget with 429, Retry-After and OpenAI rate-limit headers; other keys go on', async () => {
    const app = await appWith({ rateLimit: { rps: 1, burst: 2 } });
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
    const gateway = await startGateway(
      { shutdown: { delayMs: 0, drainMs: 5_000 } },
      {
        keys: ApiKeys.fromKeys([KEY]),
        routes: oneModelRoutes('llama', 'llama3.1:8b', double.url),
        usage: new MemoryUsage(),
        metrics: new ProxyMetrics(),
      },
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
