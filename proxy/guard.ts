import { ProxyError } from './endpoints/errors.js';
import type { Answered, Failed, Parsed } from './exchange.js';
import { ANSWER_TEXTS } from './guardrails/answer-texts.js';
import { type Cause, type Checking, checkAll } from './guardrails/check-text.js';
import { NO_CALLS } from './guardrails/checker.js';
import { Findings } from './guardrails/findings.js';
import type { GuardDeps } from './guardrails/guard-deps.js';
import type { CompiledGuardrail } from './guardrails/guardrail-set.js';
import { judgeTexts } from './guardrails/judging.js';
import { REQUEST_TEXTS } from './guardrails/request-texts.js';
import { guardStream } from './guardrails/stream-guard.js';

/**
 * The guard stage, between parse and route: the guardrails that select the request (by its key,
 * team, tags and model; proxy/guardrails/) check every text it carries, in their order. A Block
 * refuses it here, in the caller's dialect, naming the guardrail and the category; Redact and Mask
 * change what is forwarded; RouteInCluster leaves the route stage only in-cluster models. What
 * they found goes on with the request, to its usage record; the guardrails that check answers go
 * with it to the account stage.
 */

/** A guarded request's guardrails: what they found (its answer's findings are added as it is checked). */
export interface Guarding extends Checking {
  /** The guardrails that check its answer, in order. */
  answer: readonly CompiledGuardrail[];
}

export async function guard(deps: GuardDeps, parsed: Parsed): Promise<Parsed | Failed> {
  const set = deps.guardrails;
  if (!set || set.size === 0) return parsed;
  const selected = set.select({ policy: parsed.caller.policy, tags: parsed.known.tags, model: parsed.request.model });
  if (selected.length === 0) return parsed;
  const guarding: Guarding = { findings: new Findings(), answer: selected.filter((g) => g.answer) };
  const checking = selected.filter((g) => g.request);
  const at = { ...parsed, guard: guarding };
  if (checking.length === 0) return at;
  const dialect = parsed.incoming.endpoint.dialect;
  const checked = checkAll(REQUEST_TEXTS[dialect], parsed.request.forward, checking, 'request', guarding);
  if ('blocked' in checked) return { failed: guardrailBlocked(checked.blocked, 'request'), at };
  const judged = await judgeTexts(
    checking,
    REQUEST_TEXTS[dialect],
    checked.body,
    'request',
    guarding,
    judgesOf(deps),
    failedTo(deps),
  );
  if ('blocked' in judged) return { failed: guardrailBlocked(judged.blocked, 'request'), at };
  if ('unavailable' in judged) return { failed: guardrailUnavailable(judged.unavailable), at };
  const forward = judged.body;
  return forward === parsed.request.forward ? at : { ...at, request: { ...parsed.request, forward } };
}

const judgesOf = (deps: GuardDeps) => deps.judges ?? NO_CALLS;
const failedTo = (deps: GuardDeps) => deps.onJudgeFailed ?? (() => {});

/** A judge or service that fails closed could not answer: 503, the request may succeed when retried. */
const guardrailUnavailable = (cause: Cause): ProxyError =>
  new ProxyError(
    503,
    'server_error',
    'guardrail_unavailable',
    // Why stays in the proxy's log and metrics: it may name a host, an address or a provider's setup.
    `guardrail ${cause.guardrail} could not judge the text (its ${cause.category} did not answer) and refuses what it cannot judge; try again`,
    null,
    { 'retry-after': '1' },
  );

/** A Block's error: the guardrail and the category, never the text it found. */
const guardrailBlocked = (cause: Cause, where: 'request' | 'answer'): ProxyError =>
  new ProxyError(
    400,
    'invalid_request_error',
    'guardrail_blocked',
    `blocked by guardrail ${cause.guardrail}: the ${where} carries ${cause.category}`,
  );

/** A RouteInCluster whose request no in-cluster model can take. */
export const guardrailInClusterOnly = (cause: Cause, model: string): ProxyError =>
  new ProxyError(
    400,
    'invalid_request_error',
    'guardrail_in_cluster_only',
    `guardrail ${cause.guardrail} keeps requests carrying ${cause.category} in the cluster, and ${model} is not an in-cluster model (nor is one of its fallbacks, and no routing policy has one for this key); name an in-cluster model`,
    'model',
  );

/**
 * The answer's guardrails, after the call and before a stored Response keeps it: a whole answer's
 * texts checked at once (a Block answers the dialect's error instead, its tokens still counted);
 * a stream's as it streams (proxy/guardrails/stream-guard.ts).
 */
export async function guardAnswer(deps: GuardDeps, outcome: Answered | Failed): Promise<Answered | Failed> {
  if ('failed' in outcome) return outcome;
  const guarding = outcome.guard;
  if (!guarding || guarding.answer.length === 0 || outcome.incoming.endpoint.does !== 'generate') return outcome;
  const dialect = outcome.incoming.endpoint.dialect;
  const { result } = outcome;
  if (result.kind === 'stream') {
    const guarded = guardStream(
      dialect,
      result.body,
      result.outcome,
      guarding.answer,
      guarding,
      (cause) => guardrailBlocked(cause, 'answer'),
      { calls: judgesOf(deps), onFailed: failedTo(deps), unavailableError: guardrailUnavailable },
    );
    return { ...outcome, result: { ...result, ...guarded } };
  }
  // What the model used is the request's cost, whatever the guardrails make of its answer.
  const refused = (failed: ProxyError): Failed => ({
    failed,
    at: { ...outcome, route: outcome.served },
    ...(result.usage ? { usage: result.usage } : {}),
  });
  const checked = checkAll(ANSWER_TEXTS[dialect], result.body, guarding.answer, 'answer', guarding);
  if ('blocked' in checked) return refused(guardrailBlocked(checked.blocked, 'answer'));
  const judged = await judgeTexts(
    guarding.answer,
    ANSWER_TEXTS[dialect],
    checked.body,
    'answer',
    guarding,
    judgesOf(deps),
    failedTo(deps),
  );
  if ('blocked' in judged) return refused(guardrailBlocked(judged.blocked, 'answer'));
  if ('unavailable' in judged) return refused(guardrailUnavailable(judged.unavailable));
  const { body } = judged;
  if (body === result.body) return outcome;
  const { raw: _sent, ...rest } = result;
  return { ...outcome, result: { ...rest, body } };
}
