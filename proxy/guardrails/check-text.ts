import type { GuardrailAction } from '../../crds/guardrail.js';
import type { FindingPlace, Findings } from './findings.js';
import type { CompiledGuardrail } from './guardrail-set.js';
import type { MapText } from './request-texts.js';
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

/**
 * Where a text stands. `before`: what went out just before it (a stream's released text), read
 * for context (an AWS key beside the words that name it) but not changed again. `json`: the text
 * is JSON (a tool call's arguments): a placeholder outside a string is written as one, so the
 * arguments stay JSON; `inString`: the JSON text begins inside a string (a stream's next piece).
 */
export interface TextContext {
  before?: string;
  json?: boolean;
  inString?: boolean;
}

export function checkText(
  guardrails: readonly CompiledGuardrail[],
  text: string,
  where: FindingPlace,
  checking: Checking,
  context: TextContext = {},
): Checked {
  let out = text;
  const before = context.before ?? '';
  for (const g of guardrails) {
    const spans = before === '' ? g.detect(out) : shifted(g.detect(before + out), before.length);
    if (spans.length === 0) continue;
    const edits: { span: Span; action: GuardrailAction }[] = [];
    for (const span of spans) {
      let action = g.actionOf(span.category);
      // Only a model request can be kept in the cluster: elsewhere it is only recorded.
      if (action === 'RouteInCluster' && where !== 'request') action = 'Log';
      checking.findings.add(g.name, span.category, action, where);
      if (action === 'Block') return { blocked: { guardrail: g.name, category: span.category } };
      if (action === 'RouteInCluster') checking.inCluster ??= { guardrail: g.name, category: span.category };
      if (action === 'Redact' || action === 'Mask') edits.push({ span, action });
    }
    if (edits.length) out = edited(out, edits, context.json ? (context.inString ?? false) : undefined);
  }
  return { text: out };
}

/**
 * Every text `map` visits in a body (a dialect's request or answer texts, a tool call's strings)
 * through checkText: the body with what the guardrails changed, or the first Block (the texts
 * after it are left as they are: nothing goes out).
 */
export function checkAll<B>(
  map: (body: B, f: MapText) => B,
  body: B,
  guardrails: readonly CompiledGuardrail[],
  where: FindingPlace,
  checking: Checking,
): { body: B } | { blocked: Cause } {
  let blocked: Cause | undefined;
  const out = map(body, (text, json) => {
    if (blocked) return text;
    const checked = checkText(guardrails, text, where, checking, { json: json ?? false });
    if ('blocked' in checked) {
      blocked = checked.blocked;
      return text;
    }
    return checked.text;
  });
  return blocked ? { blocked } : { body: out };
}

/** Spans of `before + text` as spans of `text`: those wholly in `before` dropped, one that began there cut to its part here. */
function shifted(spans: Span[], offset: number): Span[] {
  return spans
    .filter((s) => s.end > offset)
    .map((s) => ({ ...s, start: Math.max(0, s.start - offset), end: s.end - offset }));
}

/** The text with each edit made; in JSON (`inString` given: the state at its start), one outside a string is quoted. */
function edited(text: string, edits: readonly { span: Span; action: GuardrailAction }[], inString?: boolean): string {
  let out = '';
  let at = 0;
  for (const { span, action } of edits) {
    const found = text.slice(span.start, span.end);
    const put = action === 'Redact' ? placeholder(span.category) : masked(found);
    const bare = inString !== undefined && !inJsonString(text, span.start, inString);
    out += text.slice(at, span.start) + (bare ? JSON.stringify(put) : put);
    at = span.end;
  }
  return out + text.slice(at);
}

/** Whether position `pos` of JSON text lies inside a string, the text beginning inside one or not. */
export function inJsonString(text: string, pos: number, startIn: boolean): boolean {
  let inside = startIn;
  for (let i = 0; i < pos && i < text.length; i++) {
    const c = text[i];
    if (inside && c === '\\') i++;
    else if (c === '"') inside = !inside;
  }
  return inside;
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
