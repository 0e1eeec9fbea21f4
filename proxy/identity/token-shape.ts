/**
 * Telling a JWT from an API key, before any cryptography: a compact JWS is three base64url parts,
 * the first a JSON object (so it starts `eyJ`). Keys never look like that (the operator's keys are
 * `pao-...`), and a keys-file key that does is still looked up as a key first.
 */

/** Larger tokens are refused unread: real access tokens stay under 4 KiB, ServiceAccount ones under 2. */
export const MAX_TOKEN_BYTES = 8192;

const COMPACT_JWS = /^eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*$/;

export const looksLikeJwt = (credential: string): boolean => COMPACT_JWS.test(credential);
