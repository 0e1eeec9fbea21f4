import { conformingReader } from '../conformance/conformance.js';
import type { CallerDialect } from '../endpoints/dialects.js';
import { anthropicStream, anthropicUsage } from './anthropic-stream.js';
import { FRAME_KEY } from './frame-keys.js';
import { sseFrame as frame, NO_TOKEN, type StreamReader, TOKEN } from './stream-reader.js';
import type { Usage } from './upstream.js';

/**
 * What an OpenAI-compatible server (Ollama 0.17 and vLLM 0.32: /v1/chat/completions,
 * /v1/completions, /v1/embeddings, /v1/responses and Anthropic's /v1/messages) takes per dialect:
 * the usual path, the body as the gateway needs it (the stream's usage), where its answers carry
 * usage, and how its stream is read. The gateway passes every dialect through unchanged but for
 * its engine's quirks (crds/engines/); it reads only what it accounts for.
 */

export interface PassThrough {
  /** The body as the server takes it (the caller's, plus what the gateway needs of the stream). */
  prepare(body: Record<string, unknown>, stream: boolean): Record<string, unknown>;
  /** Usage of a whole answer. */
  usageOf(json: unknown): Usage | undefined;
  /** A reader for one stream; `clientWantsUsage`: the usage the gateway asked for goes on too. */
  reader(clientWantsUsage: boolean): StreamReader;
}

import { isRecord } from '../../crds/is-record.js';
import { num } from './stream-reader.js';

function openAIUsage(body: unknown): Usage | undefined {
  const u = isRecord(body) ? body.usage : undefined;
  if (!isRecord(u) || typeof u.prompt_tokens !== 'number') return undefined;
  const cached = isRecord(u.prompt_tokens_details) ? num(u.prompt_tokens_details.cached_tokens) : 0;
  // Embeddings report only prompt tokens.
  return {
    promptTokens: u.prompt_tokens,
    completionTokens: num(u.completion_tokens),
    ...(cached ? { cachedTokens: cached } : {}),
  };
}

/** A delta with non-empty content, as OpenAI-compatible servers serialize it: "content" (chat) or "text" (completions). */
const HAS_CONTENT = /"(?:content|text)":\s*"(?!")/;

/** Chat and completions streams: `data:` events, the usage chunk asked for, then [DONE]. */
const openAIStream = (clientWantsUsage: boolean): StreamReader => ({
  // A token event (most of them) passes unchanged; the usage chunk, [DONE] and any named event are read.
  // FRAME_KEY.content is HAS_CONTENT on the bytes.
  fast: (_raw, name, frame) => {
    if (name !== undefined) return undefined;
    const keys = frame.get();
    return keys & FRAME_KEY.usage ? undefined : keys & FRAME_KEY.content ? TOKEN : NO_TOKEN;
  },
  read(_event, data) {
    if (data === '[DONE]') return { out: '', token: false, last: true };
    // Most events are a token: pass them on as they came, parsing only the one with usage
    // (parsing every event was a visible share of the streaming path's CPU).
    if (!data.includes('"usage"')) {
      if (data.charCodeAt(0) !== 123 /* { */) return undefined;
      return { out: frame(data), token: HAS_CONTENT.test(data), last: false };
    }
    let chunk: { choices?: Array<{ delta?: { content?: string } }>; usage?: unknown };
    try {
      chunk = JSON.parse(data) as typeof chunk;
    } catch {
      return undefined;
    }
    const usage = openAIUsage(chunk);
    const token = chunk.choices?.some((c) => c.delta?.content) ?? false;
    if (usage && !clientWantsUsage) {
      // The usage-only chunk exists because the gateway asked for it; the client did not.
      if (!chunk.choices || chunk.choices.length === 0) return { out: '', token, usage, last: false };
      delete chunk.usage;
      return { out: frame(JSON.stringify(chunk)), token, usage, last: false };
    }
    return { out: frame(data), token, ...(usage ? { usage } : {}), last: false };
  },
});

function responsesUsage(body: unknown): Usage | undefined {
  const u = isRecord(body) ? body.usage : undefined;
  if (!isRecord(u) || typeof u.input_tokens !== 'number') return undefined;
  const cached = isRecord(u.input_tokens_details) ? num(u.input_tokens_details.cached_tokens) : 0;
  return {
    promptTokens: u.input_tokens,
    completionTokens: num(u.output_tokens),
    ...(cached ? { cachedTokens: cached } : {}),
  };
}

