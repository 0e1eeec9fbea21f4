import type { GuardrailCalls } from './checker.js';
import type { GuardrailSet } from './guardrail-set.js';
import type { OnCheckFailed } from './judging.js';

/** What the doors that guard (the guard stage, MCP tool calls) are lent: the Guardrails, how their judges and services are called. */
export interface GuardDeps {
  guardrails?: GuardrailSet;
  /** How judges and services are called (proxy/guardrails/checker.ts); none: they fail. */
  judges?: GuardrailCalls;
  /** Told of a judge or service that could not answer. */
  onJudgeFailed?: OnCheckFailed;
}
