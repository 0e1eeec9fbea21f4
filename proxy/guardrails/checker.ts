import type { ProviderType } from '../../crds/external-provider.js';
import type { FindingPlace } from './findings.js';

/**
 * What asks others about a text: a model judge (judge.ts) or an external service
 * (services/), each a Checker of a guardrail. Unlike the built-in detectors they answer
 * asynchronously and may not answer at all; their verdicts are acted on by judging.ts.
 */

/** A string a checker found, acted on wherever it occurs in the texts. */
export interface Found {
  text: string;
  category: string;
}

export interface Verdict {
  /** Categories of the whole text (a jailbreak, violence): they cannot be cut out. */
  whole: string[];
  /** Strings to act on where they occur (a name, a card number). */
  found: Found[];
}

export type Outcome = Verdict | { failed: string };

/** What the gateway lends checkers: model calls through its routes, and service calls. */
export interface GuardrailCalls {
  /** One chat answer's text, by model name. */
  chat(
    model: string,
    messages: readonly { role: 'system' | 'user'; content: string }[],
    signal: AbortSignal,
  ): Promise<string>;
  /** Embeddings (unit length), by model name. */
  embed(model: string, texts: readonly string[], signal: AbortSignal): Promise<Float32Array[]>;
  /** A JSON POST to a registered provider's API (its base URL and credentials) or to a URL; the answer's JSON. */
  post(to: ServiceTarget, body: unknown, signal: AbortSignal): Promise<unknown>;
}

/**
 * Where a service call goes: a path under the base URL of an ExternalProvider of one of `types`
 * (in the gateway's namespace), with its credentials; or a URL of its own.
 */
export type ServiceTarget = { provider: string; types: readonly ProviderType[]; path: string } | { url: string };

export interface Checker {
  /** Its detector's name in the Guardrail's status: judge, service/<name>. */
  name: string;
  onFailure: 'Allow' | 'Block';
  /** A service of the company's own (a Presidio analyzer): asked first, and what it finds is redacted before the others are asked. */
  local: boolean;
  /** It sends the text out of the cluster (a provider's API): not asked about a request kept in the cluster. */
  leaves: boolean;
  check(texts: readonly string[], where: FindingPlace, calls: GuardrailCalls): Promise<Outcome>;
  /**
   * Starts, without waiting, what its first check would otherwise wait for (a Classifier's
   * examples' vectors, with its model's load): asked when its Guardrail is applied, so that the
   * first request is judged within its time rather than left to onFailure.
   */
  warm?(calls: GuardrailCalls): void;
}

/** A gateway that lends none: every judge and service fails (and its onFailure decides). */
export const NO_CALLS: GuardrailCalls = {
  chat: () => Promise.reject(new Error('no judge calls in this gateway')),
  embed: () => Promise.reject(new Error('no judge calls in this gateway')),
  post: () => Promise.reject(new Error('no service calls in this gateway')),
};

export const SAFE: Verdict = { whole: [], found: [] };

/** A category as spec.actions names them: CREDIT_DEBIT_CARD_NUMBER, self-harm/intent, Investment advice -> CreditDebitCardNumber, SelfHarmIntent, InvestmentAdvice. */
export function categoryOf(name: string): string {
  const words = name
    .replace(/([a-z0-9])([A-Z])/g, '$1 $2')
    .split(/[^A-Za-z0-9]+/)
    .filter(Boolean);
  const out = words.map((w) => (w[0] ?? '').toUpperCase() + w.slice(1).toLowerCase()).join('');
  return (/^[A-Z]/.test(out) ? out : `X${out}`).slice(0, 40);
}

/** Rejects once the signal aborts: raced with work that does not heed the signal, or that is not this caller's to stop. */
export const aborted = (signal: AbortSignal) =>
  new Promise<never>((_, reject) => {
    if (signal.aborted) reject(signal.reason);
    signal.addEventListener('abort', () => reject(signal.reason), { once: true });
  });

/** A run of `run` that gives up after `ms`: its failure, or that it had no answer in time. */
export async function within(ms: number, run: (signal: AbortSignal) => Promise<Verdict>): Promise<Outcome> {
  const signal = AbortSignal.timeout(ms);
  try {
    return await run(signal);
  } catch (err) {
    return { failed: signal.aborted ? `no answer within ${ms / 1000}s` : errorText(err) };
  }
}

const errorText = (err: unknown) => (err instanceof Error ? err.message : String(err)).slice(0, 200);
