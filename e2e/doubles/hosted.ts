import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import type * as Anthropic from '@anthropic-ai/sdk/resources/messages';
import type { MessageTokensCount } from '@anthropic-ai/sdk/resources/messages';
import type { ModelInfo } from '@anthropic-ai/sdk/resources/models';
import type { ChatCompletion, ChatCompletionChunk } from 'openai/resources/chat/completions';
import type { Completion } from 'openai/resources/completions';
import type { CreateEmbeddingResponse } from 'openai/resources/embeddings';
import type { Model } from 'openai/resources/models';
import type { ModerationCreateResponse } from 'openai/resources/moderations';
import type {
  Response as OpenAIResponse,
  ResponseOutputMessage,
  ResponseStreamEvent,
} from 'openai/resources/responses/responses';
import { isRecord } from '../../crds/is-record.js';

/**
 * Local stand-ins for the hosted providers the gateway calls (no provider is reachable from
 * here), on one port, each under its own path prefix, speaking its real wire protocol: OpenAI
 * (/openai-api/v1: chat, completions, embeddings, responses, models), Anthropic
 * (/anthropic-api/v1: messages, models), Azure OpenAI (/azure/openai: the v1 API and the dated
 * deployments API, api-key or an Entra token), Vertex AI (/vertex: the OpenAI-compatible
 * endpoint for Gemini, rawPredict/streamRawPredict for Claude, publisher model lists, Google
 * tokens only), any OpenAI-compatible server (/compatible/v1), and the identity services:
 * Entra ID's token endpoint (/entra), Google STS (/sts), IAM Credentials (/iam) and the GKE
 * metadata server (/computeMetadata).
 *
 * Every answer is built against the official SDKs' types (`satisfies` below: openai and
 * @anthropic-ai/sdk), so a field the SDKs do not know fails the type check; the SDKs pointed at
 * this double parse what it sends (e2e/no-cluster/hosted-providers.e2e.test.ts). Errors are each
 * provider's envelope with its statuses and types; throttling carries retry-after and the
 * provider's rate-limit headers.
 *
 * Answers: completion tokens `tok0 tok1 … tok<C-1>` (C = behaviour.completionTokens); prompt
 * tokens: the whitespace-separated words of every text in the request. Cache reads and writes
 * as behaviour says, reported in each provider's own fields.
 */

export type HostedKind = 'openai' | 'anthropic' | 'azure' | 'vertex' | 'compatible';

interface Fault {
  kind?: HostedKind;
  /** Matched against the request's path. */
  path?: RegExp;
  status: number;
  body: unknown;
  headers?: Record<string, string>;
  /** How many requests it answers (default 1). */
  times?: number;
}

interface HostedBehavior {
  completionTokens: number;
  /** Of the prompt tokens, reported as read from the provider's cache. */
  cacheRead: number;
  /** Anthropic: prompt tokens reported as written to the cache. */
  cacheWrite: number;
  /** Anthropic: of cacheWrite, those written with the 1-hour lifetime. */
  cacheWrite1h?: number;
  /** Streaming: destroy the socket after N token events. */
  cutAfterTokens?: number;
  /**
   * The answer's text instead of `tok0 tok1 ...`: its tokens are pieces of `answerChunkChars`
   * characters (default 4), so that a word may be split across events as a model splits it.
   */
  answerText?: string;
  answerChunkChars?: number;
  /**
   * The moderations endpoint's classifier: a text containing a key is flagged in its categories
   * (default: "kill" is violence, "worthless" harassment).
   */
  moderation?: Record<string, string[]>;
}

/** The categories of OpenAI's moderation results (its OpenAPI specification's, all required). */
const MODERATION_CATEGORIES = [
  'harassment',
  'harassment/threatening',
  'hate',
  'hate/threatening',
  'illicit',
  'illicit/violent',
  'self-harm',
  'self-harm/intent',
  'self-harm/instructions',
  'sexual',
  'sexual/minors',
  'violence',
  'violence/graphic',
];

interface RecordedCall {
  kind: HostedKind | 'identity';
  method: string;
  path: string;
  headers: IncomingMessage['headers'];
  body: unknown;
}

export interface HostedDouble {
  url: string;
  /** Env of a proxy or operator that should call this double for every provider. */
  env: Record<string, string>;
  calls: RecordedCall[];
  behave(b: Partial<HostedBehavior>): void;
  fail(f: Fault): void;
  reset(): void;
  /** Tokens the identity services issued (for assertions that none leaks). */
  issuedTokens(): string[];
  close(): Promise<void>;
}

export interface HostedDoubleOptions {
  openaiKeys?: string[];
  anthropicKeys?: string[];
  azureKeys?: string[];
  compatibleKeys?: string[];
  /** The federated (ServiceAccount) token Entra and STS accept. */
  federatedToken?: string;
  models?: Partial<Record<HostedKind, string[]>>;
  /** Client ids Entra ID knows (any, when absent). */
  azureClients?: string[];
  /** Azure deployments: name -> model. */
  azureDeployments?: Record<string, string>;
}

