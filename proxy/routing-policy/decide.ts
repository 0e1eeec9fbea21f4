import type { TokenPrice } from '../../crds/catalog/prices.js';
import { type CascadeTrigger, ROUTING_TIERS, type RoutingTier } from '../../crds/routing-policy.js';
import type { RouteEntry } from '../serving/routes.js';
import type { RequestFeatures } from './features.js';

/**
 * The routing decision as a pure function: which model of a policy's pool serves a request, and
 * which the cascade moves to after it. Hard constraints first (the key's allow-list, the model
 * taking traffic now, context window, tools, images, reasoning), then the lowest tier the
 * request's difficulty needs, then the cheapest model there for this request's expected tokens.
 */

/** A pool model as the gateway resolved it (proxy/routing-policy/policies.ts). */
export interface PoolModel {
  name: string;
  tier: RoutingTier;
  price?: TokenPrice;
  /** An in-cluster model (the cheap tier a spent budget degrades to). */
  inCluster: boolean;
  contextWindow?: number;
  tools: boolean;
  images: boolean;
  reasoning: boolean;
}

/** Why the served model was chosen: the record's routingReason, the metric's label. */
const ROUTING_REASONS = ['score', 'kept', 'constraints', 'cascade', 'budget-degraded', 'guardrail-in-cluster'] as const;
type RoutingReason = (typeof ROUTING_REASONS)[number];

export interface DecisionInput {
  features: RequestFeatures;
  /** The tier the request's difficulty needs. */
  need: RoutingTier;
  /** The model the caller named, when it named one (a ceiling: that model or a cheaper one); absent for `auto`. */
  named?: { name: string; price?: TokenPrice; tier?: RoutingTier };
  /** The key may call it, and it takes traffic now (not waking from zero, not deploying). */
  usable: (name: string) => boolean;
}

export interface Decision {
  model: string;
  tier: RoutingTier;
  reason: RoutingReason;
  /** A preference of the request that no model of the pool meets, for X-Routing-Reason (the request is served all the same). */
  unmet?: string;
  /** Models the cascade moves to, in order, after `model`. */
  ladder: string[];
}

/** Output tokens a request is expected to cost when it sets no maximum (prices compare on a whole answer). */
const EXPECTED_OUTPUT_TOKENS = 512;
/** Output the context window must leave room for when the request sets no maximum. */
const RESERVED_OUTPUT_TOKENS = 256;
/**
 * The most output the window must leave room for, whatever the request's maximum: agents ask for
 * far more than an answer takes (Claude Code's small model calls: 32,000), and a model whose
 * window cannot hold that is sent the request with its maximum lowered (outputCap) instead.
 */
const OUTPUT_ROOM_TOKENS = 4096;

const rank = (tier: RoutingTier): number => ROUTING_TIERS.indexOf(tier);

/** USD of the request's expected tokens at a price; unpriced models rank after priced ones. */
function expectedCost(price: TokenPrice | undefined, f: RequestFeatures, inCluster = false): number {
  if (!price) return inCluster ? 0 : Number.POSITIVE_INFINITY;
  return (f.inputTokens * price.input + (f.maxOutputTokens ?? EXPECTED_OUTPUT_TOKENS) * price.output) / 1e6;
}

/** Whether a model can take the request at all: the hard constraints (context window, tools, images). */
function takes(m: PoolModel, f: RequestFeatures): boolean {
  const room = Math.min(f.maxOutputTokens ?? RESERVED_OUTPUT_TOKENS, OUTPUT_ROOM_TOKENS);
  if (m.contextWindow !== undefined && f.inputTokens + room > m.contextWindow) return false;
  if (f.tools > 0 && !m.tools) return false;
  if (f.images && !m.images) return false;
  return true;
}

/**
 * Whether a model also meets the request's preferences: a high reasoning effort prefers a
 * reasoning model (another model answers, just without the reasoning). A preference that no
 * model of the pool meets is dropped, never refused on (decide()).
 */
function prefers(m: PoolModel, f: RequestFeatures): boolean {
  return f.reasoning !== 'high' || m.reasoning;
}

const byCost = (f: RequestFeatures) => (a: PoolModel, b: PoolModel) =>
  expectedCost(a.price, f, a.inCluster) - expectedCost(b.price, f, b.inCluster) || rank(a.tier) - rank(b.tier);

/**
 * The model to serve a request, or undefined when no model of the pool can (for `auto`: no
 * model fits; the caller learns why). A named model is kept when nothing cheaper serves as well.
 */
export function decide(pool: readonly PoolModel[], input: DecisionInput): Decision | undefined {
  const { features: f } = input;
  const usable = pool.filter((m) => input.usable(m.name));
  const fits = (m: PoolModel) => takes(m, f) && prefers(m, f);
  if (usable.some(fits) || !usable.some((m) => takes(m, f))) return decideWith(usable, input, fits);
  // No model meets the preference: the strongest tier that takes the request serves it, and says so.
  const decision = decideWith(usable, { ...input, need: 'Frontier' }, (m) => takes(m, f));
  return (
    decision && { ...decision, unmet: 'no model of the pool reasons at high effort: the strongest that fits serves it' }
  );
}

