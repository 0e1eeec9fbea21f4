import { Readable } from 'node:stream';
import {
  BedrockClient,
  ListFoundationModelsCommand,
  type ListFoundationModelsCommandInput,
  ListInferenceProfilesCommand,
} from '@aws-sdk/client-bedrock';
import {
  ApplyGuardrailCommand,
  BedrockRuntimeClient,
  ConverseCommand,
  type ConverseCommandInput,
  ConverseStreamCommand,
  InvokeModelCommand,
} from '@aws-sdk/client-bedrock-runtime';
import { AssumeRoleCommand, STSClient } from '@aws-sdk/client-sts';
import { EventStreamCodec } from '@smithy/eventstream-codec';
import { fromUtf8, toUtf8 } from '@smithy/util-utf8';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { bedrock as bedrockModule } from '../../crds/providers/bedrock.js';
import { ProviderCredentials } from '../../crds/providers/credentials.js';
import type { WireRequest } from '../../crds/providers/provider.js';
import { ProxyError } from '../../proxy/endpoints/errors.js';
import type { ServiceTarget, Verdict } from '../../proxy/guardrails/checker.js';
import { bedrockGuardrail } from '../../proxy/guardrails/services/bedrock-guardrail.js';
import { openaiChatToBedrockConverse } from '../../proxy/translators/openai-chat_bedrock-converse.js';
import { type BotocoreService, botocoreModel } from '../aws/botocore.js';
import { type AwsDouble, type Principal, type Role, startAwsDouble } from '../doubles/aws.js';
import {
  checkExchange,
  type ExchangeReport,
  type HttpExchange,
  type Problem,
  type ProblemKind,
} from '../doubles/aws-shapes.js';

/**
 * The AWS double against botocore's service models (e2e/aws/botocore.sh: the pinned botocore
 * wheel's service-2.json of bedrock-runtime, bedrock and sts). A table of operations drives the
 * double through the real SDK v3 clients; a middleware records every raw HTTP exchange (the
 * request as signed, the response body before the SDK parses it) and each one is checked
 * against the operation: the request's members, the response's or error's shape and status,
 * every event-stream frame against the output's event union. Requests the gateway builds (the
 * chat -> Converse translator, the Bedrock module's addressing and guardrail, its SigV4
 * signature) are sent as the gateway sends them and checked the same way.
 *
 * To cover a new operation, add a row to ROWS (or turn its `pending` row into a real one).
 */

const ACCOUNT = '111122223333';
const NOVA = 'amazon.nova-lite-v1:0';
const HAIKU = 'anthropic.claude-3-haiku-20240307-v1:0';
const SONNET = 'anthropic.claude-3-7-sonnet-20250219-v1:0';
const LLAMA = 'meta.llama3-8b-instruct-v1:0';
const MISTRAL = 'mistral.mistral-large-2402-v1:0';
const TITAN_EMBED = 'amazon.titan-embed-text-v2:0';
const COHERE_EMBED = 'cohere.embed-english-v3';
const APP_PROFILE = 'a1b2c3d4e5f6';
const GUARDRAIL = 'gr1shapes';

const principal = (name: string, allow: string[]): Principal => ({
  accessKeyId: `AKIA${name.toUpperCase().padEnd(16, 'X')}`,
  secretAccessKey: `shapes/${name}+${'s'.repeat(30)}`,
  arn: `arn:aws:iam::${ACCOUNT}:user/${name}`,
  allow,
  account: ACCOUNT,
});
const ADMIN = principal('shapesadmin', ['bedrock:*', 'sts:AssumeRole']);
/** May only assume roles: every Bedrock call of its own is an IAM AccessDeniedException. */
const GATEWAY = principal('shapesgateway', ['sts:AssumeRole']);
const ROLE: Role = {
  arn: `arn:aws:iam::${ACCOUNT}:role/shapes/bedrock-invoker`,
  trusted: [GATEWAY.arn],
  externalId: 'shapes-ext-1',
  allow: ['bedrock:InvokeModel', 'bedrock:InvokeModelWithResponseStream', 'bedrock:ListFoundationModels'],
};
const UNTRUSTING: Role = { arn: `arn:aws:iam::${ACCOUNT}:role/shapes/elsewhere`, trusted: [], allow: ['bedrock:*'] };

/**
 * Where AWS's own answers leave its model, so the double may too. Every other problem fails.
 * Each entry names the evidence.
 */
const AWS_DEVIATIONS: Array<{ path: RegExp; kind: ProblemKind; message?: RegExp; why: string }> = [
  {
    path: /^response\.modelSummaries\[\d+\]\.inferenceTypesSupported\[\d+\]$/,
    kind: 'enum',
    message: /got "INFERENCE_PROFILE"$/,
    why: 'ListFoundationModels lists INFERENCE_PROFILE for profile-only models (e.g. Claude 3.7 Sonnet); botocore InferenceType has only ON_DEMAND and PROVISIONED',
  },
  {
    path: /^response\.inferenceProfileSummaries\[\d+\]\.(inferenceProfileName|description)$/,
    kind: 'pattern',
    why: 'AWS profile names and descriptions carry dots and commas ("US Anthropic Claude 3.5 Sonnet") that InferenceProfileName /([0-9a-zA-Z][ _-]?)+/ does not allow',
  },
  {
    path: /^response\.modelSummaries\[\d+\]\.modelName$/,
    kind: 'length',
    why: 'AWS model names exceed BrandedName max 20 (amazon.titan-embed-text-v2:0 is "Titan Text Embeddings V2")',
  },
];

/**
 * Errors AWS answers with outside an operation's modeled `errors` (the models leave the common
 * and authentication errors out), with their HTTP status.
 */
const UNMODELED_ERRORS: Record<BotocoreService, Record<string, number>> = {
  'bedrock-runtime': { UnrecognizedClientException: 403 },
  bedrock: { UnrecognizedClientException: 403 },
  // STS: AssumeRole of a role that does not trust the caller, and a parameter outside its constraints.
  sts: { AccessDenied: 403, ValidationError: 400 },
};

// ------------------------------------------------------------------ recording SDK clients

