import { isRecord } from '../is-record.js';
import type { Refusal } from './provider.js';

/**
 * OpenAI embeddings <-> Bedrock InvokeModel bodies of the embedding models, as pure functions
 * (the Bedrock module addresses the calls as one fan-out, bedrock.ts): Titan Text Embeddings v2
 * embeds one text per call (a list becomes one call per text), Cohere Embed v3 up to 96 texts per
 * call. What a family cannot do is refused with a 400 naming the parameter, rather than dropped.
 */

type Family = 'titan-v2' | 'cohere-v3';

interface EmbeddingCall {
  /** The InvokeModel body. */
  body: Record<string, unknown>;
  /** How many of the request's inputs it embeds, in order. */
  count: number;
}

export interface EmbeddingPlan {
  family: Family;
  calls: EmbeddingCall[];
  encoding: 'float' | 'base64';
}

/** One InvokeModel answer: its JSON body and the input tokens Bedrock counted (response header). */
export interface EmbeddingAnswer {
  json: unknown;
  inputTokens?: number;
}

const invalidRequest = (refused: string, param: string, code = 'invalid_request'): Refusal => ({
  refused,
  param,
  code,
});

/** Texts per Cohere call (its limit). */
export const COHERE_BATCH = 96;
const COHERE_INPUT_TYPES = ['search_document', 'search_query', 'classification', 'clustering'];
const TITAN_DIMENSIONS = [256, 512, 1024];
/** Fields of an OpenAI embeddings request the translation reads (tags were taken before). */
const KNOWN = new Set(['model', 'input', 'encoding_format', 'dimensions', 'user', 'input_type']);

function familyOf(foundationModel: string): Family | undefined {
  if (foundationModel.startsWith('amazon.titan-embed-text-v2')) return 'titan-v2';
  if (foundationModel.startsWith('cohere.embed-')) return 'cohere-v3';
  return undefined;
}

export function toEmbeddingCalls(foundationModel: string, body: Record<string, unknown>): EmbeddingPlan | Refusal {
  const family = familyOf(foundationModel);
  if (!family) {
    return invalidRequest(
      `${foundationModel} is not an embedding model the gateway translates (Titan Text Embeddings v2, Cohere Embed v3)`,
      'model',
      'unsupported_model',
    );
  }
  for (const name of Object.keys(body)) {
    if (!KNOWN.has(name) && body[name] !== null) {
      return invalidRequest(`${name} is not supported for Bedrock embedding models`, name, 'unsupported_parameter');
    }
  }
  const input = body.input;
  const texts = typeof input === 'string' ? [input] : Array.isArray(input) ? input : [];
  if (!texts.every((t): t is string => typeof t === 'string')) {
    return invalidRequest(
      'input must be text for Bedrock embedding models (not token arrays)',
      'input',
      'invalid_input',
    );
  }
  if (texts.some((t) => t === ''))
    return invalidRequest('input must not contain empty strings', 'input', 'invalid_input');
  const encoding = body.encoding_format ?? 'float';
  if (encoding !== 'float' && encoding !== 'base64') {
    return invalidRequest('encoding_format must be float or base64', 'encoding_format');
  }
  const dimensions = body.dimensions ?? undefined;
  if (family === 'titan-v2') {
    if (body.input_type !== undefined && body.input_type !== null) {
      return invalidRequest('input_type is a Cohere parameter; Titan embeddings take none', 'input_type');
    }
    if (dimensions !== undefined && dimensions !== null && !TITAN_DIMENSIONS.includes(dimensions as number)) {
      return invalidRequest('dimensions must be 256, 512 or 1024 for Titan Text Embeddings v2', 'dimensions');
    }
    const extra = typeof dimensions === 'number' ? { dimensions } : {};
    return {
      family,
      encoding,
      calls: texts.map((inputText) => ({ body: { inputText, ...extra, normalize: true }, count: 1 })),
    };
  }
  if (dimensions !== undefined && dimensions !== null && dimensions !== 1024) {
    return invalidRequest('dimensions must be 1024 (or left out) for Cohere Embed v3', 'dimensions');
  }
  const inputType = body.input_type ?? 'search_document';
  if (typeof inputType !== 'string' || !COHERE_INPUT_TYPES.includes(inputType)) {
    return invalidRequest(`input_type must be one of ${COHERE_INPUT_TYPES.join(', ')}`, 'input_type');
  }
  const calls: EmbeddingCall[] = [];
  for (let i = 0; i < texts.length; i += COHERE_BATCH) {
    const batch = texts.slice(i, i + COHERE_BATCH);
    // truncate END: a text over Cohere's 2048 characters is embedded from its start, as OpenAI truncates.
    calls.push({ body: { texts: batch, input_type: inputType, truncate: 'END' }, count: batch.length });
  }
  return { family, encoding, calls };
}

/** Float32 little-endian bytes in base64: what OpenAI's encoding_format base64 returns. */
function base64Of(vector: number[]): string {
  const buf = Buffer.alloc(vector.length * 4);
  for (const [i, v] of vector.entries()) buf.writeFloatLE(v, i * 4);
  return buf.toString('base64');
}

const isVector = (v: unknown): v is number[] => Array.isArray(v) && v.every((x) => typeof x === 'number');
const malformed = (model: string) => ({
  unreadable: `Bedrock answered ${model} in a shape the gateway does not know`,
});

/** The answers as OpenAI's embeddings list, its usage the input tokens Bedrock counted. */
export function fromEmbeddingAnswers(
  plan: EmbeddingPlan,
  answers: readonly EmbeddingAnswer[],
  model: string,
): { body: unknown } | { unreadable: string } {
  const vectors: number[][] = [];
  let tokens = 0;
  for (const [i, answer] of answers.entries()) {
    const json = answer.json;
    if (!isRecord(json)) return malformed(model);
    if (plan.family === 'titan-v2') {
      if (!isVector(json.embedding)) return malformed(model);
      vectors.push(json.embedding);
      tokens += typeof json.inputTextTokenCount === 'number' ? json.inputTextTokenCount : (answer.inputTokens ?? 0);
    } else {
      const list = json.embeddings;
      const floats = Array.isArray(list) ? list : isRecord(list) ? list.float : undefined;
      if (!Array.isArray(floats) || !floats.every(isVector) || floats.length !== plan.calls[i]?.count) {
        return malformed(model);
      }
      vectors.push(...floats);
      tokens += answer.inputTokens ?? 0;
    }
  }
  return {
    body: {
      object: 'list',
      data: vectors.map((v, index) => ({
        object: 'embedding',
        index,
        embedding: plan.encoding === 'base64' ? base64Of(v) : v,
      })),
      model,
      usage: { prompt_tokens: tokens, total_tokens: tokens },
    },
  };
}
