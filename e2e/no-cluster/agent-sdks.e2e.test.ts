import { createOpenAI } from '@ai-sdk/openai';
import {
  AIMessage,
  type AIMessageChunk,
  type BaseMessage,
  HumanMessage,
  SystemMessage,
} from '@langchain/core/messages';
import { tool as langchainTool } from '@langchain/core/tools';
import { ChatOpenAI } from '@langchain/openai';
import {
  Agent,
  type AgentInputItem,
  tool as agentsTool,
  assistant,
  OpenAIProvider,
  OpenAIResponsesModel,
  run,
  setTracingDisabled,
  user,
} from '@openai/agents';
import { APICallError, generateText, stepCountIs, streamText, tool as vercelTool } from 'ai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { OLLAMA_MODEL, type OllamaServer } from '../ollama/server.js';
import { type AgentGateway, startAgentGateway, type UsageRow } from '../support/agent-gateway.js';
import type { ProxyProcess } from '../support/proxy-process.js';

/**
 * Three agent SDKs, pinned, each with its default OpenAI model class (all speak OpenAI's
 * Responses API): the Vercel AI SDK (`ai` + `@ai-sdk/openai`), the OpenAI Agents SDK
 * (`@openai/agents`) and LangChain (`@langchain/openai` with useResponsesApi). Each makes a
 * plain call, a streamed one and a turn with a tool, to Ollama directly and through the gateway
 * in front of it (the two compared: temperature 0 makes the 135M model deterministic), and
 * through the gateway to a Claude model on Bedrock (Responses translated to chat, then Converse,
 * served by the AWS double, whose Claude calls the first tool offered and answers text after the
 * tool's result). Usage and tags are read back from the gateway's store.
 */

const MODEL = OLLAMA_MODEL;
const CLAUDE = 'us.anthropic.claude-sonnet-4-5-20250929-v1:0';
const KEY = 'sk-e2e-sdks-8b2e5d1c0f9a7e64';
const SYSTEM = 'You are terse.';
const QUESTION = 'Name a fruit.';

// The Agents SDK would export its traces to OpenAI's platform.
setTracingDisabled(true);

let gw: AgentGateway;
let ollama: OllamaServer;
let proxy: ProxyProcess;

/** The gateway's usage rows carrying every tag of `tags` (an X-Tags value), once at least `count` are written. */
const rowsTagged = (tags: string, count: number): Promise<UsageRow[]> => {
  const wanted = tags.split(',');
  return gw.rowsAtLeast((r) => wanted.every((t) => (JSON.parse(r.tags) as string[]).includes(t)), count);
};

/** Request tags naming the SDK and the case: each test finds its own usage rows by the case. */
const tagsFor = (sdk: string, kase: string) => `team:agents,sdk:${sdk},case:${kase}`;

beforeAll(async () => {
  gw = await startAgentGateway({
    key: KEY,
    bedrock: [{ modelId: CLAUDE.slice('us.'.length), providerName: 'Anthropic' }],
    providerModels: [CLAUDE],
  });
  ({ ollama, proxy } = gw);
}, 600_000);

afterAll(async () => {
  await gw?.stop();
});

/** Where each SDK is pointed: Ollama's own OpenAI API, or the gateway's (with its key). */
const direct = () => ({ baseURL: `${ollama.url}/v1`, apiKey: 'ollama' });
const gateway = () => ({ baseURL: `${proxy.base}/openai/v1`, apiKey: KEY });

/** A two-shot example in the conversation: SmolLM2 then calls the tool (as Ollama parses <tool_call>). */
const FEW_SHOT = [
  { role: 'user', content: 'Use the Bash tool to run: echo one' },
  { role: 'assistant', content: '<tool_call>\n{"name": "Bash", "arguments": {"command": "echo one"}}\n</tool_call>' },
  { role: 'user', content: 'Use the Bash tool to run: echo three' },
  { role: 'assistant', content: '<tool_call>\n{"name": "Bash", "arguments": {"command": "echo three"}}\n</tool_call>' },
  { role: 'user', content: 'Use the Bash tool to run: echo two' },
] as const;
const BASH = { name: 'Bash', description: 'Run a shell command', schema: z.object({ command: z.string() }) };
/** What SmolLM2 asks for after the few-shot; what the double's Claude fills every required string with. */
const OLLAMA_INPUT = { command: 'echo two' };
const CLAUDE_INPUT = { command: 'tok0' };

