import { execFile } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AwsDouble } from '../doubles/aws.js';
import { OLLAMA_MODEL, type OllamaServer } from '../ollama/server.js';
import { bin, claudePrint, installClients } from '../support/agent-clients.js';
import { type AgentGateway, startAgentGateway, type UsageRow } from '../support/agent-gateway.js';
import { messageAsSpecHas } from '../support/as-spec-has.js';
import type { ProxyProcess } from '../support/proxy-process.js';

/**
 * The dialects coding agents speak, through the gateway: Anthropic's Messages (Claude Code, the
 * Anthropic SDK) and OpenAI's Responses (Codex, the OpenAI SDK), each call made to Ollama 0.17.4
 * directly and then through the gateway in front of it, the two compared; and to a Claude model
 * on Bedrock (the AWS double serving Anthropic's body on InvokeModel as Bedrock does). Usage
 * and tags are read back from the gateway's store. The real CLIs run non-interactively with
 * their telemetry off; Claude Code with a short system prompt and one tool, as a 135M model on
 * two cores cannot answer its full 18k-token prompt in time.
 */

const run = promisify(execFile);
const MODEL = OLLAMA_MODEL;
/** The same weights with temperature 0 and at most 64 tokens an answer: the CLIs set neither, and an agent's turn must end. */
const AGENT_MODEL = 'smollm2:agent';
const CLAUDE = 'anthropic.claude-sonnet-4-5-20250929-v1:0';
const KEY = 'sk-e2e-agents-4c1d9e0b7a6f5e3d';
const TAGS = 'team:agents,tool:e2e';

let gw: AgentGateway;
let ollama: OllamaServer;
let aws: AwsDouble;
let proxy: ProxyProcess;
let clients: string;

const BASH = {
  name: 'Bash',
  description: 'Run a shell command',
  input_schema: { type: 'object' as const, properties: { command: { type: 'string' } }, required: ['command'] },
};
/** A one-shot example in the conversation: SmolLM2 then calls the tool (as Ollama parses <tool_call>). */
const FEW_SHOT: Anthropic.MessageParam[] = [
  { role: 'user', content: 'Use the Bash tool to run: echo one' },
  { role: 'assistant', content: '<tool_call>\n{"name": "Bash", "arguments": {"command": "echo one"}}\n</tool_call>' },
  { role: 'user', content: 'Use the Bash tool to run: echo three' },
  { role: 'assistant', content: '<tool_call>\n{"name": "Bash", "arguments": {"command": "echo three"}}\n</tool_call>' },
  { role: 'user', content: 'Use the Bash tool to run: echo two' },
];

type Row = UsageRow;

/** The usage record of one request, by the X-Request-Id it answered with. */
async function record(requestId: string | null | undefined): Promise<Row> {
  expect(requestId).toMatch(/^req_/);
  const [row] = await gw.rowsAtLeast((r) => r.request_id === requestId, 1);
  if (!row) throw new Error(`no usage record for ${requestId}`);
  return row;
}

/** Rows of `model` once at least `count` are written. */
const rowsAtLeast = (model: string, count: number): Promise<Row[]> => gw.rowsAtLeast((r) => r.model === model, count);
const rowsFor = (model: string): Row[] => gw.rows().filter((r) => r.model === model);

beforeAll(async () => {
  clients = installClients();
  gw = await startAgentGateway({
    key: KEY,
    bedrock: [
      { modelId: CLAUDE, providerName: 'Anthropic' },
      { modelId: 'amazon.nova-lite-v1:0', providerName: 'Amazon' },
    ],
    providerModels: [`us.${CLAUDE}`, 'amazon.nova-lite-v1:0'],
    providerAliases: [{ name: 'claude-sonnet-4-5', model: `us.${CLAUDE}` }],
    // Claude Code asks for Anthropic model ids: the in-cluster model answers to one of them.
    variants: [{ model: AGENT_MODEL, parameters: { temperature: 0, num_predict: 64 }, aliases: ['claude-haiku-4-5'] }],
  });
  ({ ollama, aws, proxy } = gw);
}, 600_000);

afterAll(async () => {
  await gw?.stop();
});

const anthropic = (baseURL: string, apiKey = KEY) =>
  new Anthropic({ baseURL, apiKey, maxRetries: 0, defaultHeaders: { 'X-Tags': TAGS } });
