/**
 * What each Bedrock model family accepts, as data, checked before the upstream call so that a
 * caller gets a 400 naming the parameter and the limit rather than Bedrock's ValidationException
 * after a round trip (or, for max_tokens, a truncated answer it did not ask for). Keyed by the
 * foundation model id (an inference profile is checked as its model). Sources: each provider's
 * inference-parameter page in the Bedrock user guide; the first matching row applies.
 */

export interface ModelLimits {
  /** Foundation model ids this row covers. */
  match: RegExp;
  /** Largest maxTokens the model takes. */
  maxTokens: number;
  /** Most stop sequences. */
  stopSequences: number;
  /** The model refuses temperature and top_p together (Anthropic's 4.5 generation). */
  temperatureOrTopP?: true;
}

const MODEL_LIMITS: readonly ModelLimits[] = [
  {
    match: /^anthropic\.claude-(sonnet|haiku|opus)-4-5/,
    maxTokens: 64_000,
    stopSequences: 8191,
    temperatureOrTopP: true,
  },
  { match: /^anthropic\.claude-opus-4/, maxTokens: 32_000, stopSequences: 8191 },
  { match: /^anthropic\.claude-(sonnet-4|3-7-sonnet)/, maxTokens: 64_000, stopSequences: 8191 },
  { match: /^anthropic\.claude-3-5-(sonnet|haiku)/, maxTokens: 8192, stopSequences: 8191 },
  { match: /^anthropic\.claude-3-/, maxTokens: 4096, stopSequences: 8191 },
  { match: /^amazon\.nova-premier/, maxTokens: 32_000, stopSequences: 4 },
  { match: /^amazon\.nova-/, maxTokens: 10_000, stopSequences: 4 },
  { match: /^amazon\.titan-text-/, maxTokens: 8192, stopSequences: 4 },
  { match: /^meta\.llama/, maxTokens: 2048, stopSequences: 4 },
  { match: /^mistral\.mistral-large/, maxTokens: 8192, stopSequences: 10 },
  { match: /^mistral\./, maxTokens: 8192, stopSequences: 10 },
  { match: /^cohere\.command/, maxTokens: 4000, stopSequences: 4 },
];

export function limitsOf(foundationModel: string): ModelLimits | undefined {
  return MODEL_LIMITS.find((l) => l.match.test(foundationModel));
}
