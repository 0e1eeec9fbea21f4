import type { NeverFits } from '../access/memory-budget.js';
import type { GenAiOperation } from '../telemetry/tracing.js';
import { parseAnthropicRequest, parseCountTokensRequest } from './anthropic-request.js';
import { type ParsedRequest, parseChatRequest } from './chat-request.js';
import type { CallerDialect } from './dialects.js';
import { parseCompletionRequest, parseEmbeddingRequest } from './endpoint-requests.js';
import { invalidRequest, type ProxyError } from './errors.js';
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
   * What the answer may hold while it is built, where that can dwarf the request: reserved from
   * the memory budget once the model is routed (proxy/route.ts), so that small requests for huge
   * answers are bounded too; with the caller's error, naming the field, where it never could fit.
   */
  answerCost?(req: ParsedRequest): AnswerCost;
}

interface AnswerCost {
  bytes: number;
  /** The 4xx for an answer larger than the whole budget, given the most bytes one request may hold. */
  neverFits: NeverFits;
}

/** Dimensions of a vector when the request names none: the common maximum of Titan v2 and Cohere v3. */
const DEFAULT_DIMENSIONS = 1024;
/** Per dimension of an answer's vector: a JSON number of ~20 characters plus the parsed array's 8 bytes. */
const BYTES_PER_DIMENSION = 28;

const inputs = (n: number) => `${n} input${n === 1 ? '' : 's'}`;

/**
 * An embeddings answer: its vectors times their dimensions. 2,048 inputs of 1,024 dimensions:
 * 56 MiB. One that could never fit names the field that made it so, and what fits instead.
 */
function embeddingAnswerCost(req: ParsedRequest): AnswerCost {
  const input = req.forward.input;
  const vectors = Array.isArray(input) ? input.length : 1;
  const asked = typeof req.forward.dimensions === 'number' ? req.forward.dimensions : undefined;
  const dims = asked ?? DEFAULT_DIMENSIONS;
  const neverFits: NeverFits = (most) => {
    const dimsThatFit = Math.floor(most / (vectors * BYTES_PER_DIMENSION));
    if (asked !== undefined && dimsThatFit >= 1) {
      return invalidRequest(
        `dimensions ${asked} for ${inputs(vectors)} is a larger answer than this gateway replica holds in memory: at most ${dimsThatFit} dimensions for ${inputs(vectors)}`,
        'dimensions',
        'answer_too_large',
      );
    }
    const inputsThatFit = Math.max(1, Math.floor(most / (dims * BYTES_PER_DIMENSION)));
    return invalidRequest(
      `${inputs(vectors)} of ${dims} dimensions are a larger answer than this gateway replica holds in memory: at most ${inputs(inputsThatFit)} of ${dims} dimensions per request`,
      'input',
      'answer_too_large',
    );
  };
  return { bytes: vectors * dims * BYTES_PER_DIMENSION, neverFits };
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
    answerCost: embeddingAnswerCost,
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
