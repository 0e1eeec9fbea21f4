import type { Catalog } from '../../crds/catalog/catalog.js';
import { type AskServer, inClusterFacts } from '../models/model-metadata.js';
import type { InClusterRoute } from '../routing/routes.js';
import type { PriceBook } from '../usage/cost.js';
import type { Backend } from './backend.js';
import type { Upstream } from './upstream.js';

/**
 * The in-cluster models the operator deploys (or, standalone, the servers the config names):
 * called over their OpenAI-compatible API (proxy/upstreams/openai-compatible.ts), priced from
 * the catalog's GPU-hours, described by the catalog or by what the server reports.
 */
export function inClusterBackend(opts: {
  upstream: Upstream<InClusterRoute>;
  prices: PriceBook;
  catalog: Catalog;
  ask?: AskServer;
}): Backend<InClusterRoute> {
  const { upstream, prices } = opts;
  return {
    who: (route) => ({ label: 'in-cluster', system: 'ollama', address: route.baseUrl }),
    dialects: (route) => upstream.dialects(route),
    send: (call) => upstream.send(call),
    // Ollama has no count endpoint: the gateway estimates.
    countTokens: async () => undefined,
    price: (route) => prices.catalogPrice(route.model),
    credits: () => 0,
    facts: (route) => inClusterFacts(route, prices.catalogPrice(route.model), opts.catalog, opts.ask),
  };
}