const DEFAULT_MODELS: Record<HostedKind, string[]> = {
  openai: ['gpt-4o', 'gpt-4o-mini', 'text-embedding-3-small'],
  anthropic: ['claude-sonnet-5-5', 'claude-sonnet-4-5-20250929', 'claude-haiku-4-5-20251001'],
  azure: ['gpt-4o', 'gpt-4o-mini', 'text-embedding-3-small'],
  vertex: ['gemini-2.5-flash', 'claude-sonnet-4-5', 'claude-haiku-4-5'],
  compatible: ['meta-llama/Llama-3.1-8B-Instruct'],
};

/** Words of every text in a request: messages, system, input, prompt. */
function promptWords(body: Record<string, unknown>): number {
  let n = 0;
  const walk = (v: unknown, key?: string): void => {
    if (typeof v === 'string') {
      if (
        key === 'content' ||
        key === 'text' ||
        key === 'system' ||
        key === 'input' ||
        key === 'prompt' ||
        key === 'instructions'
      )
        n += v.split(/\s+/).filter(Boolean).length;
      return;
    }
    if (Array.isArray(v))
      for (const x of v) walk(x, key === 'content' || key === 'input' || key === 'system' ? 'text' : key);
    else if (isRecord(v))
      for (const [k, x] of Object.entries(v)) if (k !== 'tools' && k !== 'model' && k !== 'type') walk(x, k);
  };
  walk(body.messages, 'messages');
  walk(body.system, 'system');
  walk(body.input, 'input');
  walk(body.prompt, 'prompt');
  walk(body.instructions, 'instructions');
  return n;
}

const tokens = (c: number) => Array.from({ length: c }, (_, i) => `tok${i}${i < c - 1 ? ' ' : ''}`);
/** The answer's tokens: behaviour's text in pieces, or `tok0 tok1 ...`. */
function answerTokens(b: HostedBehavior): string[] {
  if (b.answerText === undefined) return tokens(b.completionTokens);
  const size = Math.max(1, b.answerChunkChars ?? 4);
  const out: string[] = [];
  for (let i = 0; i < b.answerText.length; i += size) out.push(b.answerText.slice(i, i + size));
  return out;
}
const id = (prefix: string) => `${prefix}${randomBytes(8).toString('hex')}`;

/** Arguments for a function tool: every string property "x", every other property null. */
function argumentsFor(schema: unknown): Record<string, unknown> {
  const props = isRecord(schema) && isRecord(schema.properties) ? schema.properties : {};
  return Object.fromEntries(
    Object.entries(props).map(([k, p]) => [k, isRecord(p) && p.type === 'string' ? 'x' : null]),
  );
}

