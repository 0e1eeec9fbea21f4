import type { GuardrailAction } from '../../crds/guardrail.js';

/**
 * Where a finding was: in a model request (its prompt, system text, tool calls and results) or its
 * answer; in an MCP tool call's arguments or its result.
 */
export type FindingPlace = 'request' | 'answer' | 'tool-arguments' | 'tool-result';

/** One kind of finding of a request, counted: what its usage record, the report and the metric carry. Never the text. */
export interface Finding {
  guardrail: string;
  category: string;
  action: GuardrailAction;
  where: FindingPlace;
  count: number;
}

/**
 * A request's findings as its guardrails make them: the request's at once, a streamed answer's as
 * it streams, read when the request is accounted.
 */
export class Findings {
  private readonly counts = new Map<string, Finding>();

  add(guardrail: string, category: string, action: GuardrailAction, where: FindingPlace): void {
    const key = `${guardrail}\u0000${category}\u0000${action}\u0000${where}`;
    const had = this.counts.get(key);
    if (had) had.count += 1;
    else this.counts.set(key, { guardrail, category, action, where, count: 1 });
  }

  list(): Finding[] {
    return [...this.counts.values()].map((f) => ({ ...f }));
  }

  get empty(): boolean {
    return this.counts.size === 0;
  }
}
