import { once } from 'node:events';
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type OllamaDouble, startOllamaDouble } from '../e2e/doubles/ollama.js';
import { startGateway, type TestGateway } from '../e2e/support/gateway.js';
import { ApiKeys } from './access/auth.js';
import { oneModelRoutes } from './serving/test-routes.js';
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
    // A caller's connection busy with a slow answer when the replica starts shutting down; its
    // next request arrives on that connection while the first is still being answered, so the
    // connection is never idle (an idle one is closed, which a client sees as a plain close).
    // Raw bytes: clients hold a pipelined POST until the answer before it arrived.
    double.behave({ firstByteDelayMs: 1_500 });
    const socket = connect(Number(new URL(gateway.url).port), '127.0.0.1');
    const received: Buffer[] = [];
    socket.on('data', (d: Buffer) => received.push(d));
    const ended = once(socket, 'end');
    const body = JSON.stringify({ model: 'llama3.1:8b', messages: [{ role: 'user', content: 'hi there' }] });
    const post = `POST /openai/v1/chat/completions HTTP/1.1\r\nhost: gateway\r\ncontent-type: application/json\r\nx-api-key: ${KEY}\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
    const requestsBefore = double.requests.length + 1;
    socket.write(post);
    await expect.poll(() => double.requests.length, { timeout: 5_000 }).toBe(requestsBefore);
    const closing = gateway.close();
    await new Promise((r) => setTimeout(r, 100));
    socket.write(post);
    await ended;
    const [first = '', next = ''] = Buffer.concat(received)
      .toString('utf8')
      .split(/(?=HTTP\/1\.1 )/);
    expect(first).toMatch(/^HTTP\/1\.1 200 /);
    expect(next).toMatch(/^HTTP\/1\.1 503 /);
    expect(next.toLowerCase()).toContain('connection: close');
    expect(JSON.parse(next.slice(next.indexOf('\r\n\r\n') + 4)).error.code).toBe('shutting_down');
    expect(double.requests).toHaveLength(requestsBefore);
    await closing;
    socket.destroy();
  });
});

describe('one admission for every door', () => {
  const mcp = (app: TestGateway, body: string, headers: Record<string, string> = {}) =>
    app.request('/mcp', {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        'x-api-key': KEY,
        ...headers,
      },
      body,
    });
  const initialize = JSON.stringify({
    jsonrpc: '2.0',
    id: 1,
    method: 'initialize',
    params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'admit-test', version: '1' } },
  });

  it("spends the key's request rate at /mcp as at the model endpoints, and refuses past it in MCP's form", async () => {
    // One request in 10 s past a burst of 2: nothing refills within the test.
    const app = await appWith({ rateLimit: { rps: 0.1, burst: 2 } });
    expect((await chat(app, 'llama3.1:8b')).status).toBe(200);
    const first = await mcp(app, initialize);
    expect(first.status).toBe(200);
    expect(first.headers.get('x-ratelimit-remaining-requests')).toBe('0');
    // The model endpoint and MCP drew on one bucket: the next message of either is refused.
    const refused = await mcp(app, initialize);
    expect(refused.status).toBe(429);
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(await refused.json()).toMatchObject({ jsonrpc: '2.0', error: { code: -32000 } });
    expect((await chat(app, 'llama3.1:8b')).status).toBe(429);
  });

  it('reads an MCP message with the body stage: its type, its JSON and its size, each refused as MCP says', async () => {
    const app = await appWith();
    const notJson = await mcp(app, '{"jsonrpc":');
    expect(notJson.status).toBe(400);
    expect(await notJson.json()).toMatchObject({
      error: { code: -32700, message: 'Parse error: the body is not JSON' },
    });
    const wrongType = await mcp(app, initialize, { 'content-type': 'text/plain' });
    expect(wrongType.status).toBe(415);
    expect(await wrongType.json()).toMatchObject({ error: { code: -32600 } });
    const tooLarge = await mcp(
      app,
      JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'ping', pad: 'x'.repeat(11 << 20) }),
    );
    expect(tooLarge.status).toBe(413);
    const nobody = await app.request('/mcp', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: initialize,
    });
    expect(nobody.status).toBe(401);
    expect(nobody.headers.get('www-authenticate')).toBe('Bearer');
  });
});