/** The decision among `usable` models, `fits` the constraints (and preferences) a candidate must meet. */
function decideWith(
  usable: readonly PoolModel[],
  input: DecisionInput,
  fits: (m: PoolModel) => boolean,
): Decision | undefined {
  const { features: f, need, named } = input;
  const ceiling = named ? expectedCost(named.price, f) : Number.POSITIVE_INFINITY;
  const fitting = usable.filter(
    (m) => fits(m) && (!named || m.name === named.name || expectedCost(m.price, f, m.inCluster) <= ceiling),
  );
  const sorted = [...fitting].sort(byCost(f));
  const enough = sorted.filter((m) => rank(m.tier) >= rank(need));
  const chosen = enough[0];
  const namedTier = named?.tier ?? 'Frontier';
  if (named && (!chosen || chosen.name === named.name || rank(namedTier) < rank(need))) {
    return { model: named.name, tier: namedTier, reason: 'kept', ladder: [] };
  }
  if (!chosen) {
    // Nothing of the tier needed fits: the most capable model that does, if any; 'constraints'
    // where a model of that tier was there but could not take the request.
    const best = [...sorted].sort((a, b) => rank(b.tier) - rank(a.tier))[0];
    if (!best) return undefined;
    const excluded = usable.some((m) => rank(m.tier) >= rank(need) && !fits(m));
    return {
      model: best.name,
      tier: best.tier,
      reason: excluded ? 'constraints' : 'score',
      ladder: ladderAfter(sorted, best, named),
    };
  }
  // A cheaper model of a lower tier was passed over for what the request uses, not how hard it is.
  const excluded = usable.some((m) => rank(m.tier) === rank(need) && !fits(m)) && rank(chosen.tier) > rank(need);
  return {
    model: chosen.name,
    tier: chosen.tier,
    reason: excluded ? 'constraints' : 'score',
    ladder: ladderAfter(sorted, chosen, named),
  };
}

/**
 * Where the cascade goes after a model: the cheapest fitting model of each higher tier, in tier
 * order; a named model's ladder ends at the named model (the caller's own choice is the top).
 */
function ladderAfter(sorted: readonly PoolModel[], from: PoolModel, named: DecisionInput['named']): string[] {
  const ladder: string[] = [];
  for (const tier of ROUTING_TIERS.slice(rank(from.tier) + 1)) {
    const m = sorted.find((c) => c.tier === tier && c.name !== named?.name);
    if (m && m.name !== from.name) ladder.push(m.name);
  }
  if (named && named.name !== from.name) {
    const capped = ladder.filter((n) => {
      const m = sorted.find((c) => c.name === n);
      return m !== undefined && rank(m.tier) < rank(named.tier ?? 'Frontier');
    });
    return [...capped, named.name];
  }
  return ladder;
}

/** Input tokens are estimated (about 4 characters a token): the cap leaves a tenth more of them as slack. */
const withSlack = (tokens: number): number => Math.ceil((tokens * 11) / 10);

/**
 * The output maximum a model of the pool is sent when the request's own does not fit its window
 * with the input (estimated): what the window leaves. Undefined: the request's maximum stands.
 */
export function outputCap(m: PoolModel | undefined, f: RequestFeatures): number | undefined {
  if (!m?.contextWindow || f.maxOutputTokens === undefined) return undefined;
  const left = m.contextWindow - withSlack(f.inputTokens);
  return f.maxOutputTokens > left ? Math.max(1, left) : undefined;
}

/** A spent budget's Degrade: the cheapest in-cluster model of the pool that can take the request. */
export function degradeTo(
  pool: readonly PoolModel[],
  f: RequestFeatures,
  usable: (name: string) => boolean,
): PoolModel | undefined {
  return pool.filter((m) => m.inCluster && usable(m.name) && takes(m, f)).sort(byCost(f))[0];
}

/** The policy's baseline: the model `auto` requests' savings are counted against. */
export function baselineOf(
  pool: readonly PoolModel[],
  named: string | undefined,
  f: RequestFeatures,
): string | undefined {
  if (named && pool.some((m) => m.name === named)) return named;
  const top = pool.filter((m) => m.tier === 'Frontier' && m.price);
  const candidates = top.length ? top : pool.filter((m) => m.price);
  return [...candidates].sort((a, b) => expectedCost(b.price, f) - expectedCost(a.price, f))[0]?.name;
}

/** What the route stage knows of a routed request, for the call (cascade) and the account (record, headers). */
export interface Routing {
  policy: string;
  /** The model the caller asked for (`auto`, `<policy>/auto`, or a name). */
  requested: string;
  reason: RoutingReason;
  tier: RoutingTier;
  /** For X-Routing-Reason: the tier, the difficulty score and what raised it. */
  detail: string;
  features: RequestFeatures;
  /** Models the cascade may move to, in order, and on what. */
  ladder: readonly string[];
  cascade: { max: number; triggers: ReadonlySet<CascadeTrigger> };
  /** The output maximum each model is sent where the request's own does not fit its window (decide.ts outputCap). */
  caps: ReadonlyMap<string, number>;
  /** The model whose price for the same tokens the savings are counted against. */
  counterfactual?: RouteEntry;
}