interface SdkRequest {
  method: string;
  path: string;
  query?: Record<string, string | string[] | null>;
  headers: Record<string, string>;
  body?: unknown;
}
interface SdkResponse {
  statusCode: number;
  headers: Record<string, string>;
  body?: unknown;
}

const recorded: HttpExchange[] = [];

function bytesOf(body: unknown): Uint8Array {
  if (body === undefined || body === null) return new Uint8Array();
  if (typeof body === 'string') return Buffer.from(body);
  if (body instanceof Uint8Array) return body;
  throw new Error(`unrecorded request body of type ${typeof body}`);
}

const lower = (h: Record<string, string>) =>
  Object.fromEntries(Object.entries(h).map(([k, v]) => [k.toLowerCase(), v]));

/**
 * Innermost middleware (right before the HTTP handler): keeps the signed request and the raw
 * response. The response body is read to its end and handed on as a fresh stream, so the SDK
 * parses exactly the bytes recorded.
 */
const recorder =
  <A extends { request: unknown }, R>(next: (args: A) => Promise<R>) =>
  async (args: A): Promise<R> => {
    const req = args.request as SdkRequest;
    const request = {
      method: req.method,
      path: req.path,
      query: { ...(req.query ?? {}) },
      headers: lower(req.headers),
      body: bytesOf(req.body),
    };
    const result = await next(args);
    const res = (result as { response?: SdkResponse }).response;
    if (res === undefined) throw new Error('no HTTP response to record');
    const chunks: Buffer[] = [];
    const body = res.body as AsyncIterable<Uint8Array | string> | undefined;
    if (body !== undefined && typeof body[Symbol.asyncIterator] === 'function') {
      for await (const chunk of body) chunks.push(Buffer.from(chunk));
    }
    const raw = Buffer.concat(chunks);
    res.body = Readable.from([raw], { objectMode: false });
    recorded.push({ request, response: { status: res.statusCode, headers: lower(res.headers), body: raw } });
    return result;
  };
const RECORD = { relation: 'after', toMiddleware: 'deserializerMiddleware', name: 'recordExchange' } as const;

type Creds = { accessKeyId: string; secretAccessKey: string };
const keys = (p: Principal): Creds => ({ accessKeyId: p.accessKeyId, secretAccessKey: p.secretAccessKey });

let aws: AwsDouble;
const clients: Array<{ destroy(): void }> = [];

// Retries off: each row is one exchange, the first attempt's.
const options = (credentials: Creds) => ({ region: 'us-east-1', endpoint: aws.url, credentials, maxAttempts: 1 });
function runtime(p: Principal = ADMIN): BedrockRuntimeClient {
  const c = new BedrockRuntimeClient(options(keys(p)));
  c.middlewareStack.addRelativeTo(recorder, RECORD);
  clients.push(c);
  return c;
}
function bedrock(p: Principal = ADMIN): BedrockClient {
  const c = new BedrockClient(options(keys(p)));
  c.middlewareStack.addRelativeTo(recorder, RECORD);
  clients.push(c);
  return c;
}
function sts(p: Principal = GATEWAY): STSClient {
  const c = new STSClient(options(keys(p)));
  c.middlewareStack.addRelativeTo(recorder, RECORD);
  clients.push(c);
  return c;
}

async function converse(input: ConverseCommandInput, p?: Principal): Promise<unknown> {
  return runtime(p).send(new ConverseCommand(input));
}

/** Sends ConverseStream and reads the stream to its end (an exception frame rejects). */
async function converseStream(input: ConverseCommandInput, p?: Principal): Promise<unknown> {
  const out = await runtime(p).send(new ConverseStreamCommand(input));
  const events: unknown[] = [];
  for await (const e of out.stream ?? []) events.push(e);
  return events;
}

/**
 * An OpenAI chat completion body as the gateway sends it to Bedrock: translated to Converse
 * (proxy/translators/openai-chat_bedrock-converse.ts), addressed by the Bedrock module
 * (ConverseStream when `stream`), signed with SigV4 by the provider credentials, over plain
 * HTTP; the exchange recorded like the SDK clients' (one per row). A failed call rejects.
 */
async function gateway(modelId: string, body: Record<string, unknown>, stream = false): Promise<void> {
  const t = openaiChatToBedrockConverse.begin(body, stream, { id: modelId, base: modelId });
  if (t instanceof ProxyError) throw new Error(`the translator refused the row's request: ${t.message}`);
  const wire = bedrockModule.request(
    {
      type: 'bedrock',
      upstreamModel: modelId,
      family: 'openai',
      modelType: 'text',
      baseUrl: aws.url,
      region: 'us-east-1',
      streaming: stream,
    },
    'bedrock-converse',
    t.body,
    stream,
  ) as WireRequest;
  const b64 = (v: string) => Buffer.from(v).toString('base64');
  const credentials = new ProviderCredentials(
    () => ({ data: { accessKeyId: b64(ADMIN.accessKeyId), secretAccessKey: b64(ADMIN.secretAccessKey) } }),
    { env: {} },
  );
  const text = JSON.stringify(wire.body);
  const headers = await credentials.authorize(
    { provider: 'bedrock', region: 'us-east-1', auth: { method: 'AccessKey', secretRef: { name: 'k' } } },
    bedrockModule,
    { method: 'POST', url: wire.url, headers: { 'content-type': 'application/json', ...wire.headers }, body: text },
  );
  const res = await fetch(wire.url, { method: 'POST', headers, body: text });
  const raw = Buffer.from(await res.arrayBuffer());
  recorded.push({
    request: {
      method: 'POST',
      path: new URL(wire.url).pathname,
      query: {},
      headers: lower(headers),
      body: Buffer.from(text),
    },
    response: { status: res.status, headers: lower(Object.fromEntries(res.headers)), body: raw },
  });
  if (res.status >= 400) throw new Error(`Bedrock answered ${res.status}: ${raw.toString('utf8')}`);
}

/** What the gateway's ApplyGuardrail service made of the last row's answer. */
let verdict: Verdict | undefined;

