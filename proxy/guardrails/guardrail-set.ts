import type { Guardrail, GuardrailAction, GuardrailSelector } from '../../crds/guardrail.js';
import type { KeyPolicy } from '../access/auth.js';
import type { Tag } from '../endpoints/tags.js';
import type { Checker, GuardrailCalls } from './checker.js';
import { compileDetectors, type PatternProblem } from './detectors.js';
import { compileJudge } from './judge.js';
import { compileService } from './services/services.js';
import type { Detect } from './spans.js';

/**
 * The Guardrail resources as the gateway applies them: compiled once per change of the resources
 * (their patterns, their detectors), ordered, and selected per request by its key, team, tags and
 * model.
 */

export interface CompiledGuardrail {
  name: string;
  request: boolean;
  answer: boolean;
  detect: Detect;
  /** Its model judge and its external services (checker.ts), asked after the detectors acted. */
  checkers: Checker[];
  /** The action for a finding of this category. */
  actionOf(category: string): GuardrailAction;
  /** Characters of a streamed answer held back (spec.stream.lookBehindChars). */
  lookBehind: number;
  problems: PatternProblem[];
  matches(who: Selected): boolean;
}

/** What a guardrail's selector is matched against. */
export interface Selected {
  policy: Pick<KeyPolicy, 'name' | 'team'>;
  tags: readonly Tag[];
  /** The model as the request names it. */
  model: string;
}

const DEFAULT_LOOK_BEHIND = 256;

export function compileGuardrail(g: Guardrail): CompiledGuardrail {
  const { spec } = g;
  const { detect, problems } = compileDetectors(spec.detectors);
  const byCategory = new Map((spec.actions ?? []).map((a) => [a.category, a.action]));
  const fallback = spec.action ?? 'Redact';
  const appliesTo = new Set(spec.appliesTo ?? ['Request', 'Answer']);
  return {
    name: g.metadata.name ?? '',
    request: appliesTo.has('Request'),
    answer: appliesTo.has('Answer'),
    detect,
    checkers: [
      ...(spec.detectors.judge ? [compileJudge(spec.detectors.judge)] : []),
      ...(spec.detectors.services ?? []).flatMap((s) => compileService(s) ?? []),
    ],
    actionOf: (category) => byCategory.get(category) ?? fallback,
    lookBehind: spec.stream?.lookBehindChars ?? DEFAULT_LOOK_BEHIND,
    problems,
    matches: selects(spec.selector ?? {}),
  };
}

/** Every list the selector gives must hold the request's key, team, one of its tags, its model. */
function selects(s: GuardrailSelector): (who: Selected) => boolean {
  const keys = s.apiKeys?.length ? new Set(s.apiKeys) : undefined;
  const teams = s.teams?.length ? new Set(s.teams) : undefined;
  const tags = s.tags?.length ? new Set(s.tags) : undefined;
  const models = s.models?.length ? new Set(s.models) : undefined;
  return (who) =>
    (!keys || keys.has(who.policy.name)) &&
    (!teams || teams.has(who.policy.team)) &&
    (!tags || who.tags.some((t) => tags.has(`${t.key}:${t.value}`))) &&
    (!models || models.has(who.model));
}

/** The guardrails in force, in their order (spec.order, then name). */
export class GuardrailSet {
  private compiled: CompiledGuardrail[] = [];
  private bySpec = new Map<string, CompiledGuardrail>();
  private calls: GuardrailCalls | undefined;

  constructor(
    resources: readonly Guardrail[] = [],
    private readonly onProblem?: (guardrail: string, problem: PatternProblem) => void,
  ) {
    this.replace(resources);
  }

  replace(resources: readonly Guardrail[]): void {
    const ordered = [...resources].sort(
      (a, b) =>
        (a.spec.order ?? 100) - (b.spec.order ?? 100) || (a.metadata.name ?? '').localeCompare(b.metadata.name ?? ''),
    );
    // A Guardrail whose spec did not change keeps its compiled self (its services' remembered
    // verdicts): a status the operator writes is an event too.
    const before = this.bySpec;
    this.bySpec = new Map();
    this.compiled = ordered.map((g) => {
      const key = `${g.metadata.name ?? ''}\0${JSON.stringify(g.spec)}`;
      const compiled = before.get(key) ?? compileGuardrail(g);
      this.bySpec.set(key, compiled);
      return compiled;
    });
    for (const g of this.compiled) for (const p of g.problems) this.onProblem?.(g.name, p);
    this.warm();
  }

  /** Lends the judges' calls: from now on each Guardrail's judges are warmed as it is applied. */
  warmWith(calls: GuardrailCalls): void {
    this.calls = calls;
    this.warm();
  }

  /**
   * Warms the judges that are not warm yet (checker.ts); again when the models' routes changed,
   * since a judge's model may route only once its deployment or provider arrived.
   */
  warm(): void {
    const calls = this.calls;
    if (calls) for (const g of this.compiled) for (const c of g.checkers) c.warm?.(calls);
  }

  get size(): number {
    return this.compiled.length;
  }

  /** The guardrails that select this request, in order. */
  select(who: Selected): CompiledGuardrail[] {
    return this.compiled.length === 0 ? [] : this.compiled.filter((g) => g.matches(who));
  }
}
