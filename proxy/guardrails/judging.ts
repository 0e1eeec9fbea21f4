import type { Cause, Checking } from './check-text.js';
import { checkAll } from './check-text.js';
import type { Checker, Found, GuardrailCalls, Outcome } from './checker.js';
import type { FindingPlace } from './findings.js';
import type { CompiledGuardrail } from './guardrail-set.js';
import { type MapText, textsOf } from './request-texts.js';
import { occurrences } from './spans.js';

/**
 * The checkers of a body's guardrails (their judges and services: checker.ts), asked about its
 * texts (each within its own time) after the built-in detectors acted on them: the company's own
 * services (a Presidio analyzer) first, together, and what they found acted on; then the judges
 * and the providers' services, together, on what was left (a request kept in the cluster by a
 * RouteInCluster is not sent to a provider's service: its onFailure decides). Each
 * category of a whole text is a finding acted on by its action (Block, and Redact or Mask, which
 * cannot cut out a whole text, refuse it; RouteInCluster keeps a request in the cluster; Log
 * records it); what they found in the texts is acted on where it occurs, as a detector's finding
 * is. A checker that could not answer refuses the body where it fails closed, and is counted
 * where it fails open.
 */

export type Judged<B> = { body: B } | { blocked: Cause } | { unavailable: Cause; why: string };

/** Told of a checker that could not answer: its guardrail, its detector's name, why. */
export type OnCheckFailed = (guardrail: string, detector: string, why: string) => void;

export async function judgeTexts<B>(
  guardrails: readonly CompiledGuardrail[],
  map: (body: B, f: MapText) => B,
  body: B,
  where: FindingPlace,
  checking: Checking,
  calls: GuardrailCalls,
  onFailed: OnCheckFailed,
  opts: { shown?: boolean } = {},
): Promise<Judged<B>> {
  let out = body;
  let unavailable: { unavailable: Cause; why: string } | undefined;
  // The company's own services first: what they redact never reaches a judge or a provider's service.
  for (const local of [true, false]) {
    const round = guardrails.flatMap((g) => {
      const checkers = g.checkers.filter((c) => c.local === local);
      return checkers.length ? [{ g, checkers }] : [];
    });
    if (round.length === 0) continue;
    const texts = textsOf(map, out);
    if (texts.every((t) => t.trim() === '')) break;
    const outcomes = await Promise.all(
      round.map(({ checkers }) => Promise.all(checkers.map((c) => ask(c, texts, where, checking, calls)))),
    );
    for (const [i, { g, checkers }] of round.entries()) {
      const found: Found[] = [];
      for (const [j, outcome] of (outcomes[i] ?? []).entries()) {
        const checker = checkers[j];
        if (!checker) continue;
        if ('failed' in outcome) {
          onFailed(g.name, checker.name, outcome.failed);
          if (checker.onFailure === 'Block')
            unavailable ??= { unavailable: { guardrail: g.name, category: checker.name }, why: outcome.failed };
          continue;
        }
        // What the caller was already shown cannot be cut out: what was found in it is a finding of the whole.
        const whole = opts.shown
          ? [...new Set([...outcome.whole, ...outcome.found.map((f) => f.category)])]
          : outcome.whole;
        const blocked = actOnWhole(g, whole, where, checking);
        if (blocked) return { blocked };
        if (!opts.shown) found.push(...outcome.found);
      }
      if (found.length === 0) continue;
      const checked = checkAll(map, out, [{ ...g, detect: occurrences(found) }], where, checking);
      if ('blocked' in checked) return checked;
      out = checked.body;
    }
  }
  return unavailable ?? { body: out };
}

/** One checker's verdict; one that would send a request kept in the cluster out of it is not asked. */
function ask(
  checker: Checker,
  texts: readonly string[],
  where: FindingPlace,
  checking: Checking,
  calls: GuardrailCalls,
): Promise<Outcome> {
  if (checker.leaves && where === 'request' && checking.inCluster)
    return Promise.resolve({ failed: 'not asked: the request stays in the cluster' });
  return checker.check(texts, where, calls);
}

/** A verdict's categories of the whole text, counted and acted on: the first that refuses it. */
function actOnWhole(
  g: CompiledGuardrail,
  categories: readonly string[],
  where: FindingPlace,
  checking: Checking,
): Cause | undefined {
  for (const category of categories) {
    let action = g.actionOf(category);
    if (action === 'RouteInCluster' && where !== 'request') action = 'Log';
    checking.findings.add(g.name, category, action, where);
    const cause = { guardrail: g.name, category };
    if (action === 'RouteInCluster') checking.inCluster ??= cause;
    else if (action !== 'Log') return cause;
  }
  return undefined;
}