const without = <T extends { id?: unknown }>({ id: _id, ...rest }: T) => rest;

const asSpecHas = (m: Anthropic.Message) => without(messageAsSpecHas(m));

describe('Anthropic Messages at /anthropic/v1/messages', () => {
  const params = {
    model: MODEL,
    max_tokens: 16,
    temperature: 0,
    system: 'You are terse.',
    messages: [{ role: 'user' as const, content: 'Name a fruit.' }],
  };

  it('answers create as Ollama does directly, with usage and tags recorded', async () => {
    const direct = await anthropic(ollama.url, 'ollama').messages.create(params);
    const { data, response } = await anthropic(`${proxy.base}/anthropic`).messages.create(params).withResponse();
    expect(without(data)).toEqual(asSpecHas(direct));
    const row = await record(response.headers.get('x-request-id'));
    expect(row).toMatchObject({
      model: MODEL,
      status: 200,
      stream: 0,
      prompt: direct.usage.input_tokens,
      completion: direct.usage.output_tokens,
    });
    expect(JSON.parse(row.tags)).toEqual(expect.arrayContaining(['team:agents', 'tool:e2e']));
  });

  it('streams the same events as Ollama, and the final message matches', async () => {
    const direct = await anthropic(ollama.url, 'ollama').messages.stream(params).finalMessage();
    const before = rowsFor(MODEL).length;
    const stream = anthropic(`${proxy.base}/anthropic`).messages.stream(params);
    const types: string[] = [];
    stream.on('streamEvent', (e) => types.push(e.type));
    const viaGateway = await stream.finalMessage();
    expect(without(viaGateway)).toEqual(asSpecHas(direct));
    expect(types[0]).toBe('message_start');
    expect(types.at(-1)).toBe('message_stop');
    const rows = (await rowsAtLeast(MODEL, before + 1)).filter((r) => r.stream === 1);
    expect(rows.at(-1)).toMatchObject({ status: 200, completion: direct.usage.output_tokens });
  });

  it('carries a tool call and its result both ways (tool_use, then tool_result)', async () => {
    const body = { model: MODEL, max_tokens: 80, temperature: 0, tools: [BASH], messages: FEW_SHOT };
    const direct = await anthropic(ollama.url, 'ollama').messages.create(body);
    const first = await anthropic(`${proxy.base}/anthropic`).messages.create(body);
    expect(first.stop_reason).toBe('tool_use');
    const use = first.content.find((b) => b.type === 'tool_use');
    expect(use).toMatchObject({ name: 'Bash', input: { command: 'echo two' } });
    expect(direct.content.find((b) => b.type === 'tool_use')).toMatchObject({
      name: 'Bash',
      input: { command: 'echo two' },
    });
    const next = {
      ...body,
      messages: [
        ...FEW_SHOT,
        { role: 'assistant' as const, content: first.content },
        {
          role: 'user' as const,
          content: [{ type: 'tool_result' as const, tool_use_id: (use as { id: string }).id, content: 'two' }],
        },
      ],
    };
    const second = await anthropic(`${proxy.base}/anthropic`).messages.create(next);
    expect(second.content.length).toBeGreaterThan(0);
    expect(second.usage.input_tokens).toBeGreaterThan(first.usage.input_tokens);
  });

  it('answers count_tokens (an estimate for Ollama, Bedrock CountTokens for Claude)', async () => {
    const client = anthropic(`${proxy.base}/anthropic`);
    const { data, response } = await client.messages
      .countTokens({ model: MODEL, messages: params.messages })
      .withResponse();
    expect(data.input_tokens).toBeGreaterThan(0);
    expect(response.headers.get('x-gateway-token-count')).toBe('estimate');
    const exact = await client.messages
      .countTokens({ model: `us.${CLAUDE}`, messages: params.messages })
      .withResponse();
    expect(exact.data.input_tokens).toBeGreaterThan(0);
    expect(exact.response.headers.get('x-gateway-token-count')).toBe('exact');
    expect(aws.calls.some((c) => c.action === 'CountTokens' && c.status === 200)).toBe(true);
  });

  it('routes Claude on Bedrock natively (InvokeModel), create and stream, with a tool', async () => {
    const client = anthropic(`${proxy.base}/anthropic`);
    const model = `us.${CLAUDE}`;
    const answer = await client.messages.create({
      model,
      max_tokens: 8,
      messages: [{ role: 'user', content: 'hello' }],
    });
    expect(answer.content[0]).toMatchObject({ type: 'text' });
    expect(answer.usage.output_tokens).toBe(8);
    const streamed = await client.messages
      .stream(
        { model, max_tokens: 6, messages: [{ role: 'user', content: 'hello' }] },
        { headers: { 'anthropic-beta': 'interleaved-thinking-2025-05-14' } },
      )
      .finalMessage();
    expect(streamed.usage.output_tokens).toBe(6);
    expect(JSON.stringify(streamed)).not.toContain('amazon-bedrock-invocationMetrics');
    const tool = await client.messages.create({
      model,
      max_tokens: 50,
      tools: [BASH],
      messages: [{ role: 'user', content: 'Use Bash to list files' }],
    });
    expect(tool.content[0]).toMatchObject({ type: 'tool_use', name: 'Bash', input: { command: 'gateway-double' } });
    const calls = aws.calls.filter((c) => c.action.startsWith('InvokeModel'));
    expect(calls.map((c) => c.action)).toEqual(
      expect.arrayContaining(['InvokeModel', 'InvokeModelWithResponseStream']),
    );
    // The answers' rows: a count_tokens row (the test before) records no tokens.
    const rows = await gw.rowsAtLeast((r) => r.model === model && r.endpoint === 'messages', 3);
    expect(rows.length).toBeGreaterThanOrEqual(3);
    expect(rows.every((r) => r.status === 200 && r.prompt > 0)).toBe(true);
  });

  it("refuses bad input in Anthropic's envelope, naming the field", async () => {
    const res = await fetch(`${proxy.base}/anthropic/v1/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': KEY },
      body: JSON.stringify({ model: MODEL, max_tokens: 5, messages: [{ role: 'robot', content: 'x' }] }),
    });
    expect(res.status).toBe(400);
    const body = (await res.json()) as { type: string; error: { type: string; message: string } };
    expect(body).toMatchObject({ type: 'error', error: { type: 'invalid_request_error' } });
    expect(body.error.message).toContain('messages.0.role');
    const denied = anthropic(`${proxy.base}/anthropic`, 'sk-wrong').messages.create({ ...params });
    await expect(denied).rejects.toBeInstanceOf(Anthropic.AuthenticationError);
    expect((await fetch(`${proxy.base}/anthropic`, { method: 'HEAD' })).status).toBe(200);
  });
});

describe('OpenAI Responses at /openai/v1/responses', () => {
  const params = {
    model: MODEL,
    input: 'Name a fruit.',
    instructions: 'You are terse.',
    max_output_tokens: 16,
    temperature: 0,
    store: false,
  };
  const openai = (baseURL: string, apiKey = KEY) =>
    new OpenAI({ baseURL, apiKey, maxRetries: 0, defaultHeaders: { 'X-Tags': TAGS } });

  it('answers create and stream as Ollama does directly, with usage recorded', async () => {
    const direct = await openai(`${ollama.url}/v1`, 'ollama').responses.create(params);
    const { data, response } = await openai(`${proxy.base}/openai/v1`).responses.create(params).withResponse();
    expect(data.output_text).toBe(direct.output_text);
    expect(data.usage).toEqual(direct.usage);
    const row = await record(response.headers.get('x-request-id'));
    expect(row).toMatchObject({
      status: 200,
      prompt: direct.usage?.input_tokens,
      completion: direct.usage?.output_tokens,
    });
    const stream = await openai(`${proxy.base}/openai/v1`).responses.create({ ...params, stream: true });
    let text = '';
    let completed: OpenAI.Responses.Response | undefined;
    for await (const e of stream) {
      if (e.type === 'response.output_text.delta') text += e.delta;
      if (e.type === 'response.completed') completed = e.response;
    }
    expect(text).toBe(direct.output_text);
    expect(completed?.usage).toEqual(direct.usage);
  });

  it('reaches Claude on Bedrock through the Responses-to-chat translator (Converse), with a function tool', async () => {
    const client = openai(`${proxy.base}/openai/v1`);
    const model = `us.${CLAUDE}`;
    const answer = await client.responses.create({ model, input: 'hello', max_output_tokens: 10, store: false });
    expect(answer.status).toBe('completed');
    expect(answer.output_text.length).toBeGreaterThan(0);
    expect(answer.usage?.input_tokens).toBeGreaterThan(0);
    const stream = await client.responses.create({
      model,
      input: 'hello',
      max_output_tokens: 10,
      stream: true,
      store: false,
    });
    const types: string[] = [];
    let done: OpenAI.Responses.Response | undefined;
    for await (const e of stream) {
      types.push(e.type);
      if (e.type === 'response.completed' || e.type === 'response.incomplete') done = e.response;
    }
    expect(types[0]).toBe('response.created');
    const streamedText = done?.output
      .flatMap((item) => (item.type === 'message' ? item.content : []))
      .map((part) => (part.type === 'output_text' ? part.text : ''))
      .join('');
    expect(streamedText).toBe(answer.output_text);
    expect(done?.usage).toEqual(answer.usage);
    // The gateway keeps responses (proxy/stored-responses/): an id it never stored is OpenAI's 404.
    const previous = client.responses.create({ model, input: 'x', previous_response_id: 'resp_1' });
    await expect(previous).rejects.toMatchObject({ status: 404, code: 'previous_response_not_found' });
  });

  it("refuses a malformed body in OpenAI's envelope naming the field", async () => {
    const res = await fetch(`${proxy.base}/openai/v1/responses`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': KEY },
      body: JSON.stringify({ model: MODEL, input: 42 }),
    });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: { param: string } }).error.param).toBe('input');
  });
});

describe('the model lists', () => {
  const get = async (path: string) => {
    const res = await fetch(`${proxy.base}${path}`, { headers: { 'x-api-key': KEY } });
    expect(res.status).toBe(200);
    return (await res.json()) as Record<string, unknown>;
  };

  it('the CLI model list reports what Ollama itself says of a model the catalog lacks, aliases included; includeInCLI keeps Bedrock out', async () => {
    // Direct: what Ollama reports for the model.
    const shown = (await (
      await fetch(`${ollama.url}/api/show`, { method: 'POST', body: JSON.stringify({ model: MODEL }) })
    ).json()) as { capabilities: string[]; model_info: Record<string, unknown> };
    const context = Object.entries(shown.model_info).find(([k]) => k.endsWith('.context_length'))?.[1];
    expect(typeof context).toBe('number');
    const { models } = (await get('/v1/models/metadata?include_in_cli=true')) as {
      models: Array<Record<string, unknown>>;
    };
    // The provider leaves includeInCLI at its default (false): its models serve but stay out of the CLI.
    expect(models.map((m) => m.slug).sort()).toEqual(['claude-haiku-4-5', AGENT_MODEL, MODEL].sort());
    expect(models.find((m) => m.slug === MODEL)).toMatchObject({
      provider: 'ollama',
      limits: { context_window: context, max_output_tokens: context },
      tool_call: shown.capabilities.includes('tools'),
      reasoning: shown.capabilities.includes('thinking'),
      supports_images: shown.capabilities.includes('vision'),
      status: 'active',
    });
    expect(models.find((m) => m.slug === 'claude-haiku-4-5')).toMatchObject({ alias_of: AGENT_MODEL });
    // The OpenAI list has everything the key may use, with the limits agents size prompts by.
    const { data } = (await get('/openai/v1/models')) as { data: Array<Record<string, unknown>> };
    expect(data.map((m) => m.id).sort()).toEqual(
      ['claude-haiku-4-5', 'claude-sonnet-4-5', AGENT_MODEL, MODEL, `us.${CLAUDE}`, 'amazon.nova-lite-v1:0'].sort(),
    );
    expect(data.find((m) => m.id === 'claude-sonnet-4-5')).toMatchObject({
      owned_by: 'bedrock',
      context_window: 200_000,
      max_output_tokens: 64_000,
    });
  });
});

describe('the coding agents themselves', () => {
  const claude = (model: string, prompt: string) =>
    claudePrint(clients, {
      base: proxy.base,
      key: KEY,
      model,
      prompt,
      args: ['--system-prompt', 'You are terse.'],
      env: {
        ANTHROPIC_CUSTOM_HEADERS: 'X-Tags: team:agents,agent:claude-code',
        // As Claude Code does by default for its newest models: reminders as system messages inside messages.
        CLAUDE_CODE_FORCE_MID_CONVERSATION_SYSTEM: '1',
      },
    });

  it('Claude Code (claude -p) completes a turn with a tool offered, to Ollama and to Claude on Bedrock, by Anthropic model ids', async () => {
    // The names a Claude Code user types; the aliases route them to the in-cluster model and to Bedrock.
    for (const [alias, model] of [
      ['claude-haiku-4-5', AGENT_MODEL],
      ['claude-sonnet-4-5', `us.${CLAUDE}`],
    ] as const) {
      const before = rowsFor(model).length;
      const out = await claude(alias, 'Use Bash to run: echo gateway-ok');
      expect(out.is_error).toBe(false);
      expect(out.usage.output_tokens).toBeGreaterThan(0);
      const rows = (await rowsAtLeast(model, before + 1)).slice(before);
      expect(rows.length).toBeGreaterThan(0);
      expect(rows.some((r) => r.status === 200)).toBe(true);
      // 499: Claude Code abandons a side request of its own (a title, a suggestion) once the turn ended.
      expect(rows.filter((r) => r.status !== 200 && r.status !== 499)).toEqual([]);
      expect(rows.flatMap((r) => JSON.parse(r.tags) as string[])).toContain('agent:claude-code');
    }
    // On the double, Claude called Bash: Claude Code ran it and sent the result back in a second call.
    const invokes = aws.calls.filter((c) => c.action === 'InvokeModelWithResponseStream');
    expect(invokes.length).toBeGreaterThanOrEqual(2);
  }, 600_000);

  // Claude Code's subagents: the double's Claude calls the Agent tool, Claude Code runs a subagent
  // (its own requests, with a system message inside messages as 2.1.197 sends them), and the
  // subagent's answer goes back to the main turn as the tool's result.
  it('Claude Code (claude -p) runs a subagent through its Agent tool on Claude on Bedrock', async () => {
    const model = `us.${CLAUDE}`;
    const streamed = () => aws.calls.filter((c) => c.action === 'InvokeModelWithResponseStream').length;
    const streamedBefore = streamed();
    const callsBefore = aws.calls.length;
    const before = rowsFor(model).length;
    const out = await claudePrint(clients, {
      base: proxy.base,
      key: KEY,
      model: 'claude-sonnet-4-5',
      prompt: 'Use the Agent tool to look around this directory',
      tools: 'Agent,Bash',
      // Spawning a subagent asks for permission; -p has nobody to ask.
      args: ['--system-prompt', 'You are terse.', '--allowedTools', 'Agent'],
      env: {
        ANTHROPIC_CUSTOM_HEADERS: 'X-Tags: team:agents,agent:claude-code',
        // As Claude Code does by default for its newest models: reminders as system messages inside messages.
        CLAUDE_CODE_FORCE_MID_CONVERSATION_SYSTEM: '1',
      },
    });
    expect(out.is_error).toBe(false);
    const rows = (await rowsAtLeast(model, before + 3)).slice(before);
    expect(rows.filter((r) => r.status !== 200 && r.status !== 499)).toEqual([]);
    // The main turn's call (the double's Claude called Agent), the subagent's own call (its task is
    // the prompt the double gave the tool), and the main turn's answer to the tool's result.
    const calls = aws.calls.slice(callsBefore).filter((c) => c.claude);
    const agent = calls.findIndex((c) => c.claude?.toolUsed === 'Agent');
    expect(agent).toBeGreaterThanOrEqual(0);
    const subagent = calls.findIndex((c, i) => i > agent && c.claude?.lastText.includes('gateway-double'));
    expect(subagent).toBeGreaterThan(agent);
    expect(streamed() - streamedBefore).toBeGreaterThanOrEqual(3);
  }, 600_000);

  // To Bedrock, Responses is translated to chat, then Converse: the double's Claude calls Codex's
  // first tool, Codex runs it and sends the output back, and the answer ends the turn.
  it('Codex (codex exec) completes a turn over Responses to Ollama and, with a tool call, to Claude on Bedrock by an alias', async () => {
    for (const [name, model] of [
      [AGENT_MODEL, AGENT_MODEL],
      ['claude-sonnet-4-5', `us.${CLAUDE}`],
    ] as const) {
      const home = mkdtempSync(join(tmpdir(), 'pao-codex-home-'));
      writeFileSync(join(home, 'instructions.md'), 'Answer in one short sentence.\n');
      writeFileSync(
        join(home, 'config.toml'),
        [
          `model = "${name}"`,
          'model_provider = "gateway"',
          `model_instructions_file = "${join(home, 'instructions.md')}"`,
          // OpenAI's hosted web search runs nowhere else: the gateway refuses it (400) for other models.
          'web_search = "disabled"',
          '[model_providers.gateway]',
          'name = "gateway"',
          `base_url = "${proxy.base}/openai/v1"`,
          'env_key = "GATEWAY_KEY"',
          'wire_api = "responses"',
          'request_max_retries = 0',
          'stream_max_retries = 0',
          'http_headers = { "X-Tags" = "team:agents,agent:codex" }',
          '[analytics]',
          'enabled = false',
          '[otel]',
          'exporter = "none"',
        ].join('\n'),
      );
      const before = rowsFor(model).length;
      const codex = run(bin(clients, 'codex'), ['exec', '--skip-git-repo-check', 'Say hi'], {
        cwd: home,
        timeout: 300_000,
        env: { PATH: process.env.PATH ?? '', HOME: home, CODEX_HOME: home, GATEWAY_KEY: KEY },
      });
      // codex exec reads more of the prompt from a stdin that is not a terminal until it closes.
      codex.child.stdin?.end();
      const { stdout } = await codex;
      expect(stdout.trim().length).toBeGreaterThan(0);
      const bedrock = model !== AGENT_MODEL;
      const rows = (await rowsAtLeast(model, before + (bedrock ? 2 : 1))).slice(before);
      // On Bedrock: the tool call, then the answer to its output.
      expect(rows.length).toBeGreaterThanOrEqual(bedrock ? 2 : 1);
      expect(rows.filter((r) => r.status !== 200 || r.completion === 0)).toEqual([]);
      expect(rows.every((r) => r.endpoint === 'responses')).toBe(true);
      expect(rows.flatMap((r) => JSON.parse(r.tags) as string[])).toContain('agent:codex');
    }
  }, 600_000);
});

describe('Anthropic Messages to a non-Claude Bedrock model', () => {
  // Amazon Nova serves chat only (Converse): the gateway translates Anthropic's Messages to chat and back.
  const NOVA = 'amazon.nova-lite-v1:0';
  /** The double's Converse answer: setCompletionTokens' default of 8 words. */
  const ANSWER = Array.from({ length: 8 }, (_, i) => `tok${i}`).join(' ');
  const hello = {
    model: NOVA,
    max_tokens: 50,
    system: 'You are terse.',
    messages: [{ role: 'user' as const, content: 'hello' }],
  };
  const toolTurn = {
    model: NOVA,
    max_tokens: 50,
    tools: [BASH],
    messages: [{ role: 'user' as const, content: 'Use Bash to list files' }],
  };

  it("answers create and stream with the double's Converse answer, usage recorded", async () => {
    const client = anthropic(`${proxy.base}/anthropic`);
    const callsBefore = aws.calls.length;
    const { data, response } = await client.messages.create(hello).withResponse();
    expect(data).toMatchObject({
      type: 'message',
      role: 'assistant',
      model: NOVA,
      content: [{ type: 'text', text: ANSWER }],
      stop_reason: 'end_turn',
      stop_sequence: null,
    });
    expect(data.id).toMatch(/^msg_/);
    expect(data.usage.input_tokens).toBeGreaterThan(0);
    expect(data.usage.output_tokens).toBe(8);
    expect(await record(response.headers.get('x-request-id'))).toMatchObject({
      model: NOVA,
      status: 200,
      stream: 0,
      prompt: data.usage.input_tokens,
      completion: 8,
    });

    const before = rowsFor(NOVA).length;
    const stream = client.messages.stream(hello);
    const types: string[] = [];
    stream.on('streamEvent', (e) => types.push(e.type));
    const streamed = await stream.finalMessage();
    expect(types[0]).toBe('message_start');
    expect(types.at(-1)).toBe('message_stop');
    expect(streamed.content).toEqual(data.content);
    expect(streamed.stop_reason).toBe('end_turn');
    expect(streamed.usage).toEqual(data.usage);
    const rows = (await rowsAtLeast(NOVA, before + 1)).slice(before);
    expect(rows).toEqual([
      expect.objectContaining({ status: 200, stream: 1, prompt: data.usage.input_tokens, completion: 8 }),
    ]);
    // Converse both times (the gateway streams from Bedrock whether or not the caller does), never
    // InvokeModel with Anthropic's body: Nova does not take it.
    expect(aws.calls.slice(callsBefore).map((c) => [c.action, c.status])).toEqual([
      ['ConverseStream', 200],
      ['ConverseStream', 200],
    ]);
  });

  it('carries a tool round trip: tool_use, then the tool_result answered in text (create and stream)', async () => {
    const client = anthropic(`${proxy.base}/anthropic`);
    const before = rowsFor(NOVA).length;
    const first = await client.messages.create(toolTurn);
    expect(first.stop_reason).toBe('tool_use');
    const use = first.content.find((b) => b.type === 'tool_use');
    // The double calls the first tool offered, its required string properties set to tok0.
    expect(use).toMatchObject({ type: 'tool_use', name: 'Bash', input: { command: 'tok0' } });
    const streamed = await client.messages.stream(toolTurn).finalMessage();
    expect(streamed.stop_reason).toBe('tool_use');
    expect(streamed.content).toEqual(first.content);

    const answered = {
      ...toolTurn,
      messages: [
        ...toolTurn.messages,
        { role: 'assistant' as const, content: first.content },
        {
          role: 'user' as const,
          content: [{ type: 'tool_result' as const, tool_use_id: (use as { id: string }).id, content: 'a.txt b.txt' }],
        },
      ],
    };
    const second = await client.messages.create(answered);
    expect(second).toMatchObject({ stop_reason: 'end_turn', content: [{ type: 'text', text: ANSWER }] });
    const secondStreamed = await client.messages.stream(answered).finalMessage();
    expect(secondStreamed.content).toEqual(second.content);
    expect(secondStreamed.stop_reason).toBe('end_turn');
    const rows = (await rowsAtLeast(NOVA, before + 4)).slice(before);
    expect(rows.map((r) => [r.status, r.stream])).toEqual([
      [200, 0],
      [200, 1],
      [200, 0],
      [200, 1],
    ]);
    expect(rows.every((r) => r.prompt > 0 && r.completion > 0)).toBe(true);
  });

  it('Claude Code (claude -p) completes a tool turn against Nova', async () => {
    const before = rowsFor(NOVA).length;
    const out = await claudePrint(clients, {
      base: proxy.base,
      key: KEY,
      model: NOVA,
      prompt: 'Use Bash to run: echo gateway-ok',
      // Claude Code asks for 32,000 output tokens; Nova Lite gives at most 10,000 (a 400 naming max_tokens).
      env: { CLAUDE_CODE_MAX_OUTPUT_TOKENS: '8000' },
    });
    // Its request carries context_management (clear thinking) and output_config (effort): both dropped.
    expect(out).toMatchObject({ is_error: false, result: ANSWER });
    // The double called Bash, Claude Code answered with a tool_result, the double with text.
    expect(out.num_turns).toBeGreaterThanOrEqual(2);
    const rows = (await rowsAtLeast(NOVA, before + 2)).slice(before);
    expect(rows.length).toBeGreaterThanOrEqual(2);
    expect(rows.filter((r) => r.status !== 200 && r.status !== 499)).toEqual([]);
  }, 600_000);

  it("refuses what only Claude runs (Anthropic's server tools) with a 400 naming it", async () => {
    const refused = anthropic(`${proxy.base}/anthropic`).messages.create({
      ...hello,
      tools: [{ type: 'web_search_20250305', name: 'web_search' }],
    });
    await expect(refused).rejects.toBeInstanceOf(Anthropic.BadRequestError);
    await expect(refused).rejects.toMatchObject({
      status: 400,
      error: { type: 'error', error: { type: 'invalid_request_error', message: expect.stringContaining('tools.0') } },
    });
  });
});
