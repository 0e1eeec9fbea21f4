import { connect } from 'node:net';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { loadCatalog } from '../crds/catalog/catalog.js';
import type { ModelDeployment } from '../crds/model-deployment.js';
import type { Logger } from '../crds/observability/log.js';
import { type OllamaDouble, startOllamaDouble } from '../e2e/doubles/ollama.js';
import { startGateway, type TestGateway } from '../e2e/support/gateway.js';
import { ApiKeys } from './access/auth.js';
import { buildRoutes, RouteTable } from './serving/routes.js';
import { ProxyMetrics } from './telemetry/metrics.js';
import { OpenAICompatibleUpstream } from './upstreams/openai-compatible.js';
import { MemoryUsage } from './usage/record.js';

/**
 * The request path end to end against the Ollama double, through the composed gateway's front
 * door over a real socket: the request/response contract, and where the transport matters
 * (streams, client aborts, body limits).
 */

const KEY = 'sk-test-key';
let double: OllamaDouble;
let usage: MemoryUsage;
let gateway: TestGateway;
let app: TestGateway;
let base: string;
let metrics: ProxyMetrics;

function md(name: string, model: string, endpoint?: string, status?: ModelDeployment['status']): ModelDeployment {
  return {
    apiVersion: 'ai.platform/v1beta1',
    kind: 'ModelDeployment',
    metadata: { name, namespace: 'platform-llms' },
    spec: { model, serviceName: name, port: 11434, replicas: 1, ...(endpoint ? { endpoint } : {}) },
    ...(status ? { status } : {}),
  };
}

function routesOf(): RouteTable {
  const routes = new RouteTable();
  routes.set(buildRoutes([md('llama', 'llama3.1:8b', double.url)], { standalone: true }));
  return routes;
}

function build(timeouts = { connectMs: 1000, firstByteMs: 2000, responseMs: 2000, idleMs: 300 }) {
  const routes = new RouteTable();
  routes.set(
    buildRoutes(
      [
        md('llama', 'llama3.1:8b', double.url),
        md('qwen', 'qwen2.5:0.5b', double.url),
        md('gone', 'gemma2:9b', 'http://127.0.0.1:1'),
        // Routed here, but the double does not have it (a server that lost its model).
        md('lost', 'mistral:7b', double.url),
      ],
      { standalone: true, loadedAt: 1_790_000_000 },
    ),
  );
  usage = new MemoryUsage();
  metrics = new ProxyMetrics();
  return startGateway(
    { maxBodyBytes: 10 * 1024 * 1024 },
    { keys: ApiKeys.fromKeys([KEY]), routes, inCluster: new OpenAICompatibleUpstream({ timeouts }), usage, metrics },
  );
}

const chat = (body: unknown, headers: Record<string, string> = {}) =>
  app.request('/openai/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': KEY, ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });

const hello = { model: 'llama3.1:8b', messages: [{ role: 'user', content: 'say hello to me' }] };

/** SSE frames of a response body: the data of each event, in order. */
async function frames(res: Response): Promise<string[]> {
  const text = await res.text();
  return text
    .split('\n\n')
    .filter(Boolean)
    .map((f) => f.replace(/^data: /, ''));
}

beforeAll(async () => {
  double = await startOllamaDouble();
  gateway = await build();
  app = gateway;
  base = gateway.url;
});

afterAll(async () => {
  await gateway.stop();
  await double.close();
});

beforeEach(() => {
  double.reset();
  usage.records.length = 0;
});

describe('auth', () => {
  it('accepts X-API-Key and Bearer, and refuses a missing or wrong key with 401 in OpenAI shape', async () => {
    expect((await chat(hello)).status).toBe(200);
    expect((await chat(hello, { 'x-api-key': '', authorization: `Bearer ${KEY}` })).status).toBe(200);
    for (const headers of [{ 'x-api-key': '' }, { 'x-api-key': 'sk-wrong' }]) {
      const res = await chat(hello, headers);
      expect(res.status).toBe(401);
      const body = (await res.json()) as { error: { type: string; code: string } };
      expect(body.error.type).toBe('authentication_error');
    }
    expect(double.requests).toHaveLength(2);
  });

  it('records the key hash prefix, never the key', async () => {
    await chat(hello);
    expect(usage.records[0]?.keyHashPrefix).toMatch(/^[0-9a-f]{12}$/);
    expect(JSON.stringify(usage.records)).not.toContain(KEY);
  });
});

