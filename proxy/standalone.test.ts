import { appendFileSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AwsDouble, startAwsDouble } from '../e2e/doubles/aws.js';
import { type OllamaDouble, startOllamaDouble } from '../e2e/doubles/ollama.js';
import { type ProxyProcess, startProxyProcess } from '../e2e/proxy-process.js';

/**
 * The README's main job: the proxy process in standalone mode (--config, --keys-file),
 * routing a tagged request to an Ollama-compatible server and shutting down on SIGTERM.
 */

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
    models: { 'eu-west-1': [{ modelId: 'amazon.nova-lite-v1:0', providerName: 'Amazon' }] },
  });
  appendFileSync(
    join(dir, 'gateway.yaml'),
    [
      '\n---',
      'apiVersion: ai.platform/v1beta1',
      'kind: ExternalProvider',
      'metadata: {name: bedrock}',
      'spec: {provider: bedrock, displayName: B, region: eu-west-1, auth: {method: AccessKey, secretRef: {name: aws-keys}}, models: ["amazon.nova-lite-v1:0"]}',
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

  it('logs no key and no prompt, and stops on SIGTERM', async () => {
    expect(await proxy.stop('SIGTERM')).toBe(0);
    const log = proxy.output();
    expect(log).toContain('"shutting down"');
    expect(log).not.toContain('sk-standalone');
    expect(log).not.toContain('standaloneSecret');
    expect(log).not.toContain('"hi"');
  });
});
