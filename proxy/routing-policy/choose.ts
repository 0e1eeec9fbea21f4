import { createHash } from 'node:crypto';
import { AUTO_MODEL, DEFAULT_ROUTING_POLICY, ROUTING_HEADER } from '../../crds/constants.js';
import { type KeyPolicy, mayCall } from '../access/auth.js';
import { MAX_MODEL_CHARS } from '../access/model-access.js';
import { ProxyError } from '../endpoints/errors.js';
import type { Parsed } from '../exchange.js';
import type { RouteEntry, RouteTable } from '../serving/routes.js';
import { type Backends, backendOf } from '../upstreams/backend.js';
import { cascades } from './cascade.js';
import { baselineOf, decide, degradeTo, outputCap, type Routing } from './decide.js';
import { featuresOf, type RequestFeatures, scoredText } from './features.js';
import type { TextScoreKind, TextScorer } from './learned/text-scorer.js';
import {
  type Embedder,
  type ResolvedPolicy,
  type RoutingPolicies,
  routedEmbeddingText,
  takesTraffic,
} from './policies.js';
import { scoreRequest, tierOf } from './scorer.js';

/**
 * Whether a request is routed by a RoutingPolicy, and to which model: `auto` (`<policy>/auto`)
 * always is; a named model is when routing is on for it (the request's X-Routing-Enabled, else
 * its key's `routing`, else the default policy's `enabled`), and then goes to that model or a
 * cheaper one of the pool that serves it as well. A spent budget that degrades goes to the
 * policy's cheapest in-cluster model (degrade()).
 */

export interface RoutingDeps {
  routes: RouteTable;
  backends: Backends;
  policies?: RoutingPolicies;
  embed?: Embedder;
}

export type Choice = { model: string; routing?: Routing };

/** The policy an `auto` name asks for: `auto` -> default, `<policy>/auto` -> policy. */
function autoPolicy(model: string): string | undefined {
  if (model === AUTO_MODEL) return DEFAULT_ROUTING_POLICY;
  return model.endsWith(`/${AUTO_MODEL}`) ? model.slice(0, -AUTO_MODEL.length - 1) : undefined;
}

/** Routing on for a named model: the request's header, else the key's setting, else the default policy's. */
function enabledFor(parsed: Parsed, policy: KeyPolicy, org: ResolvedPolicy | undefined): boolean | ProxyError {
  const header = parsed.incoming.header(ROUTING_HEADER)?.trim().toLowerCase();
  if (header === 'true') return true;
  if (header === 'false') return false;
  if (header !== undefined && header !== '')
    return new ProxyError(
      400,
      'invalid_request_error',
      'invalid_routing_header',
      'X-Routing-Enabled must be "true" or "false"',
      'X-Routing-Enabled',
    );
  if (policy.routing === 'Enabled') return true;
  if (policy.routing === 'Disabled') return false;
  return org?.enabled === true;
}

export async function choose(deps: RoutingDeps, parsed: Parsed): Promise<Choice | ProxyError> {
  const { request, incoming, caller } = parsed;
  const requested = request.model;
  const auto = autoPolicy(requested);
  const dialect = incoming.endpoint.dialect;
  if (auto !== undefined && !cascades(dialect))
    return new ProxyError(
      400,
      'invalid_request_error',
      'model_not_found',
      `the model "${AUTO_MODEL}" is routed on chat completions, Responses and Messages; name a model for ${incoming.endpoint.path}`,
      'model',
    );
  const policies = deps.policies;
  if (auto !== undefined) {
    const policy = policies?.get(auto);
    if (!policy)
      return new ProxyError(
        404,
        'invalid_request_error',
        'model_not_found',
        `no RoutingPolicy named ${JSON.stringify(auto.slice(0, MAX_MODEL_CHARS))} routes ${JSON.stringify(requested.slice(0, MAX_MODEL_CHARS))}; GET /openai/v1/models lists the models you can use`,
        'model',
      );
    return routeBy(deps, parsed, policy, undefined);
  }
  if (!policies || !cascades(dialect)) return { model: requested };
  const policy = policies.get(caller.policy.routingPolicy ?? DEFAULT_ROUTING_POLICY);
  // No policy to route by: nothing more to read (the header says nothing without one).
  if (!policy) return { model: requested };
  const enabled = enabledFor(parsed, caller.policy, policies.get(DEFAULT_ROUTING_POLICY));
  if (enabled instanceof ProxyError) return enabled;
  const entry = deps.routes.lookup(requested);
  // A name that does not route, or that the key may not call, keeps its own error: routing never widens access.
  if (!enabled || !entry || entry.kind === 'unavailable') return { model: requested };
  if (!mayCall(caller.policy, requested) && !mayCall(caller.policy, entry.model)) return { model: requested };
  // Only a model of the pool is swapped: the pool is what the platform declared interchangeable
  // (a fine-tuned or special-purpose model outside it is always served as named).
  if (!policy.pool.some((m) => m.name === requested || m.name === entry.model)) return { model: requested };
  return routeBy(deps, parsed, policy, entry);
}