/**
 * Checks the usage rows of one case (its X-Tags value): one per request, in order, each with the
 * request's tags, status 200, the stream flag given and the prompt and completion tokens in `usage`.
 */
async function expectRows(
  tags: string,
  model: string,
  usage: Array<{ prompt: number | undefined; completion: number | undefined }>,
  stream: boolean,
) {
  const rows = await rowsTagged(tags, usage.length);
  expect(rows.map((r) => ({ model: r.model, status: r.status, stream: r.stream === 1 }))).toEqual(
    usage.map(() => ({ model, status: 200, stream })),
  );
  expect(rows.map((r) => ({ prompt: r.prompt, completion: r.completion }))).toEqual(usage);
  for (const r of rows) expect((JSON.parse(r.tags) as string[]).sort()).toEqual(tags.split(',').sort());
}

describe('Vercel AI SDK (ai + @ai-sdk/openai, Responses API)', () => {
  const provider = (where: { baseURL: string; apiKey: string }, tags: string) =>
    createOpenAI({ ...where, headers: { 'X-Tags': tags } });
  const bash = (calls: unknown[], result: string) =>
    vercelTool({
      description: BASH.description,
      inputSchema: BASH.schema,
      execute: async (input) => {
        calls.push(input);
        return result;
      },
    });
  const ask = { system: SYSTEM, prompt: QUESTION, temperature: 0, maxOutputTokens: 16, maxRetries: 0 };

  it('generateText and streamText answer as Ollama does directly, with usage and tags recorded', async () => {
    const tags = tagsFor('vercel', 'plain');
    const byDirect = await generateText({ model: provider(direct(), tags)(MODEL), ...ask });
    expect(byDirect.text.length).toBeGreaterThan(0);
    const viaGateway = await generateText({ model: provider(gateway(), tags)(MODEL), ...ask });
    expect(viaGateway.text).toBe(byDirect.text);
    expect(viaGateway.usage).toEqual(byDirect.usage);
    expect(viaGateway.finishReason).toBe(byDirect.finishReason);
    expect(viaGateway.response.headers?.['x-request-id']).toMatch(/^req_/);
    const usage = { prompt: byDirect.usage.inputTokens, completion: byDirect.usage.outputTokens };
    await expectRows(tags, MODEL, [usage], false);

    const streamTags = tagsFor('vercel', 'stream');
    const streamed = streamText({ model: provider(gateway(), streamTags)(MODEL), ...ask });
    let text = '';
    for await (const delta of streamed.textStream) text += delta;
    expect(text).toBe(byDirect.text);
    expect(await streamed.usage).toEqual(byDirect.usage);
    await expectRows(streamTags, MODEL, [usage], true);
  });

  it('runs a tool round trip (tool call, execute, answer) as Ollama does directly', async () => {
    const tags = tagsFor('vercel', 'tool');
    const turn = async (where: { baseURL: string; apiKey: string }) => {
      const calls: unknown[] = [];
      const result = await generateText({
        model: provider(where, tags)(MODEL),
        messages: [...FEW_SHOT],
        tools: { Bash: bash(calls, 'two') },
        stopWhen: stepCountIs(3),
        temperature: 0,
        maxOutputTokens: 64,
        maxRetries: 0,
      });
      return { calls, result };
    };
    const byDirect = await turn(direct());
    expect(byDirect.calls).toEqual([OLLAMA_INPUT]);
    const viaGateway = await turn(gateway());
    expect(viaGateway.calls).toEqual([OLLAMA_INPUT]);
    const steps = (r: typeof byDirect.result) =>
      r.steps.map((s) => ({
        finishReason: s.finishReason,
        calls: s.toolCalls.map((c) => ({ name: c.toolName, input: c.input })),
        text: s.text,
        usage: s.usage,
      }));
    expect(steps(byDirect.result).map((s) => s.finishReason)).toEqual(['tool-calls', 'stop']);
    expect(steps(viaGateway.result)).toEqual(steps(byDirect.result));
    expect(viaGateway.result.text).toBe(byDirect.result.text);
    await expectRows(
      tags,
      MODEL,
      byDirect.result.steps.map((s) => ({ prompt: s.usage.inputTokens, completion: s.usage.outputTokens })),
      false,
    );
  });

  it('reaches Claude on Bedrock: generateText, streamText, and a tool the SDK executes, streamed too', async () => {
    const tags = tagsFor('vercel', 'bedrock');
    const claude = provider(gateway(), tags)(CLAUDE);
    const plain = await generateText({ model: claude, prompt: 'hello', maxOutputTokens: 10, maxRetries: 0 });
    expect(plain.text).toMatch(/^tok0/);
    const streamed = streamText({ model: claude, prompt: 'hello', maxOutputTokens: 10, maxRetries: 0 });
    let text = '';
    for await (const delta of streamed.textStream) text += delta;
    expect(text).toBe(plain.text);
    expect(await streamed.usage).toEqual(plain.usage);
    const toolTurn = (calls: unknown[]) => ({
      model: claude,
      prompt: 'Use Bash to list files',
      tools: { Bash: bash(calls, 'a.txt') },
      stopWhen: stepCountIs(3),
      maxOutputTokens: 50,
      maxRetries: 0,
    });
    const calls: unknown[] = [];
    const turn = await generateText(toolTurn(calls));
    expect(calls).toEqual([CLAUDE_INPUT]);
    expect(turn.steps.map((s) => s.finishReason)).toEqual(['tool-calls', 'stop']);
    expect(turn.text).toMatch(/^tok0/);
    const streamedCalls: unknown[] = [];
    const streamedTurn = streamText(toolTurn(streamedCalls));
    expect(await streamedTurn.text).toBe(turn.text);
    expect(streamedCalls).toEqual([CLAUDE_INPUT]);
    const streamedSteps = await streamedTurn.steps;
    expect(streamedSteps.map((s) => s.finishReason)).toEqual(['tool-calls', 'stop']);
    const rows = await rowsTagged(tags, 6);
    expect(rows.map((r) => [r.model, r.status, r.stream])).toEqual(
      [0, 1, 0, 0, 1, 1].map((stream) => [CLAUDE, 200, stream]),
    );
    expect(rows.map((r) => ({ prompt: r.prompt, completion: r.completion }))).toEqual(
      [plain, plain, ...turn.steps, ...streamedSteps].map((s) => ({
        prompt: s.usage.inputTokens,
        completion: s.usage.outputTokens,
      })),
    );
  });

  it("surfaces an unknown model as the SDK's APICallError with the gateway's 404", async () => {
    const failed = generateText({
      model: provider(gateway(), tagsFor('vercel', 'error'))('no-such-model'),
      prompt: 'x',
      maxRetries: 0,
    });
    const error = await failed.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(APICallError.isInstance(error)).toBe(true);
    const apiError = error as APICallError;
    expect(apiError.statusCode).toBe(404);
    expect(apiError.message).toContain('"no-such-model" does not exist');
    expect(JSON.parse(apiError.responseBody ?? '{}')).toMatchObject({
      error: { code: 'model_not_found', param: 'model' },
    });
  });
});