/**
 * A Guardrail's bedrockGuardrail service (proxy/guardrails/services/bedrock-guardrail.ts) asking
 * about one text: its request as the module builds it, signed by the provider credentials, the
 * exchange recorded; its verdict kept for the row's checks.
 */
async function gatewayApplyGuardrail(text: string, where: 'request' | 'answer'): Promise<void> {
  const b64 = (v: string) => Buffer.from(v).toString('base64');
  const credentials = new ProviderCredentials(
    () => ({ data: { accessKeyId: b64(ADMIN.accessKeyId), secretAccessKey: b64(ADMIN.secretAccessKey) } }),
    { env: {} },
  );
  const post = async (to: ServiceTarget, value: unknown): Promise<unknown> => {
    const url = 'url' in to ? to.url : `${aws.url}${to.path}`;
    const body = JSON.stringify(value);
    const headers = await credentials.authorize(
      { provider: 'bedrock', region: 'us-east-1', auth: { method: 'AccessKey', secretRef: { name: 'k' } } },
      bedrockModule,
      { method: 'POST', url, headers: { 'content-type': 'application/json', accept: 'application/json' }, body },
    );
    const res = await fetch(url, { method: 'POST', headers, body });
    const raw = Buffer.from(await res.arrayBuffer());
    recorded.push({
      request: {
        method: 'POST',
        path: new URL(url).pathname,
        query: {},
        headers: lower(headers),
        body: Buffer.from(body),
      },
      response: { status: res.status, headers: lower(Object.fromEntries(res.headers)), body: raw },
    });
    if (res.status >= 400) throw new Error(`Bedrock answered ${res.status}`);
    return JSON.parse(raw.toString('utf8')) as unknown;
  };
  const ask = bedrockGuardrail({ provider: 'bedrock-main', identifier: GUARDRAIL, version: '1' });
  const fail = () => Promise.reject(new Error('no model calls here'));
  verdict = await ask(text, where, { post, chat: fail, embed: fail }, AbortSignal.timeout(10_000));
}

// ------------------------------------------------------------------ the table

interface Row {
  service: BotocoreService;
  operation: string;
  name: string;
  /** Drives the double through the SDK; the call must make exactly one HTTP request. */
  call: () => Promise<unknown>;
  /** The error code the double must answer with; absent: the call succeeds. */
  error?: string;
  /**
   * For rows that send an input the model itself refuses (to make the double refuse it too): the
   * paths of the request problems the check must find. Absent: the request must fit the model.
   */
  invalidRequest?: string[];
  /** Further checks of the checked exchange (e.g. that the stream did carry a toolUse start). */
  expect?: (r: ExchangeReport) => void;
}

/** A row that cannot run yet; shown as a todo with the reason. */
interface PendingRow {
  service: BotocoreService;
  operation: string;
  name: string;
  pending: string;
}

const user = (text: string) => ({ role: 'user' as const, content: [{ text }] });
const WEATHER_TOOL = {
  toolSpec: {
    name: 'get_weather',
    description: 'Weather of a city',
    inputSchema: { json: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } },
  },
};
const OPENAI_WEATHER = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Weather of a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
};
/** A 1x1 transparent PNG. */
const PNG =
  'data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==';

const eventTypes = (r: ExchangeReport) => (r.events ?? []).map((e) => e.type);
const outputOf = (r: ExchangeReport) => r.output as Record<string, unknown>;