async function readBody(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  const text = Buffer.concat(chunks).toString('utf8');
  if (!text) return undefined;
  if ((req.headers['content-type'] ?? '').includes('x-www-form-urlencoded'))
    return Object.fromEntries(new URLSearchParams(text));
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

const json = (res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) => {
  res.writeHead(status, { 'content-type': 'application/json', ...headers });
  res.end(JSON.stringify(body));
};

export async function startHostedDouble(opts: HostedDoubleOptions = {}): Promise<HostedDouble> {
  const models = { ...DEFAULT_MODELS, ...opts.models };
  const deployments = opts.azureDeployments ?? { 'gpt4o-prod': 'gpt-4o', 'embed-small': 'text-embedding-3-small' };
  const federated = opts.federatedToken ?? 'federated-sa-token';
  const defaults: HostedBehavior = { completionTokens: 4, cacheRead: 0, cacheWrite: 0 };
  let behavior = { ...defaults };
  const faults: Fault[] = [];
  const calls: RecordedCall[] = [];
  const issued = new Set<string>();
  const sockets = new Set<Socket>();

  const keys: Record<HostedKind, Set<string>> = {
    openai: new Set(opts.openaiKeys ?? ['sk-openai-double-0001']),
    anthropic: new Set(opts.anthropicKeys ?? ['sk-ant-double-0002']),
    azure: new Set(opts.azureKeys ?? ['azure-key-double-0003']),
    compatible: new Set(opts.compatibleKeys ?? []),
    vertex: new Set(),
  };

  const issue = (prefix: string) => {
    const t = id(prefix);
    issued.add(t);
    return t;
  };

  // ---- each provider's errors, in its own envelope ----
  const errorOf = (kind: HostedKind, status: number, message: string, type: string) => {
    if (kind === 'anthropic') return { type: 'error', error: { type, message }, request_id: id('req_') };
    if (kind === 'vertex') return { error: { code: status, message, status: type } };
    if (kind === 'azure') return { error: { code: type, message } };
    return { error: { message, type, param: null, code: type } };
  };

  const authorized = (kind: HostedKind, req: IncomingMessage): boolean => {
    const bearer = /^Bearer (.+)$/.exec(req.headers.authorization ?? '')?.[1];
    switch (kind) {
      case 'anthropic':
        // Any dated API version (the SDKs send their own; the gateway 2023-06-01).
        // The key in x-api-key, or as a bearer token (what the SDK 1.x sends).
        return (
          (keys.anthropic.has(String(req.headers['x-api-key'] ?? '')) ||
            (bearer !== undefined && keys.anthropic.has(bearer))) &&
          /^[0-9]{4}-[0-9]{2}-[0-9]{2}$/.test(String(req.headers['anthropic-version'] ?? ''))
        );
      case 'azure':
        return keys.azure.has(String(req.headers['api-key'] ?? '')) || (bearer !== undefined && issued.has(bearer));
      case 'vertex':
        return bearer !== undefined && issued.has(bearer);
      case 'compatible':
        return keys.compatible.size === 0 || (bearer !== undefined && keys.compatible.has(bearer));
      default:
        return bearer !== undefined && keys.openai.has(bearer);
    }
  };

  const unauthorized = (kind: HostedKind, res: ServerResponse) => {
    const [status, type, message] =
      kind === 'anthropic'
        ? [401, 'authentication_error', 'invalid x-api-key']
        : kind === 'vertex'
          ? [401, 'UNAUTHENTICATED', 'Request had invalid authentication credentials. Expected OAuth 2 access token.']
          : kind === 'azure'
            ? [401, '401', 'Access denied due to invalid subscription key or wrong API endpoint.']
            : [401, 'invalid_api_key', 'Incorrect API key provided: sk-****0000.'];
    json(res, status, errorOf(kind, status, message, type));
  };

  // ---- OpenAI-shaped answers ----
  function openAIUsage(prompt: number, completion: number) {
    return {
      prompt_tokens: prompt,
      completion_tokens: completion,
      total_tokens: prompt + completion,
      prompt_tokens_details: { cached_tokens: Math.min(behavior.cacheRead, prompt), audio_tokens: 0 },
      completion_tokens_details: {
        reasoning_tokens: 0,
        audio_tokens: 0,
        accepted_prediction_tokens: 0,
        rejected_prediction_tokens: 0,
      },
    };
  }

  function chatAnswer(
    body: Record<string, unknown>,
    model: string,
  ): { content: string | null; toolCalls?: ChatCompletion.Choice['message']['tool_calls'] } {
    const tools = Array.isArray(body.tools) ? body.tools.filter(isRecord) : [];
    const toolChoice = body.tool_choice;
    // A tool's result came back: answer in text, as a model ends its turn (no endless tool loop).
    const messages = Array.isArray(body.messages) ? body.messages.filter(isRecord) : [];
    const answered = messages.at(-1)?.role === 'tool';
    if (tools.length > 0 && toolChoice !== 'none' && !answered) {
      const fn = isRecord(tools[0]?.function) ? tools[0].function : {};
      return {
        content: null,
        toolCalls: [
          {
            id: id('call_'),
            type: 'function',
            function: { name: String(fn.name ?? 'tool'), arguments: JSON.stringify(argumentsFor(fn.parameters)) },
          },
        ],
      };
    }
    const format = isRecord(body.response_format) ? body.response_format.type : undefined;
    if (format === 'json_object' || format === 'json_schema')
      return { content: JSON.stringify({ answer: `tok0 from ${model}` }) };
    return { content: answerTokens(behavior).join('') };
  }

  async function openAIChat(
    kind: HostedKind,
    req: IncomingMessage,
    res: ServerResponse,
    body: Record<string, unknown>,
    model: string,
  ) {
    const prompt = promptWords(body);
    const answer = chatAnswer(body, model);
    const completion = answer.toolCalls ? 6 : behavior.completionTokens;
    const finish = answer.toolCalls ? 'tool_calls' : 'stop';
    const created = Math.floor(Date.now() / 1000);
    const cid = id('chatcmpl-');
    if (body.stream !== true) {
      const out = {
        id: cid,
        object: 'chat.completion',
        created,
        model,
        choices: [
          {
            index: 0,
            message: {
              role: 'assistant',
              content: answer.content,
              refusal: null,
              ...(answer.toolCalls ? { tool_calls: answer.toolCalls } : {}),
            },
            logprobs: null,
            finish_reason: finish,
          },
        ],
        usage: openAIUsage(prompt, completion),
        service_tier: 'default',
        system_fingerprint: 'fp_double',
      } satisfies ChatCompletion;
      return json(res, 200, out);
    }
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    const chunk = (
      delta: ChatCompletionChunk.Choice['delta'],
      finishReason: ChatCompletionChunk.Choice['finish_reason'] = null,
    ) =>
      ({
        id: cid,
        object: 'chat.completion.chunk',
        created,
        model,
        system_fingerprint: 'fp_double',
        choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }],
      }) satisfies ChatCompletionChunk;
    const send = (o: unknown) => res.write(`data: ${JSON.stringify(o)}\n\n`);
    send(chunk({ role: 'assistant', content: '' }));
    if (answer.toolCalls) {
      const call = answer.toolCalls[0];
      if (call?.type === 'function') {
        send(
          chunk({
            tool_calls: [
              { index: 0, id: call.id, type: 'function', function: { name: call.function.name, arguments: '' } },
            ],
          }),
        );
        send(chunk({ tool_calls: [{ index: 0, function: { arguments: call.function.arguments } }] }));
      }
    } else {
      const parts =
        answer.content === null ? [] : answer.content.startsWith('{') ? [answer.content] : answerTokens(behavior);
      for (const [i, t] of parts.entries()) {
        if (behavior.cutAfterTokens !== undefined && i >= behavior.cutAfterTokens) {
          req.socket.destroy();
          return;
        }
        send(chunk({ content: t }));
      }
    }
    send(chunk({}, finish));
    const opts = isRecord(body.stream_options) ? body.stream_options : {};
    if (opts.include_usage === true) {
      send({
        id: cid,
        object: 'chat.completion.chunk',
        created,
        model,
        choices: [],
        usage: openAIUsage(prompt, completion),
      } satisfies ChatCompletionChunk);
    }
    res.end('data: [DONE]\n\n');
    void kind;
  }

  function openAICompletions(res: ServerResponse, body: Record<string, unknown>, model: string) {
    const prompt = promptWords(body);
    const text = answerTokens(behavior).join('');
    const cid = id('cmpl-');
    const created = Math.floor(Date.now() / 1000);
    if (body.stream !== true) {
      return json(res, 200, {
        id: cid,
        object: 'text_completion',
        created,
        model,
        choices: [{ index: 0, text, logprobs: null, finish_reason: 'stop' }],
        usage: openAIUsage(prompt, behavior.completionTokens),
      } satisfies Completion);
    }
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    for (const t of answerTokens(behavior)) {
      res.write(
        `data: ${JSON.stringify({ id: cid, object: 'text_completion', created, model, choices: [{ index: 0, text: t, logprobs: null, finish_reason: null }] } as unknown as Completion)}\n\n`,
      );
    }
    const usage = isRecord(body.stream_options) && body.stream_options.include_usage === true;
    res.write(
      `data: ${JSON.stringify({ id: cid, object: 'text_completion', created, model, choices: [{ index: 0, text: '', logprobs: null, finish_reason: 'stop' }] } satisfies Completion)}\n\n`,
    );
    if (usage)
      res.write(
        `data: ${JSON.stringify({ id: cid, object: 'text_completion', created, model, choices: [], usage: openAIUsage(prompt, behavior.completionTokens) } satisfies Completion)}\n\n`,
      );
    res.end('data: [DONE]\n\n');
  }

  function openAIEmbeddings(res: ServerResponse, body: Record<string, unknown>, model: string) {
    const inputs = Array.isArray(body.input) ? body.input : [body.input];
    const prompt = promptWords({ input: inputs.map(String) });
    // base64 (little-endian float32) when asked, as the SDKs do by default.
    const vector = [0.1, 0.2, 0.3, 0.4];
    const embedding =
      body.encoding_format === 'base64' ? Buffer.from(new Float32Array(vector).buffer).toString('base64') : vector;
    json(res, 200, {
      object: 'list',
      model,
      data: inputs.map((_, index) => ({ object: 'embedding', index, embedding: embedding as number[] })),
      usage: { prompt_tokens: prompt, total_tokens: prompt },
    } satisfies CreateEmbeddingResponse);
  }

  /** OpenAI's moderations: one result per input string, every category of the spec, flagged by the double's classifier. */
  function openAIModeration(res: ServerResponse, body: Record<string, unknown>) {
    const model = typeof body.model === 'string' ? body.model : 'omni-moderation-latest';
    if (!/^(omni|text)-moderation-/.test(model)) {
      return json(
        res,
        404,
        errorOf(
          'openai',
          404,
          `The model \`${model}\` does not exist or you do not have access to it.`,
          'model_not_found',
        ),
      );
    }
    const inputs = (Array.isArray(body.input) ? body.input : [body.input]).map((i) => (typeof i === 'string' ? i : ''));
    const classifier = behavior.moderation ?? { kill: ['violence'], worthless: ['harassment'] };
    const results = inputs.map((text) => {
      const flagged = new Set(
        Object.entries(classifier).flatMap(([word, cats]) => (text.toLowerCase().includes(word) ? cats : [])),
      );
      const names = MODERATION_CATEGORIES;
      const categories = Object.fromEntries(names.map((c) => [c, flagged.has(c)]));
      const scores = Object.fromEntries(names.map((c) => [c, flagged.has(c) ? 0.93 : 0.0001]));
      const applied = Object.fromEntries(names.map((c) => [c, ['text']]));
      return { flagged: flagged.size > 0, categories, category_scores: scores, category_applied_input_types: applied };
    });
    json(res, 200, {
      id: id('modr-'),
      model: model.replace(/-latest$/, '-2024-09-26'),
      results,
    } as unknown as ModerationCreateResponse);
  }

  function openAIResponses(req: IncomingMessage, res: ServerResponse, body: Record<string, unknown>, model: string) {
    const prompt = promptWords(body);
    const text = answerTokens(behavior).join('');
    const created = Math.floor(Date.now() / 1000);
    const message: ResponseOutputMessage = {
      type: 'message',
      id: id('msg_'),
      status: 'completed',
      role: 'assistant',
      content: [{ type: 'output_text', text, annotations: [], logprobs: [] }],
    };
    const usage = {
      input_tokens: prompt,
      input_tokens_details: { cached_tokens: Math.min(behavior.cacheRead, prompt), cache_write_tokens: 0 },
      output_tokens: behavior.completionTokens,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: prompt + behavior.completionTokens,
    };
    const response = (status: 'in_progress' | 'completed', output: OpenAIResponse['output'], u?: typeof usage) =>
      ({
        id: 'resp_double',
        object: 'response',
        created_at: created,
        status,
        model,
        output,
        output_text: '',
        error: null,
        incomplete_details: null,
        instructions: null,
        metadata: {},
        parallel_tool_calls: true,
        temperature: 1,
        tool_choice: 'auto',
        tools: [],
        top_p: 1,
        ...(u ? { usage: u } : {}),
      }) satisfies OpenAIResponse;
    if (body.stream !== true)
      return json(res, 200, response('completed', [{ ...message, content: [...message.content] }], usage));
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    let seq = 0;
    const send = (e: ResponseStreamEvent) => res.write(`event: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`);
    send({ type: 'response.created', sequence_number: seq++, response: response('in_progress', []) });
    send({
      type: 'response.output_item.added',
      sequence_number: seq++,
      output_index: 0,
      item: { ...message, status: 'in_progress', content: [] },
    });
    send({
      type: 'response.content_part.added',
      sequence_number: seq++,
      output_index: 0,
      content_index: 0,
      item_id: message.id,
      part: { type: 'output_text', text: '', annotations: [], logprobs: [] },
    });
    for (const [i, t] of answerTokens(behavior).entries()) {
      if (behavior.cutAfterTokens !== undefined && i >= behavior.cutAfterTokens) {
        req.socket.destroy();
        return;
      }
      send({
        type: 'response.output_text.delta',
        sequence_number: seq++,
        output_index: 0,
        content_index: 0,
        item_id: message.id,
        delta: t,
        logprobs: [],
      });
    }
    send({
      type: 'response.output_text.done',
      sequence_number: seq++,
      output_index: 0,
      content_index: 0,
      item_id: message.id,
      text,
      logprobs: [],
    });
    send({
      type: 'response.output_item.done',
      sequence_number: seq++,
      output_index: 0,
      item: { ...message, content: [...message.content] },
    });
    send({
      type: 'response.completed',
      sequence_number: seq++,
      response: response('completed', [{ ...message, content: [...message.content] }], usage),
    });
    res.end();
  }

  // ---- Anthropic-shaped answers (Anthropic's API and Claude on Vertex) ----
  function anthropicUsage(prompt: number, output: number): Anthropic.Usage {
    const read = Math.min(behavior.cacheRead, prompt);
    const write = Math.min(behavior.cacheWrite, prompt - read);
    return {
      input_tokens: prompt - read - write,
      output_tokens: output,
      cache_creation_input_tokens: write,
      cache_read_input_tokens: read,
      cache_creation: behavior.cacheWrite1h
        ? {
            ephemeral_5m_input_tokens: write - Math.min(behavior.cacheWrite1h, write),
            ephemeral_1h_input_tokens: Math.min(behavior.cacheWrite1h, write),
          }
        : null,
      server_tool_use: null,
      service_tier: 'standard',
      inference_geo: null,
      output_tokens_details: null,
      speed: null,
    };
  }

  function anthropicMessages(
    req: IncomingMessage,
    res: ServerResponse,
    body: Record<string, unknown>,
    model: string,
    stream: boolean,
  ) {
    const prompt = promptWords(body);
    const tools = Array.isArray(body.tools) ? body.tools.filter(isRecord) : [];
    const choice = isRecord(body.tool_choice) ? body.tool_choice.type : undefined;
    // A tool's result came back: answer in text (no endless tool loop).
    const messages = Array.isArray(body.messages) ? body.messages.filter(isRecord) : [];
    const last = messages.at(-1);
    const answered = Array.isArray(last?.content) && last.content.some((b) => isRecord(b) && b.type === 'tool_result');
    const useTool = tools.length > 0 && choice !== 'none' && !answered;
    const mid = id('msg_');
    const text = answerTokens(behavior).join('');
    const toolBlock = useTool
      ? ({
          type: 'tool_use',
          id: id('toolu_'),
          name: String(tools[0]?.name ?? 'tool'),
          input: argumentsFor(tools[0]?.input_schema),
          caller: { type: 'direct' },
        } satisfies Anthropic.ToolUseBlock)
      : undefined;
    const output = useTool ? 6 : behavior.completionTokens;
    const stop: Anthropic.StopReason = useTool ? 'tool_use' : 'end_turn';
    if (!stream) {
      return json(res, 200, {
        id: mid,
        type: 'message',
        role: 'assistant',
        model,
        content: toolBlock ? [toolBlock] : [{ type: 'text', text, citations: null }],
        stop_reason: stop,
        stop_sequence: null,
        usage: anthropicUsage(prompt, output),
        container: null,
        diagnostics: null,
        stop_details: null,
      } satisfies Anthropic.Message);
    }
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    const send = (e: Anthropic.RawMessageStreamEvent) => res.write(`event: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`);
    send({
      type: 'message_start',
      message: {
        id: mid,
        type: 'message',
        role: 'assistant',
        model,
        content: [],
        stop_reason: null,
        stop_sequence: null,
        usage: anthropicUsage(prompt, 1),
        container: null,
        diagnostics: null,
        stop_details: null,
      },
    });
    if (toolBlock) {
      send({ type: 'content_block_start', index: 0, content_block: { ...toolBlock, input: {} } });
      send({
        type: 'content_block_delta',
        index: 0,
        delta: { type: 'input_json_delta', partial_json: JSON.stringify(toolBlock.input) },
      });
    } else {
      send({ type: 'content_block_start', index: 0, content_block: { type: 'text', text: '', citations: null } });
      res.write('event: ping\ndata: {"type": "ping"}\n\n');
      for (const [i, t] of answerTokens(behavior).entries()) {
        if (behavior.cutAfterTokens !== undefined && i >= behavior.cutAfterTokens) {
          req.socket.destroy();
          return;
        }
        send({ type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: t } });
      }
    }
    send({ type: 'content_block_stop', index: 0 });
    const u = anthropicUsage(prompt, output);
    send({
      type: 'message_delta',
      delta: { stop_reason: stop, stop_sequence: null, container: null, stop_details: null },
      usage: {
        output_tokens: output,
        input_tokens: u.input_tokens,
        cache_creation_input_tokens: u.cache_creation_input_tokens,
        cache_read_input_tokens: u.cache_read_input_tokens,
        server_tool_use: null,
        output_tokens_details: null,
      },
    });
    send({ type: 'message_stop' });
    res.end();
  }

  // ---- routing ----
  const takeFault = (kind: HostedKind, path: string): Fault | undefined => {
    const i = faults.findIndex((f) => (!f.kind || f.kind === kind) && (!f.path || f.path.test(path)));
    if (i < 0) return undefined;
    const f = faults[i] as Fault;
    f.times = (f.times ?? 1) - 1;
    if (f.times <= 0) faults.splice(i, 1);
    return f;
  };

  async function identity(req: IncomingMessage, res: ServerResponse, path: string, body: unknown): Promise<boolean> {
    if (/^\/entra\/[^/]+\/oauth2\/v2\.0\/token$/.test(path)) {
      const form = isRecord(body) ? body : {};
      if (opts.azureClients && !opts.azureClients.includes(String(form.client_id))) {
        json(res, 400, {
          error: 'unauthorized_client',
          error_description: `AADSTS700016: Application with identifier '${String(form.client_id)}' was not found in the directory. Trace ID: 00000000`,
        });
        return true;
      }
      if (form.client_assertion !== federated || form.grant_type !== 'client_credentials') {
        json(res, 400, {
          error: 'invalid_client',
          error_description:
            'AADSTS700213: No matching federated identity record found for presented assertion subject. Trace ID: 00000000',
        });
        return true;
      }
      json(res, 200, { token_type: 'Bearer', expires_in: 3599, ext_expires_in: 3599, access_token: issue('entra-') });
      return true;
    }
    if (path === '/sts/v1/token') {
      const b = isRecord(body) ? body : {};
      if (b.subjectToken !== federated) {
        json(res, 400, {
          error: 'invalid_grant',
          error_description: 'The audience in ID Token does not match the expected audience.',
        });
        return true;
      }
      json(res, 200, {
        access_token: issue('ya29.sts-'),
        issued_token_type: 'urn:ietf:params:oauth:token-type:access_token',
        token_type: 'Bearer',
        expires_in: 3600,
      });
      return true;
    }
    if (/^\/iam\/v1\/projects\/-\/serviceAccounts\/[^/]+:generateAccessToken$/.test(path)) {
      const bearer = /^Bearer (.+)$/.exec(req.headers.authorization ?? '')?.[1];
      if (!bearer || !issued.has(bearer)) {
        json(res, 403, {
          error: {
            code: 403,
            message: 'Permission iam.serviceAccounts.getAccessToken denied',
            status: 'PERMISSION_DENIED',
          },
        });
        return true;
      }
      json(res, 200, { accessToken: issue('ya29.sa-'), expireTime: new Date(Date.now() + 3600_000).toISOString() });
      return true;
    }
    if (path === '/computeMetadata/v1/instance/service-accounts/default/token') {
      if (req.headers['metadata-flavor'] !== 'Google') {
        res.writeHead(403).end('Missing Metadata-Flavor:Google header.');
        return true;
      }
      json(res, 200, { access_token: issue('ya29.gke-'), expires_in: 3599, token_type: 'Bearer' });
      return true;
    }
    return false;
  }

  /** [kind, the path under the provider's API root] of a request. */
  function kindOf(path: string): [HostedKind, string] | undefined {
    for (const [prefix, kind] of [
      ['/openai-api', 'openai'],
      ['/anthropic-api', 'anthropic'],
      ['/azure', 'azure'],
      ['/vertex', 'vertex'],
      ['/compatible', 'compatible'],
    ] as const) {
      if (path.startsWith(`${prefix}/`)) return [kind, path.slice(prefix.length)];
    }
    return undefined;
  }

  const modelsList = (kind: HostedKind): Model[] =>
    models[kind].map((m) => ({
      id: m,
      object: 'model',
      created: 1_700_000_000,
      owned_by: kind === 'compatible' ? 'vllm' : 'system',
    }));

  async function route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://double');
    const body = await readBody(req);
    const which = kindOf(url.pathname);
    calls.push({
      kind: which?.[0] ?? 'identity',
      method: req.method ?? '',
      path: `${url.pathname}${url.search}`,
      headers: req.headers,
      body,
    });
    if (!which) {
      if (!(await identity(req, res, url.pathname, body))) json(res, 404, { error: 'not found' });
      return;
    }
    const [kind, path] = which;
    if (!authorized(kind, req)) return unauthorized(kind, res);
    const fault = takeFault(kind, url.pathname);
    if (fault) return json(res, fault.status, fault.body, fault.headers);
    const b = isRecord(body) ? body : {};
    const model = typeof b.model === 'string' ? b.model : '';
    const known = (m: string) => models[kind].includes(m);
    const notFound = (m: string) =>
      json(
        res,
        404,
        kind === 'anthropic'
          ? errorOf(kind, 404, `model: ${m}`, 'not_found_error')
          : kind === 'vertex'
            ? errorOf(
                kind,
                404,
                `Publisher Model \`${m}\` was not found or your project does not have access to it.`,
                'NOT_FOUND',
              )
            : errorOf(
                kind,
                404,
                `The model \`${m}\` does not exist or you do not have access to it.`,
                'model_not_found',
              ),
      );

    if (kind === 'openai' || kind === 'compatible') {
      if (path === '/v1/moderations') return openAIModeration(res, b);
      if (req.method === 'GET' && path === '/v1/models')
        return json(res, 200, { object: 'list', data: modelsList(kind) });
      if (!known(model)) return notFound(model);
      if (path === '/v1/chat/completions') return openAIChat(kind, req, res, b, model);
      if (path === '/v1/completions') return openAICompletions(res, b, model);
      if (path === '/v1/embeddings') return openAIEmbeddings(res, b, model);
      if (path === '/v1/responses' && kind === 'openai') return openAIResponses(req, res, b, model);
      return json(res, 404, errorOf(kind, 404, `Invalid URL (POST ${path})`, 'invalid_request_error'));
    }
    if (kind === 'anthropic') {
      if (req.method === 'GET' && path.startsWith('/v1/models')) {
        const data = models.anthropic.map(
          (m) =>
            ({
              type: 'model',
              id: m,
              display_name: m,
              created_at: '2025-09-29T00:00:00Z',
              capabilities: null,
              deprecated_at: null,
              lifecycle: 'active',
              line: null,
              max_input_tokens: 200_000,
              max_tokens: 64_000,
              retires_at: null,
            }) satisfies ModelInfo,
        );
        return json(res, 200, {
          data,
          has_more: false,
          first_id: data[0]?.id ?? null,
          last_id: data.at(-1)?.id ?? null,
        });
      }
      const dated = models.anthropic.find((m) => m === model || m.replace(/-[0-9]{8}$/, '') === model);
      if (!dated) return notFound(model);
      if (path === '/v1/messages') return anthropicMessages(req, res, b, model, b.stream === true);
      if (path === '/v1/messages/count_tokens') {
        if ('max_tokens' in b) {
          return json(
            res,
            400,
            errorOf(kind, 400, 'max_tokens: Extra inputs are not permitted', 'invalid_request_error'),
          );
        }
        return json(res, 200, { input_tokens: promptWords(b) } satisfies MessageTokensCount);
      }
      return json(res, 404, errorOf(kind, 404, 'Not found', 'not_found_error'));
    }
    if (kind === 'azure') {
      if (req.method === 'GET' && (path === '/openai/v1/models' || path === '/openai/models')) {
        return json(res, 200, { object: 'list', data: modelsList('azure') });
      }
      const dated = /^\/openai\/deployments\/([^/]+)(\/.+)$/.exec(path);
      const deployment = dated ? decodeURIComponent(dated[1] ?? '') : model;
      const op = dated ? dated[2] : path.replace(/^\/openai\/v1/, '');
      if (dated && !url.searchParams.get('api-version')) {
        return json(res, 404, errorOf(kind, 404, 'Resource not found', '404'));
      }
      const deployed = deployments[deployment];
      if (!deployed) {
        return json(
          res,
          404,
          errorOf(
            kind,
            404,
            'The API deployment for this resource does not exist. If you created the deployment within the last 5 minutes, please wait a moment and try again.',
            'DeploymentNotFound',
          ),
        );
      }
      // stream_options came with 2024-09-01-preview: older API versions refuse it.
      const version = url.searchParams.get('api-version');
      if (version && version < '2024-09-01' && 'stream_options' in b) {
        return json(
          res,
          400,
          errorOf(kind, 400, 'Unrecognized request argument supplied: stream_options', 'invalid_request_error'),
        );
      }
      if (op === '/chat/completions') return openAIChat(kind, req, res, b, deployed);
      if (op === '/completions') return openAICompletions(res, b, deployed);
      if (op === '/embeddings') return openAIEmbeddings(res, b, deployed);
      if (op === '/responses') return openAIResponses(req, res, b, deployed);
      return json(res, 404, errorOf(kind, 404, 'Resource not found', '404'));
    }
    // Vertex AI
    const list = /^\/v1beta1\/publishers\/(google|anthropic)\/models$/.exec(path);
    if (req.method === 'GET' && list) {
      const publisher = list[1];
      const publisherModels = models.vertex
        .filter((m) => (publisher === 'anthropic') === m.startsWith('claude'))
        .map((m) => ({
          name: `publishers/${publisher}/models/${m}`,
          versionId: '001',
          launchStage: 'GA',
          openSourceCategory: 'PROPRIETARY',
        }));
      return json(res, 200, { publisherModels });
    }
    const at = /^\/v1\/projects\/([a-z0-9-]+)\/locations\/([a-z0-9-]+)(\/.+)$/.exec(path);
    if (!at) return json(res, 404, errorOf(kind, 404, 'Not found', 'NOT_FOUND'));
    const op = at[3] ?? '';
    if (op === '/endpoints/openapi/chat/completions') {
      const bare = model.replace(/^google\//, '');
      if (!model.startsWith('google/') || !known(bare)) return notFound(model);
      return openAIChat(kind, req, res, b, model);
    }
    if (op === '/publishers/anthropic/models/count-tokens:rawPredict') {
      if (typeof b.model !== 'string' || !known(b.model.split('@')[0] ?? '')) return notFound(String(b.model));
      return json(res, 200, { input_tokens: promptWords(b) } satisfies MessageTokensCount);
    }
    const raw = /^\/publishers\/anthropic\/models\/([^/:]+):(rawPredict|streamRawPredict)$/.exec(op);
    if (raw) {
      const m = decodeURIComponent(raw[1] ?? '');
      if (!known(m.split('@')[0] ?? m)) return notFound(m);
      if (JSON.stringify(b.messages ?? []).includes('"type":"url"')) {
        return json(res, 400, {
          type: 'error',
          error: { type: 'invalid_request_error', message: 'URL sources are not supported' },
        });
      }
      // Vertex's own version, or a dated API version (what the Anthropic Vertex SDK 1.x copies from its header).
      const version = String(b.anthropic_version ?? '');
      if (!/^(vertex-2023-10-16|[0-9]{4}-[0-9]{2}-[0-9]{2})$/.test(version) || 'model' in b) {
        return json(res, 400, {
          type: 'error',
          error: {
            type: 'invalid_request_error',
            message: 'anthropic_version: vertex-2023-10-16 is required; model must not be in the body',
          },
        });
      }
      return anthropicMessages(req, res, b, m, raw[2] === 'streamRawPredict');
    }
    return json(res, 404, errorOf(kind, 404, 'Not found', 'NOT_FOUND'));
  }

  const server = createServer((req, res) => {
    route(req, res).catch((err: unknown) => {
      if (!res.headersSent) json(res, 500, { error: { message: String(err) } });
      else res.destroy();
    });
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url,
    env: {
      PAO_ENDPOINT_URL_OPENAI: `${url}/openai-api/v1`,
      PAO_ENDPOINT_URL_ANTHROPIC: `${url}/anthropic-api`,
      PAO_ENDPOINT_URL_AZURE_OPENAI: `${url}/azure`,
      PAO_ENDPOINT_URL_VERTEX_AI: `${url}/vertex`,
      AZURE_AUTHORITY_HOST: `${url}/entra`,
      PAO_ENDPOINT_URL_GOOGLE_STS: `${url}/sts`,
      PAO_ENDPOINT_URL_GOOGLE_IAM_CREDENTIALS: `${url}/iam`,
      GCE_METADATA_HOST: url.replace(/^http:\/\//, ''),
    },
    calls,
    behave: (b) => {
      behavior = { ...behavior, ...b };
    },
    fail: (f) => {
      faults.push({ ...f });
    },
    reset: () => {
      behavior = { ...defaults };
      faults.length = 0;
      calls.length = 0;
    },
    issuedTokens: () => [...issued],
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}
