import { createHash } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse, STATUS_CODES } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

/**
 * A local stand-in for an in-cluster Ollama model server (the version the operator deploys, 0.17.x), speaking its
 * OpenAI compatibility layer (/v1) plus the few native endpoints the operator touches. Plain node:http so what the
 * gateway sees on the wire (framing, keep-alive, resets, backpressure) is what a real server would produce, and so
 * benchmarks measure the gateway rather than a framework.
 *
 * Prompt tokens: the number of whitespace-separated words across every text in the request's messages (string
 * contents and `{type:'text'}` parts; roles, names and images count 0). "You are terse." + "hi there" = 5.
 * Completion tokens: `tok0 tok1 … tok<C-1>` (a space after every token but the last), C = behaviour.completionTokens,
 * capped by max_tokens with finish_reason "length" (max_completion_tokens is ignored, as by the real Ollama 0.17).
 */

export interface OllamaDoubleOptions {
  /** Models it "has" (default ['llama3.1:8b', 'qwen2.5:0.5b']). A name without a tag also matches `name:latest`. */
  models?: string[];
  /** Default 0 = a free port; always binds 127.0.0.1. */
  port?: number;
  /**
   * Keep every chat request in `requests` (default true). A load test sends hundreds of thousands, so it turns this
   * off to keep the double's memory and GC flat; `requests` then stays empty.
   */
  record?: boolean;
}

/**
 * Mutable at runtime via double.behave({...}); reset() restores the defaults. Each request uses the behaviour in
 * effect when it arrived, so a test can change it without disturbing streams already in flight.
 */
export interface Behavior {
  /** Tokens generated per response (default 8). */
  completionTokens: number;
  /** Delay before response headers (default 0). Applies after request validation, as model loading would. */
  firstByteDelayMs: number;
  /** Delay between tokens (default 0). Non-streaming responses also wait (C-1) × this before answering. */
  interTokenDelayMs: number;
  /** Reply to valid chat completions with this error envelope instead (after firstByteDelayMs). */
  failWith?: { status: number; retryAfterSeconds?: number; message?: string };
  /** Streaming: destroy the socket after N token chunks (no finish chunk, no [DONE]). No effect if N > tokens. */
  resetAfterTokens?: number;
  /** Streaming: stop after N token chunks and keep the connection open until the client goes away or close(). */
  stallAfterTokens?: number;
  /** Chat: each token's text padded to this many bytes (a long answer, for callers that read it slowly). */
  tokenBytes?: number;
}

interface RecordedRequest {
  method: string;
  /** As received, query string included. */
  path: string;
  headers: Record<string, string | string[] | undefined>;
  /** Parsed JSON; the raw text when it was not JSON; undefined while the body is still arriving. */
  body: unknown;
  /** true if the client went away before the response finished (never set when the double itself cut it). */
  aborted: boolean;
}

export interface OllamaDouble {
  /** http://127.0.0.1:PORT (OpenAI base is `${url}/v1`). */
  url: string;
  port: number;
  /** Every /v1/chat/completions request, in arrival order (none with record: false). Cleared in place by reset(). */
  requests: RecordedRequest[];
  /** Changes the behaviour; with `model`, only for requests naming that model (over the common one). */
  behave(b: Partial<Behavior>, model?: string): void;
  /** Behaviour defaults + clear requests. */
  reset(): void;
  /** Also destroys open sockets (idle keep-alive connections, stalled streams). */
  close(): Promise<void>;
}

const DEFAULT_MODELS = ['llama3.1:8b', 'qwen2.5:0.5b'];
const DEFAULT_BEHAVIOR: Behavior = { completionTokens: 8, firstByteDelayMs: 0, interTokenDelayMs: 0 };
/** What the operator deploys; /api/version reports it. */
const OLLAMA_VERSION = '0.17.4';

type ErrorType = 'invalid_request_error' | 'api_error';

interface ChatPlan {
  model: string;
  stream: boolean;
  includeUsage: boolean;
  promptTokens: number;
  maxTokens: number | undefined;
}

type Verdict = ({ ok: true } & ChatPlan) | { ok: false; status: number; type: ErrorType; message: string };

/** Per chat request: lets close() and client disconnects stop timers, and tells who ended the exchange. */
interface Exchange {
  abort: AbortController;
  selfClosed: boolean;
}

