import type { Cause, Checking } from './check-text.js';
import { checkAll } from './check-text.js';
import type { Found, GuardrailCalls } from './checker.js';
import type { FindingPlace } from './findings.js';
import type { CompiledGuardrail } from './guardrail-set.js';
import { type MapText, textsOf } from './request-texts.js';
import { occurrences } from './spans.js';

/**
 * The checkers of a body's guardrails (their judges and services: checker.ts), asked together
 * about its texts (each within its own time), after the built-in detectors acted on them. Each
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
  const asking = guardrails.filter((g) => g.checkers.length > 0);
  if (asking.length === 0) return { body };
  const texts = textsOf(map, body);
  if (texts.every((t) => t.trim() === '')) return { body };
  const outcomes = await Promise.all(
    asking.map((g) => Promise.all(g.checkers.map((c) => c.check(texts, where, calls)))),
  );
  let out = body;
  let unavailable: { unavailable: Cause; why: string } | undefined;
  for (const [i, g] of asking.entries()) {
    const found: Found[] = [];
    for (const [j, outcome] of (outcomes[i] ?? []).entries()) {
      const checker = g.checkers[j];
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
  return unavailable ?? { body: out };
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