async function routeBy(
  deps: RoutingDeps,
  parsed: Parsed,
  policy: ResolvedPolicy,
  named: RouteEntry | undefined,
): Promise<Choice | ProxyError> {
  const { request, incoming, caller } = parsed;
  const features = featuresOf(incoming.endpoint.dialect, request.forward);
  // A guardrail that keeps the request in the cluster keeps its text from a hosted embedding model too.
  const text = await textScore(deps, policy, features, parsed.guard?.inCluster !== undefined);
  const difficulty = scoreRequest(features, text);
  const score = difficulty.score;
  const need = tierOf(score, policy.thresholds);
  const usable = usableFor(deps, caller.policy);
  // An alias the caller sent stands for its model, which the pool may list by either name.
  const inPool = named && policy.pool.find((m) => m.name === request.model || m.name === named.model);
  const price = named && backendOf(deps.backends, named).price(named);
  const decision = decide(policy.pool, {
    features,
    need,
    ...(named
      ? {
          named: {
            name: inPool?.name ?? request.model,
            ...(price ? { price } : {}),
            ...(inPool ? { tier: inPool.tier } : {}),
          },
        }
      : {}),
    usable,
  });
  if (!decision)
    return noModelFits(
      policy,
      features,
      policy.pool.some((m) => usable(m.name)),
    );
  // count_tokens is routed too, and generates nothing to judge.
  const ladder = incoming.endpoint.does === 'generate' ? decision.ladder : [];
  const signals = difficulty.signals.length ? `; signals=${difficulty.signals.join(',')}` : '';
  const unmet = decision.unmet ? `; ${decision.unmet}` : '';
  const cf = named ? request.model : (policy.baseline ?? baselineOf(policy.pool, undefined, features));
  const counterfactual = cf === undefined ? undefined : deps.routes.lookup(cf);
  return {
    model: decision.model,
    routing: {
      policy: policy.name,
      requested: request.model,
      reason: decision.reason,
      tier: decision.tier,
      detail: `tier=${decision.tier}; score=${score.toFixed(2)}${signals}; embedding=${text.embedding}${unmet}`,
      features,
      ladder,
      cascade: policy.cascade,
      caps: capsOf(policy, [decision.model, ...ladder], features),
      ...(counterfactual ? { counterfactual } : {}),
    },
  };
}

function capsOf(policy: ResolvedPolicy, models: readonly string[], f: RequestFeatures): ReadonlyMap<string, number> {
  const caps = new Map<string, number>();
  for (const name of models) {
    const cap = outputCap(
      policy.pool.find((m) => m.name === name),
      f,
    );
    if (cap !== undefined) caps.set(name, cap);
  }
  return caps;
}

const usableFor = (deps: RoutingDeps, key: KeyPolicy) => (name: string) =>
  mayCall(key, name) && takesTraffic(deps.routes.lookup(name));

/**
 * No model of the pool can take the request: only hard constraints refuse (the key's allow-list
 * and what takes traffic, the context window, tools, images), each named. A preference such as a
 * reasoning effort never refuses (decide.ts).
 */
function noModelFits(policy: ResolvedPolicy, f: RequestFeatures, anyUsable: boolean): ProxyError {
  if (!anyUsable)
    return new ProxyError(
      400,
      'invalid_request_error',
      'no_model_fits',
      `this API key may call no model of the RoutingPolicy ${policy.name} that takes traffic now (its models allow-list, or models deploying or at zero replicas); name a model instead`,
      'model',
    );
  const needs = [`${f.inputTokens} input tokens`, ...(f.tools ? ['tools'] : []), ...(f.images ? ['images'] : [])];
  return new ProxyError(
    400,
    'invalid_request_error',
    'no_model_fits',
    `no model of the RoutingPolicy ${policy.name} that this API key may call serves what this request needs (${needs.join(', ')}: context window, tools or images); name a model instead`,
    'model',
  );
}