export async function startOllamaDouble(opts: OllamaDoubleOptions = {}): Promise<OllamaDouble> {
  const models = [...(opts.models ?? DEFAULT_MODELS)];
  const record = opts.record ?? true;
  const startedAt = new Date();
  const requests: RecordedRequest[] = [];
  const sockets = new Set<Socket>();
  const inflight = new Set<Exchange>();
  let behavior: Behavior = { ...DEFAULT_BEHAVIOR };
  /** Per-model changes over `behavior`, by the model's name as listed. */
  const byModel = new Map<string, Partial<Behavior>>();
  let nextId = 1;
  let closing: Promise<void> | undefined;

  // Indexed, not scanned: the proxy's scaling bench gives it 1000 models, and a lookup that grew with them would
  // take CPU from the proxy it shares the machine with. The first of two equal names wins, as a scan would.
  const byName = new Map<string, string>();
  for (const m of models) if (!byName.has(withTag(m).toLowerCase())) byName.set(withTag(m).toLowerCase(), m);
  const findModel = (name: string): string | undefined => byName.get(withTag(name).toLowerCase());

  const server = createServer((req, res) => {
    route(req, res).catch((err: unknown) => {
      // A bug in the double must surface in the test that hit it, not hang it.
      if (!res.headersSent) sendJson(res, 500, { error: `ollama double: ${String(err)}` });
      else res.destroy();
    });
  });
  // Ollama (Go net/http, no IdleTimeout) never closes idle keep-alive connections; Node's 5 s default would race
  // the gateway's connection pool in a way the real server does not.
  server.keepAliveTimeout = 0;
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  });

  async function route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = new URL(req.url ?? '/', 'http://double').pathname;
    const method = req.method ?? 'GET';
    if (method === 'POST' && path === '/v1/chat/completions') return chat(req, res);
    if (method === 'POST' && path === '/v1/completions') return complete(req, res);
    if (method === 'POST' && path === '/v1/embeddings') return embed(req, res);
    if (method === 'POST' && path === '/v1/responses') return responses(req, res);
    if (method === 'POST' && path === '/v1/messages') return messages(req, res);
    // node:http drops the body of a HEAD response by itself.
    if ((method === 'GET' || method === 'HEAD') && path === '/') return sendText(res, 200, 'Ollama is running');
    if (method === 'GET' && path === '/api/version') return sendJson(res, 200, { version: OLLAMA_VERSION });
    if (method === 'GET' && path === '/v1/models') {
      return sendJson(res, 200, { object: 'list', data: models.map((m) => openAIModel(m, startedAt)) });
    }
    if (method === 'GET' && path.startsWith('/v1/models/')) {
      const name = decodeURIComponent(path.slice('/v1/models/'.length));
      const found = findModel(name);
      if (found === undefined) return sendOpenAIError(res, 404, 'api_error', `model '${name}' not found`);
      return sendJson(res, 200, openAIModel(name, startedAt));
    }
    if (method === 'GET' && path === '/api/tags') {
      return sendJson(res, 200, { models: models.map((m) => ({ name: m, model: m, ...modelFacts(m, startedAt) })) });
    }
    if (method === 'POST' && path === '/api/show') return show(req, res);
    // Gin's default for unknown routes and for known paths with another method.
    return sendText(res, 404, '404 page not found');
  }

  async function show(req: IncomingMessage, res: ServerResponse): Promise<void> {
    let body: unknown;
    try {
      body = JSON.parse(await readBody(req));
    } catch (err) {
      if (req.destroyed) return;
      return sendJson(res, 400, { error: `invalid JSON body: ${errorMessage(err)}` });
    }
    const rec = isRecord(body) ? body : {};
    const name = nonEmptyString(rec.model) ?? nonEmptyString(rec.name);
    if (name === undefined) return sendJson(res, 400, { error: 'model is required' });
    const found = findModel(name);
    if (found === undefined) return sendJson(res, 404, { error: `model '${name}' not found` });
    const facts = modelFacts(found, startedAt);
    return sendJson(res, 200, {
      license: '',
      modelfile:
        `# Modelfile generated by "ollama show"\n# To build a new Modelfile based on this, replace FROM with:\n` +
        `# FROM ${found}\n\nFROM /root/.ollama/models/blobs/sha256-${facts.digest}\nTEMPLATE "{{ .Prompt }}"\n`,
      parameters: '',
      template: '{{ .Prompt }}',
      details: facts.details,
      model_info: {
        'general.architecture': facts.details.family,
        'general.parameter_count': facts.parameterCount,
      },
      capabilities: ['completion'],
      modified_at: facts.modified_at,
    });
  }

  async function chat(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const rec: RecordedRequest = {
      method: req.method ?? 'POST',
      path: req.url ?? '',
      headers: { ...req.headers },
      body: undefined,
      aborted: false,
    };
    if (record) requests.push(rec);
    const ex: Exchange = { abort: new AbortController(), selfClosed: false };
    inflight.add(ex);
    // 'close' fires on normal completion too; only an unfinished response that we did not cut counts as aborted.
    res.once('close', () => {
      if (!res.writableEnded && !ex.selfClosed) rec.aborted = true;
      inflight.delete(ex);
      ex.abort.abort();
    });
    const b: Behavior = { ...behavior };
    const socket = req.socket;

    let text: string;
    try {
      text = await readBody(req);
    } catch {
      return; // The client left mid-upload; the 'close' listener has recorded it.
    }
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch (err) {
      rec.body = text;
      return sendOpenAIError(res, 400, 'invalid_request_error', `invalid JSON body: ${errorMessage(err)}`);
    }
    rec.body = body;

    const v = validateChat(body, (m) => findModel(m) !== undefined);
    if (!v.ok) return sendOpenAIError(res, v.status, v.type, v.message);
    Object.assign(b, byModel.get(findModel(v.model) ?? ''));

    const signal = ex.abort.signal;
    if (!(await sleep(b.firstByteDelayMs, signal))) return;

    if (b.failWith) {
      const { status, retryAfterSeconds, message } = b.failWith;
      const headers: Record<string, string> = {};
      if (retryAfterSeconds !== undefined) headers['Retry-After'] = String(retryAfterSeconds);
      const msg = message ?? (STATUS_CODES[status] ?? 'error').toLowerCase();
      return sendOpenAIError(res, status, 'api_error', msg, headers);
    }

    const n = v.maxTokens !== undefined ? Math.min(v.maxTokens, b.completionTokens) : b.completionTokens;
    const finishReason = n < b.completionTokens ? 'length' : 'stop';
    const id = `chatcmpl-${nextId++}`;
    const created = Math.floor(Date.now() / 1000);
    const usage = { prompt_tokens: v.promptTokens, completion_tokens: n, total_tokens: v.promptTokens + n };
    const head = { id, object: 'chat.completion.chunk', created, model: v.model, system_fingerprint: 'fp_ollama' };

    if (!v.stream) {
      if (!(await sleep(Math.max(n - 1, 0) * b.interTokenDelayMs, signal))) return;
      let content = '';
      for (let i = 0; i < n; i++) content += tokenText(i, n, b.tokenBytes);
      return sendJson(res, 200, {
        ...head,
        object: 'chat.completion',
        choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: finishReason }],
        usage,
      });
    }

    res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache', Connection: 'keep-alive' });
    // Headers go out now so the client sees the stream start even if the first token stalls.
    res.flushHeaders();
    for (let i = 0; ; i++) {
      if (b.resetAfterTokens !== undefined && i === b.resetAfterTokens) {
        // Let the tokens already written reach the client first; otherwise the cut lands before them.
        await socketFlushed(socket);
        ex.selfClosed = true;
        socket.destroy();
        return;
      }
      if (b.stallAfterTokens !== undefined && i === b.stallAfterTokens) return;
      if (i === n) break;
      if (i > 0 && !(await sleep(b.interTokenDelayMs, signal))) return;
      const chunk = {
        ...head,
        choices: [
          { index: 0, delta: { role: 'assistant', content: tokenText(i, n, b.tokenBytes) }, finish_reason: null },
        ],
      };
      if (!(await send(res, frame(chunk)))) return;
    }
    const last = {
      ...head,
      choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: finishReason }],
    };
    if (!(await send(res, frame(last)))) return;
    if (v.includeUsage && !(await send(res, frame({ ...head, choices: [], usage })))) return;
    if (!(await send(res, 'data: [DONE]\n\n'))) return;
    res.end();
  }

  /** Ollama's 404 for a model it does not have (the same text validateChat gives chat). */
  const modelNotFound = (res: ServerResponse, model: unknown) =>
    sendOpenAIError(
      res,
      404,
      'api_error',
      `model ${JSON.stringify(String(model ?? ''))} not found, try pulling it first`,
    );

  /** The body of a POST as JSON, or the 400 Ollama sends (its Gin binding) and undefined. */
  async function jsonBody(req: IncomingMessage, res: ServerResponse): Promise<Record<string, unknown> | undefined> {
    let text: string;
    try {
      text = await readBody(req);
    } catch {
      return undefined;
    }
    try {
      const body = JSON.parse(text) as unknown;
      if (isRecord(body)) return body;
      sendOpenAIError(res, 400, 'invalid_request_error', 'invalid request body');
    } catch (err) {
      sendOpenAIError(res, 400, 'invalid_request_error', `invalid JSON body: ${errorMessage(err)}`);
    }
    return undefined;
  }

  /**
   * /v1/completions as Ollama 0.17 answers it (openai/openai.go CompletionRequest: one prompt
   * string; text_completion objects without `logprobs`). With stream_options.include_usage every
   * chunk before the last carries a zero usage, and the last (no choices) the real one, as the real
   * server does (captured from 0.17.4).
   */
  async function complete(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const body = await jsonBody(req, res);
    if (!body) return;
    if (typeof body.prompt !== 'string') {
      return sendOpenAIError(res, 400, 'invalid_request_error', 'prompt must be a string');
    }
    const model = nonEmptyString(body.model);
    if (model === undefined || findModel(model) === undefined) return modelNotFound(res, body.model);
    const b: Behavior = { ...behavior };
    const max = typeof body.max_tokens === 'number' ? body.max_tokens : undefined;
    const n = max !== undefined ? Math.min(max, b.completionTokens) : b.completionTokens;
    const promptTokens = Math.max(1, Math.ceil(body.prompt.length / 4));
    const usage = { prompt_tokens: promptTokens, completion_tokens: n, total_tokens: promptTokens + n };
    const head = {
      id: `cmpl-${nextId++}`,
      object: 'text_completion',
      created: Math.floor(Date.now() / 1000),
      model,
      system_fingerprint: 'fp_ollama',
    };
    const finishReason = n < b.completionTokens ? 'length' : 'stop';
    if (body.stream !== true) {
      let text = '';
      for (let i = 0; i < n; i++) text += tokenText(i, n);
      return sendJson(res, 200, { ...head, choices: [{ text, index: 0, finish_reason: finishReason }], usage });
    }
    const includeUsage = isRecord(body.stream_options) && body.stream_options.include_usage === true;
    const zero = includeUsage ? { usage: { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 } } : {};
    res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache', Connection: 'keep-alive' });
    for (let i = 0; i < n; i++) {
      const chunk = { ...head, choices: [{ text: tokenText(i, n), index: 0, finish_reason: null }], ...zero };
      if (!(await send(res, frame(chunk)))) return;
    }
    const last = { ...head, choices: [{ text: '', index: 0, finish_reason: finishReason }], ...zero };
    if (!(await send(res, frame(last)))) return;
    if (includeUsage && !(await send(res, frame({ ...head, choices: [], usage })))) return;
    if (!(await send(res, 'data: [DONE]\n\n'))) return;
    res.end();
  }

  /** The prompt tokens of a Responses `input` or a Messages `messages`: words, as chat counts them. */
  const wordsOf = (v: unknown): number => Math.max(1, countWords(JSON.stringify(v ?? '')));

  /** SSE with an event name, as Ollama's Responses and Anthropic endpoints send it. */
  const named = (event: string, data: object) => `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;

  /**
   * /v1/responses as Ollama 0.17 answers it (openai/responses.go): one message output item; streamed as
   * response.created, the item and its text part, output_text deltas, their ends, then response.completed with usage.
   * The response object carries every field the real server writes (captured from 0.17.4), the request's
   * instructions, temperature, top_p and max_output_tokens echoed, and its nulls where OpenAI's spec has
   * none (safety_identifier, prompt_cache_key, usage before the end): the gateway's to mend.
   * Text only: the benches and the pipeline's tests need the shape and the usage, not tools.
   */
  async function responses(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const body = await jsonBody(req, res);
    if (!body) return;
    const model = nonEmptyString(body.model);
    if (model === undefined || findModel(model) === undefined) return modelNotFound(res, body.model);
    const b: Behavior = { ...behavior };
    // The first byte waits as on chat (a slow model on demand); a caller that leaves ends the wait.
    const left = new AbortController();
    res.once('close', () => left.abort());
    if (!(await sleep(b.firstByteDelayMs, left.signal))) return;
    const max = typeof body.max_output_tokens === 'number' ? body.max_output_tokens : undefined;
    const n = max !== undefined ? Math.min(max, b.completionTokens) : b.completionTokens;
    const inputTokens = wordsOf(body.input) + wordsOf(body.instructions ?? '');
    const id = `resp_${nextId++}`;
    const itemId = `msg_${nextId++}`;
    let text = '';
    for (let i = 0; i < n; i++) text += tokenText(i, n);
    const usage = {
      input_tokens: inputTokens,
      output_tokens: n,
      total_tokens: inputTokens + n,
      input_tokens_details: { cached_tokens: 0 },
      output_tokens_details: { reasoning_tokens: 0 },
    };
    const part = { type: 'output_text', text, annotations: [], logprobs: [] };
    const item = { id: itemId, type: 'message', status: 'completed', role: 'assistant', content: [part] };
    const createdAt = Math.floor(Date.now() / 1000);
    // The request's function tools echoed, their description and strict null where unset (as Ollama does).
    const toolsEcho = (Array.isArray(body.tools) ? body.tools : []).filter(isRecord).map((t) => ({
      type: t.type,
      name: t.name,
      description: t.description ?? null,
      strict: t.strict ?? null,
      parameters: t.parameters,
    }));
    const response = (status: string, output: object[], u: object | null) => ({
      id,
      object: 'response',
      created_at: createdAt,
      completed_at: status === 'completed' ? Math.floor(Date.now() / 1000) : null,
      status,
      incomplete_details: null,
      model,
      previous_response_id: null,
      instructions: typeof body.instructions === 'string' ? body.instructions : null,
      output,
      error: null,
      tools: toolsEcho,
      // Ollama answers 'auto' whatever tool_choice the request sent.
      tool_choice: 'auto',
      truncation: 'disabled',
      parallel_tool_calls: true,
      text: { format: { type: 'text' } },
      top_p: typeof body.top_p === 'number' ? body.top_p : 1,
      presence_penalty: 0,
      frequency_penalty: 0,
      top_logprobs: 0,
      temperature: typeof body.temperature === 'number' ? body.temperature : 1,
      reasoning: null,
      usage: u,
      max_output_tokens: max ?? null,
      max_tool_calls: null,
      store: false,
      background: false,
      service_tier: 'default',
      // Ollama answers {} whatever metadata the request sent.
      metadata: {},
      safety_identifier: null,
      prompt_cache_key: null,
    });
    if (body.stream !== true) return sendJson(res, 200, response('completed', [item], usage));
    res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache', Connection: 'keep-alive' });
    let seq = 0;
    const ev = (type: string, data: object) => named(type, { type, sequence_number: seq++, ...data });
    const opening =
      ev('response.created', { response: response('in_progress', [], null) }) +
      ev('response.in_progress', { response: response('in_progress', [], null) }) +
      ev('response.output_item.added', { output_index: 0, item: { ...item, status: 'in_progress', content: [] } }) +
      ev('response.content_part.added', {
        item_id: itemId,
        output_index: 0,
        content_index: 0,
        part: { ...part, text: '' },
      });
    if (!(await send(res, opening))) return;
    for (let i = 0; i < n; i++) {
      const delta = ev('response.output_text.delta', {
        item_id: itemId,
        output_index: 0,
        content_index: 0,
        delta: tokenText(i, n),
        logprobs: [],
      });
      if (!(await send(res, delta))) return;
    }
    const closing =
      ev('response.output_text.done', { item_id: itemId, output_index: 0, content_index: 0, text, logprobs: [] }) +
      ev('response.content_part.done', { item_id: itemId, output_index: 0, content_index: 0, part }) +
      ev('response.output_item.done', { output_index: 0, item }) +
      ev('response.completed', { response: response('completed', [item], usage) });
    if (!(await send(res, closing))) return;
    res.end();
  }

  /**
   * Anthropic's /v1/messages as Ollama 0.17 answers it (anthropic/anthropic.go): one text block; streamed as
   * message_start (input tokens), the block's start, text_delta events and stop, message_delta (stop reason,
   * output tokens), message_stop. As the real server (captured from 0.17.4): no stop_sequence anywhere, no
   * stop_reason in message_start, the usage's two counts only.
   */
  async function messages(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const body = await jsonBody(req, res);
    if (!body) return;
    const model = nonEmptyString(body.model);
    if (model === undefined || findModel(model) === undefined) {
      return sendJson(res, 404, {
        type: 'error',
        error: { type: 'not_found_error', message: `model '${String(body.model ?? '')}' not found` },
      });
    }
    const b: Behavior = { ...behavior };
    const max = typeof body.max_tokens === 'number' ? body.max_tokens : undefined;
    const n = max !== undefined ? Math.min(max, b.completionTokens) : b.completionTokens;
    const inputTokens = wordsOf(body.messages) + wordsOf(body.system ?? '');
    const stopReason = n < b.completionTokens ? 'max_tokens' : 'end_turn';
    const id = `msg_${nextId++}`;
    let text = '';
    for (let i = 0; i < n; i++) text += tokenText(i, n);
    const message = (content: object[], stop: string | undefined, out: number) => ({
      id,
      type: 'message',
      role: 'assistant',
      model,
      content,
      ...(stop ? { stop_reason: stop } : {}),
      usage: { input_tokens: inputTokens, output_tokens: out },
    });
    if (body.stream !== true) return sendJson(res, 200, message([{ type: 'text', text }], stopReason, n));
    res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache', Connection: 'keep-alive' });
    const opening =
      named('message_start', { type: 'message_start', message: message([], undefined, 0) }) +
      named('content_block_start', {
        type: 'content_block_start',
        index: 0,
        content_block: { type: 'text', text: '' },
      });
    if (!(await send(res, opening))) return;
    for (let i = 0; i < n; i++) {
      const delta = named('content_block_delta', {
        type: 'content_block_delta',
        index: 0,
        delta: { type: 'text_delta', text: tokenText(i, n) },
      });
      if (!(await send(res, delta))) return;
    }
    const closing =
      named('content_block_stop', { type: 'content_block_stop', index: 0 }) +
      named('message_delta', {
        type: 'message_delta',
        delta: { stop_reason: stopReason },
        usage: { input_tokens: inputTokens, output_tokens: n },
      }) +
      named('message_stop', { type: 'message_stop' });
    if (!(await send(res, closing))) return;
    res.end();
  }

  /** /v1/embeddings as Ollama 0.17 answers it: a list of float vectors, usage with prompt and total tokens. */
  async function embed(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const body = await jsonBody(req, res);
    if (!body) return;
    const model = nonEmptyString(body.model);
    if (model === undefined || findModel(model) === undefined) return modelNotFound(res, body.model);
    const inputs = typeof body.input === 'string' ? [body.input] : Array.isArray(body.input) ? body.input : [];
    if (inputs.length === 0) return sendOpenAIError(res, 400, 'invalid_request_error', 'invalid input');
    const dims = typeof body.dimensions === 'number' && body.dimensions > 0 ? body.dimensions : 8;
    const tokens = inputs.reduce<number>(
      (sum, i) =>
        sum + (typeof i === 'string' ? Math.max(1, Math.ceil(i.length / 4)) : Array.isArray(i) ? i.length : 1),
      0,
    );
    return sendJson(res, 200, {
      object: 'list',
      data: inputs.map((input, index) => ({
        object: 'embedding',
        // A unit vector that depends on the input, so answers can be told apart.
        embedding: Array.from({ length: dims }, (_, d) => ((JSON.stringify(input).length + d) % 7) / 7),
        index,
      })),
      model,
      usage: { prompt_tokens: tokens, total_tokens: tokens },
    });
  }

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    // As deep an accept queue as Ollama's (Go listens with the kernel's somaxconn), not Node's 511.
    server.listen({ port: opts.port ?? 0, host: '127.0.0.1', backlog: 4096 }, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;

  return {
    url: `http://127.0.0.1:${port}`,
    port,
    requests,
    behave(patch: Partial<Behavior>, model?: string): void {
      if (model !== undefined) {
        const name = findModel(model);
        if (name === undefined) throw new RangeError(`the double does not serve ${model}`);
        const next = { ...byModel.get(name), ...patch };
        checkBehavior({ ...behavior, ...next });
        byModel.set(name, next);
        return;
      }
      const next = { ...behavior, ...patch };
      checkBehavior(next);
      behavior = next;
    },
    reset(): void {
      behavior = { ...DEFAULT_BEHAVIOR };
      byModel.clear();
      requests.length = 0;
    },
    close(): Promise<void> {
      closing ??= new Promise<void>((resolve, reject) => {
        server.close((err) => (err ? reject(err) : resolve()));
        for (const ex of inflight) {
          ex.selfClosed = true;
          ex.abort.abort();
        }
        for (const socket of sockets) socket.destroy();
      });
      return closing;
    },
  };
}

