import { isRecord } from '../../crds/is-record.js';
import { choicesOf, modelOf, type ParsedRequest } from './chat-request.js';
import { invalidRequest, type ProxyError } from './errors.js';

/**
 * The legacy completions and the embeddings requests as the gateway checks them: what it must
 * see to route and account for the call (the model, whether it streams, the tags, the choices and
 * prompts it asks for, the answer's size); the rest goes to the upstream untouched, which refuses
 * what it does not support in OpenAI's envelope.
 */

/** Most prompts one completions request may carry, as OpenAI's embeddings inputs. */
const MAX_PROMPTS = 2048;

/** Token ids as the spec has them: integers, at least one (which ids a model knows is its server's to say). */
const isTokenIds = (v: unknown): v is number[] => Array.isArray(v) && v.length > 0 && v.every(Number.isInteger);

/**
 * A completions `prompt` as OpenAI defines it: a string, an array of strings, an array of token
 * ids, or an array of token-id arrays. Which of them a model's server takes natively, and what
 * the gateway does for the rest, is proxy/upstreams/fan-out.ts's.
 */
function isPrompt(prompt: unknown): boolean {
  // null is the spec's (its default, <|endoftext|>, is the upstream's to apply or refuse).
  if (typeof prompt === 'string' || prompt === null) return true;
  if (!Array.isArray(prompt) || prompt.length > MAX_PROMPTS) return false;
  return (
    prompt.every((p) => typeof p === 'string') || isTokenIds(prompt) || (prompt.length > 0 && prompt.every(isTokenIds))
  );
}

export function parseCompletionRequest(body: unknown): ParsedRequest | ProxyError {
  if (!isRecord(body)) return invalidRequest('the request body must be a JSON object');
  const model = modelOf(body);
  if (typeof model !== 'string') return model;
  const { tags, stream, stream_options, n, prompt, ...rest } = body;
  if (!isPrompt(prompt)) {
    return invalidRequest(
      `prompt must be a string, an array of strings, an array of token ids, an array of token-id arrays (at most ${MAX_PROMPTS} prompts), or null`,
      'prompt',
      'invalid_prompt',
    );
  }
  if (stream !== undefined && stream !== null && typeof stream !== 'boolean')
    return invalidRequest('stream must be a boolean', 'stream');
  if (stream_options !== undefined && stream_options !== null && !isRecord(stream_options))
    return invalidRequest('stream_options must be an object', 'stream_options');
  const choices = choicesOf(n);
  if (typeof choices !== 'number') return choices;
  const forward: Record<string, unknown> = { ...rest, model, prompt };
  if (n !== undefined && n !== null) forward.n = n;
  if (stream !== undefined && stream !== null) forward.stream = stream;
  if (stream_options !== undefined && stream_options !== null) forward.stream_options = stream_options;
  const includeUsage = isRecord(stream_options) && stream_options.include_usage === true;
  return { model, stream: stream === true, includeUsage, tags, forward };
}

/** Most inputs one embeddings request may carry (OpenAI's own limit). */
const MAX_EMBEDDING_INPUTS = 2048;
/**
 * Most dimensions a request may ask of a vector. OpenAI's API says only "a positive integer"; the
 * largest real embedding models have at most 8,192 (text-embedding-3-large 3,072), so 65,536 is
 * 8 times the largest with room for models to come, and bounds the answer a request can ask for.
 */
const MAX_EMBEDDING_DIMENSIONS = 65_536;

export function parseEmbeddingRequest(body: unknown): ParsedRequest | ProxyError {
  if (!isRecord(body)) return invalidRequest('the request body must be a JSON object');
  const model = modelOf(body);
  if (typeof model !== 'string') return model;
  const { tags, input, stream: _stream, ...rest } = body;
  // An empty string is the spec's to allow and the upstream's to refuse (OpenAI does).
  const ok =
    typeof input === 'string' ||
    (Array.isArray(input) &&
      input.length > 0 &&
      input.length <= MAX_EMBEDDING_INPUTS &&
      (input.every((i) => typeof i === 'string') ||
        input.every((i) => Number.isInteger(i)) ||
        input.every((i) => Array.isArray(i) && i.every((t) => Number.isInteger(t)))));
  if (!ok) {
    return invalidRequest(
      `input must be a string, or 1-${MAX_EMBEDDING_INPUTS} strings, or token arrays`,
      'input',
      'invalid_input',
    );
  }
  const { dimensions } = rest;
  if (
    dimensions !== undefined &&
    dimensions !== null &&
    !(Number.isInteger(dimensions) && (dimensions as number) >= 1 && (dimensions as number) <= MAX_EMBEDDING_DIMENSIONS)
  ) {
    return invalidRequest(
      `dimensions must be a whole number from 1 to ${MAX_EMBEDDING_DIMENSIONS} (the largest embedding models have 8,192)`,
      'dimensions',
      'invalid_dimensions',
    );
  }
  return { model, stream: false, includeUsage: false, tags, forward: { ...rest, model, input } };
}