const ROWS: Array<Row | PendingRow> = [
  // ---------------------------------------------------------------- Bedrock Runtime: Converse
  {
    service: 'bedrock-runtime',
    operation: 'Converse',
    name: 'plain text',
    call: () => converse({ modelId: NOVA, messages: [user('say hello')], system: [{ text: 'Be brief.' }] }),
    expect: (r) => expect(outputOf(r)).toMatchObject({ stopReason: 'end_turn' }),
  },
  {
    service: 'bedrock-runtime',
    operation: 'Converse',
    name: 'tool use answer (toolConfig, toolChoice any)',
    call: () =>
      converse({
        modelId: NOVA,
        messages: [user('weather in Paris?')],
        toolConfig: { tools: [WEATHER_TOOL], toolChoice: { any: {} } },
      }),
    expect: (r) =>
      expect(outputOf(r)).toMatchObject({
        stopReason: 'tool_use',
        output: { message: { content: [{ toolUse: { name: 'get_weather' } }] } },
      }),
  },
  {
    service: 'bedrock-runtime',
    operation: 'Converse',
    name: 'stop sequence',
    call: () => converse({ modelId: NOVA, messages: [user('count')], inferenceConfig: { stopSequences: ['tok3'] } }),
    expect: (r) => expect(outputOf(r)).toMatchObject({ stopReason: 'stop_sequence' }),
  },
  {
    service: 'bedrock-runtime',
    operation: 'Converse',
    name: 'maxTokens stop',
    call: () => converse({ modelId: NOVA, messages: [user('count')], inferenceConfig: { maxTokens: 2 } }),
    expect: (r) => expect(outputOf(r)).toMatchObject({ stopReason: 'max_tokens', usage: { outputTokens: 2 } }),
  },
  {
    service: 'bedrock-runtime',
    operation: 'Converse',
    name: 'cross-region inference profile id',
    call: () => converse({ modelId: `us.${SONNET}`, messages: [user('hi')] }),
  },
  {
    service: 'bedrock-runtime',
    operation: 'Converse',
    name: 'ValidationException: conversation starting with the assistant',
    call: () => converse({ modelId: NOVA, messages: [{ role: 'assistant', content: [{ text: 'hi' }] }] }),
    error: 'ValidationException',
  },
  {
    service: 'bedrock-runtime',
    operation: 'Converse',
    name: 'ValidationException: unknown model id',
    call: () => converse({ modelId: 'amazon.nope-v1:0', messages: [user('hi')] }),
    error: 'ValidationException',
  },
  {
    service: 'bedrock-runtime',
    operation: 'Converse',
    name: 'ValidationException: maxTokens 0',
    call: () => converse({ modelId: NOVA, messages: [user('hi')], inferenceConfig: { maxTokens: 0 } }),
    error: 'ValidationException',
    invalidRequest: ['request.inferenceConfig.maxTokens'],
  },
  {
    service: 'bedrock-runtime',
    operation: 'Converse',
    name: 'AccessDeniedException: model access not enabled',
    call: () => converse({ modelId: MISTRAL, messages: [user('hi')] }),
    error: 'AccessDeniedException',
  },
  {
    service: 'bedrock-runtime',
    operation: 'Converse',
    name: 'AccessDeniedException: no IAM permission',
    call: () => converse({ modelId: NOVA, messages: [user('hi')] }, GATEWAY),
    error: 'AccessDeniedException',
  },
  {
    service: 'bedrock-runtime',
    operation: 'Converse',
    name: 'ThrottlingException',
    call: () => {
      aws.throttle(1);
      return converse({ modelId: NOVA, messages: [user('hi')] });
    },
    error: 'ThrottlingException',
  },
  {
    service: 'bedrock-runtime',
    operation: 'Converse',
    name: 'UnrecognizedClientException: unknown access key',
    call: () => converse({ modelId: NOVA, messages: [user('hi')] }, principal('shapesnobody', [])),
    error: 'UnrecognizedClientException',
  },
  {
    service: 'bedrock-runtime',
    operation: 'Converse',
    name: 'ResourceNotFoundException',
    pending:
      'no request makes the double answer ResourceNotFoundException (unknown ids are ValidationException, as on AWS)',
  },

  // ---------------------------------------------------------------- Bedrock Runtime: ConverseStream
  {
    service: 'bedrock-runtime',
    operation: 'ConverseStream',
    name: 'text',
    call: () => converseStream({ modelId: NOVA, messages: [user('say hello')] }),
    expect: (r) => {
      const types = eventTypes(r);
      expect(types[0]).toBe('messageStart');
      expect(types.slice(-3)).toEqual(['contentBlockStop', 'messageStop', 'metadata']);
      expect(types).toContain('contentBlockDelta');
    },
  },
  {
    service: 'bedrock-runtime',
    operation: 'ConverseStream',
    name: 'tool use (contentBlockStart + toolUse deltas)',
    call: () =>
      converseStream({
        modelId: NOVA,
        messages: [user('weather in Paris?')],
        toolConfig: { tools: [WEATHER_TOOL], toolChoice: { tool: { name: 'get_weather' } } },
      }),
    expect: (r) => {
      expect(eventTypes(r)).toContain('contentBlockStart');
      const start = r.events?.find((e) => e.type === 'contentBlockStart');
      expect(start?.payload).toMatchObject({ start: { toolUse: { name: 'get_weather' } } });
      const deltas = (r.events ?? []).filter((e) => e.type === 'contentBlockDelta');
      expect(deltas.length).toBeGreaterThan(0);
      for (const d of deltas) expect(d.payload).toMatchObject({ delta: { toolUse: {} } });
    },
  },
  {
    service: 'bedrock-runtime',
    operation: 'ConverseStream',
    name: 'modelStreamErrorException frame after the deltas',
    call: () => {
      aws.breakStreams(1, 'exception');
      return converseStream({ modelId: NOVA, messages: [user('say hello')] });
    },
    expect: (r) => {
      const last = r.events?.at(-1);
      expect(last?.messageType).toBe('exception');
      expect(last?.type).toBe('modelStreamErrorException');
    },
  },
  ...(
    [
      ['throttling', 'throttlingException'],
      ['unavailable', 'serviceUnavailableException'],
      ['internal', 'internalServerException'],
      ['validation', 'validationException'],
    ] as const
  ).map(
    ([how, type]): Row => ({
      service: 'bedrock-runtime',
      operation: 'ConverseStream',
      name: `${type} frame after the deltas`,
      call: () => {
        aws.breakStreams(1, how);
        return converseStream({ modelId: NOVA, messages: [user('say hello')] });
      },
      expect: (r) => {
        const last = r.events?.at(-1);
        expect(last?.messageType).toBe('exception');
        expect(last?.type).toBe(type);
      },
    }),
  ),
  {
    service: 'bedrock-runtime',
    operation: 'ConverseStream',
    name: 'ValidationException: model without streaming',
    call: () => converseStream({ modelId: LLAMA, messages: [user('hi')] }),
    error: 'ValidationException',
  },
  {
    service: 'bedrock-runtime',
    operation: 'ConverseStream',
    name: 'AccessDeniedException: no InvokeModelWithResponseStream',
    call: () => converseStream({ modelId: NOVA, messages: [user('hi')] }, GATEWAY),
    error: 'AccessDeniedException',
  },

  // ---------------------------------------------------------------- requests the gateway builds
  {
    service: 'bedrock-runtime',
    operation: 'Converse',
    name: 'gateway: system, developer, sampling, stop, max_tokens',
    call: () =>
      gateway(NOVA, {
        model: 'nova',
        messages: [
          { role: 'system', content: 'Be brief.' },
          { role: 'developer', content: [{ type: 'text', text: 'No lists.' }] },
          { role: 'user', content: 'count to ten' },
        ],
        temperature: 0.2,
        top_p: 0.9,
        max_tokens: 64,
        stop: ['tok5', 'END'],
        stream: false,
        user: 'someone',
      }),
    expect: (r) => expect(outputOf(r)).toMatchObject({ stopReason: 'stop_sequence' }),
  },
  {
    service: 'bedrock-runtime',
    operation: 'Converse',
    name: 'gateway: tools with tool_choice required',
    call: () =>
      gateway(NOVA, {
        model: 'nova',
        messages: [{ role: 'user', content: 'weather in Paris?' }],
        tools: [OPENAI_WEATHER, { type: 'function', function: { name: 'now' } }],
        tool_choice: 'required',
      }),
    expect: (r) => expect(outputOf(r)).toMatchObject({ stopReason: 'tool_use' }),
  },
  {
    service: 'bedrock-runtime',
    operation: 'Converse',
    name: 'gateway: tool call and tool result turns',
    call: () =>
      gateway(NOVA, {
        model: 'nova',
        messages: [
          { role: 'user', content: 'weather in Paris?' },
          {
            role: 'assistant',
            content: null,
            tool_calls: [
              { id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } },
            ],
          },
          { role: 'tool', tool_call_id: 'call_1', content: 'sunny' },
        ],
        tools: [OPENAI_WEATHER],
        tool_choice: { type: 'function', function: { name: 'get_weather' } },
      }),
    expect: (r) => expect(outputOf(r)).toMatchObject({ stopReason: 'end_turn' }),
  },
  {
    service: 'bedrock-runtime',
    operation: 'ConverseStream',
    name: 'gateway: response_format json_schema (forced tool), streamed',
    call: () =>
      gateway(
        NOVA,
        {
          model: 'nova',
          messages: [{ role: 'user', content: 'a city as JSON' }],
          response_format: {
            type: 'json_schema',
            json_schema: {
              name: 'city',
              schema: { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] },
            },
          },
          stream: true,
        },
        true,
      ),
    expect: (r) => expect(eventTypes(r)).toContain('contentBlockStart'),
  },
  {
    service: 'bedrock-runtime',
    operation: 'Converse',
    name: 'gateway: response_format json_object',
    call: () =>
      gateway(NOVA, {
        model: 'nova',
        messages: [{ role: 'user', content: 'a city as JSON' }],
        response_format: { type: 'json_object' },
      }),
  },
  {
    service: 'bedrock-runtime',
    operation: 'Converse',
    name: 'gateway: reasoning_effort (Anthropic extended thinking)',
    call: () =>
      gateway(HAIKU, {
        model: 'haiku',
        messages: [{ role: 'user', content: 'think first' }],
        reasoning_effort: 'medium',
        max_completion_tokens: 4096,
      }),
  },
  {
    service: 'bedrock-runtime',
    operation: 'ConverseStream',
    name: 'gateway: image data URL, streamed',
    call: () =>
      gateway(
        NOVA,
        {
          model: 'nova',
          messages: [
            {
              role: 'user',
              content: [
                { type: 'text', text: 'what is this?' },
                { type: 'image_url', image_url: { url: PNG } },
              ],
            },
          ],
        },
        true,
      ),
  },

  // ---------------------------------------------------------------- Bedrock Runtime: ApplyGuardrail
  {
    service: 'bedrock-runtime',
    operation: 'ApplyGuardrail',
    name: 'sensitive information anonymized',
    call: () =>
      runtime().send(
        new ApplyGuardrailCommand({
          guardrailIdentifier: GUARDRAIL,
          guardrailVersion: '1',
          source: 'INPUT',
          content: [{ text: { text: 'write to jane.doe@example.com' } }],
        }),
      ),
    expect: (r) =>
      expect(outputOf(r)).toMatchObject({
        action: 'GUARDRAIL_INTERVENED',
        outputs: [{ text: 'write to {EMAIL}' }],
        assessments: [
          { sensitiveInformationPolicy: { piiEntities: [{ type: 'EMAIL', match: 'jane.doe@example.com' }] } },
        ],
      }),
  },
  {
    service: 'bedrock-runtime',
    operation: 'ApplyGuardrail',
    name: 'nothing found',
    call: () =>
      runtime().send(
        new ApplyGuardrailCommand({
          guardrailIdentifier: GUARDRAIL,
          guardrailVersion: 'DRAFT',
          source: 'OUTPUT',
          content: [{ text: { text: 'hello there' } }],
        }),
      ),
    expect: (r) => expect(outputOf(r)).toMatchObject({ action: 'NONE', outputs: [] }),
  },
  {
    service: 'bedrock-runtime',
    operation: 'ApplyGuardrail',
    name: 'a guardrail that does not exist',
    call: () =>
      runtime().send(
        new ApplyGuardrailCommand({
          guardrailIdentifier: 'nosuchguardrail',
          guardrailVersion: '1',
          source: 'INPUT',
          content: [{ text: { text: 'hello' } }],
        }),
      ),
    error: 'ResourceNotFoundException',
  },
  {
    service: 'bedrock-runtime',
    operation: 'ApplyGuardrail',
    name: "the gateway's request: a denied topic, a blocked word and an email in an answer",
    call: () => gatewayApplyGuardrail('Buy stocks now, it is forbidden to wait; ask ann@example.org', 'answer'),
    expect: (r) => {
      expect(outputOf(r)).toMatchObject({ action: 'GUARDRAIL_INTERVENED' });
      expect(verdict).toEqual({
        whole: ['InvestmentAdvice', 'CustomWord'],
        found: [{ text: 'ann@example.org', category: 'Email' }],
      });
    },
  },

  // ---------------------------------------------------------------- Bedrock Runtime: InvokeModel
  {
    service: 'bedrock-runtime',
    operation: 'InvokeModel',
    name: `embeddings (${TITAN_EMBED})`,
    call: () =>
      runtime().send(
        new InvokeModelCommand({
          modelId: TITAN_EMBED,
          contentType: 'application/json',
          accept: 'application/json',
          body: JSON.stringify({ inputText: 'hello world', dimensions: 256 }),
        }),
      ),
  },
  {
    service: 'bedrock-runtime',
    operation: 'InvokeModel',
    name: `embeddings (${COHERE_EMBED})`,
    call: () =>
      runtime().send(
        new InvokeModelCommand({
          modelId: COHERE_EMBED,
          contentType: 'application/json',
          body: JSON.stringify({ texts: ['a', 'b'], input_type: 'search_document' }),
        }),
      ),
  },
  {
    service: 'bedrock-runtime',
    operation: 'InvokeModel',
    name: 'ValidationException: a Titan body without inputText',
    call: () =>
      runtime().send(
        new InvokeModelCommand({
          modelId: TITAN_EMBED,
          contentType: 'application/json',
          body: JSON.stringify({ texts: ['a'] }),
        }),
      ),
    error: 'ValidationException',
  },
  {
    service: 'bedrock-runtime',
    operation: 'Converse',
    name: 'through an application inference profile id',
    call: () => converse({ modelId: APP_PROFILE, messages: [user('hi')] }),
  },
  {
    service: 'bedrock-runtime',
    operation: 'Converse',
    name: 'a guardrail intervenes',
    call: () =>
      converse({
        modelId: NOVA,
        messages: [user('tell me the forbidden thing')],
        guardrailConfig: { guardrailIdentifier: GUARDRAIL, guardrailVersion: '1', trace: 'disabled' },
      }),
    expect: (r) => expect(outputOf(r).stopReason).toBe('guardrail_intervened'),
  },
  {
    service: 'bedrock-runtime',
    operation: 'ConverseStream',
    name: 'a guardrail intervenes, streamed (async processing)',
    call: () =>
      converseStream({
        modelId: NOVA,
        messages: [user('the forbidden thing')],
        // ConverseStream's GuardrailStreamConfiguration; the helper takes Converse's input type.
        guardrailConfig: {
          guardrailIdentifier: GUARDRAIL,
          guardrailVersion: 'DRAFT',
          streamProcessingMode: 'async',
        } as never,
      }),
  },
  {
    service: 'bedrock-runtime',
    operation: 'ConverseStream',
    name: 'extended thinking: a signed reasoning block, then a tool use (streamed)',
    call: () =>
      converseStream({
        modelId: `us.${SONNET}`,
        messages: [user('what time is it?')],
        toolConfig: { tools: [WEATHER_TOOL] },
        additionalModelRequestFields: { thinking: { type: 'enabled', budget_tokens: 1024 } } as never,
        inferenceConfig: { maxTokens: 2000 },
      }),
    expect: (r) => {
      const deltas = (r.events ?? []).filter((e) => e.type === 'contentBlockDelta').map((e) => e.payload);
      expect(deltas[0]).toMatchObject({
        contentBlockIndex: 0,
        delta: { reasoningContent: { text: expect.any(String) } },
      });
      expect(deltas[1]).toMatchObject({ delta: { reasoningContent: { signature: expect.any(String) } } });
    },
  },
  {
    service: 'bedrock-runtime',
    operation: 'Converse',
    name: 'a prompt-cache write (cachePoint)',
    call: () =>
      converse({
        modelId: `us.${SONNET}`,
        system: [{ text: 'rule '.repeat(1100) }, { cachePoint: { type: 'default' } }],
        messages: [user('question')],
      }),
    expect: (r) => expect(outputOf(r).usage).toMatchObject({ cacheWriteInputTokens: 1100, inputTokens: 1 }),
  },

  // ---------------------------------------------------------------- Bedrock: ListFoundationModels
  {
    service: 'bedrock',
    operation: 'ListFoundationModels',
    name: 'all models',
    call: () => bedrock().send(new ListFoundationModelsCommand({})),
    expect: (r) => expect((outputOf(r).modelSummaries as unknown[]).length).toBeGreaterThan(3),
  },
  {
    service: 'bedrock',
    operation: 'ListFoundationModels',
    name: 'filtered by provider, output modality and inference type',
    call: () =>
      bedrock().send(
        new ListFoundationModelsCommand({
          byProvider: 'Amazon',
          byOutputModality: 'TEXT',
          byInferenceType: 'ON_DEMAND',
        }),
      ),
    expect: (r) => expect(outputOf(r).modelSummaries).toEqual([expect.objectContaining({ modelId: NOVA })]),
  },
  {
    service: 'bedrock',
    operation: 'ListFoundationModels',
    name: 'as an assumed role',
    call: async () => {
      const out = await sts().send(
        new AssumeRoleCommand({ RoleArn: ROLE.arn, RoleSessionName: 'shapes', ExternalId: ROLE.externalId }),
      );
      const c = out.Credentials;
      recorded.length = 0;
      const client = new BedrockClient({
        ...options({ accessKeyId: c?.AccessKeyId ?? '', secretAccessKey: c?.SecretAccessKey ?? '' }),
        credentials: {
          accessKeyId: c?.AccessKeyId ?? '',
          secretAccessKey: c?.SecretAccessKey ?? '',
          sessionToken: c?.SessionToken ?? '',
        },
      });
      client.middlewareStack.addRelativeTo(recorder, RECORD);
      clients.push(client);
      return client.send(new ListFoundationModelsCommand({ byOutputModality: 'EMBEDDING' }));
    },
    expect: (r) =>
      expect(outputOf(r).modelSummaries).toEqual([
        expect.objectContaining({ modelId: TITAN_EMBED }),
        expect.objectContaining({ modelId: COHERE_EMBED }),
      ]),
  },
  {
    service: 'bedrock',
    operation: 'ListFoundationModels',
    name: 'ValidationException: output modality outside the enum',
    call: () => bedrock().send(new ListFoundationModelsCommand({ byOutputModality: 'VIDEO' as 'TEXT' })),
    error: 'ValidationException',
    invalidRequest: ['request.byOutputModality'],
  },
  {
    service: 'bedrock',
    operation: 'ListFoundationModels',
    name: 'AccessDeniedException: no IAM permission',
    call: () => bedrock(GATEWAY).send(new ListFoundationModelsCommand({})),
    error: 'AccessDeniedException',
  },
  {
    service: 'bedrock',
    operation: 'ListInferenceProfiles',
    name: 'system-defined profiles, paged',
    call: () => bedrock().send(new ListInferenceProfilesCommand({ typeEquals: 'SYSTEM_DEFINED', maxResults: 1 })),
    expect: (r) => {
      expect(outputOf(r).inferenceProfileSummaries).toHaveLength(1);
      expect(outputOf(r).nextToken).toEqual(expect.any(String));
    },
  },
  {
    service: 'bedrock',
    operation: 'ListInferenceProfiles',
    name: 'application profiles',
    call: () => bedrock().send(new ListInferenceProfilesCommand({ typeEquals: 'APPLICATION' })),
    expect: (r) =>
      expect(outputOf(r).inferenceProfileSummaries).toEqual([
        expect.objectContaining({ inferenceProfileId: APP_PROFILE, type: 'APPLICATION' }),
      ]),
  },
  {
    service: 'bedrock',
    operation: 'ListInferenceProfiles',
    name: 'AccessDeniedException: no IAM permission',
    call: () => bedrock(GATEWAY).send(new ListInferenceProfilesCommand({})),
    error: 'AccessDeniedException',
  },

  // ---------------------------------------------------------------- STS: AssumeRole
  {
    service: 'sts',
    operation: 'AssumeRole',
    name: 'with external id and duration',
    call: () =>
      sts().send(
        new AssumeRoleCommand({
          RoleArn: ROLE.arn,
          RoleSessionName: 'shapes-session',
          ExternalId: ROLE.externalId,
          DurationSeconds: 900,
        }),
      ),
    expect: (r) =>
      expect(r.output).toMatchObject({
        Credentials: { AccessKeyId: expect.stringMatching(/^ASIA/) },
        AssumedRoleUser: { Arn: `arn:aws:sts::${ACCOUNT}:assumed-role/bedrock-invoker/shapes-session` },
      }),
  },
  {
    service: 'sts',
    operation: 'AssumeRole',
    name: 'AccessDenied: the role does not trust the caller',
    call: () => sts().send(new AssumeRoleCommand({ RoleArn: UNTRUSTING.arn, RoleSessionName: 'shapes-session' })),
    error: 'AccessDenied',
  },
  {
    service: 'sts',
    operation: 'AssumeRole',
    name: 'ValidationError: session name too short',
    call: () => sts().send(new AssumeRoleCommand({ RoleArn: ROLE.arn, RoleSessionName: 'x' })),
    error: 'ValidationError',
    invalidRequest: ['request.RoleSessionName'],
  },
];