/**
 * The checks Ollama's /v1/chat/completions makes, in its order: JSON binding (types), messages (the middleware),
 * then model presence and existence (the handler).
 */
function validateChat(body: unknown, hasModel: (name: string) => boolean): Verdict {
  const bad = (message: string): Verdict => ({ ok: false, status: 400, type: 'invalid_request_error', message });
  if (!isRecord(body)) return bad('request body must be a JSON object');
  const { model, messages, stream, stream_options: streamOptions } = body;
  if (model != null && typeof model !== 'string') return bad('model must be a string');
  if (stream != null && typeof stream !== 'boolean') return bad('stream must be a boolean');
  if (streamOptions != null && !isRecord(streamOptions)) return bad('stream_options must be an object');
  const includeUsage = isRecord(streamOptions) ? streamOptions.include_usage : undefined;
  if (includeUsage != null && typeof includeUsage !== 'boolean') {
    return bad('stream_options.include_usage must be a boolean');
  }
  const limits: number[] = [];
  // Ollama 0.17 reads only max_tokens: max_completion_tokens is ignored (the model runs on), as the real server does.
  for (const key of ['max_tokens']) {
    const limit = body[key];
    if (limit == null) continue;
    if (typeof limit !== 'number' || !Number.isInteger(limit)) return bad(`${key} must be an integer`);
    // Ollama reads a negative num_predict as "no limit".
    if (limit >= 0) limits.push(limit);
  }
  if (messages != null && !Array.isArray(messages)) return bad('messages must be an array');
  if (!Array.isArray(messages) || messages.length === 0) return bad("[] is too short - 'messages'");

  let promptTokens = 0;
  for (const [i, msg] of messages.entries()) {
    if (!isRecord(msg)) return bad(`messages[${i}] must be an object`);
    if (typeof msg.role !== 'string') return bad(`messages[${i}].role must be a string`);
    const content = msg.content;
    if (typeof content === 'string') {
      promptTokens += countWords(content);
    } else if (Array.isArray(content)) {
      for (const [j, part] of content.entries()) {
        const where = `messages[${i}].content[${j}]`;
        const partTokens = checkPart(part, where);
        if (typeof partTokens === 'string') return bad(partTokens);
        promptTokens += partTokens;
      }
    } else if (!(content == null && Array.isArray(msg.tool_calls))) {
      // Content may only be absent on an assistant message that carries tool calls.
      return bad(
        `invalid message content type: ${goTypeName(content)} ` +
          `(messages[${i}].content must be a string or an array of content parts)`,
      );
    }
  }

  if (typeof model !== 'string' || model === '') {
    return { ok: false, status: 400, type: 'invalid_request_error', message: 'model is required' };
  }
  if (!hasModel(model)) {
    return {
      ok: false,
      status: 404,
      type: 'api_error',
      message: `model ${JSON.stringify(model)} not found, try pulling it first`,
    };
  }
  return {
    ok: true,
    model,
    stream: stream === true,
    includeUsage: includeUsage === true,
    promptTokens,
    maxTokens: limits.length > 0 ? Math.min(...limits) : undefined,
  };
}

