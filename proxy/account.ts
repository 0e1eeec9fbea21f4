import { deprecationHeaders, isDeprecated } from '../crds/catalog/lifecycle.js';
import { ROUTED_MODEL_HEADER, ROUTING_REASON_HEADER } from '../crds/constants.js';
import type { BudgetGuard } from './access/budgets.js';
import { MAX_MODEL_CHARS } from './access/model-access.js';
import type { RateLimiter } from './access/rate-limit.js';
import type { Cached } from './cache.js';
import { conformAnswer } from './conformance/conformance.js';
import { errorAnswer } from './endpoints/error-answer.js';
import type { Admitted, Answer, Answered, Escalation, Failed, Known } from './exchange.js';
import type { Guarding } from './guard.js';
import type { Routing } from './routing-policy/decide.js';
import type { RouteEntry } from './serving/routes.js';
import type { ProxyMetrics } from './telemetry/metrics.js';
import { type Backends, backendOf } from './upstreams/backend.js';
import type { StreamOutcome, UpstreamResult, Usage } from './upstreams/upstream.js';
import { charge } from './usage/cost.js';
import type { UsageRecord, UsageSink } from './usage/record.js';

/**
 * The last stage: one usage record per request, answered or refused, with what it cost; the
 * request's metrics and span; its spend added to the budgets and its tokens debited from its
 * key's token rate. A whole answer is accounted at once; a stream when its last byte went out
 * (or the caller left), after a provisional record at its start that a crash would leave
 * behind. Returns what the front door writes, in the caller's dialect.
 */

export interface AccountDeps {
  usage: UsageSink;
  metrics: ProxyMetrics;
  backends: Backends;
  limiter: RateLimiter;
  budgets?: BudgetGuard;
  /** Told of every request that used tokens of a model without a price. */
  onUnpriced?: (model: string, provider: string) => void;
}

/** What a finished request ended with, to account for it. */
interface Ending {
  status: number;
  usage?: Usage;
  firstTokenMs?: number;
  errorType?: string;
  /** A whole answer, still to be written: the front door says whether it reached the caller (UsageSink.delivered). */
  whole?: boolean;
}

export function account(deps: AccountDeps, outcome: Answered | Failed): Answer {
  if ('failed' in outcome) return accountFailure(deps, outcome);
  const { result } = outcome;
  if (result.kind === 'json') {
    settle(deps, outcome, outcome.known, outcome.served, {
      status: result.status,
      ...(result.usage ? { usage: result.usage } : {}),
      whole: true,
    });
    return {
      kind: 'json',
      status: 200,
      headers: { 'content-type': 'application/json', ...answerHeaders(deps, outcome), ...result.headers },
      body: answerBody(outcome, result),
    };
  }
  deps.usage.begin?.(recordOf(outcome, outcome.known, 200, performance.now() - outcome.started));
  result.outcome.then(
    (o: StreamOutcome) => settle(deps, outcome, outcome.known, outcome.served, streamEnding(o)),
    // A bug in a relay must not lose the record: the stream is accounted as the gateway's failure.
    () => settle(deps, outcome, outcome.known, outcome.served, { status: 500, errorType: 'internal_error' }),
  );
  return {
    kind: 'stream',
    status: 200,
    headers: {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache',
      connection: 'keep-alive',
      ...answerHeaders(deps, outcome),
    },
    body: result.body,
  };
}

/**
 * A whole answer's body, as the caller's dialect's spec has it (proxy/conformance/): the bytes the
 * upstream sent where they already were, re-serialized only where something was added or dropped.
 */
function answerBody({ incoming }: Answered, result: Extract<UpstreamResult, { kind: 'json' }>): string {
  const body =
    incoming.endpoint.does === 'generate' ? conformAnswer(incoming.endpoint.dialect, result.body) : result.body;
  return (body === result.body ? result.raw : undefined) ?? JSON.stringify(body);
}

/** A refusal or a failure: recorded with what was known, answered in the caller's dialect. */
function accountFailure(deps: AccountDeps, { failed, at, usage }: Failed): Answer {
  settle(deps, at, at.known, at.route, {
    status: failed.status,
    errorType: failed.code,
    whole: true,
    ...(usage ? { usage } : {}),
  });
  const headers = at.routing
    ? { ...at.headers, ...routingHeaders(at.routing, at.known.model, at.escalations) }
    : at.headers;
  return errorAnswer(failed, at.incoming.requestId, at.incoming.endpoint.dialect, headers);
}

