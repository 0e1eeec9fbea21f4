import { ProxyError } from '../endpoints/errors.js';

/**
 * Why a bearer token was not taken, each the check that failed. Every one is a 401 the caller
 * fixes by getting another token (or a 403 for a valid token this gateway gives nothing to),
 * never one a retry fixes; none shows the token or its claims' values.
 */
const REFUSALS = {
  token_too_large: [401, 'the bearer token is larger than this gateway takes (8 KiB)'],
  malformed_token: [401, 'the bearer token is not a signed JWT this gateway can read'],
  unknown_issuer: [401, 'the token was issued by an issuer this gateway does not trust (no IdentityProvider names it)'],
  unsupported_algorithm: [401, "the token's signing algorithm is not one this gateway accepts (RSA, ECDSA or EdDSA)"],
  unknown_signing_key: [
    401,
    "the token was signed with a key its issuer does not publish (or the issuer's keys cannot be read now)",
  ],
  invalid_signature: [401, "the token's signature does not verify against its issuer's keys"],
  token_expired: [401, 'the token has expired; get a new one'],
  token_not_yet_valid: [401, 'the token is not valid yet (nbf or iat in the future)'],
  wrong_audience: [401, "the token's audience (aud) is not one this gateway accepts"],
  invalid_claims: [
    401,
    "the token's claims are missing or of the wrong type (exp, iat, nbf, sub, or the subject claim)",
  ],
  token_rejected: [401, 'the API server does not accept this ServiceAccount token (TokenReview)'],
  issuer_unreachable: [401, "the token's issuer cannot be reached to check it; retry later"],
  no_profile: [
    403,
    'the token is valid but this gateway gives its subject no grants (no profile of its IdentityProvider matches)',
  ],
  profile_not_found: [403, 'the token maps to an ApiKey profile that does not exist'],
} as const satisfies Record<string, readonly [401 | 403, string]>;

export type RefusalCode = keyof typeof REFUSALS;

/** Every code a token's refusal may carry (the troubleshooting page has a row for each). */
export const REFUSAL_CODES = Object.keys(REFUSALS) as RefusalCode[];

export function refusal(code: RefusalCode): ProxyError {
  const [status, message] = REFUSALS[code];
  return new ProxyError(status, status === 401 ? 'authentication_error' : 'permission_error', code, message);
}

/** A refusal code as a value a verifier returns instead of claims. */
export class Refused {
  constructor(readonly code: RefusalCode) {}
}
