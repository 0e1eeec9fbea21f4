import type { IdentityProvider } from '../../crds/identity-provider.js';
import type { Condition } from '../../crds/meta.js';

/**
 * The Ready condition of an IdentityProvider, from what a check found: pure, so that every way it
 * can be unready has its reason and its fix in one table.
 */

/** What checking the issuer found: its signing keys' count, or where it failed. */
export type IssuerCheck = { keys: number } | { failed: 'Discovery' | 'Keys'; error: string };

/** An issuer's last reading, kept so that a resync or an unrelated event does not fetch it again. */
export interface LastCheck {
  generation: number;
  at: number;
  check: IssuerCheck;
}

/** How often an issuer is read again: it can fail, or turn its keys, without any object changing. */
export const RECHECK_MS = 600_000;
/** A failed reading sooner: the issuer may be starting, or out of reach for a moment. */
export const FAILED_RECHECK_MS = 30_000;

/** Milliseconds until the issuer is read again: 0 when never read, its spec changed, or it is time. */
export function recheckIn(last: LastCheck | undefined, generation: number, now: number): number {
  if (!last || last.generation !== generation) return 0;
  const every = 'failed' in last.check ? FAILED_RECHECK_MS : RECHECK_MS;
  return Math.max(0, last.at + every - now);
}

/** The ApiKeys its profiles and profileClaim name that do not exist. */
export function missingProfiles(ip: IdentityProvider, apiKeys: ReadonlySet<string>): string[] {
  const named = [...(ip.spec.profiles ?? []).map((p) => p.apiKey), ...(ip.spec.profileClaim?.allowed ?? [])];
  return [...new Set(named.filter((n) => !apiKeys.has(n)))].sort();
}

export function readyCondition(
  ip: IdentityProvider,
  check: IssuerCheck,
  missing: string[],
  generation: number,
): Omit<Condition, 'lastTransitionTime'> {
  const where = ip.spec.kubernetes ? "the API server's" : `${ip.spec.issuer}'s`;
  const base = { type: 'Ready', observedGeneration: generation };
  if ('failed' in check) {
    return {
      ...base,
      status: 'False',
      reason: check.failed === 'Discovery' ? 'DiscoveryFailed' : 'KeysUnreadable',
      message:
        check.failed === 'Discovery'
          ? `${where} discovery document could not be read (${check.error}); tokens of this issuer are refused until it can`
          : `${where} signing keys could not be read (${check.error}); only keys read before keep working`,
    };
  }
  if (check.keys === 0) {
    return { ...base, status: 'False', reason: 'NoSigningKeys', message: `${where} key set holds no key` };
  }
  if (missing.length > 0) {
    return {
      ...base,
      status: 'False',
      reason: 'ApiKeyNotFound',
      message: `no ApiKey ${missing.join(', ')} in this namespace: tokens mapped to it are refused with 403 profile_not_found`,
    };
  }
  return {
    ...base,
    status: 'True',
    reason: 'KeysRead',
    message: `${check.keys} signing key${check.keys === 1 ? '' : 's'} read; tokens are checked against them`,
  };
}