function streamEnding(o: StreamOutcome): Ending {
  const status = o.error ? o.error.status : o.clientAborted ? 499 : 200;
  const errorType = o.error ? o.error.code : o.clientAborted ? 'client_closed_request' : undefined;
  return {
    status,
    ...(o.usage ? { usage: o.usage } : {}),
    ...(o.firstTokenMs !== undefined ? { firstTokenMs: o.firstTokenMs } : {}),
    ...(errorType ? { errorType } : {}),
  };
}

/**
 * The request id, the key's rate state, which model served where a fallback did, what routing
 * chose, and Deprecation and Sunset where the model that served is deprecated.
 */
function answerHeaders(deps: AccountDeps, answered: Answered): Record<string, string> {
  const routed = {
    ...(answered.routing ? routingHeaders(answered.routing, answered.served.model, answered.escalations) : {}),
    ...cacheHeader(answered),
  };
  const cascaded = answered.escalations?.length ? answered.served.model : undefined;
  const going = deprecationHeaders(lifecycleOf(deps, answered.served), Date.now());
  return answered.served === answered.route || answered.served.model === cascaded
    ? { ...answered.headers, ...routed, ...going }
    : { ...answered.headers, 'x-gateway-fallback': answered.served.model, ...routed, ...going };
}

/** X-Cache: `hit; kind=exact|semantic` for an answer from the response cache, `miss` for one it looked for. */
function cacheHeader(answered: Answered): Record<string, string> {
  if (answered.cached) return { [CACHE_STATUS_HEADER]: `hit; kind=${answered.cached.kind}` };
  return answered.cacheLookup ? { [CACHE_STATUS_HEADER]: 'miss' } : {};
}

const CACHE_STATUS_HEADER = 'x-cache';

/** When the route's provider deprecates and retires its model, where it publishes it. */
const lifecycleOf = (deps: AccountDeps, route: RouteEntry) => backendOf(deps.backends, route).lifecycle?.(route);

/** X-Routed-Model and X-Routing-Reason: `<reason>; <details>`, the cascade's steps named. */
function routingHeaders(
  routing: Routing,
  served: string,
  escalations: readonly Escalation[] = [],
): Record<string, string> {
  const moved = escalations.map((e) => `${e.route.model} (${e.trigger})`).join(', ');
  const reason = escalations.length
    ? `cascade; from=${moved}; ${routing.detail}`
    : `${routing.reason}; ${routing.detail}`;
  return { [ROUTED_MODEL_HEADER]: served, [ROUTING_REASON_HEADER]: reason };
}