describe('OpenAI Agents SDK (@openai/agents, OpenAIResponsesModel)', () => {
  const model = async (where: { baseURL: string; apiKey: string }, name: string) => {
    const m = await new OpenAIProvider(where).getModel(name);
    // The provider's default model class: Responses, over HTTP.
    expect(m).toBeInstanceOf(OpenAIResponsesModel);
    return m;
  };
  const settings = (tags: string, maxTokens: number) => ({
    temperature: 0,
    maxTokens,
    providerData: { extraHeaders: { 'X-Tags': tags } },
  });
  const bash = (calls: unknown[], result: string) =>
    agentsTool({
      name: BASH.name,
      description: BASH.description,
      parameters: BASH.schema,
      execute: async (input) => {
        calls.push(input);
        return result;
      },
    });
  const usageOf = (r: { rawResponses: Array<{ usage: { inputTokens: number; outputTokens: number } }> }) =>
    r.rawResponses.map((x) => ({ prompt: x.usage.inputTokens, completion: x.usage.outputTokens }));

  it('run answers as Ollama does directly, streamed too, with usage and tags recorded', async () => {
    const tags = tagsFor('openai-agents', 'plain');
    const agent = async (where: { baseURL: string; apiKey: string }, t: string) =>
      new Agent({
        name: 'terse',
        instructions: SYSTEM,
        model: await model(where, MODEL),
        modelSettings: settings(t, 16),
      });
    const byDirect = await run(await agent(direct(), tags), QUESTION);
    expect(byDirect.finalOutput?.length).toBeGreaterThan(0);
    const viaGateway = await run(await agent(gateway(), tags), QUESTION);
    expect(viaGateway.finalOutput).toBe(byDirect.finalOutput);
    expect(usageOf(viaGateway)).toEqual(usageOf(byDirect));
    await expectRows(tags, MODEL, usageOf(byDirect), false);

    const streamTags = tagsFor('openai-agents', 'stream');
    const streamed = await run(await agent(gateway(), streamTags), QUESTION, { stream: true });
    let text = '';
    for await (const delta of streamed.toTextStream()) text += delta;
    await streamed.completed;
    expect(text).toBe(byDirect.finalOutput);
    expect(streamed.finalOutput).toBe(byDirect.finalOutput);
    expect(usageOf(streamed)).toEqual(usageOf(byDirect));
    await expectRows(streamTags, MODEL, usageOf(byDirect), true);
  });

  it('runs an agent with a function tool to its final answer as Ollama does directly', async () => {
    const tags = tagsFor('openai-agents', 'tool');
    const input: AgentInputItem[] = FEW_SHOT.map((m) => (m.role === 'user' ? user(m.content) : assistant(m.content)));
    const turn = async (where: { baseURL: string; apiKey: string }) => {
      const calls: unknown[] = [];
      const agent = new Agent({
        name: 'shell',
        model: await model(where, MODEL),
        tools: [bash(calls, 'two')],
        modelSettings: settings(tags, 64),
      });
      return { calls, result: await run(agent, input, { maxTurns: 3 }) };
    };
    const byDirect = await turn(direct());
    expect(byDirect.calls).toEqual([OLLAMA_INPUT]);
    expect(byDirect.result.newItems.map((i) => i.type)).toEqual([
      'tool_call_item',
      'tool_call_output_item',
      'message_output_item',
    ]);
    const viaGateway = await turn(gateway());
    expect(viaGateway.calls).toEqual([OLLAMA_INPUT]);
    expect(viaGateway.result.newItems.map((i) => i.type)).toEqual(byDirect.result.newItems.map((i) => i.type));
    expect(viaGateway.result.finalOutput).toBe(byDirect.result.finalOutput);
    expect(usageOf(viaGateway.result)).toEqual(usageOf(byDirect.result));
    await expectRows(tags, MODEL, usageOf(byDirect.result), false);
  });

  it('reaches Claude on Bedrock: run, streamed run, and a tool the SDK executes, streamed too', async () => {
    const tags = tagsFor('openai-agents', 'bedrock');
    const claude = await model(gateway(), CLAUDE);
    const plain = await run(new Agent({ name: 'c', model: claude, modelSettings: settings(tags, 10) }), 'hello');
    expect(plain.finalOutput).toMatch(/^tok0/);
    const streamed = await run(new Agent({ name: 'c', model: claude, modelSettings: settings(tags, 10) }), 'hello', {
      stream: true,
    });
    let text = '';
    for await (const delta of streamed.toTextStream()) text += delta;
    await streamed.completed;
    expect(text).toBe(plain.finalOutput);
    const shell = (calls: unknown[]) =>
      new Agent({ name: 'shell', model: claude, tools: [bash(calls, 'a.txt')], modelSettings: settings(tags, 50) });
    const calls: unknown[] = [];
    const turn = await run(shell(calls), 'Use Bash to list files', { maxTurns: 3 });
    expect(calls).toEqual([CLAUDE_INPUT]);
    expect(turn.newItems.map((i) => i.type)).toEqual([
      'tool_call_item',
      'tool_call_output_item',
      'message_output_item',
    ]);
    expect(turn.finalOutput).toMatch(/^tok0/);
    const streamedCalls: unknown[] = [];
    const streamedTurn = await run(shell(streamedCalls), 'Use Bash to list files', { maxTurns: 3, stream: true });
    await streamedTurn.completed;
    expect(streamedCalls).toEqual([CLAUDE_INPUT]);
    expect(streamedTurn.newItems.map((i) => i.type)).toEqual(turn.newItems.map((i) => i.type));
    expect(streamedTurn.finalOutput).toBe(turn.finalOutput);
    const rows = await rowsTagged(tags, 6);
    expect(rows.map((r) => [r.model, r.status, r.stream])).toEqual(
      [0, 1, 0, 0, 1, 1].map((stream) => [CLAUDE, 200, stream]),
    );
    expect(rows.map((r) => ({ prompt: r.prompt, completion: r.completion }))).toEqual([
      ...usageOf(plain),
      ...usageOf(streamed),
      ...usageOf(turn),
      ...usageOf(streamedTurn),
    ]);
  });

  it("surfaces an unknown model as the SDK's OpenAI NotFoundError with the gateway's message", async () => {
    const agent = new Agent({
      name: 'x',
      model: await model(gateway(), 'no-such-model'),
      modelSettings: settings(tagsFor('openai-agents', 'error'), 5),
    });
    const error = await run(agent, 'x').then(
      () => undefined,
      (e: unknown) => e,
    );
    // The openai package the SDK brings (v7) throws it; the repo's own openai is v6, another class.
    expect(error?.constructor.name).toBe('NotFoundError');
    expect(error).toMatchObject({ status: 404, code: 'model_not_found', param: 'model' });
    expect((error as Error).message).toContain('"no-such-model" does not exist');
  });
});

