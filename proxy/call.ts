import { anthropicBetas, estimateInputTokens } from './endpoints/anthropic-request.js';
import type { Endpoint } from './endpoints/endpoints.js';
import { internalError, ProxyError } from './endpoints/errors.js';
import type { Answered, Attempt, Escalation, Failed, Routed } from './exchange.js';
import { judgeAnswer, judgeStream } from './routing-policy/cascade.js';
import type { ProxyMetrics } from './telemetry/metrics.js';
import type { RequestSpan } from './telemetry/tracing.js';
import { type Backend, type Backends, backendOf, type Server } from './upstreams/backend.js';
import { fanOut } from './upstreams/fan-out.js';
import { type RetryPolicy, shouldFallBack, withRetries } from './upstreams/resilience.js';
import { sender } from './upstreams/send.js';
import type { StreamOutcome, UpstreamCall, UpstreamResult, Usage } from './upstreams/upstream.js';

/**
 * The fifth stage: the call. Each route of the chain in turn, the model first, then its
 * fallbacks (on a failure of the model rather than of the request); each with retries where a
 * second try can help, before the caller got a byte; each through its plan's translators, and
 * in a CLIENT span of its own when tracing is on. count_tokens asks the backend for an exact
 * count instead, and estimates where it has none.
 */

export interface CallDeps {
  backends: Backends;
  retry: RetryPolicy;
  metrics: ProxyMetrics;
}

type Operation = (deps: CallDeps, routed: Routed) => Promise<Answered | Failed>;

/** What each kind of endpoint does (Endpoint.does). */
const OPERATIONS: Readonly<Record<Endpoint['does'], Operation>> = {
  generate,
  'count-tokens': countTokens,
};

export function call(deps: CallDeps, routed: Routed): Promise<Answered | Failed> {
  return OPERATIONS[routed.incoming.endpoint.does](deps, routed);
}

/** The call as every route of the chain takes it, before its plan translates the body. */
export type Call = Omit<UpstreamCall, 'route' | 'dialect'>;

async function generate(deps: CallDeps, routed: Routed): Promise<Answered | Failed> {
  const { request, incoming } = routed;
  const betas = anthropicBetas(incoming.header('anthropic-beta'));
  const call: Call = {
    body: request.forward,
    stream: request.stream,
    clientWantsUsage: request.includeUsage,
    signal: incoming.signal,
    ...(betas.length ? { betas } : {}),
  };
  if (!routed.cascade?.length) return tryChain(deps, routed, routed.chain, call);
  return cascade(deps, routed, call);
}

/**
 * A routed request's cascade: the chosen model's chain, then each next model's, until an answer
 * passes the judge (proxy/routing-policy/cascade.ts) or the last model answered; a failure of the
 * model (not of the request) moves on too. The last answer is the caller's, whatever it is.
 */
async function cascade(deps: CallDeps, routed: Routed, call: Call): Promise<Answered | Failed> {
  const { routing } = routed;
  const steps = [routed.chain, ...(routed.cascade ?? [])];
  const escalations: Escalation[] = [];
  const dialect = routed.incoming.endpoint.dialect;
  for (const [n, chain] of steps.entries()) {
    const outcome = await tryChain(deps, routed, chain, call);
    const first = chain[0];
    const last = n === steps.length - 1 || !routing || !first;
    if ('failed' in outcome) {
      const modelFailed = outcome.cause === undefined && shouldFallBack(outcome.failed);
      if (last || !modelFailed || !routing.cascade.triggers.has('Error') || call.signal.aborted)
        return escalations.length ? { ...outcome, at: { ...outcome.at, escalations } } : outcome;
      escalations.push({ route: first.route, trigger: 'Error' });
      continue;
    }
    if (last) return withEscalations(outcome, escalations);
    const { result } = outcome;
    if (result.kind === 'json') {
      const trigger = judgeAnswer(
        dialect,
        result.body,
        routing.features,
        routing.cascade.triggers,
        result.usage?.completionTokens,
      );
      if (!trigger) return withEscalations(outcome, escalations);
      escalations.push({ route: outcome.served, trigger, ...(result.usage ? { usage: result.usage } : {}) });
      continue;
    }
    const judged = await judgeStream(dialect, result.body, routing.features, routing.cascade.triggers);
    if ('body' in judged) return withEscalations({ ...outcome, result: { ...result, body: judged.body } }, escalations);
    escalations.push({ route: outcome.served, trigger: judged.failed, ...(await usageOf(result.outcome)) });
  }
  // Unreachable: the last step returns.
  return { failed: internalError(routed.incoming.requestId), at: routed };
}

/** The answer with the answers the cascade moved past before it, where there were any. */
const withEscalations = (answered: Answered, escalations: readonly Escalation[]): Answered =>
  escalations.length ? { ...answered, escalations } : answered;

/** What a stream the cascade moved past used, as its relay counted it on ending (waited for briefly). */
async function usageOf(outcome: Promise<StreamOutcome>): Promise<{ usage?: Usage }> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<undefined>((resolve) => {
    timer = setTimeout(() => resolve(undefined), STREAM_USAGE_WAIT_MS);
  });
  const ended = await Promise.race([outcome.catch(() => undefined), late]);
  clearTimeout(timer);
  return ended?.usage ? { usage: ended.usage } : {};
}

