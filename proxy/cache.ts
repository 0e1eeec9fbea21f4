import type { CacheMode } from './cache/cache-choice.js';
import { cacheChoice } from './cache/cache-choice.js';
import type { CacheHit, CacheLookup, ResponseCache } from './cache/response-cache.js';
import { hitResult } from './cache/response-cache.js';
import { ProxyError } from './endpoints/errors.js';
import type { Answered, Failed, Routed } from './exchange.js';
import { type Backends, backendOf } from './upstreams/backend.js';
import { charge } from './usage/cost.js';

/**
 * The cache stage, between route and call (proxy/cache/): a request its key or its own header
 * opts in looks for its answer; a hit is answered here, in the caller's dialect (whole, or its
 * stream replayed), at no upstream cost, the cost it avoided on its record; a miss goes on to the
 * call, and its answer is kept once its guardrails passed it (keepInCache).
 */

export interface CacheDeps {
  cache?: ResponseCache;
  backends: Backends;
}

/** How a hit was answered: what its record and X-Cache say. */
export interface Cached {
  kind: CacheMode;
  /** What the answer cost when it was made: what this request did not pay. */
  savedUsd: number;
}

/**
 * The request as it goes on: a hit's answer, a miss with where to keep its answer, or the request
 * as it was (its key and headers opt out): synchronously then, the request path's common case.
 */
export function lookInCache(deps: CacheDeps, routed: Routed): Routed | Failed | Promise<Routed | Answered | Failed> {
  if (!deps.cache) return routed;
  const { caller, incoming, request } = routed;
  const choice = cacheChoice(caller.policy, caller.keyHashPrefix, incoming.header, incoming.endpoint, request);
  if (choice instanceof ProxyError) return { failed: choice, at: routed };
  if (!choice) return routed;
  const cache = deps.cache;
  return cache
    .lookup(routed, choice)
    .then(({ lookup, hit }) => (hit ? answeredFrom(routed, hit) : { ...routed, cacheLookup: lookup }));
}

function answeredFrom(routed: Routed, hit: CacheHit): Answered {
  return {
    ...routed,
    served: routed.route,
    result: hitResult(hit.entry),
    cached: { kind: hit.kind, savedUsd: hit.entry.costUsd },
  };
}

/** After the call (and the answer's guardrails): a miss's answer kept, when it succeeded. */
export function keepInCache(deps: CacheDeps, outcome: Answered | Failed): Answered | Failed {
  if ('failed' in outcome || !deps.cache || outcome.cached) return outcome;
  const lookup: CacheLookup | undefined = outcome.cacheLookup;
  if (!lookup) return outcome;
  const { served } = outcome;
  const backend = backendOf(deps.backends, served);
  return deps.cache.keep(outcome, lookup, (usage) => charge(backend.price(served), usage, 0).costUsd);
}