/** The Responses events that end a response; each carries it whole, usage included. */
const RESPONSE_ENDS = new Set(['response.completed', 'response.incomplete', 'response.failed']);

/** A delta that is the answer's content (its first time is the first token's), reasoning included. */
const isTokenDelta = (name: string) => name === 'response.output_text.delta' || name.includes('reasoning');

const responsesStream = (): StreamReader => ({
  // The deltas (most of a stream) pass unchanged; the events that carry the Response are read.
  fast: (_raw, name) => (name?.endsWith('.delta') ? (isTokenDelta(name) ? TOKEN : NO_TOKEN) : undefined),
  read(event, data) {
    if (data.charCodeAt(0) !== 123) return undefined;
    const out = frame(data, event);
    const name = event ?? '';
    if (name.endsWith('.delta')) return { out, token: isTokenDelta(name), last: false };
    if (!RESPONSE_ENDS.has(name)) return { out, token: false, last: name === 'error' };
    let parsed: unknown;
    try {
      parsed = JSON.parse(data);
    } catch {
      return undefined;
    }
    if (!isRecord(parsed)) return undefined;
    const usage = responsesUsage(parsed.response);
    // Parsed whole: handed on, so the conformance and stored Responses' stamp read it again for nothing.
    return { out, token: false, ...(usage ? { usage } : {}), last: true, data: parsed };
  },
});

/** A chat or completions body that asks for the stream's usage chunk (stream_options.include_usage). */
export const withUsage = (body: Record<string, unknown>, stream: boolean) =>
  stream
    ? { ...body, stream_options: { ...((body.stream_options as object | undefined) ?? {}), include_usage: true } }
    : body;

export const PASS_THROUGH: Readonly<Record<CallerDialect, PassThrough>> = {
  'openai-chat': {
    prepare: withUsage,
    usageOf: openAIUsage,
    reader: (wantsUsage) => conformingReader('openai-chat', openAIStream(wantsUsage)),
  },
  'openai-completions': {
    prepare: withUsage,
    usageOf: openAIUsage,
    reader: (wantsUsage) => conformingReader('openai-completions', openAIStream(wantsUsage)),
  },
  'openai-embeddings': {
    prepare: (body) => body,
    usageOf: openAIUsage,
    reader: openAIStream,
  },
  'openai-responses': {
    prepare: (body) => body,
    usageOf: responsesUsage,
    reader: () => conformingReader('openai-responses', responsesStream()),
  },
  'anthropic-messages': {
    prepare: (body) => body,
    usageOf: (json) => (isRecord(json) && isRecord(json.usage) ? anthropicUsage(json.usage) : undefined),
    reader: () => conformingReader('anthropic-messages', anthropicStream()),
  },
};

/**
 * What a server takes natively of a request for more than one answer to one prompt: `n` choices,
 * a completions `prompt` that is a list, a prompt of token ids. A server takes them in the
 * caller's own dialect only (a translator between means one answer per call). What it does not
 * take, the gateway makes of several calls (proxy/upstreams/fan-out.ts), but token ids: they mean
 * something only to the model's own tokenizer, and are refused with a 400 naming `prompt`.
 */
export interface ManyAnswers {
  choices: boolean;
  promptLists: boolean;
  tokenPrompts: boolean;
}

const ALL: ManyAnswers = { choices: true, promptLists: true, tokenPrompts: true };

/**
 * By who serves the route (Server.system: the engine's container in the cluster, the provider's
 * gen_ai.provider.name outside it), per caller dialect; a server or dialect absent takes none.
 * Ollama 0.17.4 answers one choice whatever `n` asks, and refuses (400) a `prompt` that is not one
 * string (checked against the real server: e2e/no-cluster/dialect-requests.e2e.test.ts); vLLM and
 * OpenAI's API (Azure's too) take all three. Generic OpenAI-compatible servers, Anthropic,
 * Bedrock and Vertex are served by several calls.
 */
export const MANY_ANSWERS: Readonly<Record<string, Readonly<Partial<Record<CallerDialect, ManyAnswers>>>>> = {
  ollama: {},
  vllm: { 'openai-chat': ALL, 'openai-completions': ALL },
  openai: { 'openai-chat': ALL, 'openai-completions': ALL },
  'azure.ai.openai': { 'openai-chat': ALL, 'openai-completions': ALL },
};
