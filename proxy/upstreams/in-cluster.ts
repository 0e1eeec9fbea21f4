import type { Catalog } from '../../crds/catalog/catalog.js';
import { engineFor } from '../../crds/engines/table.js';
import { type AskServer, inClusterFacts } from '../models/model-metadata.js';
import type { InClusterRoute } from '../serving/routes.js';
import type { PriceBook } from '../usage/cost.js';
import type { Backend } from './backend.js';
import type { Upstream } from './upstream.js';

/**
 * The in-cluster models the operator deploys (or, standalone, the servers the config names):
 * called over their engine's OpenAI-compatible API (proxy/upstreams/openai-compatible.ts),
 * priced from the catalog's GPU-hours and the engine's throughput at the deployment's
 * concurrency, described by the catalog or by what the server reports.
 */
export function inClusterBackend(opts: {
  upstream: Upstream<InClusterRoute>;
  prices: PriceBook;
  catalog: Catalog;
  ask?: AskServer;
  fetch?: typeof fetch;
}): Backend<InClusterRoute> {
  const { upstream, prices } = opts;
  const price = (route: InClusterRoute) => prices.catalogPrice(route.model, route.engine, route.slots);
  return {
    who: (route) => ({ label: 'in-cluster', system: engineFor(route).container, address: route.baseUrl }),
    dialects: (route) => upstream.dialects(route),
    send: (call) => upstream.send(call),
    countTokens: (route, body, signal) => countOnServer(opts.fetch ?? fetch, route, body, signal),
    price,
    credits: () => 0,
    facts: (route) => inClusterFacts(route, price(route), opts.catalog, opts.ask),
  };
}

const COUNT_TIMEOUT_MS = 5_000;

/**
 * Exact input tokens where the engine counts them (vLLM's /v1/messages/count_tokens, with the
 * model's own tokenizer and chat template); undefined, for the gateway to estimate, where it has
 * no such endpoint (Ollama) or the count fails: counting is advice, never a reason to refuse.
 */
async function countOnServer(
  fetchImpl: typeof fetch,
  route: InClusterRoute,
  body: Record<string, unknown>,
  signal: AbortSignal,
): Promise<number | undefined> {
  const path = engineFor(route).countTokens;
  if (!path) return undefined;
  try {
    const res = await fetchImpl(`${route.replicas?.[0] ?? route.baseUrl}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ ...body, model: route.model }),
      signal: AbortSignal.any([signal, AbortSignal.timeout(COUNT_TIMEOUT_MS)]),
    });
    if (!res.ok) {
      await res.body?.cancel();
      return undefined;
    }
    const json = (await res.json()) as { input_tokens?: unknown };
    return typeof json.input_tokens === 'number' ? json.input_tokens : undefined;
  } catch {
    return undefined;
  }
}