// ------------------------------------------------------------------ running the table

const isPending = (row: Row | PendingRow): row is PendingRow => 'pending' in row;

const deviation = (p: Problem) =>
  AWS_DEVIATIONS.find((d) => d.kind === p.kind && d.path.test(p.path) && (d.message?.test(p.message) ?? true));

const lines = (problems: Problem[]) => problems.map((p) => `${p.path} [${p.kind}] ${p.message}`);

beforeAll(async () => {
  for (const service of ['bedrock-runtime', 'bedrock', 'sts'] as const) botocoreModel(service);
  aws = await startAwsDouble({
    principals: [ADMIN, GATEWAY],
    roles: [ROLE, UNTRUSTING],
    models: {
      'us-east-1': [
        {
          modelId: NOVA,
          providerName: 'Amazon',
          modelName: 'Nova Lite',
          inferenceTypesSupported: ['ON_DEMAND', 'INFERENCE_PROFILE'],
        },
        { modelId: HAIKU, providerName: 'Anthropic', modelName: 'Claude 3 Haiku' },
        {
          modelId: SONNET,
          providerName: 'Anthropic',
          modelName: 'Claude 3.7 Sonnet',
          inferenceTypesSupported: ['INFERENCE_PROFILE'],
          promptCaching: true,
          global: true,
        },
        { modelId: LLAMA, providerName: 'Meta', modelName: 'Llama 3 8B Instruct', streaming: false },
        { modelId: MISTRAL, providerName: 'Mistral AI', modelName: 'Mistral Large (24.02)' },
        {
          modelId: TITAN_EMBED,
          providerName: 'Amazon',
          modelName: 'Titan Text Embeddings V2',
          outputModalities: ['EMBEDDING'],
        },
        { modelId: COHERE_EMBED, providerName: 'Cohere', modelName: 'Embed English', outputModalities: ['EMBEDDING'] },
      ],
    },
    applicationProfiles: { 'us-east-1': [{ id: APP_PROFILE, name: 'team-ml-haiku', modelId: HAIKU }] },
    guardrails: [
      {
        id: GUARDRAIL,
        versions: ['1'],
        blockedWords: ['forbidden'],
        blockedMessage: 'Sorry, I cannot answer that.',
        piiEntities: [{ type: 'EMAIL', pattern: /[\w.]+@[\w.]+\.[a-z]+/ }],
        topics: [{ name: 'Investment advice', words: ['stocks'] }],
      },
    ],
    notEnabled: [MISTRAL],
  });
});

