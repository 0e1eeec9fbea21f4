import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { exportJWK, exportSPKI, generateKeyPair, type JWK, SignJWT } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ApiKey } from '../../crds/api-key.js';
import { getJson } from '../../crds/identity/get-json.js';
import type { IdentityProvider, IdentityProviderSpec } from '../../crds/identity-provider.js';
import { ApiKeys, authenticate, type Caller, keyPolicy } from '../access/auth.js';
import { ProxyError } from '../endpoints/errors.js';
import { Identities } from './identities.js';

/**
 * Tokens of an OpenID provider served on loopback (its discovery document and JWKS, the keys
 * swapped or the server stopped on demand), checked as a request's credentials: what a caller
 * gets for each, and the check named when refused.
 */

type Signer = Awaited<ReturnType<typeof generateKeyPair>>;
const AUD = 'platform-ai-optimizer';

let server: Server;
let issuer: string;
let published: JWK[] = [];
let served = true;
let first: Signer;
let rotated: Signer;

async function publicJwk(pair: Signer, kid: string): Promise<JWK> {
  return { ...(await exportJWK(pair.publicKey)), kid, alg: 'RS256', use: 'sig' };
}

beforeAll(async () => {
  first = await generateKeyPair('RS256', { extractable: true });
  rotated = await generateKeyPair('RS256', { extractable: true });
  published = [await publicJwk(first, 'k1')];
  server = createServer((req, res) => {
    if (!served) return res.socket?.destroy();
    const body =
      req.url === '/.well-known/openid-configuration'
        ? { issuer, jwks_uri: `${issuer}/jwks` }
        : req.url === '/jwks'
          ? { keys: published }
          : undefined;
    res.writeHead(body ? 200 : 404, { 'content-type': 'application/json' }).end(JSON.stringify(body ?? {}));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  issuer = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

const apiKey = (name: string, team: string, extra: Partial<ApiKey['spec']> = {}): ApiKey => ({
  apiVersion: 'ai.platform/v1beta1',
  kind: 'ApiKey',
  metadata: { name, namespace: 'platform-agent' },
  spec: { team, role: 'User', rotation: 0, ...extra },
});

function provider(spec: Partial<IdentityProviderSpec> = {}): IdentityProvider {
  return {
    apiVersion: 'ai.platform/v1beta1',
    kind: 'IdentityProvider',
    metadata: { name: 'sso', namespace: 'platform-agent' },
    spec: {
      issuer,
      audiences: [AUD],
      clockSkewSeconds: 5,
      profiles: [
        { apiKey: 'team-ml', claim: { name: 'groups', values: ['ml'] } },
        { apiKey: 'team-web', serviceAccount: { namespace: 'web' } },
      ],
      ...spec,
    },
  };
}

function keysWith(ip: IdentityProvider = provider(), now?: () => number): ApiKeys {
  const keys = ApiKeys.fromKeys(['sk-static']);
  const profiles = [
    apiKey('team-ml', 'ml', { models: ['small'] }),
    apiKey('team-web', 'web'),
    apiKey('team-ops', 'ops'),
  ];
  keys.setManaged([], profiles.map(keyPolicy));
  keys.identities = new Identities({ getJson, ...(now ? { now } : {}) });
  keys.identities.set([ip]);
  return keys;
}

const nowS = () => Math.floor(Date.now() / 1000);

async function token(
  claims: Record<string, unknown> = {},
  opts: { signer?: Signer; kid?: string; iss?: string; aud?: string; exp?: number; nbf?: number } = {},
): Promise<string> {
  const jwt = new SignJWT({ sub: 'alice', groups: ['ml'], ...claims })
    .setProtectedHeader({ alg: 'RS256', kid: opts.kid ?? 'k1' })
    .setIssuer(opts.iss ?? issuer)
    .setAudience(opts.aud ?? AUD)
    .setIssuedAt()
    .setExpirationTime(opts.exp ?? nowS() + 300);
  if (opts.nbf !== undefined) jwt.setNotBefore(opts.nbf);
  return jwt.sign((opts.signer ?? first).privateKey);
}

/** A token signed as it is written, no claim set by the builder (claims of any type). */
const unchecked = (claims: Record<string, unknown>) =>
  new SignJWT({ sub: 'alice', groups: ['ml'], iss: issuer, aud: AUD, ...claims })
    .setProtectedHeader({ alg: 'RS256', kid: 'k1' })
    .sign(first.privateKey);

const b64 = (v: unknown) => Buffer.from(JSON.stringify(v)).toString('base64url');

async function refusedAs(keys: ApiKeys, credential: string): Promise<[number, string]> {
  const got = await authenticate(keys, { authorization: `Bearer ${credential}` });
  if (!(got instanceof ProxyError)) throw new Error(`taken as ${JSON.stringify(got)}`);
  // Neither the claims nor the signature (the header is the same for every token of a key).
  for (const part of credential.split('.').slice(1))
    if (part.length >= 16) expect(got.message).not.toContain(part.slice(0, 40));
  return [got.status, got.code];
}

describe('a token in place of a key', () => {
  it("gets its profile's grants, named by a stable hash of issuer and subject", async () => {
    const keys = keysWith();
    const a = (await authenticate(keys, { authorization: `Bearer ${await token()}` })) as Caller;
    expect(a).not.toBeInstanceOf(ProxyError);
    expect(a.policy.name).toBe('team-ml');
    expect(a.policy.team).toBe('ml');
    expect([...(a.policy.models ?? [])]).toEqual(['small']);
    expect(a.policy.tags).toEqual([{ key: 'team', value: 'ml' }]);
    expect(a.keyHashPrefix).toMatch(/^[0-9a-f]{12}$/);
    // Another token of the same subject: the same caller in records; another subject: another.
    const again = (await authenticate(keys, { apiKey: await token({ jti: 'x' }) })) as Caller;
    expect(again.keyHashPrefix).toBe(a.keyHashPrefix);
    const bob = (await authenticate(keys, { authorization: `Bearer ${await token({ sub: 'bob' })}` })) as Caller;
    expect(bob.keyHashPrefix).not.toBe(a.keyHashPrefix);
    // Keys work beside tokens.
    expect(await authenticate(keys, { apiKey: 'sk-static' })).not.toBeInstanceOf(ProxyError);
  });

  it('carries the subject as the tag user:<name> only where the provider says so', async () => {
    const keys = keysWith(provider({ subject: { claim: 'email', inRecords: 'Name' } }));
    const a = (await authenticate(keys, {
      authorization: `Bearer ${await token({ email: 'alice@example.com' })}`,
    })) as Caller;
    expect(a.policy.tags).toContainEqual({ key: 'user', value: 'alice@example.com' });
    // No email claim: the subject claim is missing, which is a refusal, not a record without a name.
    expect(await refusedAs(keys, await token())).toEqual([401, 'invalid_claims']);
  });

  it('maps ServiceAccount subjects and a profile claim; no match is 403', async () => {
    const keys = keysWith(provider({ profileClaim: { name: 'pao_profile', allowed: ['team-ops'] } }));
    const sa = (await authenticate(keys, {
      authorization: `Bearer ${await token({ sub: 'system:serviceaccount:web:frontend', groups: [] })}`,
    })) as Caller;
    expect(sa.policy.name).toBe('team-web');
    const named = (await authenticate(keys, {
      authorization: `Bearer ${await token({ groups: 'none', pao_profile: 'team-ops' })}`,
    })) as Caller;
    expect(named.policy.name).toBe('team-ops');
    expect(await refusedAs(keys, await token({ groups: [], pao_profile: 'team-ml' }))).toEqual([403, 'no_profile']);
    // A claim of the wrong type satisfies nothing.
    expect(await refusedAs(keys, await token({ groups: 7 }))).toEqual([403, 'no_profile']);
    expect(await refusedAs(keys, await token({ sub: 'system:serviceaccount:other:x', groups: [] }))).toEqual([
      403,
      'no_profile',
    ]);
  });

  it('refuses each bad token with the check that failed', async () => {
    const keys = keysWith();
    const good = await token();
    const [h, p] = good.split('.');
    const cases: Array<[string, string, number]> = [
      ['expired', await token({}, { exp: nowS() - 60 }), 401],
      ['not yet valid', await token({}, { nbf: nowS() + 600 }), 401],
      ['wrong audience', await token({}, { aud: 'someone-else' }), 401],
      ['unknown issuer', await token({}, { iss: 'https://elsewhere.example' }), 401],
      [
        'forged',
        `${h}.${b64({ ...JSON.parse(Buffer.from(p ?? '', 'base64url').toString()), groups: ['ml', 'admins'] })}.${good.split('.')[2]}`,
        401,
      ],
      ['alg none', `${b64({ alg: 'none' })}.${p}.`, 401],
      [
        'HMAC with the public key',
        await new SignJWT({ sub: 'alice', groups: ['ml'] })
          .setProtectedHeader({ alg: 'HS256', kid: 'k1' })
          .setIssuer(issuer)
          .setAudience(AUD)
          .setExpirationTime(nowS() + 300)
          .sign(new TextEncoder().encode(await exportSPKI(first.publicKey))),
        401,
      ],
      ['exp of the wrong type', await unchecked({ exp: 'tomorrow' }), 401],
      ['sub of the wrong type', await token({ sub: { id: 1 } }), 401],
      ['huge', `${h}.${'A'.repeat(20_000)}.x`, 401],
    ];
    const codes: Record<string, string> = {};
    for (const [what, credential, status] of cases) {
      const [got, code] = await refusedAs(keys, credential);
      expect(got, what).toBe(status);
      codes[what] = code;
    }
    expect(codes).toEqual({
      expired: 'token_expired',
      'not yet valid': 'token_not_yet_valid',
      'wrong audience': 'wrong_audience',
      'unknown issuer': 'unknown_issuer',
      forged: 'invalid_signature',
      'alg none': 'unsupported_algorithm',
      'HMAC with the public key': 'unsupported_algorithm',
      'exp of the wrong type': 'invalid_claims',
      'sub of the wrong type': 'invalid_claims',
      huge: 'token_too_large',
    });
  });

  it('takes a rotated key, keeps known keys through an outage, and fails closed on unknown ones', async () => {
    let now = Date.now();
    const keys = keysWith(provider(), () => now);
    expect(await authenticate(keys, { authorization: `Bearer ${await token()}` })).not.toBeInstanceOf(ProxyError);
    published = [await publicJwk(first, 'k1'), await publicJwk(rotated, 'k2')];
    // An unknown kid fetches the keys again, at most once per 10 s (a flood of made-up kids costs one fetch).
    now += 11_000;
    const newKid = await token({ sub: 'carol' }, { signer: rotated, kid: 'k2' });
    expect(await authenticate(keys, { authorization: `Bearer ${newKid}` })).not.toBeInstanceOf(ProxyError);
    served = false;
    try {
      // An unknown kid while the issuer is down: the fetch fails, the token is refused...
      now += 11_000;
      const stranger = await generateKeyPair('RS256');
      expect(await refusedAs(keys, await token({ sub: 'eve' }, { signer: stranger, kid: 'k9' }))).toEqual([
        401,
        'unknown_signing_key',
      ]);
      // ...and the keys already known still verify new tokens.
      expect(await authenticate(keys, { authorization: `Bearer ${await token({ sub: 'dave' })}` })).not.toBeInstanceOf(
        ProxyError,
      );
      // A replica that never read the keys refuses every token until it can.
      expect(await refusedAs(keysWith(), await token({ sub: 'frank' }))).toEqual([401, 'issuer_unreachable']);
    } finally {
      served = true;
      published = [await publicJwk(first, 'k1')];
    }
  });

  it('verifies tokens that arrive together while the keys are first fetched', async () => {
    const keys = keysWith();
    const tokens = await Promise.all(['a', 'b', 'c', 'd', 'e'].map((sub) => token({ sub })));
    const callers = await Promise.all(tokens.map((t) => authenticate(keys, { authorization: `Bearer ${t}` })));
    expect(callers.filter((c) => c instanceof ProxyError)).toEqual([]);
  });

  it('keeps a verified token until it expires, and no longer', async () => {
    let now = Date.now();
    const keys = keysWith(provider(), () => now);
    const short = await token({}, { exp: nowS() + 30 });
    expect(await authenticate(keys, { authorization: `Bearer ${short}` })).not.toBeInstanceOf(ProxyError);
    now += 60_000;
    expect(await refusedAs(keys, short)).toEqual([401, 'token_expired']);
  });

  it('is not taken without an IdentityProvider, and a profile that is gone is 403', async () => {
    const keys = keysWith();
    const t = await token();
    keys.identities?.set([]);
    expect(await refusedAs(keys, t)).toEqual([401, 'invalid_api_key']);
    keys.identities?.set([provider()]);
    keys.setManaged([], []);
    expect(await refusedAs(keys, t)).toEqual([403, 'profile_not_found']);
  });
});
