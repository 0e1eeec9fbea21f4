import type { BedrockModelFacts } from '../../crds/catalog/bedrock-models.js';
import type { ProviderType } from '../../crds/external-provider.js';
import { PROVIDER_NAMES } from '../../crds/providers/table.js';
import { externalFacts } from '../models/model-metadata.js';
import type { ExternalRoute } from '../routing/routes.js';
import type { PriceBook } from '../usage/cost.js';
import type { Backend } from './backend.js';
import type { Upstream } from './upstream.js';

/**
 * The models of registered ExternalProviders. Each provider is a module of crds/providers/
 * (where its API is, its native dialects, credentials, errors); the upstream that carries its
 * calls is looked up by the route's provider type, and prices come from the one price table.
 */
export function externalBackend(opts: {
  upstreams: Readonly<Record<ProviderType, Upstream<ExternalRoute>>>;
  prices: PriceBook;
  bedrockModels: Readonly<Record<string, BedrockModelFacts>>;
}): Backend<ExternalRoute> {
  const { upstreams, prices } = opts;
  const upstreamOf = (route: ExternalRoute) => upstreams[route.target.type];
  const priceOf = (route: ExternalRoute) => prices.providerPrice(route.target, route.model, route.baseModel);
  return {
    who: (route) => {
      const names = PROVIDER_NAMES[route.target.type];
      return { label: names.label, system: names.system };
    },
    dialects: (route) => upstreamOf(route).dialects(route),
    send: (call) => upstreamOf(call.route).send(call),
    countTokens: async (route, body, signal) => upstreamOf(route).countTokens?.(route, body, signal),
    price: priceOf,
    credits: (route) => route.freeCredits ?? 0,
    facts: async (route) => externalFacts(route, priceOf(route), opts.bedrockModels),
  };
}
