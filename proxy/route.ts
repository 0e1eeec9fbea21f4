import { mayCall } from './access/auth.js';
import type { BudgetGuard } from './access/budgets.js';
import { routeFor } from './access/model-access.js';
import { ENDPOINTS, type Endpoint } from './endpoints/endpoints.js';
import { ProxyError } from './endpoints/errors.js';
import type { Failed, Parsed, Plan, Routed } from './exchange.js';
import type { RouteEntry, RouteTable } from './routing/routes.js';
import type { ProxyMetrics } from './telemetry/metrics.js';
import { translatorFor } from './translators/table.js';
import { type Backends, backendOf } from './upstreams/backend.js';

/**
 * The fourth stage: where the request goes. The model name through the route table (aliases
 * included) and the key's allow-list, permission judged before existence so a key cannot probe
 * for models beyond it; the budgets of the key and of the request's tags; then what to try in
 * order, the model and its fallbacks the key may call, each with its plan: the dialect its
 * backend serves natively and the translators that get the caller's dialect there.
 */

export interface RouteDeps {
  routes: RouteTable;
  backends: Backends;
  metrics: ProxyMetrics;
  /** Spend budgets of keys and tags; none checked when absent. */
  budgets?: BudgetGuard;
}

export function route(deps: RouteDeps, parsed: Parsed): Routed | Failed {
  const { caller, request, incoming } = parsed;
  const entry = routeFor(deps.routes, caller.policy, request.model);
  if (entry instanceof ProxyError) return { failed: entry, at: parsed };
  const backend = backendOf(deps.backends, entry);
  // Usage, metrics and traces name the model that serves, not the alias the caller sent.
  const known = { ...parsed.known, model: entry.model, provider: entry.provider };
  parsed.span?.routed(entry.model, { provider: entry.provider, ...systemOf(backend.who(entry)) }, request.forward);
  const flying = deps.metrics.started(entry.model, entry.provider);
  const at = { ...parsed, known, route: entry, flying };
  const refused = deps.budgets?.check(caller.policy, known.tags);
  if (refused) {
    deps.metrics.budgetRefused.inc({ scope: refused.scope });
    return { failed: refused.error, at };
  }
  const chain: RouteEntry[] = [entry];
  for (const name of entry.fallback ?? []) {
    const f = deps.routes.lookup(name);
    if (f && !chain.includes(f) && mayCall(caller.policy, f.model)) chain.push(f);
  }
  return { ...at, chain: chain.map((r) => ({ route: r, plan: planFor(deps.backends, incoming.endpoint, r) })) };
}

const systemOf = (who: { system?: string }) => (who.system ? { system: who.system } : {});

function planFor(backends: Backends, endpoint: Endpoint, target: RouteEntry): Plan {
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
