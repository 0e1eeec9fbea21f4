import type { Embedder } from './policies.js';

/**
 * One OpenAI embeddings call to a model the gateway routes, answering the JSON body: given by the
 * composition (compose.ts), which makes it as a caller's call would be made (its backend,
 * translators and retries; Bedrock's Titan as much as an in-cluster model). The gateway's own
 * call: no key, no usage record.
 */
export type EmbeddingsCall = (model: string, input: readonly string[], signal: AbortSignal) => Promise<unknown>;

/** The semantic scorer's embeddings: `call` in batches, each answer's vectors in input order. */

const BATCH = 64;

export function gatewayEmbedder(call: EmbeddingsCall): Embedder {
  return async (model, texts, signal = AbortSignal.timeout(30_000)) => {
    const out: Float32Array[] = [];
    for (let i = 0; i < texts.length; i += BATCH) {
      const input = texts.slice(i, i + BATCH);
      out.push(...vectorsOf(await call(model, input, signal), input.length, model));
    }
    return out;
  };
}

/** The answer's vectors in input order. */
function vectorsOf(answer: unknown, count: number, model: string): Float32Array[] {
  const data = (answer as { data?: unknown }).data;
  if (!Array.isArray(data) || data.length !== count)
    throw new Error(`the embedding model ${model} answered no vectors`);
  const vectors: Float32Array[] = new Array(count);
  for (const [i, d] of data.entries()) {
    const { embedding, index } = d as { embedding?: unknown; index?: unknown };
    if (!Array.isArray(embedding)) throw new Error(`the embedding model ${model} answered no vectors`);
    vectors[typeof index === 'number' && index >= 0 && index < count ? index : i] = Float32Array.from(
      embedding as number[],
    );
  }
  return vectors;
}
