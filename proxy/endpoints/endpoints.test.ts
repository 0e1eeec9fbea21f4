import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ModelDeployment } from '../../crds/model-deployment.js';
import { type OllamaDouble, startOllamaDouble } from '../../e2e/doubles/ollama.js';
import { startGateway, type TestGateway } from '../../e2e/support/gateway.js';
import { ApiKeys } from '../access/auth.js';
import { MemoryBudget } from '../access/memory-budget.js';
import { buildRoutes, RouteTable } from '../serving/routes.js';
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
  const post = (body: unknown) =>
    fetch(`${base}/openai/v1/embeddings`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': KEY },
      body: JSON.stringify(body),
    });

  it('is reserved with the body: 1,000 vectors are refused with 503 and Retry-After only while other requests hold memory', async () => {
    budget.take(10 * 1024 * 1024); // others in flight
    const many = Array.from({ length: 1000 }, (_, i) => `t${i}`);
    try {
      const busy = await post({ model: 'nomic-embed-text', input: many });
      expect(busy.status).toBe(503);
      expect(busy.headers.get('retry-after')).toBe('1');
      expect(((await busy.json()) as { error: { code: string } }).error.code).toBe('server_busy');
    } finally {
      budget.give(10 * 1024 * 1024);
    }
    // The retry the 503 promised succeeds once the others are done.
    const res = await client.embeddings.create({ model: 'nomic-embed-text', input: many });
    expect(res.data).toHaveLength(1000);
    expect(budget.inUse).toBe(0);
  });

  it('an answer that could never fit is a 400 naming the field and what fits, never a 503', async () => {
    const huge = await post({ model: 'nomic-embed-text', input: 'hi', dimensions: 65_536 * 20 });
    expect(huge.status).toBe(400);
    expect(((await huge.json()) as { error: { param: string; code: string } }).error).toMatchObject({
      param: 'dimensions',
      code: 'invalid_dimensions',
    });
    const wide = await post({
      model: 'nomic-embed-text',
      input: ['a', 'b', 'c'].concat(Array(997).fill('x')),
      dimensions: 65_536,
    });
    expect(wide.status).toBe(400);
    const wideError = ((await wide.json()) as { error: { param: string; code: string; message: string } }).error;
    expect(wideError).toMatchObject({ param: 'dimensions', code: 'answer_too_large' });
    // 32 MiB over 1,000 vectors of 28 bytes a dimension.
    expect(wideError.message).toContain('at most 1198 dimensions for 1000 inputs');
    const many = await post({ model: 'nomic-embed-text', input: Array.from({ length: 2048 }, (_, i) => `t${i}`) });
    expect(many.status).toBe(400);
    const manyError = ((await many.json()) as { error: { param: string; message: string } }).error;
    expect(manyError.param).toBe('input');
    expect(manyError.message).toContain('at most 1170 inputs of 1024 dimensions per request');
    expect(many.headers.get('retry-after')).toBeNull();
    expect(budget.inUse).toBe(0);
  });

  it('an unknown model is a 404 before the memory its answer would take is judged', async () => {
    const res = await post({
      model: 'no-such-model',
      input: Array.from({ length: 2048 }, (_, i) => `t${i}`),
      dimensions: 65_536,
    });
    expect(res.status).toBe(404);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('model_not_found');
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

  it('answers a list of prompts on a server of one prompt per call: one call each, choices prompt * n + i, usage summed once', async () => {
    const records = usage.records.length;
    const res = await client.completions.create({
      model: 'llama3.1:8b',
      prompt: ['one', 'two two'],
      n: 2,
      max_tokens: 3,
    });
    expect(res.choices.map((c) => c.index)).toEqual([0, 1, 2, 3]);
    expect(res.choices.every((c) => c.text.length > 0)).toBe(true);
    // The double counts a prompt's tokens as its length / 4, at least 1; 3 tokens per answer.
    expect(res.usage).toEqual({ prompt_tokens: 1 + 1 + 2 + 2, completion_tokens: 12, total_tokens: 18 });
    expect(usage.records.length).toBe(records + 1);
    expect(last()).toMatchObject({ status: 200, promptTokens: 6, completionTokens: 12 });
  });

  it('refuses token prompts for a server of text prompts with 400 naming prompt, and other methods with 405', async () => {
    await expect(client.completions.create({ model: 'llama3.1:8b', prompt: [1, 2, 3] })).rejects.toMatchObject({
      status: 400,
      param: 'prompt',
      code: 'unsupported_prompt',
    });
    const get = await fetch(`${base}/openai/v1/completions`, { headers: { 'x-api-key': KEY } });
    expect(get.status).toBe(405);
    expect(get.headers.get('allow')).toBe('POST');
  });
});

describe('n choices on a server that gives one per call (Ollama)', () => {
  it('chat n 3 whole: three calls, one answer with choices 0-2, usage summed and recorded once', async () => {
    const calls = double.requests.length;
    const records = usage.records.length;
    const res = await client.chat.completions.create({
      model: 'llama3.1:8b',
      messages: [{ role: 'user', content: 'hello there' }],
      n: 3,
      max_tokens: 4,
    });
    expect(double.requests.length - calls).toBe(3);
    expect(double.requests.slice(calls).every((r) => (r.body as { n?: unknown }).n === undefined)).toBe(true);
    expect(res.choices.map((c) => c.index)).toEqual([0, 1, 2]);
    expect(res.usage?.completion_tokens).toBe(12);
    expect(res.usage?.total_tokens).toBe((res.usage?.prompt_tokens ?? 0) + 12);
    expect(usage.records.length).toBe(records + 1);
    expect(last()).toMatchObject({ status: 200, completionTokens: 12, promptTokens: res.usage?.prompt_tokens });
  });

  it('chat n 2 streamed: one stream, each choice under its index, one usage chunk summed, one [DONE]', async () => {
    const records = usage.records.length;
    const res = await fetch(`${base}/openai/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': KEY },
      body: JSON.stringify({
        model: 'llama3.1:8b',
        messages: [{ role: 'user', content: 'hi' }],
        n: 2,
        max_tokens: 3,
        stream: true,
        stream_options: { include_usage: true },
      }),
    });
    expect(res.status).toBe(200);
    const events = (await res.text())
      .split('\n\n')
      .filter((e) => e !== '')
      .map((e) => e.replace(/^data: /, ''));
    expect(events.filter((e) => e === '[DONE]')).toEqual(['[DONE]']);
    expect(events.at(-1)).toBe('[DONE]');
    const chunks = events
      .slice(0, -1)
      .map(
        (e) =>
          JSON.parse(e) as { id: string; choices: Array<{ index: number }>; usage?: { completion_tokens: number } },
      );
    expect(new Set(chunks.map((c) => c.id)).size).toBe(1);
    expect(new Set(chunks.flatMap((c) => c.choices.map((ch) => ch.index)))).toEqual(new Set([0, 1]));
    const usages = chunks.filter((c) => c.usage);
    expect(usages).toHaveLength(1);
    expect(usages[0]?.usage?.completion_tokens).toBe(6);
    // A stream's record is settled once its last byte went out: waited for, not timed.
    await expect.poll(() => usage.records.length).toBe(records + 1);
    expect(last()).toMatchObject({ status: 200, stream: true, completionTokens: 6 });
  });
});
