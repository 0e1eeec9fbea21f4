import type { ApiKey, ApiKeyStatus, BudgetSpec, UsageStatus } from '../../crds/api-key.js';
import { periodEnd, periodNoun, periodStart } from '../../crds/budget-period.js';
import type { Condition } from '../../crds/meta.js';
import { setCondition } from '../runtime/conditions.js';

/**
 * What an ApiKey's status should say, from the object alone (pure, so the rules are tested as
 * a table): whether a key must be issued (none yet, or spec.rotation changed), the Ready,
 * Expired and BudgetExhausted conditions, and when to look again (at expiry). The proxies
 * write status.usage; it is carried over unchanged.
 */

const HOUR = 3_600_000;

export interface ApiKeyPlan {
  /** Generate a new key into the Secret before writing the status. */
  issue: boolean;
  /** The status to write once issued (digest and hint filled in by the caller when issuing). */
  status: ApiKeyStatus;
  requeueAfterMs?: number;
}

/** BudgetExhausted from the spend the proxies reported, counted only for the current period. */
export function budgetCondition(
  budget: BudgetSpec | undefined,
  usage: UsageStatus | undefined,
  now: Date,
  generation: number,
): Omit<Condition, 'lastTransitionTime'> {
  const current =
    budget && usage?.periodStart && Date.parse(usage.periodStart) === periodStart(budget.period, now).getTime();
  const spend = current ? (usage?.spendUsd ?? 0) : 0;
  if (!budget) {
    return {
      type: 'BudgetExhausted',
      status: 'False',
      reason: 'NoBudget',
      message: 'no budget',
      observedGeneration: generation,
    };
  }
  const exhausted = spend >= budget.usd;
  return {
    type: 'BudgetExhausted',
    status: exhausted ? 'True' : 'False',
    reason: exhausted ? 'BudgetExhausted' : 'WithinBudget',
    message: `${spend.toFixed(4)} of ${budget.usd} USD spent this ${periodNoun(budget.period)}${exhausted ? '; requests are refused with 429 insufficient_quota until the period resets' : ''}`,
    observedGeneration: generation,
  };
}

export function apiKeyPlan(ak: ApiKey, now: Date): ApiKeyPlan {
  const generation = ak.metadata.generation ?? 0;
  const old = ak.status ?? {};
  const rotation = ak.spec.rotation ?? 0;
  const issue = !old.digest || (old.rotation ?? 0) !== rotation;
  const expiresAt = ak.spec.expiresAt ? Date.parse(ak.spec.expiresAt) : undefined;
  const expired = expiresAt !== undefined && expiresAt <= now.getTime();

  let conditions = setCondition(
    old.conditions,
    expired
      ? {
          type: 'Expired',
          status: 'True',
          reason: 'Expired',
          message: `the key expired at ${ak.spec.expiresAt}; requests with it are refused with 401`,
          observedGeneration: generation,
        }
      : {
          type: 'Expired',
          status: 'False',
          reason: expiresAt === undefined ? 'NoExpiry' : 'NotExpired',
          message: expiresAt === undefined ? 'the key does not expire' : `the key expires at ${ak.spec.expiresAt}`,
          observedGeneration: generation,
        },
    now,
  );
  conditions = setCondition(conditions, budgetCondition(ak.spec.budget, old.usage, now, generation), now);
  conditions = setCondition(
    conditions,
    expired
      ? {
          type: 'Ready',
          status: 'False',
          reason: 'Expired',
          message: 'the key has expired: move spec.expiresAt and change spec.rotation to issue a new one',
          observedGeneration: generation,
        }
      : {
          type: 'Ready',
          status: 'True',
          reason: 'KeyIssued',
          message: `the key is in the Secret apikey-${ak.metadata.name} (data key "key")`,
          observedGeneration: generation,
        },
    now,
  );
  const status: ApiKeyStatus = {
    ...(old.digest ? { digest: old.digest } : {}),
    ...(old.keyHint ? { keyHint: old.keyHint } : {}),
    rotation: issue ? rotation : (old.rotation ?? 0),
    observedGeneration: generation,
    ...(old.usage ? { usage: old.usage } : {}),
    conditions,
  };
  return { issue, status, ...requeue(ak.spec.budget, expired ? undefined : expiresAt, now) };
}

/**
 * Look again when the key expires or the budget period resets, whichever comes first, and at
 * least hourly (a month is past what a timer can hold).
 */
export function requeue(
  budget: BudgetSpec | undefined,
  expiresAt: number | undefined,
  now: Date,
): { requeueAfterMs?: number } {
  const at = [expiresAt, budget ? periodEnd(budget.period, now).getTime() : undefined].filter(
    (t): t is number => t !== undefined,
  );
  return at.length > 0
    ? { requeueAfterMs: Math.max(1000, Math.min(...at, now.getTime() + HOUR) - now.getTime() + 1000) }
    : {};
}
