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
  },
};
