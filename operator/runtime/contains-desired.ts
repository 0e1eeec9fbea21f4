/**
 * The comparison every applier here makes before it writes: what it would apply is already there
 * (the API server adds defaults and other managers' fields, so equality would never hold).
 */

/** Whether every field of `desired` is present with the same value in `actual`. */
export function containsDesired(actual: unknown, desired: unknown): boolean {
  if (desired === null || typeof desired !== 'object') return actual === desired;
  if (Array.isArray(desired)) {
    return (
      Array.isArray(actual) &&
      actual.length === desired.length &&
      desired.every((d, i) => containsDesired(actual[i], d))
    );
  }
  if (actual === null || typeof actual !== 'object' || Array.isArray(actual)) return false;
  const a = actual as Record<string, unknown>;
  return Object.entries(desired).every(([k, v]) =>
    v === undefined ? true : k === 'ownerReferences' ? containsEach(a[k], v) : containsDesired(a[k], v),
  );
}

/**
 * Owner references are a list keyed by uid that others share: a previous owner of the same name
 * (deleted and created again) stays listed until garbage collection drops it. Ours being there
 * is what counts; demanding the exact list would re-apply on every reconcile meanwhile.
 */
function containsEach(actual: unknown, desired: unknown): boolean {
  if (!Array.isArray(actual) || !Array.isArray(desired)) return containsDesired(actual, desired);
  return desired.every((d) => actual.some((x) => containsDesired(x, d)));
}
