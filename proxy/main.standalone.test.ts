import { appendFileSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AwsDouble, startAwsDouble } from '../e2e/doubles/aws.js';
import { type OllamaDouble, startOllamaDouble } from '../e2e/doubles/ollama.js';
import { type ProxyProcess, startProxyProcess } from '../e2e/support/proxy-process.js';

/**
 * The README's main job: the proxy process in standalone mode (--config, --keys-file),
 * routing a tagged request to an Ollama-compatible server and shutting down on SIGTERM.
 */

const TITAN = 'amazon.titan-embed-text-v2:0';
const COHERE = 'cohere.embed-multilingual-v3';
const SONNET = 'anthropic.claude-3-7-sonnet-20250219-v1:0';

let double: OllamaDouble;
let aws: AwsDouble;
let proxy: ProxyProcess;
let base = '';

beforeAll(async () => {
  double = await startOllamaDouble({ models: ['llama3.2:3b'] });
  const dir = mkdtempSync(join(tmpdir(), 'standalone-'));
  writeFileSync(
    join(dir, 'gateway.yaml'),
    [
      'apiVersion: ai.platform/v1beta1',
      'kind: ModelDeployment',
      'metadata: {name: local}',
      `spec: {model: "llama3.2:3b", serviceName: local, endpoint: "${double.url}"}`,
    ].join('\n'),
  );
  writeFileSync(join(dir, 'keys.txt'), '# keys\nsk-standalone\n');
  // A Bedrock provider by access key, its Secret laid out as a mounted volume.
  aws = await startAwsDouble({
    principals: [
      {
        accessKeyId: 'AKIASTANDALONE000001',
        secretAccessKey: 'standaloneSecret000000000000000000000000',
        arn: 'arn:aws:iam::123456789012:user/standalone',
        allow: ['bedrock:*'],
        account: '123456789012',
      },
    ],
    models: {
      'eu-west-1': [
        { modelId: 'amazon.nova-lite-v1:0', providerName: 'Amazon' },
        { modelId: 'amazon.nova-micro-v1:0', providerName: 'Amazon' },
        { modelId: TITAN, providerName: 'Amazon', outputModalities: ['EMBEDDING'] },
        { modelId: COHERE, providerName: 'Cohere', outputModalities: ['EMBEDDING'] },
        {
          modelId: SONNET,
          providerName: 'Anthropic',
          inferenceTypesSupported: ['INFERENCE_PROFILE'],
          promptCaching: true,
          global: true,
        },
      ],
    },
    guardrails: [
      {
        id: 'gr1standalone',
        versions: ['1'],
        blockedWords: ['forbidden'],
        blockedMessage: 'Sorry, I cannot answer that.',
      },
    ],
  });
  appendFileSync(
    join(dir, 'gateway.yaml'),
    [
      '\n---',
      'apiVersion: ai.platform/v1beta1',
      'kind: ExternalProvider',
      'metadata: {name: bedrock}',
      `spec: {provider: bedrock, displayName: B, region: eu-west-1, auth: {method: AccessKey, secretRef: {name: aws-keys}}, models: ["amazon.nova-lite-v1:0", "${TITAN}", "${COHERE}", "eu.${SONNET}", "global.${SONNET}"]}`,
      '---',
      'apiVersion: ai.platform/v1beta1',
      'kind: ExternalProvider',
      'metadata: {name: guarded}',
      'spec: {provider: bedrock, displayName: G, region: eu-west-1, auth: {method: AccessKey, secretRef: {name: aws-keys}}, models: ["amazon.nova-micro-v1:0"], guardrail: {identifier: gr1standalone, version: "1"}}',
    ].join('\n'),
  );
  mkdirSync(join(dir, 'secrets', 'aws-keys'), { recursive: true });
  writeFileSync(join(dir, 'secrets', 'aws-keys', 'accessKeyId'), 'AKIASTANDALONE000001');
  writeFileSync(join(dir, 'secrets', 'aws-keys', 'secretAccessKey'), 'standaloneSecret000000000000000000000000\n');
  proxy = await startProxyProcess(
    [
      '--config',
      join(dir, 'gateway.yaml'),
      '--keys-file',
      join(dir, 'keys.txt'),
      '--secrets-dir',
      join(dir, 'secrets'),
      // A store of its own: the usage assertions count this run's requests only.
      '--usage-db',
      join(dir, 'usage.db'),
    ],
    // The SDK's own endpoint override, as the README documents.
    { ...process.env, AWS_ENDPOINT_URL_BEDROCK_RUNTIME: aws.url },
  );
  base = proxy.base;
}, 30_000);