/** Why a request goes to an in-cluster model whatever it asked for, as its routing reason and detail say it. */
const DEGRADED: Readonly<Record<'budget-degraded' | 'guardrail-in-cluster', string>> = {
  'budget-degraded': 'a spent budget degrades to the cheapest in-cluster model',
  'guardrail-in-cluster': 'a guardrail keeps this request in the cluster: the cheapest in-cluster model serves it',
};

/**
 * A spent budget that degrades, or a guardrail's RouteInCluster: the policy's cheapest in-cluster
 * model that can take the request (never a paid one, so no cascade), or undefined (the budget's
 * refusal, the guardrail's, stands).
 */
export function degrade(
  deps: RoutingDeps,
  parsed: Parsed,
  chosen: Choice,
  reason: keyof typeof DEGRADED = 'budget-degraded',
): Choice | undefined {
  // An embeddings or legacy completions request has no chat model to go to.
  if (!cascades(parsed.incoming.endpoint.dialect)) return undefined;
  const policy = deps.policies?.get(
    chosen.routing?.policy ?? parsed.caller.policy.routingPolicy ?? DEFAULT_ROUTING_POLICY,
  );
  if (!policy) return undefined;
  const features = chosen.routing?.features ?? featuresOf(parsed.incoming.endpoint.dialect, parsed.request.forward);
  const to = degradeTo(policy.pool, features, usableFor(deps, parsed.caller.policy));
  if (!to) return undefined;
  const counterfactual = chosen.routing?.counterfactual ?? deps.routes.lookup(chosen.model);
  return {
    model: to.name,
    routing: {
      policy: policy.name,
      requested: parsed.request.model,
      reason,
      tier: to.tier,
      detail: DEGRADED[reason],
      features,
      ladder: [],
      cascade: policy.cascade,
      caps: capsOf(policy, [to.name], features),
      ...(counterfactual ? { counterfactual } : {}),
    },
  };
}

/** Embedded prompts by digest: a repeated prompt (an agent's retries, a benchmark) is embedded by a routed model once. */
const PROMPT_CACHE = new Map<string, Float32Array>();
const PROMPT_CACHE_MAX = 2048;
const PROMPT_EMBED_TIMEOUT_MS = 2_000;

/**
 * The text's score: the policy's classifier, over the built-in embedding (in-process, under a
 * millisecond) or over the vector of the policy's embedding model (a gateway call, cached by
 * digest); when that call fails, the shipped classifier over the built-in embedding.
 */
async function textScore(
  deps: RoutingDeps,
  policy: ResolvedPolicy,
  f: RequestFeatures,
  inClusterOnly = false,
): Promise<{ score: number; by: TextScoreKind; embedding: string }> {
  const text = scoredText(f);
  const { embeddingModel, text: scorer, fallback } = policy.scorer;
  const named = (s: TextScorer, result: { score: number; by: TextScoreKind }) => ({
    ...result,
    embedding: result.by === 'learned' ? (s.embedding ?? 'none') : 'none',
  });
  if (embeddingModel === undefined || !deps.embed || text === '') return named(scorer, scorer.score(text));
  if (inClusterOnly && deps.routes.lookup(embeddingModel)?.kind !== 'in-cluster')
    return named(fallback, fallback.score(text));
  const digest = createHash('sha256').update(embeddingModel).update('\n').update(text).digest('base64');
  let vector = PROMPT_CACHE.get(digest);
  if (!vector) {
    vector = await deps
      .embed(embeddingModel, [routedEmbeddingText(text)], AbortSignal.timeout(PROMPT_EMBED_TIMEOUT_MS))
      .then((v) => v[0])
      .catch(() => undefined);
    if (!vector) return named(fallback, fallback.score(text));
    if (PROMPT_CACHE.size >= PROMPT_CACHE_MAX) PROMPT_CACHE.clear();
    PROMPT_CACHE.set(digest, vector);
  }
  return named(scorer, scorer.score(text, vector));
}