beforeEach(() => {
  recorded.length = 0;
  aws.throttle(0);
  aws.breakStreams(0, 'exception');
});

afterAll(async () => {
  for (const c of clients) c.destroy();
  await aws?.close();
});

describe.each(['bedrock-runtime', 'bedrock', 'sts'] as const)('%s against botocore', (service) => {
  for (const row of ROWS.filter((r) => r.service === service)) {
    const title = `${row.operation}: ${row.name}`;
    if (isPending(row)) {
      it.todo(`${title} (pending: ${row.pending})`);
      continue;
    }
    it(title, async () => {
      const outcome = await row.call().then(
        () => undefined,
        (err: unknown) => err,
      );
      expect(recorded, `${title}: one HTTP exchange`).toHaveLength(1);
      const exchange = recorded[0] as HttpExchange;
      const report = checkExchange(botocoreModel(service), row.operation, exchange, {
        unmodeledErrors: UNMODELED_ERRORS[service],
      });
      const problems = report.problems.filter((p) => deviation(p) === undefined);
      const request = problems.filter((p) => p.path.startsWith('request'));
      const response = problems.filter((p) => !p.path.startsWith('request'));
      // Requests: the SDK's serialisation of what the row (or the gateway) built.
      if (row.invalidRequest === undefined) expect(lines(request), `${title}: request vs botocore`).toEqual([]);
      else expect(request.map((p) => p.path)).toEqual(row.invalidRequest);
      // Responses: the double's bytes.
      expect(lines(response), `${title}: the double's response vs botocore`).toEqual([]);
      expect(report.error?.code, `${title}: error code`).toBe(row.error);
      if (row.error === undefined) {
        // A stream that ends in an exception frame rejects the SDK's iteration; nothing else may fail.
        const streamError = report.events?.some((e) => e.messageType === 'exception') ?? false;
        if (!streamError) expect(outcome).toBeUndefined();
      } else {
        expect((outcome as Error | undefined)?.name).toBe(row.error);
      }
      row.expect?.(report);
    });
  }
});

