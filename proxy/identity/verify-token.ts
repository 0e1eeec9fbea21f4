import { errors, type JWTPayload, type JWTVerifyGetKey, jwtVerify } from 'jose';
import { KeysUnavailable } from './key-set.js';
import { type RefusalCode, Refused } from './refusals.js';

/**
 * One token's signature and claims, against one issuer's keys: jose's jwtVerify, held to the
 * asymmetric algorithms (so an HMAC token signed with an issuer's public key, or `alg: none`, never
 * verifies), the issuer, one of the audiences, and exp required, with the clock skew allowed. Each
 * failure is the check that failed.
 */

/** RSA, RSA-PSS, ECDSA and EdDSA: what OpenID providers and the Kubernetes API server sign with. */
const ALGORITHMS = [
  'RS256',
  'RS384',
  'RS512',
  'PS256',
  'PS384',
  'PS512',
  'ES256',
  'ES384',
  'ES512',
  'EdDSA',
  'Ed25519',
];

export interface TokenChecks {
  issuer: string;
  audiences: string[];
  clockSkewSeconds: number;
  keys: JWTVerifyGetKey;
  now?: () => number;
}

export async function verifyToken(token: string, checks: TokenChecks): Promise<JWTPayload | Refused> {
  const options = {
    issuer: checks.issuer,
    audience: checks.audiences,
    algorithms: ALGORITHMS,
    clockTolerance: checks.clockSkewSeconds,
    requiredClaims: ['exp'],
    ...(checks.now ? { currentDate: new Date(checks.now()) } : {}),
  };
  try {
    return (await jwtVerify(token, checks.keys, options)).payload;
  } catch (err) {
    if (err instanceof errors.JWKSMultipleMatchingKeys) return verifyWithEach(token, err, options);
    return new Refused(refusalOf(err));
  }
}

/** A token without a kid that several keys could have signed: each key in turn (as jose's own remote set does). */
async function verifyWithEach(
  token: string,
  candidates: errors.JWKSMultipleMatchingKeys,
  options: Parameters<typeof jwtVerify>[2],
): Promise<JWTPayload | Refused> {
  let last: unknown = new errors.JWKSNoMatchingKey();
  for await (const key of candidates) {
    try {
      return (await jwtVerify(token, key, options)).payload;
    } catch (err) {
      last = err;
      if (!(err instanceof errors.JWSSignatureVerificationFailed)) break;
    }
  }
  return new Refused(refusalOf(last));
}

function refusalOf(err: unknown): RefusalCode {
  if (err instanceof KeysUnavailable) return 'issuer_unreachable';
  if (err instanceof errors.JWTExpired) return 'token_expired';
  if (err instanceof errors.JWTClaimValidationFailed) {
    if (err.claim === 'aud') return 'wrong_audience';
    if (err.claim === 'iss') return 'unknown_issuer';
    if ((err.claim === 'nbf' || err.claim === 'iat') && err.reason === 'check_failed') return 'token_not_yet_valid';
    return 'invalid_claims';
  }
  if (err instanceof errors.JOSEAlgNotAllowed || err instanceof errors.JOSENotSupported) return 'unsupported_algorithm';
  if (err instanceof errors.JWKSNoMatchingKey) return 'unknown_signing_key';
  if (err instanceof errors.JWSSignatureVerificationFailed) return 'invalid_signature';
  if (err instanceof errors.JWTInvalid) return 'invalid_claims';
  return 'malformed_token';
}