/** Words the part contributes to the prompt, or why Ollama would reject it. */
function checkPart(part: unknown, where: string): number | string {
  const shape = `${where} must be {type:'text',text} or {type:'image_url',image_url:{url}}`;
  if (!isRecord(part)) return `invalid message format: ${shape}`;
  if (part.type === 'text') {
    return typeof part.text === 'string'
      ? countWords(part.text)
      : `invalid message format: ${where}.text must be a string`;
  }
  if (part.type === 'image_url') {
    const ref = part.image_url;
    const url = isRecord(ref) ? ref.url : ref;
    if (typeof url !== 'string') return `invalid message format: ${where}.image_url.url must be a string`;
    // Ollama only takes inline base64 images; it does not fetch URLs.
    const m = /^data:(?:image\/(?:jpeg|jpg|png|webp))?;base64,(.*)$/s.exec(url);
    if (m === null) return `invalid image input: ${where} must be a data:image/{jpeg,jpg,png,webp};base64 URL`;
    const data = m[1] ?? '';
    if (data.length % 4 !== 0 || !/^[A-Za-z0-9+/]*={0,2}$/.test(data)) {
      return `invalid message format: ${where} is not valid base64`;
    }
    return 0;
  }
  return `invalid message format: ${shape}`;
}

function checkBehavior(b: Behavior): void {
  const counts = ['completionTokens', 'resetAfterTokens', 'stallAfterTokens', 'tokenBytes'] as const;
  for (const key of counts) {
    const v = b[key];
    if (v !== undefined && !(Number.isInteger(v) && v >= 0)) {
      throw new RangeError(`${key} must be a non-negative integer, got ${v}`);
    }
  }
  for (const key of ['firstByteDelayMs', 'interTokenDelayMs'] as const) {
    if (!(Number.isFinite(b[key]) && b[key] >= 0)) throw new RangeError(`${key} must be >= 0, got ${b[key]}`);
  }
  if (b.failWith && !(Number.isInteger(b.failWith.status) && b.failWith.status >= 100 && b.failWith.status <= 599)) {
    throw new RangeError(`failWith.status must be an HTTP status, got ${b.failWith.status}`);
  }
}

