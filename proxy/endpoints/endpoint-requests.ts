import { isRecord, modelOf, type ParsedRequest } from './chat-request.js';
import { invalidRequest, type ProxyError } from './errors.js';

/**
 * The legacy completions and the embeddings requests as the gateway checks them: what it must
 * see to route and account for the call (the model, whether it streams, the tags); the rest goes
 * to the upstream untouched, which refuses what it does not support in OpenAI's envelope.
 */

export function parseCompletionRequest(body: unknown): ParsedRequest | ProxyError {
  if (!isRecord(body)) return invalidRequest('the request body must be a JSON object');
  const model = modelOf(body);
  if (typeof model !== 'string') return model;
  const { tags, stream, stream_options, n, prompt, ...rest } = body;
  // Ollama takes one prompt string (ollama/ollama#5259); a list would be refused there with less to go on.
  if (typeof prompt !== 'string') {
    return invalidRequest('prompt must be a string (one prompt per request)', 'prompt', 'missing_prompt');
  }
  if (stream !== undefined && stream !== null && typeof stream !== 'boolean')
    return invalidRequest('stream must be a boolean', 'stream');
  if (stream_options !== undefined && stream_options !== null && !isRecord(stream_options))
    return invalidRequest('stream_options must be an object', 'stream_options');
  if (n !== undefined && n !== null && n !== 1)
    return invalidRequest('n must be 1: the gateway returns one choice per request', 'n', 'unsupported_parameter');
  const forward: Record<string, unknown> = { ...rest, model, prompt };
  if (stream !== undefined && stream !== null) forward.stream = stream;
  if (stream_options !== undefined && stream_options !== null) forward.stream_options = stream_options;
  const includeUsage = isRecord(stream_options) && stream_options.include_usage === true;
  return { model, stream: stream === true, includeUsage, tags, forward };
}

/** Most inputs one embeddings request may carry (OpenAI's own limit). */
const MAX_EMBEDDING_INPUTS = 2048;

export function parseEmbeddingRequest(body: unknown): ParsedRequest | ProxyError {
  if (!isRecord(body)) return invalidRequest('the request body must be a JSON object');
  const model = modelOf(body);
  if (typeof model !== 'string') return model;
  const { tags, input, stream: _stream, ...rest } = body;
  const ok =
    (typeof input === 'string' && input !== '') ||
    (Array.isArray(input) &&
      input.length > 0 &&
      input.length <= MAX_EMBEDDING_INPUTS &&
      (input.every((i) => typeof i === 'string') ||
        input.every((i) => Number.isInteger(i)) ||
        input.every((i) => Array.isArray(i) && i.every((t) => Number.isInteger(t)))));
  if (!ok) {
    return invalidRequest(
      `input must be a non-empty string, or 1-${MAX_EMBEDDING_INPUTS} strings, or token arrays`,
      'input',
      'invalid_input',
    );
  }
  return { model, stream: false, includeUsage: false, tags, forward: { ...rest, model, input } };
}
