import type { GenAiOperation } from '../telemetry/tracing.js';
import { parseAnthropicRequest, parseCountTokensRequest } from './anthropic-request.js';
import { type ParsedRequest, parseChatRequest } from './chat-request.js';
import type { CallerDialect } from './dialects.js';
import { parseCompletionRequest, parseEmbeddingRequest } from './endpoint-requests.js';
import type { ProxyError } from './errors.js';
import { parseResponsesRequest } from './responses-request.js';

/**
 * The endpoints the gateway serves, as data: each is its dialect (which also says how its errors
 * leave, proxy/endpoints/dialects.ts), its parser and its operation name. Auth, limits, body, tags,
 * routing, budgets and accounting are one pipeline for all (proxy/pipeline.ts); which upstream
 * takes which dialect, natively or through a translator, is the upstreams' and translators' own
 * table. Adding an endpoint is a row here and its parser beside the others.
 */

export type EndpointName = 'chat' | 'completions' | 'embeddings' | 'responses' | 'messages' | 'count_tokens';

export interface Endpoint {
  name: EndpointName;
  dialect: CallerDialect;
  /** Where callers send it. */
  path: string;
  /** gen_ai.operation.name of its spans. */
  operation: GenAiOperation;
  parse(body: unknown): ParsedRequest | ProxyError;
  /**
   * What the call stage does with it: have the model generate an answer (through translators,
   * retries and fallbacks), or count the request's input tokens (the provider's exact count where
   * it has one, an estimate elsewhere; nothing generated, nothing billed).
   */
  does: 'generate' | 'count-tokens';
  /**
   * Bytes the answer may hold while it is built, where that can dwarf the request: reserved from
   * the memory budget with the body's, so that small requests for huge answers are bounded too.
   */
  answerBytes?(req: ParsedRequest): number;
}

/**
 * An embeddings answer: per vector, its dimensions (asked, else 1024, the common maximum of
 * Titan v2 and Cohere v3) as JSON numbers of ~20 characters plus the parsed array's 8 bytes each.
 * 2,048 inputs of 1,024 dimensions: 56 MiB.
 */
function embeddingAnswerBytes(req: ParsedRequest): number {
  const input = req.forward.input;
  const vectors = Array.isArray(input) ? input.length : 1;
  const dims = typeof req.forward.dimensions === 'number' ? req.forward.dimensions : 1024;
  return vectors * dims * 28;
}

export const ENDPOINTS: Record<EndpointName, Endpoint> = {
  chat: {
    name: 'chat',
    dialect: 'openai-chat',
    path: '/openai/v1/chat/completions',
    operation: 'chat',
    parse: parseChatRequest,
    does: 'generate',
  },
  completions: {
    name: 'completions',
    dialect: 'openai-completions',
    path: '/openai/v1/completions',
    operation: 'text_completion',
    parse: parseCompletionRequest,
    does: 'generate',
  },
  embeddings: {
    name: 'embeddings',
    dialect: 'openai-embeddings',
    path: '/openai/v1/embeddings',
    operation: 'embeddings',
    parse: parseEmbeddingRequest,
    does: 'generate',
    answerBytes: embeddingAnswerBytes,
  },
  responses: {
    name: 'responses',
    dialect: 'openai-responses',
    path: '/openai/v1/responses',
    operation: 'chat',
    parse: parseResponsesRequest,
    does: 'generate',
  },
  messages: {
    name: 'messages',
    dialect: 'anthropic-messages',
    path: '/anthropic/v1/messages',
    operation: 'chat',
    parse: parseAnthropicRequest,
    does: 'generate',
  },
  // Claude Code calls it to size its context.
  count_tokens: {
    name: 'count_tokens',
    dialect: 'anthropic-messages',
    path: '/anthropic/v1/messages/count_tokens',
    operation: 'count_tokens',
    parse: parseCountTokensRequest,
    does: 'count-tokens',
  },
};
