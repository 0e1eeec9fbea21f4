import { mayCall } from './access/auth.js';
import type { BudgetGuard } from './access/budgets.js';
import { routeFor } from './access/model-access.js';
import { ENDPOINTS, type Endpoint } from './endpoints/endpoints.js';
import { ProxyError } from './endpoints/errors.js';
import type { Attempt, Failed, Parsed, Plan, Routed } from './exchange.js';
import { guardrailInClusterOnly } from './guard.js';
import { type Choice, choose, degrade, type RoutingDeps } from './routing-policy/choose.js';
import type { RouteEntry, RouteTable } from './serving/routes.js';
import type { ProxyMetrics } from './telemetry/metrics.js';
import { translatorFor } from './translators/table.js';
import { type Backends, backendOf } from './upstreams/backend.js';

/**
 * The fourth stage: where the request goes. First the routing policy's choice, where one applies
 * (proxy/routing-policy/choose.ts: `auto`, or a named model with routing on); then the model name
 * through the route table (aliases included) and the key's allow-list, permission judged before
 * existence so a key cannot probe for models beyond it; the budgets of the key and of the
 * request's tags (a spent one that degrades moves the request to an in-cluster model); the memory
 * its answer may cost, with its body's; then what
 * to try in order (where a guardrail keeps the request in the cluster, only in-cluster routes), the model and its fallbacks the key may call, each with its plan: the dialect
 * its backend serves natively and the translators that get the caller's dialect there; and,
 * routed, the models the cascade may move to.
 */

export interface RouteDeps extends RoutingDeps {
  routes: RouteTable;
  backends: Backends;
  metrics: ProxyMetrics;
  /** Spend budgets of keys and tags; none checked when absent. */
  budgets?: BudgetGuard;
}

export async function route(deps: RouteDeps, parsed: Parsed): Promise<Routed | Failed> {
  const { caller, request } = parsed;
  let choice = await choose(deps, parsed);
  if (choice instanceof ProxyError) return { failed: choice, at: parsed };
  const refused = deps.budgets?.check(caller.policy, parsed.known.tags);
  const degraded = refused?.degrade ? degrade(deps, parsed, choice) : undefined;
  if (degraded) choice = degraded;
  const kept = parsed.guard?.inCluster;
  if (kept && deps.routes.lookup(choice.model)?.kind !== 'in-cluster')
    choice = degrade(deps, parsed, choice, 'guardrail-in-cluster') ?? choice;
  const entry = routeFor(deps.routes, caller.policy, choice.model);
  if (entry instanceof ProxyError) return { failed: entry, at: parsed };
  const backend = backendOf(deps.backends, entry);
  // Usage, metrics and traces name the model that serves, not the alias the caller sent.
  const known = { ...parsed.known, model: entry.model, provider: entry.provider };
  parsed.span?.routed(entry.model, { provider: entry.provider, ...systemOf(backend.who(entry)) }, request.forward);
  const flying = deps.metrics.started(entry.model, entry.provider);
  const at = { ...parsed, known, route: entry, flying, ...(choice.routing ? { routing: choice.routing } : {}) };
  if (refused && !degraded) {
    deps.metrics.budgetRefused.inc({ scope: refused.scope });
    return { failed: refused.error, at };
  }
  const unreserved = reserveAnswer(parsed);
  if (unreserved) return { failed: unreserved, at };
  const chain = chainOf(deps, parsed, entry);
  if (!kept) return { ...at, chain, ...cascadeOf(deps, parsed, choice) };
  // A guardrail's RouteInCluster: only the in-cluster routes of the chain and the cascade are tried.
  const inCluster = (c: readonly Attempt[]) => c.filter((a) => a.route.kind === 'in-cluster');
  const onlyInCluster = inCluster(chain);
  if (onlyInCluster.length === 0) return { failed: guardrailInClusterOnly(kept, entry.model), at };
  const cascade = (cascadeOf(deps, parsed, choice).cascade ?? []).map(inCluster).filter((c) => c.length > 0);
  return { ...at, chain: onlyInCluster, ...(cascade.length ? { cascade } : {}) };
}

/**
 * The memory the answer may cost (an embeddings answer of many large vectors), reserved with the
 * body's once the model is known to exist for this key: an unknown model is its 404, a request
 * whose answer could never fit is a 400 naming its field, one that fits once others finish a 503.
 */
function reserveAnswer(parsed: Parsed): ProxyError | undefined {
  const cost = parsed.incoming.endpoint.answerCost?.(parsed.request);
  if (!cost) return undefined;
  try {
    parsed.reservation.atLeast(cost.bytes, cost.neverFits);
    return undefined;
  } catch (err) {
    if (err instanceof ProxyError) return err;
    throw err;
  }
}

/** The route, then its fallbacks the key may call (theirs not: no chains, no loops), each with its plan. */
function chainOf(deps: RouteDeps, parsed: Parsed, entry: RouteEntry): Attempt[] {
  const chain: RouteEntry[] = [entry];
  for (const name of entry.fallback ?? []) {
    const f = deps.routes.lookup(name);
    if (f && !chain.includes(f) && mayCall(parsed.caller.policy, f.model)) chain.push(f);
  }
  return chain.map((r) => ({ route: r, plan: planFor(deps.backends, parsed.incoming.endpoint, r) }));
}

/** The cascade's next models (each with its own chain), as many as the policy escalates. */
function cascadeOf(deps: RouteDeps, parsed: Parsed, choice: Choice): { cascade?: Attempt[][] } {
  const routing = choice.routing;
  if (!routing || routing.cascade.max === 0 || routing.ladder.length === 0) return {};
  const next: Attempt[][] = [];
  for (const name of routing.ladder.slice(0, routing.cascade.max)) {
    const e = deps.routes.lookup(name);
    if (e && mayCall(parsed.caller.policy, e.model)) next.push(chainOf(deps, parsed, e));
  }
  return next.length ? { cascade: next } : {};
}

const systemOf = (who: { system?: string }) => (who.system ? { system: who.system } : {});

export function planFor(backends: Backends, endpoint: Endpoint, target: RouteEntry): Plan {
  const backend = backendOf(backends, target);
  const refused = backend.refuse?.(target);
  if (refused) return refused;
  const serves = backend.dialects(target);
  if (serves.includes(endpoint.dialect)) return { dialect: endpoint.dialect };
  for (const to of serves) {
    const translator = translatorFor(endpoint.dialect, to);
    if (translator) return { dialect: to, translator };
  }
  const paths = Object.values(ENDPOINTS)
    .filter((e) => e.does === endpoint.does)
    .filter((e) => serves.includes(e.dialect) || serves.some((to) => translatorFor(e.dialect, to)))
    .map((e) => e.path);
  return new ProxyError(
    400,
    'invalid_request_error',
    'unsupported_endpoint',
    `${endpoint.path} is not served for ${target.model} (${backend.who(target).label}): ${paths.length ? `it answers ${paths.join(', ')}` : 'it answers no endpoint of the gateway'}`,
    'model',
  );
}