describe('LangChain (@langchain/openai ChatOpenAI, useResponsesApi)', () => {
  const chat = (where: { baseURL: string; apiKey: string }, model: string, tags: string, maxTokens: number) =>
    new ChatOpenAI({
      model,
      apiKey: where.apiKey,
      useResponsesApi: true,
      temperature: 0,
      maxTokens,
      maxRetries: 0,
      configuration: { baseURL: where.baseURL, defaultHeaders: { 'X-Tags': tags } },
    });
  const bash = (calls: unknown[], result: string) =>
    langchainTool(
      async (input: { command: string }) => {
        calls.push(input);
        return result;
      },
      { name: BASH.name, description: BASH.description, schema: BASH.schema },
    );
  const messages = [new SystemMessage(SYSTEM), new HumanMessage(QUESTION)];
  /** A stream's chunks concatenated, as LangChain merges them (text, tool calls, usage). */
  const collect = async (stream: AsyncIterable<AIMessageChunk>) => {
    let all: AIMessageChunk | undefined;
    for await (const chunk of stream) all = all === undefined ? chunk : all.concat(chunk);
    if (all === undefined) throw new Error('an empty stream');
    return all;
  };

  it('invoke and stream answer as Ollama does directly, with usage and tags recorded', async () => {
    const tags = tagsFor('langchain', 'plain');
    const byDirect = await chat(direct(), MODEL, tags, 16).invoke(messages);
    expect(byDirect.text.length).toBeGreaterThan(0);
    const viaGateway = await chat(gateway(), MODEL, tags, 16).invoke(messages);
    expect(viaGateway.text).toBe(byDirect.text);
    expect(viaGateway.usage_metadata).toEqual(byDirect.usage_metadata);
    const usage = { prompt: byDirect.usage_metadata?.input_tokens, completion: byDirect.usage_metadata?.output_tokens };
    await expectRows(tags, MODEL, [usage], false);

    const streamTags = tagsFor('langchain', 'stream');
    const streamed = await collect(await chat(gateway(), MODEL, streamTags, 16).stream(messages));
    expect(streamed.text).toBe(byDirect.text);
    expect(streamed.usage_metadata).toEqual(byDirect.usage_metadata);
    await expectRows(streamTags, MODEL, [usage], true);
  });

  it('bindTools: a tool call, then the ToolMessage answered, as Ollama does directly', async () => {
    const tags = tagsFor('langchain', 'tool');
    const conversation: BaseMessage[] = FEW_SHOT.map((m) =>
      m.role === 'user' ? new HumanMessage(m.content) : new AIMessage(m.content),
    );
    const turn = async (where: { baseURL: string; apiKey: string }) => {
      const calls: unknown[] = [];
      const tool = bash(calls, 'two');
      const model = chat(where, MODEL, tags, 64).bindTools([tool]);
      const first = await model.invoke(conversation);
      const results = await Promise.all((first.tool_calls ?? []).map((call) => tool.invoke(call)));
      const second = await model.invoke([...conversation, first, ...results]);
      return { calls, first, results, second };
    };
    const byDirect = await turn(direct());
    expect(byDirect.first.tool_calls).toMatchObject([{ name: 'Bash', args: OLLAMA_INPUT }]);
    expect(byDirect.results.map((m) => [m.type, m.content])).toEqual([['tool', 'two']]);
    const viaGateway = await turn(gateway());
    expect(viaGateway.calls).toEqual([OLLAMA_INPUT]);
    expect(viaGateway.first.tool_calls?.map(({ id: _id, ...call }) => call)).toEqual(
      byDirect.first.tool_calls?.map(({ id: _id, ...call }) => call),
    );
    expect(viaGateway.second.text).toBe(byDirect.second.text);
    expect(viaGateway.second.tool_calls).toEqual([]);
    expect(viaGateway.second.usage_metadata).toEqual(byDirect.second.usage_metadata);
    await expectRows(
      tags,
      MODEL,
      [byDirect.first, byDirect.second].map((m) => ({
        prompt: m.usage_metadata?.input_tokens,
        completion: m.usage_metadata?.output_tokens,
      })),
      false,
    );
  });

  it('reaches Claude on Bedrock: invoke, stream, and bindTools with the ToolMessage answered, streamed too', async () => {
    const tags = tagsFor('langchain', 'bedrock');
    const claude = chat(gateway(), CLAUDE, tags, 10);
    const plain = await claude.invoke('hello');
    expect(plain.text).toMatch(/^tok0/);
    const streamed = await collect(await claude.stream('hello'));
    expect(streamed.text).toBe(plain.text);
    expect(streamed.usage_metadata).toEqual(plain.usage_metadata);
    const calls: unknown[] = [];
    const tool = bash(calls, 'a.txt');
    const model = chat(gateway(), CLAUDE, tags, 50).bindTools([tool]);
    const ask = [new HumanMessage('Use Bash to list files')];
    const first = await model.invoke(ask);
    expect(first.tool_calls).toMatchObject([{ name: 'Bash', args: CLAUDE_INPUT }]);
    const results = await Promise.all((first.tool_calls ?? []).map((call) => tool.invoke(call)));
    expect(calls).toEqual([CLAUDE_INPUT]);
    const second = await model.invoke([...ask, first, ...results]);
    expect(second.tool_calls).toEqual([]);
    expect(second.text).toMatch(/^tok0/);
    // The same turn streamed: the tool call arrives in chunks, and the answer after the ToolMessage.
    const streamedFirst = await collect(await model.stream(ask));
    expect(streamedFirst.tool_calls).toEqual(first.tool_calls);
    const streamedResults = await Promise.all((streamedFirst.tool_calls ?? []).map((call) => tool.invoke(call)));
    expect(calls).toEqual([CLAUDE_INPUT, CLAUDE_INPUT]);
    const streamedSecond = await collect(await model.stream([...ask, streamedFirst, ...streamedResults]));
    expect(streamedSecond.text).toBe(second.text);
    const rows = await rowsTagged(tags, 6);
    expect(rows.map((r) => [r.model, r.status, r.stream])).toEqual(
      [0, 1, 0, 0, 1, 1].map((stream) => [CLAUDE, 200, stream]),
    );
    expect(rows.map((r) => ({ prompt: r.prompt, completion: r.completion }))).toEqual(
      [plain, plain, first, second, streamedFirst, streamedSecond].map((m) => ({
        prompt: m.usage_metadata?.input_tokens,
        completion: m.usage_metadata?.output_tokens,
      })),
    );
  });

  it("surfaces an unknown model as LangChain's MODEL_NOT_FOUND error with the gateway's message", async () => {
    const error = await chat(gateway(), 'no-such-model', tagsFor('langchain', 'error'), 5)
      .invoke('x')
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    expect(error).toMatchObject({ lc_error_code: 'MODEL_NOT_FOUND', status: 404, code: 'model_not_found' });
    expect((error as Error).message).toContain('"no-such-model" does not exist');
  });
});
