import { isDeprecated, type ModelLifecycle } from '../../crds/catalog/lifecycle.js';
import type { ProviderType } from '../../crds/external-provider.js';
import { PROVIDERS } from '../../crds/providers/table.js';
import type { ModelFacts } from '../models/model-metadata.js';
import type { ExternalRoute } from '../serving/routes.js';
import type { PriceBook } from '../usage/cost.js';
import type { Backend } from './backend.js';
import type { Upstream } from './upstream.js';

/**
 * The models of registered ExternalProviders. Each provider is a module of crds/providers/
 * (where its API is, its native dialects, credentials, errors, prices and its models' facts);
 * the upstream that carries its calls is looked up by the route's provider type (the one
 * provider upstream, unless a test stands a double in its place).
 */
export function externalBackend(opts: {
  upstreams: Readonly<Record<ProviderType, Upstream<ExternalRoute>>>;
  prices: PriceBook;
}): Backend<ExternalRoute> {
  const { upstreams, prices } = opts;
  const upstreamOf = (route: ExternalRoute) => upstreams[route.target.type];
  const moduleOf = (route: ExternalRoute) => PROVIDERS[route.target.type];
  const priceOf = (route: ExternalRoute) => prices.providerPrice(route);
  return {
    who: (route) => ({ label: moduleOf(route).label, system: moduleOf(route).system }),
    dialects: (route) => upstreamOf(route).dialects(route),
    send: (call) => upstreamOf(call.route).send(call),
    countTokens: async (route, body, signal) => upstreamOf(route).countTokens?.(route, body, signal),
    baseModel: (route) => route.baseModel,
    price: priceOf,
    credits: (route) => route.freeCredits ?? 0,
    lifecycle: (route) => prices.providerLifecycle(route),
    facts: async (route) => {
      const price = priceOf(route);
      const facts = moduleOf(route).facts(route.model, route.baseModel, route.target);
      return { ...facts, ...lifecycleFacts(prices.providerLifecycle(route)), ...(price ? { price } : {}) };
    },
  };
}

/** What the lifecycle table adds to a model's facts: its dates and replacement, and deprecated once it is. */
function lifecycleFacts(l: ModelLifecycle | undefined): Partial<ModelFacts> {
  if (!l) return {};
  return {
    ...(isDeprecated(l, Date.now()) ? { status: 'deprecated' as const } : {}),
    ...(l.deprecated ? { deprecatedAt: l.deprecated } : {}),
    ...(l.retires ? { retiresAt: l.retires } : {}),
    ...(l.replacement ? { replacement: l.replacement } : {}),
  };
}
