import type { Condition } from '../../crds/meta.js';
import { type NameClaims, ownerKey } from '../../crds/model-names.js';
import { withOptionalCondition } from '../runtime/conditions.js';

/**
 * The AliasesAccepted condition of a ModelDeployment or ExternalProvider: whether every alias it
 * declares routes to it, from the same cluster-wide decision the proxy routes by
 * (crds/model-names.ts). A clash is a condition and an Event, never a silent winner. A resource
 * without aliases carries no such condition.
 */

const ALIASES_ACCEPTED = 'AliasesAccepted';

type Owner = {
  kind: string;
  metadata: { namespace?: string; name?: string; generation?: number };
  spec: { aliases?: readonly unknown[] };
  status?: { conditions?: Condition[] };
};

export function aliasCondition(o: Owner, claims: NameClaims): Omit<Condition, 'lastTransitionTime'> | undefined {
  const declared = o.spec.aliases?.length ?? 0;
  if (declared === 0) return undefined;
  const refused = claims.refused.get(ownerKey(o)) ?? [];
  const generation = o.metadata.generation ?? 0;
  if (refused.length === 0) {
    return {
      type: ALIASES_ACCEPTED,
      status: 'True',
      reason: 'AliasesAccepted',
      message: `all ${declared} aliases route here`,
      observedGeneration: generation,
    };
  }
  return {
    type: ALIASES_ACCEPTED,
    status: 'False',
    reason: 'AliasConflict',
    message: `${refused.length} of ${declared} aliases do not route here: ${refused.map((r) => r.message).join('; ')}; rename them or remove the other claim`,
    observedGeneration: generation,
  };
}

/** The conditions with AliasesAccepted set to `next`, or without it when `next` is undefined. */
export function withAliasCondition(
  conditions: Condition[] | undefined,
  next: Omit<Condition, 'lastTransitionTime'> | undefined,
  now: Date,
): Condition[] | undefined {
  return withOptionalCondition(conditions, ALIASES_ACCEPTED, next, now);
}

/** The Event to record when a resource's aliases start to clash. */
export function aliasConflictEvent(
  before: Condition[] | undefined,
  next: Omit<Condition, 'lastTransitionTime'> | undefined,
): { reason: string; message: string } | undefined {
  const was = before?.find((c) => c.type === ALIASES_ACCEPTED);
  if (next?.status !== 'False' || (was?.status === 'False' && was.message === next.message)) return undefined;
  return { reason: next.reason, message: next.message };
}
