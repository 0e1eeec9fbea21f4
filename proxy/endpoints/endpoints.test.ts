import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ModelDeployment } from '../../crds/model-deployment.js';
import { type OllamaDouble, startOllamaDouble } from '../../e2e/doubles/ollama.js';
import { startGateway, type TestGateway } from '../../e2e/support/gateway.js';
import { ApiKeys } from '../access/auth.js';
import { MemoryBudget } from '../access/memory-budget.js';
import { buildRoutes, RouteTable } from '../routing/routes.js';
import { ProxyMetrics } from '../telemetry/metrics.js';
import { OpenAICompatibleUpstream } from '../upstreams/openai-compatible.js';
import { MemoryUsage } from '../usage/record.js';

/**
 * The legacy completions and the embeddings endpoints, through the same pipeline as chat
 * (auth, tags, routing, usage, the error envelope), served by node:http as in production and
 * called with the official SDK, against the Ollama double.
 */

const KEY = 'sk-endpoints';
let double: OllamaDouble;
let gateway: TestGateway;
let client: OpenAI;
let base: string;
const usage = new MemoryUsage();
/** 32 MiB for all requests in flight: room for ordinary embeddings, not for the largest answers. */
const budget = new MemoryBudget(32 * 1024 * 1024);

function md(name: string, model: string): ModelDeployment {
  return {
    apiVersion: 'ai.platform/v1beta1',
    kind: 'ModelDeployment',
    metadata: { name, namespace: 'platform-llms' },
    spec: { model, serviceName: name, port: 11434, replicas: 1, endpoint: double.url },
  };
}

beforeAll(async () => {
  double = await startOllamaDouble({ models: ['llama3.1:8b', 'nomic-embed-text'] });
  const routes = new RouteTable();
  routes.set(buildRoutes([md('llama', 'llama3.1:8b'), md('embed', 'nomic-embed-text')], { standalone: true }));
  gateway = await startGateway(
    {},
    {
      keys: ApiKeys.fromKeys([KEY]),
      routes,
      inCluster: new OpenAICompatibleUpstream(),
      usage,
      metrics: new ProxyMetrics(),
      memory: budget,
    },
  );
  base = gateway.url;
  client = new OpenAI({ baseURL: `${base}/openai/v1`, apiKey: KEY, maxRetries: 0 });
});

afterAll(async () => {
  await gateway?.stop();
  await double?.close();
});

const last = () => usage.records.at(-1);

describe('POST /openai/v1/embeddings', () => {
  it('answers the SDK with one vector per input, tagged and recorded with its prompt tokens', async () => {
    const res = await client.embeddings.create(
      { model: 'nomic-embed-text', input: ['first text', 'a second, longer text'] },
      { headers: { 'x-tags': 'team:search,project:rag' } },
    );
    expect(res.data.map((d) => d.index)).toEqual([0, 1]);
    expect(res.data[0]?.embedding.length).toBeGreaterThan(0);
    expect(res.usage.prompt_tokens).toBeGreaterThan(0);
    expect(last()).toMatchObject({
      model: 'nomic-embed-text',
      provider: 'platform-llms/embed',
      status: 200,
      stream: false,
      promptTokens: res.usage.prompt_tokens,
      completionTokens: 0,
      tags: [
        { key: 'team', value: 'search' },
        { key: 'project', value: 'rag' },
      ],
    });
    // Priced from the catalog like chat (nomic-embed-text is a catalog model of kind embedding).
    expect(last()?.costUsd).toBeGreaterThan(0);
    expect(last()?.unpriced).toBeUndefined();
  });

  it('refuses bad input with 400 naming the field, no key with 401, an unknown model with 404', async () => {
    const bad = await fetch(`${base}/openai/v1/embeddings`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': KEY },
      body: JSON.stringify({ model: 'nomic-embed-text', input: [] }),
    });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: { param: string } }).error.param).toBe('input');
    const anon = await fetch(`${base}/openai/v1/embeddings`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'nomic-embed-text', input: 'x' }),
    });
    expect(anon.status).toBe(401);
    await expect(client.embeddings.create({ model: 'nope', input: 'x' })).rejects.toMatchObject({
      status: 404,
      code: 'model_not_found',
    });
  });
});

describe('the memory an embeddings answer will take', () => {
  it('is reserved with the body: a small request for 2,048 vectors is refused with 503 while memory is in use', async () => {
    budget.take(1); // another request in flight
    try {
      const many = Array.from({ length: 2048 }, (_, i) => `t${i}`);
      await expect(client.embeddings.create({ model: 'nomic-embed-text', input: many })).rejects.toMatchObject({
        status: 503,
        code: 'server_busy',
      });
      const few = await client.embeddings.create({ model: 'nomic-embed-text', input: ['a', 'b'] });
      expect(few.data).toHaveLength(2);
    } finally {
      budget.give(1);
    }
    // Every reservation was given back.
    expect(budget.inUse).toBe(0);
  });
});

describe('POST /openai/v1/completions', () => {
  it('answers whole and streamed, with usage recorded either way', async () => {
    const whole = await client.completions.create({ model: 'llama3.1:8b', prompt: 'Once upon a time', max_tokens: 5 });
    expect(whole.object).toBe('text_completion');
    expect(whole.choices[0]?.text.length).toBeGreaterThan(0);
    expect(last()).toMatchObject({ model: 'llama3.1:8b', completionTokens: 5, stream: false, status: 200 });

    const stream = await client.completions.create({ model: 'llama3.1:8b', prompt: 'Count', stream: true });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.text ?? '';
    expect(text.length).toBeGreaterThan(0);
    await new Promise((r) => setTimeout(r, 50));
    // The gateway asked for the usage chunk itself; the caller, who did not, got none.
    expect(last()).toMatchObject({ model: 'llama3.1:8b', stream: true, status: 200 });
    expect(last()?.completionTokens).toBeGreaterThan(0);
    expect(last()?.tokensCounted).toBeUndefined();
  });

  it('refuses a prompt that is not one string with 400, and other methods with 405', async () => {
    await expect(client.completions.create({ model: 'llama3.1:8b', prompt: ['a', 'b'] })).rejects.toMatchObject({
      status: 400,
      param: 'prompt',
    });
    const get = await fetch(`${base}/openai/v1/completions`, { headers: { 'x-api-key': KEY } });
    expect(get.status).toBe(405);
    expect(get.headers.get('allow')).toBe('POST');
  });
});