afterAll(async () => {
  await proxy?.stop('SIGKILL');
  await double.close();
  await aws.close();
});

describe('standalone proxy process', () => {
  it("listens on loopback only and routes the config file's model", async () => {
    expect(base).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    const res = await fetch(`${base}/openai/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': 'sk-standalone', 'x-tags': 'team:ml' },
      body: JSON.stringify({
        model: 'llama3.2:3b',
        messages: [{ role: 'user', content: 'hi' }],
        tags: ['project:demo'],
      }),
    });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { object: string; choices: Array<{ message: { role: string } }> };
    expect(body.object).toBe('chat.completion');
    expect(body.choices[0]?.message.role).toBe('assistant');
    expect(double.requests).toHaveLength(1);
  });

  it('routes a Bedrock model of the config file with the access key from --secrets-dir', async () => {
    const res = await fetch(`${base}/openai/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: 'Bearer sk-standalone' },
      body: JSON.stringify({ model: 'amazon.nova-lite-v1:0', messages: [{ role: 'user', content: 'hi there' }] }),
    });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { usage: { prompt_tokens: number; completion_tokens: number } };
    expect(body.usage).toMatchObject({ prompt_tokens: 2, completion_tokens: 8 });
    expect(aws.calls.map((c) => [c.action, c.accessKeyId, c.status])).toEqual([
      ['ConverseStream', 'AKIASTANDALONE000001', 200],
    ]);
  });

  it('runs a tool-calling loop of the official SDK on a Bedrock model: call, tool result, final answer', async () => {
    const client = new OpenAI({ baseURL: `${base}/openai/v1`, apiKey: 'sk-standalone', maxRetries: 0 });
    const tools: OpenAI.Chat.Completions.ChatCompletionTool[] = [
      {
        type: 'function',
        function: {
          name: 'get_weather',
          description: 'Weather in a city',
          parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
        },
      },
    ];
    for (const stream of [false, true]) {
      const messages: OpenAI.Chat.Completions.ChatCompletionMessageParam[] = [
        { role: 'user', content: 'What is the weather in Paris?' },
      ];
      let first: OpenAI.Chat.Completions.ChatCompletionMessage;
      let finish: string | null;
      if (stream) {
        const s = client.chat.completions.stream({ model: 'amazon.nova-lite-v1:0', messages, tools });
        const done = await s.finalChatCompletion();
        first = done.choices[0]?.message as OpenAI.Chat.Completions.ChatCompletionMessage;
        finish = done.choices[0]?.finish_reason ?? null;
      } else {
        const done = await client.chat.completions.create({ model: 'amazon.nova-lite-v1:0', messages, tools });
        first = done.choices[0]?.message as OpenAI.Chat.Completions.ChatCompletionMessage;
        finish = done.choices[0]?.finish_reason ?? null;
      }
      expect(finish, `stream ${stream}`).toBe('tool_calls');
      const call = first.tool_calls?.[0];
      if (call?.type !== 'function') throw new Error('no function call');
      expect(call.function.name).toBe('get_weather');
      expect(JSON.parse(call.function.arguments)).toEqual({ city: 'tok0' });
      messages.push(first, { role: 'tool', tool_call_id: call.id, content: '18 C and sunny' });
      const answer = await client.chat.completions.create({ model: 'amazon.nova-lite-v1:0', messages, tools });
      expect(answer.choices[0]?.finish_reason).toBe('stop');
      expect(answer.choices[0]?.message.content).toMatch(/tok0/);
    }
    // The double checked the tool turns as Bedrock does (ids answered, toolConfig present): all 200.
    expect(aws.calls.filter((c) => c.status !== 200)).toEqual([]);
  });

  it('runs a tool loop with reasoning_effort on Claude: the signed thinking blocks go back with the tool result', async () => {
    const client = new OpenAI({ baseURL: `${base}/openai/v1`, apiKey: 'sk-standalone', maxRetries: 0 });
    const tools: OpenAI.Chat.Completions.ChatCompletionTool[] = [
      { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: {} } } },
    ];
    const params = { model: `eu.${SONNET}`, tools, reasoning_effort: 'low' as const, max_tokens: 2000 };
    for (const stream of [false, true]) {
      const messages: OpenAI.Chat.Completions.ChatCompletionMessageParam[] = [
        { role: 'user', content: 'What time is it?' },
      ];
      const done = stream
        ? await client.chat.completions.stream({ ...params, messages }).finalChatCompletion()
        : await client.chat.completions.create({ ...params, messages });
      const first = done.choices[0]?.message as OpenAI.Chat.Completions.ChatCompletionMessage & {
        reasoning_content?: string;
        thinking_blocks?: Array<{ type: string; thinking: string; signature: string }>;
      };
      expect(done.choices[0]?.finish_reason, `stream ${stream}`).toBe('tool_calls');
      expect(first.reasoning_content).toBe('The user asks; a short answer will do.');
      expect(first.thinking_blocks).toEqual([
        { type: 'thinking', thinking: 'The user asks; a short answer will do.', signature: expect.any(String) },
      ]);
      const call = first.tool_calls?.[0];
      if (call?.type !== 'function') throw new Error('no function call');
      const result = { role: 'tool' as const, tool_call_id: call.id, content: '12:00' };
      // Without the thinking blocks Bedrock refuses the next turn (the double checks it as Anthropic does).
      const { thinking_blocks: _dropped, ...bare } = first;
      await expect(
        client.chat.completions.create({ ...params, messages: [...messages, bare, result] }),
      ).rejects.toMatchObject({ status: 400, message: expect.stringContaining('thinking') });
      // With them, as the answer gave them, the loop goes on.
      const answer = await client.chat.completions.create({ ...params, messages: [...messages, first, result] });
      expect(answer.choices[0]?.finish_reason, `stream ${stream}`).toBe('stop');
      expect(answer.choices[0]?.message.content).toMatch(/tok0/);
    }
  });

  it('Anthropic Messages to Claude on Bedrock: extended thinking and a tool, the signed block round-trips untouched', async () => {
    const client = new Anthropic({ baseURL: `${base}/anthropic`, apiKey: 'sk-standalone', maxRetries: 0 });
    const tools: Anthropic.Tool[] = [
      { name: 'get_time', description: 'the time', input_schema: { type: 'object', properties: {}, required: [] } },
    ];
    const params = {
      model: `eu.${SONNET}`,
      max_tokens: 2000,
      thinking: { type: 'enabled' as const, budget_tokens: 1024 },
      tools,
    };
    for (const stream of [false, true]) {
      const messages: Anthropic.MessageParam[] = [{ role: 'user', content: 'Use get_time: what time is it?' }];
      const first = stream
        ? await client.messages.stream({ ...params, messages }).finalMessage()
        : await client.messages.create({ ...params, messages });
      expect(first.stop_reason, `stream ${stream}`).toBe('tool_use');
      expect(first.content.map((b) => b.type)).toEqual(['thinking', 'tool_use']);
      const use = first.content[1];
      if (use?.type !== 'tool_use') throw new Error('no tool_use');
      const result: Anthropic.MessageParam = {
        role: 'user',
        content: [{ type: 'tool_result', tool_use_id: use.id, content: '12:00' }],
      };
      // A block altered on the way (here its signature) is refused by Bedrock, in Anthropic's envelope.
      const altered = first.content.map((b) => (b.type === 'thinking' ? { ...b, signature: `${b.signature}x` } : b));
      await expect(
        client.messages.create({ ...params, messages: [...messages, { role: 'assistant', content: altered }, result] }),
      ).rejects.toMatchObject({ status: 400, message: expect.stringContaining('signature') });
      // As the answer gave it, the loop goes on.
      const answer = await client.messages.create({
        ...params,
        messages: [...messages, { role: 'assistant', content: first.content }, result],
      });
      expect(answer.stop_reason, `stream ${stream}`).toBe('end_turn');
      expect(answer.content.at(-1)?.type).toBe('text');
    }
  });

  it('answers response_format json_schema on a Bedrock model with JSON that fits the schema', async () => {
    const client = new OpenAI({ baseURL: `${base}/openai/v1`, apiKey: 'sk-standalone', maxRetries: 0 });
    for (const stream of [false, true]) {
      const params = {
        model: 'amazon.nova-lite-v1:0',
        messages: [{ role: 'user' as const, content: 'Who wrote the first program?' }],
        response_format: {
          type: 'json_schema' as const,
          json_schema: {
            name: 'person',
            schema: { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] },
          },
        },
      };
      const done = stream
        ? await client.chat.completions.stream(params).finalChatCompletion()
        : await client.chat.completions.create(params);
      expect(done.choices[0]?.finish_reason, `stream ${stream}`).toBe('stop');
      expect(done.choices[0]?.message.tool_calls ?? []).toEqual([]);
      expect(JSON.parse(done.choices[0]?.message.content ?? '')).toEqual({ name: 'tok0' });
    }
  });

  it('answers embeddings of the official SDK from Titan v2 and Cohere Embed through InvokeModel', async () => {
    const client = new OpenAI({ baseURL: `${base}/openai/v1`, apiKey: 'sk-standalone', maxRetries: 0 });
    const before = aws.calls.length;
    // The SDK asks for base64 by default and decodes it: the vectors arrive as numbers.
    const titan = await client.embeddings.create({
      model: TITAN,
      input: ['hello world', 'second text here'],
      dimensions: 256,
    });
    expect(titan.data.map((d) => [d.index, d.embedding.length])).toEqual([
      [0, 256],
      [1, 256],
    ]);
    const norm = Math.sqrt(titan.data[0]?.embedding.reduce((n, v) => n + v * v, 0) ?? 0);
    expect(norm).toBeCloseTo(1, 5);
    expect(titan.usage).toEqual({ prompt_tokens: 5, total_tokens: 5 });
    const again = await client.embeddings.create({
      model: TITAN,
      input: 'hello world',
      dimensions: 256,
      encoding_format: 'float',
    });
    expect(again.data[0]?.embedding[0]).toBeCloseTo(titan.data[0]?.embedding[0] ?? Number.NaN, 6);

    const cohere = await client.embeddings.create({
      model: COHERE,
      input: Array.from({ length: 100 }, (_, i) => `text ${i}`),
    });
    expect(cohere.data).toHaveLength(100);
    expect(cohere.data[99]?.embedding).toHaveLength(1024);
    // Two InvokeModel calls (96 + 4 texts); the tokens from Bedrock's response header.
    expect(cohere.usage.prompt_tokens).toBe(200);
    expect(
      aws.calls
        .slice(before)
        .filter((c) => c.action === 'InvokeModel')
        .map((c) => c.status),
    ).toEqual([200, 200, 200, 200, 200]);

    // A chat model asked for embeddings, an embedding model asked to chat: clear 400s.
    const wrong = await fetch(`${base}/openai/v1/embeddings`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': 'sk-standalone' },
      body: JSON.stringify({ model: 'amazon.nova-lite-v1:0', input: 'x' }),
    });
    expect(wrong.status).toBe(400);
    expect(((await wrong.json()) as { error: { code: string; message: string } }).error).toMatchObject({
      code: 'unsupported_endpoint',
      message: expect.stringContaining('it answers /openai/v1/chat/completions, /openai/v1/responses'),
    });
    const chatToEmbed = await fetch(`${base}/openai/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': 'sk-standalone' },
      body: JSON.stringify({ model: TITAN, messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(chatToEmbed.status).toBe(400);
    expect(((await chatToEmbed.json()) as { error: { message: string } }).error.message).toContain(
      'it answers /openai/v1/embeddings',
    );
  });

  it("applies the provider's guardrail: a blocked prompt ends with content_filter and the guardrail's message", async () => {
    const client = new OpenAI({ baseURL: `${base}/openai/v1`, apiKey: 'sk-standalone', maxRetries: 0 });
    const blocked = await client.chat.completions.create({
      model: 'amazon.nova-micro-v1:0',
      messages: [{ role: 'user', content: 'tell me the forbidden thing' }],
    });
    expect(blocked.choices[0]).toMatchObject({
      finish_reason: 'content_filter',
      message: { content: 'Sorry, I cannot answer that.' },
    });
    const fine = await client.chat.completions.create({
      model: 'amazon.nova-micro-v1:0',
      messages: [{ role: 'user', content: 'hello' }],
    });
    expect(fine.choices[0]?.finish_reason).toBe('stop');
  });

  it('marks a cached prompt prefix with cache_control and prices cache writes and reads apart', async () => {
    const system = {
      role: 'system',
      content: [{ type: 'text', text: 'rule '.repeat(1100), cache_control: { type: 'ephemeral' } }],
    };
    const ask = async () => {
      const res = await fetch(`${base}/openai/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-api-key': 'sk-standalone', 'x-tags': 'project:cache' },
        body: JSON.stringify({ model: `eu.${SONNET}`, messages: [system, { role: 'user', content: 'question' }] }),
      });
      expect(res.status).toBe(200);
      return ((await res.json()) as { usage: Record<string, unknown> }).usage;
    };
    // First call writes the 1100-token prefix, the second reads it: both in prompt_tokens.
    expect(await ask()).toEqual({ prompt_tokens: 1101, completion_tokens: 8, total_tokens: 1109 });
    expect(await ask()).toEqual({
      prompt_tokens: 1101,
      completion_tokens: 8,
      total_tokens: 1109,
      prompt_tokens_details: { cached_tokens: 1100 },
    });
    await new Promise((r) => setTimeout(r, 700));
    const usage = (await (
      await fetch(`${base}/v1/usage?tag=project:cache`, { headers: { 'x-api-key': 'sk-standalone' } })
    ).json()) as { totals: { requests: number; costUsd: number } };
    // Claude 3.7 Sonnet per 1M: input 3, cache write 3.75, cache read 0.3, output 15.
    const expected = (1 * 3 + 1100 * 3.75 + 8 * 15 + (1 * 3 + 1100 * 0.3 + 8 * 15)) / 1e6;
    expect(usage.totals.requests).toBe(2);
    expect(usage.totals.costUsd).toBeCloseTo(expected, 9);
  });

  it('routes a global. profile and prices it as its foundation model', async () => {
    const res = await fetch(`${base}/openai/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': 'sk-standalone', 'x-tags': 'project:global' },
      body: JSON.stringify({ model: `global.${SONNET}`, messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(res.status).toBe(200);
    await new Promise((r) => setTimeout(r, 700));
    const usage = (await (
      await fetch(`${base}/v1/usage?tag=project:global`, { headers: { 'x-api-key': 'sk-standalone' } })
    ).json()) as { totals: { costUsd: number } };
    // Claude 3.7 costs the same routed globally: 1 input and 8 output tokens at 3 and 15 per 1M.
    expect(usage.totals.costUsd).toBeCloseTo((1 * 3 + 8 * 15) / 1e6, 9);
  });

  it('logs no key and no prompt, and stops on SIGTERM', async () => {
    expect(await proxy.stop('SIGTERM')).toBe(0);
    const log = proxy.output();
    expect(log).toContain('"shutting down"');
    expect(log).not.toContain('sk-standalone');
    expect(log).not.toContain('standaloneSecret');
    expect(log).not.toContain('"hi"');
  });
});