const STREAM_USAGE_WAIT_MS = 250;

/** One model's chain: the model, then its fallbacks on a failure of the model rather than of the request. */
async function tryChain(
  deps: CallDeps,
  routed: Routed,
  chain: readonly Attempt[],
  call: Call,
): Promise<Answered | Failed> {
  const { request, incoming } = routed;
  let first: ProxyError | undefined;
  const failed: string[] = [];
  for (const [i, attempt] of chain.entries()) {
    const { route } = attempt;
    const cap = routed.routing?.caps.get(route.model);
    const sent = cap === undefined ? forModel(call, route.model) : capped(forModel(call, route.model), cap);
    const result = await callOne(deps, attempt, sent, routed.span).catch((err: unknown) =>
      err instanceof ProxyError ? err : { bug: err },
    );
    if ('bug' in result) return { failed: internalError(incoming.requestId), at: routed, cause: result.bug };
    if (!(result instanceof ProxyError)) {
      return {
        ...routed,
        known: { ...routed.known, model: route.model, provider: route.provider },
        served: route,
        result,
      };
    }
    if ((i === 0 && !shouldFallBack(result)) || incoming.signal.aborted) return { failed: result, at: routed };
    first ??= result;
    if (i > 0) failed.push(`${route.model} (${result.code})`);
    const next = chain[i + 1];
    if (next) deps.metrics.fallbacks.inc({ model: request.model, fallback: next.route.model, code: result.code });
  }
  const e = first as ProxyError;
  if (failed.length === 0) return { failed: e, at: routed };
  return {
    failed: new ProxyError(
      e.status,
      e.type,
      e.code,
      `${e.message}; its fallbacks failed too: ${failed.join(', ')}`,
      e.param,
      e.headers,
    ),
    at: routed,
  };
}

/** The output maximum fields of every dialect (chat's two, Responses', Messages'). */
const MAX_OUTPUT_FIELDS = ['max_tokens', 'max_completion_tokens', 'max_output_tokens'] as const;

/** The request's output maximum lowered to what the routed model's window leaves (proxy/routing-policy/decide.ts outputCap). */
function capped(call: Call, cap: number): Call {
  const body = { ...call.body };
  for (const field of MAX_OUTPUT_FIELDS) {
    const asked = body[field];
    if (typeof asked === 'number' && asked > cap) body[field] = cap;
  }
  return { ...call, body };
}

/** The body names the model each route serves (a fallback's own, an alias's model). */
const forModel = (call: Call, model: string): Call =>
  call.body.model === model ? call : { ...call, body: { ...call.body, model } };

/**
 * One route, in one direction: its plan (the attempt), then fan-out (several answers, `n` or a
 * list of prompts, that its server does not give in one call are several calls, merged into one
 * answer: proxy/upstreams/fan-out.ts), then retries (proxy/upstreams/resilience.ts), then the
 * send (proxy/upstreams/send.ts: the plan's translators, the span, the backend). Rejects with the
 * ProxyError the caller should see.
 */
export function callOne(
  deps: CallDeps,
  attempt: Attempt,
  call: Call,
  span: RequestSpan | undefined,
): Promise<UpstreamResult> {
  const { route } = attempt;
  return fanOut(deps.backends, attempt, call, async (one) =>
    withRetries(sender(deps.backends, attempt, one, span), deps.retry, one.signal, {
      onRetry: (err) => deps.metrics.retries.inc({ model: route.model, provider: route.provider, code: err.code }),
    }),
  );
}

/**
 * count_tokens: exact where the model's provider counts (Anthropic, Claude on Vertex and on
 * Bedrock), said so in `x-gateway-token-count: exact`; elsewhere an estimate from the request's
 * length, said so too. The served model's own id, never an alias. Nothing is generated.
 */
async function countTokens(deps: CallDeps, routed: Routed): Promise<Answered | Failed> {
  const { route, request, incoming } = routed;
  const backend: Backend = backendOf(deps.backends, route);
  const body = { ...request.forward, model: route.model };
  const count = async () => {
    const exact = await backend.countTokens(route, body, incoming.signal);
    return exact === undefined
      ? { inputTokens: estimateInputTokens(body), exact: false }
      : { inputTokens: exact, exact: true };
  };
  try {
    const counted = await (routed.span ? countTraced(routed.span, backend.who(route), routed, count) : count());
    return {
      ...routed,
      served: route,
      result: {
        kind: 'json',
        status: 200,
        body: { input_tokens: counted.inputTokens },
        headers: { 'x-gateway-token-count': counted.exact ? 'exact' : 'estimate' },
      },
    };
  } catch (err) {
    if (err instanceof ProxyError) return { failed: err, at: routed };
    return { failed: internalError(incoming.requestId), at: routed, cause: err };
  }
}

/** A count in a CLIENT span, as any upstream call. */
async function countTraced<T>(span: RequestSpan, who: Server, routed: Routed, count: () => Promise<T>): Promise<T> {
  const up = span.upstream({
    model: routed.route.model,
    provider: routed.route.provider,
    ...(who.system ? { system: who.system } : {}),
  });
  try {
    const counted = await count();
    up.end();
    return counted;
  } catch (err) {
    up.end(
      err instanceof ProxyError ? { code: err.code, status: err.status } : { code: 'internal_error', status: 500 },
    );
    throw err;
  }
}
