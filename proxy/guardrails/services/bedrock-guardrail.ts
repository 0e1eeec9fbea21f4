import { type GuardrailService, SERVICE_PROVIDER_TYPES } from '../../../crds/guardrail.js';
import { isRecord } from '../../../crds/is-record.js';
import { categoryOf, type Found, type Verdict } from '../checker.js';
import type { FindingPlace } from '../findings.js';
import type { AskOne } from './per-text.js';

/**
 * Bedrock's ApplyGuardrail (POST /guardrail/{id}/version/{version}/apply on bedrock-runtime,
 * signed with a Bedrock ExternalProvider's region and credentials; source INPUT for a request and
 * a tool's result, OUTPUT for an answer and a tool call's arguments) as a guardrail's service. What its assessments detected (botocore's
 * GuardrailAssessment): sensitive information is found where its match occurs (the PII entity's
 * type, CREDIT_DEBIT_CARD_NUMBER is CreditDebitCardNumber, or the regex's name); content filters,
 * denied topics, words and contextual grounding are findings of the whole text. Bedrock's own
 * actions (BLOCKED, ANONYMIZED) are not used: the Guardrail's decide.
 */

type BedrockSpec = NonNullable<GuardrailService['bedrockGuardrail']>;

/** What goes into a model is Bedrock's INPUT (its prompt-attack filter reads only that): a request, a tool's result. */
const INPUT_PLACES: ReadonlySet<FindingPlace> = new Set(['request', 'tool-result']);

export function bedrockGuardrail(spec: BedrockSpec): AskOne {
  const path = `/guardrail/${encodeURIComponent(spec.identifier)}/version/${encodeURIComponent(spec.version)}/apply`;
  return async (text, where, calls, signal) => {
    const answer = await calls.post(
      { provider: spec.provider, types: SERVICE_PROVIDER_TYPES.bedrockGuardrail, path },
      {
        source: INPUT_PLACES.has(where) ? 'INPUT' : 'OUTPUT',
        content: [{ text: { text } }],
        outputScope: 'INTERVENTIONS',
      },
      signal,
    );
    if (!isRecord(answer) || !Array.isArray(answer.assessments))
      throw new Error('the ApplyGuardrail answer has no assessments');
    const verdict: Verdict = { whole: [], found: [] };
    for (const a of answer.assessments) if (isRecord(a)) assessed(a, verdict);
    // An intervention by a policy read nowhere here (a newer one) is still one.
    if (answer.action === 'GUARDRAIL_INTERVENED' && verdict.whole.length === 0 && verdict.found.length === 0)
      verdict.whole.push('Intervened');
    verdict.whole = [...new Set(verdict.whole)];
    return verdict;
  };
}

/** Whether an assessment's entry counts: detected (a policy in detect mode acts NONE), or acted on. */
const detected = (e: Record<string, unknown>) => e.detected === true || (e.action !== undefined && e.action !== 'NONE');

/** The entries of a policy's list: policy.list[] that were detected. */
function entries(policy: unknown, list: string): Record<string, unknown>[] {
  if (!isRecord(policy)) return [];
  const items = policy[list];
  return Array.isArray(items) ? items.filter((e): e is Record<string, unknown> => isRecord(e) && detected(e)) : [];
}

function assessed(a: Record<string, unknown>, into: Verdict): void {
  const sensitive = a.sensitiveInformationPolicy;
  for (const e of entries(sensitive, 'piiEntities')) matched(e, String(e.type ?? 'Pii'), into);
  for (const e of entries(sensitive, 'regexes')) matched(e, String(e.name ?? 'Regex'), into);
  for (const e of entries(a.contentPolicy, 'filters')) into.whole.push(categoryOf(String(e.type ?? 'Content')));
  for (const e of entries(a.topicPolicy, 'topics')) into.whole.push(categoryOf(String(e.name ?? 'Topic')));
  if (entries(a.wordPolicy, 'customWords').length) into.whole.push('CustomWord');
  for (const e of entries(a.wordPolicy, 'managedWordLists')) into.whole.push(categoryOf(String(e.type ?? 'Word')));
  for (const e of entries(a.contextualGroundingPolicy, 'filters'))
    into.whole.push(categoryOf(String(e.type ?? 'Grounding')));
}

/** A sensitive-information entry: found where its match occurs; without a match, a finding of the whole text. */
function matched(e: Record<string, unknown>, name: string, into: Verdict): void {
  const category = categoryOf(name);
  if (typeof e.match === 'string' && e.match !== '') into.found.push({ text: e.match, category } satisfies Found);
  else into.whole.push(category);
}
