import type { JWTPayload } from 'jose';
import type { IdentityProfile, IdentityProviderSpec } from '../../crds/identity-provider.js';
import { Refused } from './refusals.js';

/**
 * Which ApiKey's grants a verified token gets, and whom it names: the first of the provider's
 * profiles whose conditions all hold, else the ApiKey its profileClaim names (one of those it
 * allows). Pure: claims in, a name out. A claim of the wrong type (a number where a string or a
 * list of strings belongs) satisfies no condition rather than failing the request.
 */

const SA_PREFIX = 'system:serviceaccount:';

export interface Identity {
  /** The ApiKey whose grants apply. */
  profile: string;
  /** The subject as the provider's subject claim gives it (the tag user:<subject>). */
  subject: string;
  /** The token's sub: with the issuer, who the caller is (claims such as email can change hands). */
  sub: string;
}

/** A ServiceAccount's namespace and name from a token's subject (system:serviceaccount:<ns>:<name>). */
function serviceAccountOf(subject: string): { namespace: string; name: string } | undefined {
  if (!subject.startsWith(SA_PREFIX)) return undefined;
  const [namespace, name, ...rest] = subject.slice(SA_PREFIX.length).split(':');
  return namespace && name && rest.length === 0 ? { namespace, name } : undefined;
}

/** A claim's values as strings: a string, or the strings of a list; nothing for any other type. */
function claimValues(claims: JWTPayload, name: string): string[] {
  const value = Object.hasOwn(claims, name) ? claims[name] : undefined;
  if (typeof value === 'string') return [value];
  if (Array.isArray(value)) return value.filter((v): v is string => typeof v === 'string');
  return [];
}

function holds(rule: IdentityProfile, claims: JWTPayload, subject: string): boolean {
  if (rule.claim) {
    const values = claimValues(claims, rule.claim.name);
    if (!rule.claim.values.some((v) => values.includes(v))) return false;
  }
  if (rule.serviceAccount) {
    const sa = serviceAccountOf(subject);
    if (!sa || sa.namespace !== rule.serviceAccount.namespace) return false;
    if (rule.serviceAccount.names && !rule.serviceAccount.names.includes(sa.name)) return false;
  }
  return true;
}

/**
 * The identity of verified claims under a provider's rules. ServiceAccount conditions read the
 * token's sub (what the API server signs), whatever claim names the subject in records.
 */
export function identityOf(spec: IdentityProviderSpec, claims: JWTPayload): Identity | Refused {
  const sub = claims.sub;
  const named = spec.subject?.claim && spec.subject.claim !== 'sub' ? claims[spec.subject.claim] : sub;
  if (typeof sub !== 'string' || sub === '' || typeof named !== 'string' || named === '') {
    return new Refused('invalid_claims');
  }
  const rule = spec.profiles?.find((r) => holds(r, claims, sub));
  if (rule) return { profile: rule.apiKey, subject: named, sub };
  const claim = spec.profileClaim;
  if (claim) {
    const [value, ...more] = claimValues(claims, claim.name);
    if (value !== undefined && more.length === 0 && claim.allowed.includes(value))
      return { profile: value, subject: named, sub };
  }
  return new Refused('no_profile');
}