function tokenText(i: number, n: number, bytes = 0): string {
  const word = `tok${i}`.padEnd(bytes - (i < n - 1 ? 1 : 0), 'x');
  return i < n - 1 ? `${word} ` : word;
}

function countWords(text: string): number {
  return text.match(/\S+/g)?.length ?? 0;
}

function frame(payload: unknown): string {
  return `data: ${JSON.stringify(payload)}\n\n`;
}

/** "llama3.1" and "llama3.1:latest" are the same model to Ollama. */
function withTag(name: string): string {
  const base = name.slice(name.lastIndexOf('/') + 1);
  return base.includes(':') ? name : `${name}:latest`;
}

/** Ollama reports the name's namespace: "library" for plain names, "org" for "org/model". */
function namespaceOf(name: string): string {
  const parts = name.split('/');
  return parts.length >= 2 ? (parts[parts.length - 2] ?? 'library') : 'library';
}

function openAIModel(name: string, startedAt: Date) {
  return { id: name, object: 'model', created: Math.floor(startedAt.getTime() / 1000), owned_by: namespaceOf(name) };
}

/** Deterministic stand-ins for what Ollama knows about a pulled model. */
function modelFacts(name: string, startedAt: Date) {
  const base = (name.slice(name.lastIndexOf('/') + 1).split(':')[0] ?? name).toLowerCase();
  const family = /^[a-z]+/.exec(base)?.[0] ?? base;
  const size = /(\d+(?:\.\d+)?)b\b/i.exec(name.split(':')[1] ?? '')?.[1];
  const billions = size !== undefined ? Number(size) : 1;
  return {
    modified_at: startedAt.toISOString(),
    size: Math.round(billions * 6e8),
    digest: createHash('sha256').update(name).digest('hex'),
    parameterCount: Math.round(billions * 1e9),
    details: {
      parent_model: '',
      format: 'gguf',
      family,
      families: [family],
      parameter_size: size !== undefined ? `${size}B` : '1B',
      quantization_level: 'Q4_K_M',
    },
  };
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of req as AsyncIterable<Buffer>) chunks.push(chunk);
  return Buffer.concat(chunks).toString('utf8');
}

