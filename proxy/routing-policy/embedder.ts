import { type CallDeps, callOne } from '../call.js';
import { ENDPOINTS } from '../endpoints/endpoints.js';
import { ProxyError } from '../endpoints/errors.js';
import { planFor } from '../route.js';
import type { RouteTable } from '../routing/routes.js';
import type { Embedder } from './policies.js';

/**
 * The semantic scorer's embeddings: the OpenAI embeddings call to a model the gateway routes,
 * made as a caller's would be (proxy/call.ts callOne: its backend, translators and retries;
 * Bedrock's Titan as much as an in-cluster model), in batches. The gateway's own calls: no key,
 * no usage record.
 */

const BATCH = 64;

export function gatewayEmbedder(routes: RouteTable, deps: CallDeps): Embedder {
  return async (model, texts, signal = AbortSignal.timeout(30_000)) => {
    const entry = routes.lookup(model);
    if (!entry || entry.kind === 'unavailable') throw new Error(`the embedding model ${model} does not route`);
    const plan = planFor(deps.backends, ENDPOINTS.embeddings, entry);
    if (plan instanceof ProxyError) throw plan;
    const out: Float32Array[] = [];
    for (let i = 0; i < texts.length; i += BATCH) {
      const input = texts.slice(i, i + BATCH);
      const body = { model: entry.model, input };
      const result = await callOne(
        deps,
        { route: entry, plan },
        { body, stream: false, clientWantsUsage: false, signal },
        undefined,
      );
      if (result.kind !== 'json') throw new Error(`the embedding model ${model} answered a stream`);
      out.push(...vectorsOf(result.body, input.length, model));
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
