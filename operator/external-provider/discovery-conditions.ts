import type { DiscoveredModel, ExternalProviderStatus } from '../../crds/external-provider.js';
import { type Condition, rfc3339 } from '../../crds/meta.js';

/**
 * The parts of an ExternalProvider's status every kind of provider writes alike, whichever
 * discovery ran (Bedrock's in external-provider-status.ts, the hosted providers' in
 * hosted-provider-status.ts): the conditions of a failed attempt, ModelsPriced, and the status
 * assembled from one attempt and the status before it.
 */

export type SetCondition = (type: string, status: Condition['status'], reason: string, message: string) => void;

/** A failed attempt: who failed (the credentials, or the listing after them) and why, not Ready. */
export function failedConditions(
  set: SetCondition,
  problem: { reason: string; credentials: boolean; message: string },
  accepted: string,
): void {
  if (problem.credentials) {
    set('CredentialsValid', 'False', problem.reason, problem.message);
    set('ModelsAvailable', 'Unknown', 'CredentialsInvalid', 'models cannot be listed without working credentials');
  } else {
    set('CredentialsValid', 'True', 'Authenticated', accepted);
    set('ModelsAvailable', 'Unknown', problem.reason, problem.message);
  }
  set('Ready', 'False', problem.reason, problem.message);
}

/** ModelsPriced: which selected models have no price, and where to add one (`fix`). */
export function pricedCondition(set: SetCondition, models: readonly DiscoveredModel[], fix: string): void {
  const unpriced = models.filter((m) => !m.priced).map((m) => m.id);
  if (unpriced.length > 0) {
    set(
      'ModelsPriced',
      'False',
      'UnpricedModels',
      `no price for ${unpriced.join(', ')}: their usage is recorded with its tokens at cost 0 and marked unpriced; ${fix}`,
    );
  } else if (models.length > 0) {
    set('ModelsPriced', 'True', 'Priced', 'every available selected model has a price');
  }
}

/** The status of one attempt; a failed one keeps the last successful discovery's time. */
export function discoveryStatus(
  prev: ExternalProviderStatus,
  s: Pick<ExternalProviderStatus, 'phase' | 'conditions' | 'availableModels' | 'models' | 'accessKeyLast4'> & {
    generation: number;
    ok: boolean;
    now: Date;
  },
): ExternalProviderStatus {
  const status: ExternalProviderStatus = { phase: s.phase, observedGeneration: s.generation, conditions: s.conditions };
  if (s.availableModels) status.availableModels = s.availableModels;
  if (s.models) status.models = s.models;
  if (s.accessKeyLast4) status.accessKeyLast4 = s.accessKeyLast4;
  if (s.ok) status.lastDiscoveryTime = rfc3339(s.now);
  else if (prev.lastDiscoveryTime) status.lastDiscoveryTime = prev.lastDiscoveryTime;
  return status;
}