/** Resolves false if the exchange ended first, so callers stop instead of writing into a dead response. */
function sleep(ms: number, signal: AbortSignal): Promise<boolean> {
  if (signal.aborted) return Promise.resolve(false);
  if (ms <= 0) return Promise.resolve(true);
  return new Promise((resolve) => {
    const onAbort = () => {
      clearTimeout(timer);
      resolve(false);
    };
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve(true);
    }, ms);
    signal.addEventListener('abort', onAbort, { once: true });
  });
}

/** Writes with backpressure; false if the connection went away (a 'drain' would then never come). */
function send(res: ServerResponse, data: string): Promise<boolean> {
  if (res.destroyed) return Promise.resolve(false);
  if (res.write(data)) return Promise.resolve(true);
  return new Promise((resolve) => {
    const settle = (ok: boolean) => {
      res.off('drain', onDrain);
      res.off('close', onClose);
      resolve(ok);
    };
    const onDrain = () => settle(true);
    const onClose = () => settle(false);
    res.on('drain', onDrain);
    res.on('close', onClose);
  });
}

async function socketFlushed(socket: Socket): Promise<void> {
  // node:http corks the socket and uncorks on the next tick; after that writableLength counts unsent bytes.
  await new Promise<void>((resolve) => setImmediate(resolve));
  if (socket.destroyed || socket.writableLength === 0) return;
  await new Promise<void>((resolve) => {
    const done = () => {
      socket.off('drain', done);
      socket.off('close', done);
      resolve();
    };
    socket.on('drain', done);
    socket.on('close', done);
  });
}

function sendJson(res: ServerResponse, status: number, payload: unknown, headers: Record<string, string> = {}): void {
  const body = JSON.stringify(payload);
  res.writeHead(status, {
    ...headers,
    'Content-Type': 'application/json; charset=utf-8',
    'Content-Length': Buffer.byteLength(body),
  });
  res.end(body);
}

function sendOpenAIError(
  res: ServerResponse,
  status: number,
  type: ErrorType,
  message: string,
  headers: Record<string, string> = {},
): void {
  sendJson(res, status, { error: { message, type, param: null, code: null } }, headers);
}

function sendText(res: ServerResponse, status: number, text: string): void {
  res.writeHead(status, { 'Content-Type': 'text/plain; charset=utf-8', 'Content-Length': Buffer.byteLength(text) });
  res.end(text);
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function nonEmptyString(v: unknown): string | undefined {
  return typeof v === 'string' && v !== '' ? v : undefined;
}

function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** Go's %T, which Ollama puts in its "invalid message content type" error. */
function goTypeName(v: unknown): string {
  if (v == null) return '<nil>';
  if (typeof v === 'number') return 'float64';
  if (typeof v === 'boolean') return 'bool';
  return 'map[string]interface {}';
}
