import { createHash } from 'node:crypto';
import { isRecord } from '../../crds/is-record.js';

/**
 * The AWS double's embedding models behind InvokeModel, with the request bodies Bedrock checks
 * and the answers it gives: Titan Text Embeddings v2 (`inputText`, `dimensions`, `normalize`,
 * `embeddingTypes`) and Cohere Embed v3 (`texts`, `input_type`, `truncate`, `embedding_types`).
 * Vectors are deterministic per text (a hash stream), so a test can compare two calls; the
 * input token count is the words of the text, as the double counts prompts everywhere.
 */

export type EmbeddingAnswer = { body: unknown; inputTokens: number } | { error: string };

const words = (text: string) => text.split(/\s+/).filter(Boolean).length;

/** A unit-length (or raw) vector of `dims` numbers that depends only on the text. */
function vectorOf(text: string, dims: number, normalize = true): number[] {
  const out: number[] = [];
  for (let block = 0; out.length < dims; block++) {
    const digest = createHash('sha256').update(`${block}:${text}`).digest();
    for (let i = 0; i + 2 <= digest.length && out.length < dims; i += 2) out.push(digest.readUInt16BE(i) / 32768 - 1);
  }
  if (!normalize) return out;
  const norm = Math.sqrt(out.reduce((s, v) => s + v * v, 0)) || 1;
  return out.map((v) => v / norm);
}

const extraneous = (body: Record<string, unknown>, allowed: readonly string[]) =>
  Object.keys(body).find((k) => !allowed.includes(k));

/** Titan Text Embeddings v2: one text per call, 256/512/1024 dimensions, up to 8192 tokens (50,000 characters). */
function titanEmbedV2(body: unknown): EmbeddingAnswer {
  if (!isRecord(body)) return { error: 'Malformed input request: expected type: JSONObject' };
  const extra = extraneous(body, ['inputText', 'dimensions', 'normalize', 'embeddingTypes']);
  if (extra)
    return {
      error: `Malformed input request: #: extraneous key [${extra}] is not permitted, please reformat your input and try again.`,
    };
  const { inputText, dimensions = 1024, normalize = true, embeddingTypes = ['float'] } = body;
  if (typeof inputText !== 'string')
    return {
      error:
        'Malformed input request: #: required key [inputText] not found, please reformat your input and try again.',
    };
  if (inputText.length === 0 || inputText.length > 50_000) {
    return {
      error:
        'Malformed input request: #/inputText: expected minLength: 1, actual: 0, please reformat your input and try again.',
    };
  }
  if (dimensions !== 256 && dimensions !== 512 && dimensions !== 1024) {
    return {
      error: `Malformed input request: #/dimensions: ${String(dimensions)} is not a valid enum value, please reformat your input and try again.`,
    };
  }
  if (typeof normalize !== 'boolean')
    return {
      error: 'Malformed input request: #/normalize: expected type: Boolean, please reformat your input and try again.',
    };
  if (!Array.isArray(embeddingTypes) || embeddingTypes.some((t) => t !== 'float' && t !== 'binary')) {
    return {
      error:
        'Malformed input request: #/embeddingTypes: is not a valid enum value, please reformat your input and try again.',
    };
  }
  const inputTokens = words(inputText);
  if (inputTokens > 8192) return { error: 'Input text exceeds the maximum of 8192 tokens.' };
  const embedding = vectorOf(inputText, dimensions, normalize);
  const byType: Record<string, number[]> = {};
  if (embeddingTypes.includes('float')) byType.float = embedding;
  if (embeddingTypes.includes('binary')) byType.binary = embedding.map((v) => (v > 0 ? 1 : 0));
  return { body: { embedding, inputTextTokenCount: inputTokens, embeddingsByType: byType }, inputTokens };
}

const COHERE_INPUT_TYPES = ['search_document', 'search_query', 'classification', 'clustering'];

/** Cohere Embed v3 (english, multilingual): up to 96 texts of up to 2048 characters, 1024 dimensions. */
function cohereEmbedV3(body: unknown): EmbeddingAnswer {
  if (!isRecord(body)) return { error: 'Malformed input request: expected type: JSONObject' };
  const extra = extraneous(body, ['texts', 'images', 'input_type', 'truncate', 'embedding_types']);
  if (extra)
    return {
      error: `Malformed input request: #: extraneous key [${extra}] is not permitted, please reformat your input and try again.`,
    };
  const { texts, input_type, truncate = 'NONE', embedding_types } = body;
  if (!Array.isArray(texts) || !texts.every((t) => typeof t === 'string')) {
    return {
      error: 'Malformed input request: #: required key [texts] not found, please reformat your input and try again.',
    };
  }
  if (texts.length > 96)
    return {
      error: `Malformed input request: #/texts: expected maximum item count: 96, found: ${texts.length}, please reformat your input and try again.`,
    };
  if (typeof input_type !== 'string' || !COHERE_INPUT_TYPES.includes(input_type)) {
    return {
      error:
        'Malformed input request: #/input_type: is not a valid enum value, please reformat your input and try again.',
    };
  }
  if (truncate !== 'NONE' && truncate !== 'START' && truncate !== 'END') {
    return {
      error:
        'Malformed input request: #/truncate: is not a valid enum value, please reformat your input and try again.',
    };
  }
  if (truncate === 'NONE' && texts.some((t) => t.length > 2048)) {
    return {
      error: 'Malformed input request: #/texts: expected maxLength: 2048, please reformat your input and try again.',
    };
  }
  const vectors = texts.map((t) => vectorOf(t, 1024));
  const inputTokens = texts.reduce((n, t) => n + words(t), 0);
  const id = createHash('sha256').update(texts.join('\u0000')).digest('hex').slice(0, 32);
  if (embedding_types === undefined) {
    return { body: { id, texts, embeddings: vectors, response_type: 'embeddings_floats' }, inputTokens };
  }
  if (!Array.isArray(embedding_types) || embedding_types.some((t) => t !== 'float' && t !== 'int8')) {
    return {
      error:
        'Malformed input request: #/embedding_types: is not a valid enum value, please reformat your input and try again.',
    };
  }
  const embeddings: Record<string, number[][]> = {};
  if (embedding_types.includes('float')) embeddings.float = vectors;
  if (embedding_types.includes('int8')) embeddings.int8 = vectors.map((v) => v.map((x) => Math.round(x * 127)));
  return { body: { id, texts, embeddings, response_type: 'embeddings_by_type' }, inputTokens };
}

/** The body format an embedding model takes, by its foundation model id. */
export function embeddingModel(modelId: string): ((body: unknown) => EmbeddingAnswer) | undefined {
  if (modelId.startsWith('amazon.titan-embed-text-v2')) return titanEmbedV2;
  if (modelId.startsWith('cohere.embed-')) return cohereEmbedV3;
  return undefined;
}