function settle(
  deps: AccountDeps,
  at: Admitted & {
    flying?: Answered['flying'];
    routing?: Routing;
    escalations?: readonly Escalation[];
    guard?: Guarding;
    cached?: Cached;
  },
  known: Known,
  served: RouteEntry | undefined,
  end: Ending,
): void {
  const latencyMs = performance.now() - at.started;
  if (at.flying) deps.metrics.finished(at.flying);
  at.span?.end({
    status: end.status,
    ...(served ? { route: { provider: served.provider, ...systemOf(deps, served) } } : {}),
    stream: known.stream,
    ...(end.usage ? { usage: end.usage } : {}),
    ...(end.errorType ? { errorType: end.errorType } : {}),
    ...(end.firstTokenMs !== undefined ? { firstTokenMs: end.firstTokenMs } : {}),
  });
  const backend = served && backendOf(deps.backends, served);
  const cost = served && backend ? charge(backend.price(served), end.usage, backend.credits(served)) : { costUsd: 0 };
  // Answers the cascade moved past cost what they used (list price; their credits are not allocated).
  for (const e of at.escalations ?? [])
    cost.costUsd += charge(backendOf(deps.backends, e.route).price(e.route), e.usage, 0).costUsd;
  const routed = at.routing ? routingFields(deps, at.routing, at.escalations, served, end.usage) : undefined;
  const findings = at.guard?.findings.list() ?? [];
  deps.metrics.countFindings(findings);
  const { model, provider } = known;
  if (cost.unpriced) {
    deps.metrics.unpriced.inc({ model, provider });
    deps.onUnpriced?.(model, provider);
  }
  if (end.usage?.counted) deps.metrics.countedTokens.inc({ model, provider });
  const tokens = (end.usage?.promptTokens ?? 0) + (end.usage?.completionTokens ?? 0);
  if (at.tokens) deps.limiter.debit(at.tokens.bucket, at.tokens.rate, tokens);
  const now = Date.now();
  const deprecated = served !== undefined && isDeprecated(lifecycleOf(deps, served), now);
  // The record's own time: the budgets match the two when the recorder writes it.
  deps.budgets?.add(at.caller.policy, known.tags, cost.costUsd, now);
  deps.usage.record(
    {
      ...recordOf(at, known, end.status, latencyMs, now),
      promptTokens: end.usage?.promptTokens ?? 0,
      completionTokens: end.usage?.completionTokens ?? 0,
      costUsd: cost.costUsd,
      ...(cost.creditsUsd ? { creditsUsd: cost.creditsUsd } : {}),
      ...(end.firstTokenMs !== undefined ? { firstTokenMs: end.firstTokenMs } : {}),
      ...(end.errorType ? { errorType: end.errorType } : {}),
      ...(end.usage?.counted ? { tokensCounted: true } : {}),
      ...(cost.unpriced ? { unpriced: true } : {}),
      ...(deprecated ? { deprecated: true } : {}),
      ...(findings.length ? { findings } : {}),
      ...(at.cached ? { cache: at.cached.kind, cacheSavingsUsd: at.cached.savedUsd } : {}),
      ...routed,
    },
    end.whole,
  );
  deps.metrics.observeRequest({
    // Only routable models become label values: a caller's made-up names must not add series.
    model: served ? model : '',
    provider,
    tags: known.tags,
    status: end.status,
    code: end.errorType ?? '',
    seconds: latencyMs / 1000,
    ...(end.firstTokenMs !== undefined ? { firstTokenSeconds: end.firstTokenMs / 1000 } : {}),
    ...(end.usage ? { usage: end.usage } : {}),
    costUsd: cost.costUsd,
  });
}

/** A routed request's record fields, and its decision counted. */
function routingFields(
  deps: AccountDeps,
  routing: Routing,
  escalations: readonly Escalation[] = [],
  served: RouteEntry | undefined,
  usage: Usage | undefined,
): Partial<UsageRecord> {
  const reason = escalations.length ? 'cascade' : routing.reason;
  deps.metrics.routingDecisions.inc({
    policy: routing.policy,
    from: routing.requested,
    to: served?.model ?? '',
    reason,
  });
  const cf = routing.counterfactual;
  const counterfactual = cf ? charge(backendOf(deps.backends, cf).price(cf), usage, 0) : undefined;
  return {
    requestedModel: routing.requested.slice(0, MAX_MODEL_CHARS),
    routingPolicy: routing.policy,
    routingReason: reason,
    escalations: escalations.length,
    ...(counterfactual && !counterfactual.unpriced ? { counterfactualCostUsd: counterfactual.costUsd } : {}),
  };
}

const systemOf = (deps: AccountDeps, route: RouteEntry) => {
  const { system } = backendOf(deps.backends, route).who(route);
  return system ? { system } : {};
};

/** The record's fields known before the answer is: who, what, where, when. */
function recordOf(at: Admitted, known: Known, status: number, latencyMs: number, now = Date.now()): UsageRecord {
  const { policy } = at.caller;
  return {
    time: new Date(now).toISOString(),
    requestId: at.incoming.requestId,
    keyHashPrefix: at.caller.keyHashPrefix,
    ...(policy.team ? { team: policy.team } : {}),
    ...(policy.name ? { apiKey: policy.name } : {}),
    model: known.model.slice(0, MAX_MODEL_CHARS),
    endpoint: at.incoming.endpoint.name,
    provider: known.provider,
    tags: known.tags,
    promptTokens: 0,
    completionTokens: 0,
    costUsd: 0,
    savingsUsd: 0,
    latencyMs,
    status,
    stream: known.stream,
  };
}