describe('non-streaming', () => {
  it('returns the upstream completion in OpenAI shape and records usage with the merged tags', async () => {
    const res = await chat(
      { ...hello, tags: ['project:chatbot', 'team:ml'] },
      { 'x-tags': 'team:ml,environment:prod', 'x-gateway-tags': 'cost:1' },
    );
    expect(res.status).toBe(200);
    expect(res.headers.get('x-request-id')).toMatch(/^req_/);
    const body = (await res.json()) as {
      object: string;
      choices: Array<{ message: { content: string }; finish_reason: string }>;
      usage: { prompt_tokens: number; completion_tokens: number };
    };
    expect(body.object).toBe('chat.completion');
    expect(body.choices[0]?.message.content).toBe('tok0 tok1 tok2 tok3 tok4 tok5 tok6 tok7');
    expect(body.usage).toMatchObject({ prompt_tokens: 4, completion_tokens: 8 });
    // The gateway's own field does not reach the upstream; everything else does.
    expect(double.requests[0]?.body).toEqual({ model: 'llama3.1:8b', messages: hello.messages });
    expect(usage.records).toHaveLength(1);
    expect(usage.records[0]).toMatchObject({
      model: 'llama3.1:8b',
      provider: 'platform-llms/llama',
      promptTokens: 4,
      completionTokens: 8,
      status: 200,
      stream: false,
      tags: [
        { key: 'team', value: 'ml' },
        { key: 'environment', value: 'prod' },
        { key: 'cost', value: '1' },
        { key: 'project', value: 'chatbot' },
      ],
    });
  });

  it('passes unknown parameters through to the upstream', async () => {
    await chat({ ...hello, temperature: 0.1, max_tokens: 3, seed: 42, response_format: { type: 'json_object' } });
    expect(double.requests[0]?.body).toMatchObject({
      temperature: 0.1,
      max_tokens: 3,
      seed: 42,
      response_format: { type: 'json_object' },
    });
  });
});

describe('streaming', () => {
  it('relays chunks and ends with [DONE], without the usage chunk the client did not ask for', async () => {
    const res = await chat({ ...hello, stream: true });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toContain('text/event-stream');
    const data = await frames(res);
    expect(data.at(-1)).toBe('[DONE]');
    const chunks = data
      .slice(0, -1)
      .map((d) => JSON.parse(d) as { choices: Array<{ delta: { content?: string } }>; usage?: unknown });
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? '').join('')).toBe(
      'tok0 tok1 tok2 tok3 tok4 tok5 tok6 tok7',
    );
    expect(chunks.some((c) => c.usage !== undefined || c.choices.length === 0)).toBe(false);
    // The gateway asked the upstream for usage anyway, and recorded it.
    expect(double.requests[0]?.body).toMatchObject({ stream: true, stream_options: { include_usage: true } });
    await new Promise((r) => setTimeout(r, 10));
    expect(usage.records[0]).toMatchObject({ promptTokens: 4, completionTokens: 8, status: 200, stream: true });
    expect(usage.records[0]?.firstTokenMs).toBeGreaterThanOrEqual(0);
  });

  it('passes the usage chunk on when the client asks for it', async () => {
    const data = await frames(await chat({ ...hello, stream: true, stream_options: { include_usage: true } }));
    const last = JSON.parse(data.at(-2) ?? '{}') as { choices: unknown[]; usage: { completion_tokens: number } };
    expect(last.choices).toEqual([]);
    expect(last.usage.completion_tokens).toBe(8);
  });

  it('ends a stream the upstream broke off with an error event, then [DONE], and records the error', async () => {
    double.behave({ resetAfterTokens: 3 });
    const data = await frames(await chat({ ...hello, stream: true }));
    expect(data.at(-1)).toBe('[DONE]');
    const error = JSON.parse(data.at(-2) ?? '{}') as { error: { code: string } };
    expect(error.error.code).toBe('upstream_stream_broken');
    await new Promise((r) => setTimeout(r, 10));
    expect(usage.records[0]).toMatchObject({ status: 502, errorType: 'upstream_stream_broken' });
  });

  it('bills a stream broken off before the usage chunk with the tokens it delivered, marked as counted', async () => {
    const counted = async () =>
      (await metrics.registry.metrics())
        .split('\n')
        .find((l) => l.startsWith('pao_gateway_counted_usage_total{model="llama3.1:8b"'))
        ?.split(' ')[1] ?? '0';
    const before = Number(await counted());
    double.behave({ resetAfterTokens: 3 });
    const data = await frames(await chat({ ...hello, stream: true }));
    expect(data.filter((d) => d.includes('"content":"tok')).length).toBe(3);
    await new Promise((r) => setTimeout(r, 10));
    expect(usage.records[0]).toMatchObject({ completionTokens: 3, promptTokens: 0, tokensCounted: true });
    expect(Number(await counted())).toBe(before + 1);
  });

  it('ends a stalled stream after the idle timeout with an error event', async () => {
    double.behave({ stallAfterTokens: 2 });
    const started = Date.now();
    const data = await frames(await chat({ ...hello, stream: true }));
    expect(Date.now() - started).toBeGreaterThanOrEqual(280);
    expect((JSON.parse(data.at(-2) ?? '{}') as { error: { code: string } }).error.code).toBe('upstream_idle_timeout');
    expect(data.at(-1)).toBe('[DONE]');
  });
});

