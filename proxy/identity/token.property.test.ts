import fc from 'fast-check';
import { exportJWK, generateKeyPair, SignJWT } from 'jose';
import { beforeAll, describe, expect, it } from 'vitest';
import type { IdentityProvider } from '../../crds/identity-provider.js';
import { ApiKeys, authenticate } from '../access/auth.js';
import { ProxyError } from '../endpoints/errors.js';
import { Identities } from './identities.js';

/**
 * Whatever a caller sends as a bearer token (random text, a JWT's parts with random headers and
 * claims of any type, a valid token with one character changed), the answer is a 401 or 403
 * ProxyError, never a throw, and never a caller unless the token is the one the issuer signed.
 */

const ISSUER = 'https://issuer.invalid';
let valid: string;
let keys: ApiKeys;

beforeAll(async () => {
  const pair = await generateKeyPair('ES256');
  const jwk = { ...(await exportJWK(pair.publicKey)), kid: 'k', alg: 'ES256' };
  keys = new ApiKeys();
  keys.setManaged([], [{ name: 'p', team: 't', role: 'User', tags: [] }]);
  keys.identities = new Identities({ getJson: async () => ({ keys: [jwk] }) });
  const ip: IdentityProvider = {
    apiVersion: 'ai.platform/v1beta1',
    kind: 'IdentityProvider',
    metadata: { name: 'i' },
    spec: {
      issuer: ISSUER,
      jwksUri: `${ISSUER}/jwks`,
      audiences: ['a'],
      profiles: [{ apiKey: 'p', claim: { name: 'g', values: ['x'] } }],
    },
  };
  keys.identities.set([ip]);
  valid = await new SignJWT({ sub: 's', g: 'x' })
    .setProtectedHeader({ alg: 'ES256', kid: 'k' })
    .setIssuer(ISSUER)
    .setAudience('a')
    .setExpirationTime('5m')
    .sign(pair.privateKey);
});

const b64 = (v: unknown) => Buffer.from(typeof v === 'string' ? v : JSON.stringify(v)).toString('base64url');
const BASE64URL = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';

async function refused(token: string): Promise<void> {
  const got = await authenticate(keys, { authorization: `Bearer ${token}` });
  expect(got).toBeInstanceOf(ProxyError);
  expect([401, 403]).toContain((got as ProxyError).status);
}

describe('the token parser', () => {
  it('takes the valid token', async () => {
    expect(await authenticate(keys, { authorization: `Bearer ${valid}` })).not.toBeInstanceOf(ProxyError);
  });

  it('refuses random text and random JWT parts', async () => {
    const claim = fc.oneof(
      fc.string(),
      fc.integer(),
      fc.double(),
      fc.boolean(),
      fc.constant(null),
      fc.array(fc.string()),
      fc.object(),
    );
    const header = fc.record(
      {
        alg: fc.oneof(fc.constantFrom('none', 'HS256', 'ES256', 'RS256', 'EdDSA'), claim),
        kid: fc.oneof(fc.constant('k'), claim),
        crit: fc.array(fc.string()),
      },
      { requiredKeys: [] },
    );
    const payload = fc.record(
      {
        iss: fc.oneof(fc.constant(ISSUER), claim),
        aud: fc.oneof(fc.constant('a'), claim),
        exp: claim,
        nbf: claim,
        sub: claim,
        g: claim,
      },
      { requiredKeys: [] },
    );
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(
          fc.string({ maxLength: 300 }).map((s) => `eyJ${s}`),
          fc
            .tuple(header, payload, fc.string({ maxLength: 100 }))
            .map(([h, p, sig]) => `${b64(h)}.${b64(p)}.${b64(sig)}`),
          fc.tuple(fc.json(), fc.json()).map(([h, p]) => `${b64(h)}.${b64(p)}.`),
        ),
        refused,
      ),
      { numRuns: 300 },
    );
  });

  it('refuses the valid token with any one character changed', async () => {
    await fc.assert(
      fc.asyncProperty(fc.nat(), fc.constantFrom(...BASE64URL), async (at, c) => {
        const i = at % valid.length;
        // A segment's last character may carry unused bits: changing those changes no byte.
        if (valid[i] === '.' || valid[i] === c || i === valid.length - 1 || valid[i + 1] === '.') return;
        await refused(`${valid.slice(0, i)}${c}${valid.slice(i + 1)}`);
      }),
      { numRuns: 300 },
    );
  });
});