describe('the double and botocore agree on ListFoundationModels filter values', () => {
  it('accepts every enum value botocore defines for each filter', async () => {
    const model = botocoreModel('bedrock');
    const input = model.shapes.ListFoundationModelsRequest?.members ?? {};
    const tried: string[] = [];
    for (const [member, ref] of Object.entries(input)) {
      for (const value of model.shapes[ref.shape]?.enum ?? []) {
        const result = await bedrock()
          .send(new ListFoundationModelsCommand({ [member]: value } as ListFoundationModelsCommandInput))
          .then(
            () => 'ok',
            (err: Error) => `${err.name}: ${err.message}`,
          );
        expect(result, `${member}=${value}`).toBe('ok');
        tried.push(`${member}=${value}`);
      }
    }
    expect(tried.length).toBeGreaterThan(5);
    // Every exchange fits the model, request and response alike.
    for (const ex of recorded) {
      const problems = checkExchange(model, 'ListFoundationModels', ex).problems.filter(
        (p) => deviation(p) === undefined,
      );
      expect(lines(problems)).toEqual([]);
    }
  });
});

describe('the checker finds what does not fit (so the table passing means something)', () => {
  const frame = (kind: 'event' | 'exception', type: string, payload: unknown) =>
    new EventStreamCodec(toUtf8, fromUtf8).encode({
      headers: {
        ':message-type': { type: 'string', value: kind },
        [kind === 'event' ? ':event-type' : ':exception-type']: { type: 'string', value: type },
        ':content-type': { type: 'string', value: 'application/json' },
      },
      body: fromUtf8(JSON.stringify(payload)),
    });
  const converseRequest = {
    method: 'POST',
    path: '/model/amazon.nova-lite-v1%3A0/converse-stream',
    query: {},
    headers: { 'content-type': 'application/json' },
    body: Buffer.from(JSON.stringify({ messages: [user('hi')] })),
  };

  it('in JSON bodies: unknown and missing members, unions, enums, ranges, patterns', () => {
    const body = {
      output: {
        message: { role: 'bot', content: [{ text: 'x', toolUse: { toolUseId: 'a b', name: 'n', input: {} } }] },
      },
      stopReason: 'done',
      usage: { inputTokens: -1, outputTokens: 1.5 },
      metrics: { latencyMs: 1 },
      extra: true,
    };
    const report = checkExchange(botocoreModel('bedrock-runtime'), 'Converse', {
      request: { ...converseRequest, path: '/model/amazon.nova-lite-v1%3A0/converse' },
      response: {
        status: 200,
        headers: { 'content-type': 'application/json' },
        body: Buffer.from(JSON.stringify(body)),
      },
    });
    expect(report.problems.map((p) => `${p.path} ${p.kind}`)).toEqual([
      'response.output.message.role enum',
      'response.output.message.content[0].toolUse.toolUseId pattern',
      'response.output.message.content[0] union',
      'response.stopReason enum',
      'response.usage.inputTokens range',
      'response.usage.outputTokens type',
      'response.usage.totalTokens required',
      'response.extra unknown-member',
    ]);
  });

  it('in event streams: unknown events, exceptions outside the union, payloads', () => {
    const bytes = Buffer.concat([
      frame('event', 'messageStart', { role: 'assistant' }),
      frame('event', 'contentBlockDelta', { contentBlockIndex: 0, delta: { text: 'a', reasoning: 'b' } }),
      frame('event', 'messageEnd', {}),
      frame('exception', 'accessDeniedException', { message: 'no' }),
      frame('event', 'metadata', { usage: { inputTokens: 1, outputTokens: 1, totalTokens: 2 } }),
    ]);
    const report = checkExchange(botocoreModel('bedrock-runtime'), 'ConverseStream', {
      request: converseRequest,
      response: { status: 200, headers: { 'content-type': 'application/vnd.amazon.eventstream' }, body: bytes },
    });
    expect(report.problems.map((p) => `${p.path} ${p.kind}`)).toEqual([
      'response.events[1](contentBlockDelta).delta.reasoning unknown-member',
      'response.events[2](messageEnd) unknown-member',
      'response.events[3](accessDeniedException) unknown-member',
      'response.events[4](metadata).metrics required',
    ]);
  });

  it('in errors: codes outside the operation, statuses, members; in awsQuery: parameters and XML', () => {
    const rt = botocoreModel('bedrock-runtime');
    const error = (status: number, code: string, body: unknown) =>
      checkExchange(rt, 'Converse', {
        request: { ...converseRequest, path: '/model/amazon.nova-lite-v1%3A0/converse' },
        response: {
          status,
          headers: {
            'content-type': 'application/json',
            'x-amzn-errortype': `${code}:http://internal.amazon.com/coral/`,
          },
          body: Buffer.from(JSON.stringify(body)),
        },
      }).problems.map((p) => `${p.path} ${p.kind}`);
    expect(error(404, 'UnknownOperationException', { message: 'm' })).toEqual(['response.error unknown-member']);
    expect(error(403, 'ValidationException', { message: 'm', reason: 'r' })).toEqual([
      'response.status protocol',
      'response.error.reason unknown-member',
    ]);
    const xml =
      '<AssumeRoleResponse><AssumeRoleResult><Credentials><AccessKeyId>short</AccessKeyId><SecretAccessKey>s</SecretAccessKey>' +
      '<SessionToken>t</SessionToken><Expiration>yesterday</Expiration><Extra>1</Extra></Credentials></AssumeRoleResult>' +
      '<ResponseMetadata><RequestId>r</RequestId></ResponseMetadata></AssumeRoleResponse>';
    const sts = checkExchange(botocoreModel('sts'), 'AssumeRole', {
      request: {
        method: 'POST',
        path: '/',
        query: {},
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: Buffer.from('Action=AssumeRole&Version=2011-06-15&RoleSessionName=s&Bogus=1'),
      },
      response: { status: 200, headers: { 'content-type': 'text/xml' }, body: Buffer.from(xml) },
    });
    expect(sts.problems.map((p) => `${p.path} ${p.kind}`)).toEqual([
      'request.RoleSessionName length',
      'request.Bogus unknown-member',
      'request.RoleArn required',
      'response.Credentials.AccessKeyId length',
      'response.Credentials.Expiration type',
      'response.Credentials.Extra unknown-member',
    ]);
  });
});