describe('routing and upstream errors', () => {
  it('answers an unknown model with 404 model_not_found saying how to list models', async () => {
    const res = await chat({ ...hello, model: 'gpt-7' });
    expect(res.status).toBe(404);
    const body = (await res.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe('model_not_found');
    expect(body.error.message).toContain('GET /openai/v1/models');
    expect(usage.records[0]).toMatchObject({ status: 404, errorType: 'model_not_found', model: 'gpt-7' });
  });

  it('answers 503 with Retry-After for a model still deploying', async () => {
    const routes = new RouteTable();
    routes.set(buildRoutes([md('d', 'llama3.1:8b', undefined, { phase: 'Deploying' })], { standalone: false }));
    const deploying = await startGateway({}, { keys: ApiKeys.fromKeys([KEY]), routes, usage: new MemoryUsage() });
    const res = await deploying.request('/openai/v1/chat/completions', {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': KEY },
      body: JSON.stringify(hello),
    });
    expect(res.status).toBe(503);
    expect(res.headers.get('retry-after')).toBe('30');
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('model_deploying');
    await deploying.stop();
  });

  it('maps connection refused to 502, upstream 5xx to 502, and passes 429 with Retry-After', async () => {
    const refused = await chat({ ...hello, model: 'gemma2:9b' });
    expect(refused.status).toBe(502);
    expect(((await refused.json()) as { error: { code: string } }).error.code).toBe('upstream_unreachable');

    double.behave({ failWith: { status: 500, message: 'CUDA error' } });
    const broken = await chat(hello);
    expect(broken.status).toBe(502);
    expect(((await broken.json()) as { error: { message: string } }).error.message).toContain(
      'answered 500: CUDA error',
    );

    double.behave({ failWith: { status: 429, retryAfterSeconds: 7 } });
    const limited = await chat(hello);
    expect(limited.status).toBe(429);
    expect(limited.headers.get('retry-after')).toBe('7');
  });

  it('answers 504 when the upstream does not answer in time', async () => {
    // Far past the 2 s limit, so that a loaded machine's late timers cannot let the answer win.
    double.behave({ firstByteDelayMs: 20_000 });
    const res = await chat(hello);
    expect(res.status).toBe(504);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('upstream_timeout');
  });
});

describe('bad input', () => {
  it('refuses malformed JSON with 400, another content type with 415, and a bad body with 400', async () => {
    const malformed = await chat('{"model": ');
    expect(malformed.status).toBe(400);
    expect(((await malformed.json()) as { error: { code: string } }).error.code).toBe('invalid_json');

    const text = await chat(JSON.stringify(hello), { 'content-type': 'text/plain' });
    expect(text.status).toBe(415);

    const noMessages = await chat({ model: 'llama3.1:8b' });
    expect(noMessages.status).toBe(400);
    const badTag = await chat({ ...hello, tags: ['nocolon'] });
    expect(badTag.status).toBe(400);
    expect(((await badTag.json()) as { error: { message: string } }).error.message).toContain('"nocolon"');
    expect(double.requests).toHaveLength(0);
  });

  it('does not serve metrics on the API port (they have their own)', async () => {
    expect((await app.request('/metrics')).status).toBe(404);
  });

  it('answers unknown routes with a 404 envelope that says what is served', async () => {
    const res = await app.request('/v1/chat/completions', { method: 'POST' });
    expect(res.status).toBe(404);
    const outside = ((await res.json()) as { error: { code: string; message: string } }).error;
    expect(outside).toMatchObject({ code: 'unknown_route', message: expect.stringContaining('under /openai/v1') });
    const inside = await app.request('/openai/v1/embeddingz', { method: 'POST' });
    const err = ((await inside.json()) as { error: { code: string; message: string } }).error;
    expect(err.code).toBe('unknown_route');
    // Not "the API is under /openai/v1": the path already is.
    expect(err.message).not.toContain('under /openai/v1');
    expect(err.message).toContain('/openai/v1/chat/completions');
  });

  it('answers a model server without the routed model with 404 model_not_found naming the deployment, once', async () => {
    const res = await chat({ ...hello, model: 'mistral:7b' });
    expect(res.status).toBe(404);
    const err = ((await res.json()) as { error: { code: string; message: string; param: string } }).error;
    expect(err).toMatchObject({ code: 'model_not_found', param: 'model' });
    expect(err.message).toContain('platform-llms/lost');
    expect(err.message).toContain('does not have it');
    expect(double.requests).toHaveLength(1);
    expect(usage.records[0]).toMatchObject({ model: 'mistral:7b', status: 404, errorType: 'model_not_found' });
  });

  it('sends max_completion_tokens to the model server as max_tokens, the smaller when both are given', async () => {
    await chat({ ...hello, max_completion_tokens: 3 });
    await chat({ ...hello, max_completion_tokens: 3, max_tokens: 2 });
    await chat({ ...hello, max_completion_tokens: null, max_tokens: 5 });
    expect(double.requests.map((r) => r.body)).toEqual([
      expect.objectContaining({ max_tokens: 3 }),
      expect.objectContaining({ max_tokens: 2 }),
      expect.objectContaining({ max_tokens: 5 }),
    ]);
    for (const r of double.requests) expect(r.body).not.toHaveProperty('max_completion_tokens');
  });

  it('records requests refused for their body under the model they asked for', async () => {
    await chat({ model: 'llama3.1:8b', messages: 'not a list' });
    expect(usage.records[0]).toMatchObject({ model: 'llama3.1:8b', status: 400 });
  });

  it('marks the usage of a model without a price as unpriced and counts it', async () => {
    const catalog = loadCatalog();
    const gateways: TestGateway[] = [];
    const metered = async (models: typeof catalog.models) => {
      const metrics = new ProxyMetrics();
      const unpriced: string[] = [];
      const logger: Logger = {
        info: () => {},
        error: () => {},
        warn: (msg, fields) => {
          if (msg.startsWith('model has no price')) unpriced.push(String(fields?.model));
        },
      };
      const g = await startGateway(
        { logger },
        { keys: ApiKeys.fromKeys([KEY]), routes: routesOf(), usage, metrics, catalog: { ...catalog, models } },
      );
      gateways.push(g);
      return { g, metrics, unpriced };
    };
    const send = (g: TestGateway) =>
      g.request('/openai/v1/chat/completions', {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-api-key': KEY },
        body: JSON.stringify(hello),
      });
    const priced = await metered(catalog.models);
    await send(priced.g);
    expect(usage.records.at(-1)?.unpriced).toBeUndefined();
    expect(usage.records.at(-1)?.costUsd).toBeGreaterThan(0);
    // The same model when the catalog does not know it: cost 0, but said to be unknown, once in the log.
    const bare = await metered([]);
    await send(bare.g);
    await send(bare.g);
    expect(usage.records.at(-1)).toMatchObject({ costUsd: 0, unpriced: true });
    expect(bare.unpriced).toEqual(['llama3.1:8b']);
    expect(await bare.metrics.registry.metrics()).toMatch(
      /pao_gateway_unpriced_requests_total\{model="llama3.1:8b",provider="platform-llms\/llama"\} 2/,
    );
    for (const g of gateways) await g.stop();
  });
});

describe('over a real socket', () => {
  it('refuses a body over 10 MB with 413 before reading it all', async () => {
    const big = JSON.stringify({ ...hello, padding: 'x'.repeat(11 * 1024 * 1024) });
    const res = await fetch(`${base}/openai/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': KEY },
      body: big,
    });
    expect(res.status).toBe(413);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('request_too_large');
    expect(double.requests).toHaveLength(0);
  });

  it('records an upload that broke off as 400 body_unreadable and keeps serving', async () => {
    const { port } = new URL(base);
    const socket = connect(Number(port), '127.0.0.1');
    await new Promise((r) => socket.once('connect', r));
    socket.write(
      `POST /openai/v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nx-api-key: ${KEY}\r\ncontent-length: 1000\r\n\r\n{"model":`,
    );
    await new Promise((r) => setTimeout(r, 50));
    socket.destroy();
    const deadline = Date.now() + 2000;
    while (usage.records.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    expect(usage.records[0]).toMatchObject({ status: 400, errorType: 'body_unreadable' });
    const next = await fetch(`${base}/openai/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': KEY },
      body: JSON.stringify(hello),
    });
    expect(next.status).toBe(200);
  });

  it('cancels the upstream call when the client goes away mid-stream', async () => {
    double.behave({ stallAfterTokens: 2 });
    const controller = new AbortController();
    const res = await fetch(`${base}/openai/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': KEY },
      body: JSON.stringify({ ...hello, stream: true }),
      signal: controller.signal,
    });
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    await reader.read();
    controller.abort();
    const deadline = Date.now() + 2000;
    while (!double.requests[0]?.aborted && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    expect(double.requests[0]?.aborted).toBe(true);
  });

  it('lists routable models with GET /openai/v1/models', async () => {
    const res = await fetch(`${base}/openai/v1/models`, { headers: { authorization: `Bearer ${KEY}` } });
    const body = (await res.json()) as { object: string; data: Array<{ id: string }> };
    expect(body.object).toBe('list');
    expect(body.data.map((m) => m.id)).toEqual(['gemma2:9b', 'llama3.1:8b', 'mistral:7b', 'qwen2.5:0.5b']);
    expect((await fetch(`${base}/openai/v1/models`)).status).toBe(401);
  });

  it('retrieves one model with GET /openai/v1/models/{id}, with the time the config was loaded', async () => {
    const res = await fetch(`${base}/openai/v1/models/llama3.1:8b`, { headers: { authorization: `Bearer ${KEY}` } });
    expect(await res.json()).toEqual({
      id: 'llama3.1:8b',
      object: 'model',
      created: 1_790_000_000,
      owned_by: 'platform-llms/llama',
      context_window: 8192,
      max_output_tokens: 8192,
    });
    const missing = await fetch(`${base}/openai/v1/models/nope:1b`, { headers: { authorization: `Bearer ${KEY}` } });
    expect(missing.status).toBe(404);
    expect(((await missing.json()) as { error: { code: string } }).error.code).toBe('model_not_found');
    expect((await fetch(`${base}/openai/v1/models/llama3.1:8b`)).status).toBe(401);
  });

  it('sends whole answers with Content-Length, streams chunked', async () => {
    const res = await fetch(`${base}/openai/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': KEY },
      body: JSON.stringify(hello),
    });
    const body = await res.text();
    expect(res.headers.get('content-length')).toBe(String(Buffer.byteLength(body)));
    expect(res.headers.get('transfer-encoding')).toBeNull();
  });
});
