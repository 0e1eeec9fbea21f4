import { type ChatRequest, parseChatRequest } from './chat-request.js';
import { parseCompletionRequest, parseEmbeddingRequest } from './endpoint-requests.js';
import type { ProxyError } from './errors.js';

/**
 * The OpenAI endpoints the gateway serves, as data: each contributes only how its request is
 * parsed and where an OpenAI-compatible upstream takes it; auth, limits, body, tags, routing,
 * budgets and accounting are one pipeline for all (proxy/chat-handler.ts), and each upstream
 * translator says which endpoints it speaks.
 */

export type EndpointName = 'chat' | 'completions' | 'embeddings';

export interface Endpoint {
  name: EndpointName;
  /** Where callers send it. */
  path: string;
  /** Where an OpenAI-compatible server (Ollama) takes it. */
  upstreamPath: string;
  parse(body: unknown): ChatRequest | ProxyError;
  /**
   * Bytes the answer may hold while it is built, where that can dwarf the request: reserved from
   * the memory budget with the body's, so that small requests for huge answers are bounded too.
   */
  answerBytes?(req: ChatRequest): number;
}

/**
 * An embeddings answer: per vector, its dimensions (asked, else 1024, the common maximum of
 * Titan v2 and Cohere v3) as JSON numbers of ~20 characters plus the parsed array's 8 bytes each.
 * 2,048 inputs of 1,024 dimensions: 56 MiB.
 */
function embeddingAnswerBytes(req: ChatRequest): number {
  const input = req.forward.input;
  const vectors = Array.isArray(input) ? input.length : 1;
  const dims = typeof req.forward.dimensions === 'number' ? req.forward.dimensions : 1024;
  return vectors * dims * 28;
}

export const ENDPOINTS: Record<EndpointName, Endpoint> = {
  chat: {
    name: 'chat',
    path: '/openai/v1/chat/completions',
    upstreamPath: '/v1/chat/completions',
    parse: parseChatRequest,
  },
  completions: {
    name: 'completions',
    path: '/openai/v1/completions',
    upstreamPath: '/v1/completions',
    parse: parseCompletionRequest,
  },
  embeddings: {
    name: 'embeddings',
    path: '/openai/v1/embeddings',
    upstreamPath: '/v1/embeddings',
    parse: parseEmbeddingRequest,
    answerBytes: embeddingAnswerBytes,
  },
};
