import type { Cause, Checking } from './check-text.js';
import type { FindingPlace } from './findings.js';
import type { CompiledGuardrail } from './guardrail-set.js';
import type { JudgeCalls } from './judge.js';

/**
 * The judges of a text's guardrails, asked together (each within its own time): an unsafe
 * verdict is a finding of the judge's category for the whole text, acted on by its action (Block,
 * and Redact or Mask, which cannot cut out a whole text, refuse it; RouteInCluster keeps a request
 * in the cluster; Log records it); a judge that could not answer refuses the text where it fails
 * closed, and is counted where it fails open.
 */

export type Judged = { ok: true } | { blocked: Cause } | { unavailable: Cause; why: string };

export async function judgeText(
  guardrails: readonly CompiledGuardrail[],
  text: string,
  where: FindingPlace,
  checking: Checking,
  calls: JudgeCalls,
  onFailed: (guardrail: string, why: string) => void,
): Promise<Judged> {
  const judged = guardrails.filter((g) => g.judge);
  if (judged.length === 0 || text.trim() === '') return { ok: true };
  const verdicts = await Promise.all(judged.map((g) => g.judge?.judge(text, calls)));
  let outcome: Judged = { ok: true };
  for (const [i, g] of judged.entries()) {
    const judge = g.judge;
    const verdict = verdicts[i];
    if (!judge || !verdict) continue;
    const cause = { guardrail: g.name, category: judge.category };
    if ('failed' in verdict) {
      onFailed(g.name, verdict.failed);
      if (judge.onFailure === 'Block' && 'ok' in outcome) outcome = { unavailable: cause, why: verdict.failed };
      continue;
    }
    if (!verdict.unsafe) continue;
    let action = g.actionOf(judge.category);
    if (action === 'RouteInCluster' && where !== 'request') action = 'Log';
    checking.findings.add(g.name, judge.category, action, where);
    if (action === 'RouteInCluster') checking.inCluster ??= cause;
    else if (action !== 'Log' && !('blocked' in outcome)) outcome = { blocked: cause };
  }
  return outcome;
}
