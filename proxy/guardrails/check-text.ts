import type { GuardrailAction } from '../../crds/guardrail.js';
import type { FindingPlace, Findings } from './findings.js';
import type { CompiledGuardrail } from './guardrail-set.js';
import type { Span } from './spans.js';

/**
 * One text through a request's guardrails, in their order, each seeing what the one before it
 * left: each finding counted, and acted on by its category's action. Block stops at once;
 * Redact puts `<CATEGORY>` in its place; Mask keeps its last 4 characters; RouteInCluster (on a
 * request) marks the request for in-cluster models only and, like Log, leaves the text as it is.
 */

/** What a Block or a RouteInCluster names: the guardrail and the category, never the text. */
export interface Cause {
  guardrail: string;
  category: string;
}

/** What checking a request's texts has found so far: its findings, and a RouteInCluster's cause. */
export interface Checking {
  findings: Findings;
  inCluster?: Cause;
}

export type Checked = { text: string } | { blocked: Cause };

export function checkText(
  guardrails: readonly CompiledGuardrail[],
  text: string,
  where: FindingPlace,
  checking: Checking,
): Checked {
  let out = text;
  for (const g of guardrails) {
    const spans = g.detect(out);
    if (spans.length === 0) continue;
    const edits: { span: Span; action: GuardrailAction }[] = [];
    for (const span of spans) {
      let action = g.actionOf(span.category);
      // An answer is already where it is: keeping it in the cluster is only recording it.
      if (action === 'RouteInCluster' && where === 'answer') action = 'Log';
      checking.findings.add(g.name, span.category, action, where);
      if (action === 'Block') return { blocked: { guardrail: g.name, category: span.category } };
      if (action === 'RouteInCluster') checking.inCluster ??= { guardrail: g.name, category: span.category };
      if (action === 'Redact' || action === 'Mask') edits.push({ span, action });
    }
    if (edits.length) out = edited(out, edits);
  }
  return { text: out };
}

function edited(text: string, edits: readonly { span: Span; action: GuardrailAction }[]): string {
  let out = '';
  let at = 0;
  for (const { span, action } of edits) {
    const found = text.slice(span.start, span.end);
    out += text.slice(at, span.start) + (action === 'Redact' ? placeholder(span.category) : masked(found));
    at = span.end;
  }
  return out + text.slice(at);
}

/** Redact's typed placeholder: <PAYMENT_CARD> for PaymentCard, <EMPLOYEE_ID> for a pattern EmployeeId. */
export const placeholder = (category: string): string =>
  `<${category.replace(/([a-z0-9])([A-Z])/g, '$1_$2').toUpperCase()}>`;

/** Mask: every character but the last 4 (and the separators of a card or IBAN) made '*'. */
export function masked(found: string): string {
  const keep = 4;
  let seen = 0;
  let out = '';
  for (let i = found.length - 1; i >= 0; i--) {
    const c = found[i] ?? '';
    const separator = c === ' ' || c === '-' || c === '\n';
    out = (separator || seen < keep ? c : '*') + out;
    if (!separator) seen++;
  }
  return out;
}
