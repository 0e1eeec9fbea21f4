import { describe, expect, it } from 'vitest';
import type { IdentityProvider } from '../../crds/identity-provider.js';
import type { Caller, KeyPolicy } from '../access/auth.js';
import { ProxyError } from '../endpoints/errors.js';
import { SessionSealer } from '../mcp/session.js';
import { Identities, identified, type Verified } from './identities.js';
import { type PageSignInDeps, SESSION_COOKIE, sessionCaller } from './page-sign-in.js';

/** The pages' session cookie: who it stands for while it lives, nothing once altered, expired or orphaned. */

const NOW = Date.parse('2026-11-29T12:00:00Z');
const sso: IdentityProvider = {
  apiVersion: 'ai.platform/v1beta1',
  kind: 'IdentityProvider',
  metadata: { name: 'sso' },
  spec: {
    issuer: 'https://sso.example.com',
    audiences: ['gw'],
    pageSignIn: { clientId: 'pages' },
    subject: { inRecords: 'Name' },
    profiles: [{ apiKey: 'team-ml', claim: { name: 'groups', values: ['ml'] } }],
  },
};
const teamMl: KeyPolicy = { name: 'team-ml', team: 'ml', role: 'User', tags: [{ key: 'team', value: 'ml' }] };

function setup() {
  const sealer = new SessionSealer(() => 'a shared secret of the replicas');
  const identities = new Identities({ getJson: async () => ({ keys: [] }), now: () => NOW });
  identities.set([sso]);
  const deps: PageSignInDeps = {
    identities: () => identities,
    sealer,
    profileOf: (name) => (name === 'team-ml' ? teamMl : undefined),
    now: () => NOW,
  };
  const version = identities.pageSignIn()?.version ?? '';
  const verified = identified(
    sso,
    version,
    'https://sso.example.com',
    { sub: 'alice', groups: ['ml'] },
    NOW + 60_000,
  ) as Verified;
  const cookie = (value: unknown) => `theme=dark; ${SESSION_COOKIE}=${sealer.sealValue(value)}`;
  return { sealer, identities, deps, verified, cookie };
}

const code = (got: Caller | ProxyError | undefined) => (got instanceof ProxyError ? [got.status, got.code] : got);

describe('a pages session cookie', () => {
  it("stands for its subject under the profile's current grants", () => {
    const { deps, verified, cookie } = setup();
    const caller = sessionCaller(cookie({ k: 'page', v: verified }), deps) as Caller;
    expect(caller.policy.team).toBe('ml');
    expect(caller.policy.tags).toContainEqual({ key: 'user', value: 'alice' });
    expect(caller.identity).toEqual({ provider: 'sso' });
    expect(sessionCaller('theme=dark', deps)).toBeUndefined();
  });

  it('is refused once altered, expired, of a removed provider, or sealed for something else', () => {
    const { deps, verified, cookie, identities, sealer } = setup();
    const good = cookie({ k: 'page', v: verified });
    const altered = good.replace(/.(.)$/, (_, last: string) => (last === 'A' ? 'BB' : 'AA'));
    expect(code(sessionCaller(altered, deps))).toEqual([401, 'session_expired']);
    expect(code(sessionCaller(cookie({ k: 'page', v: { ...verified, until: NOW - 1 } }), deps))).toEqual([
      401,
      'session_expired',
    ]);
    // A sign-in's flow state, or an MCP session id, sealed with the same key, is no session.
    expect(code(sessionCaller(cookie({ k: 'signin', v: verified }), deps))).toEqual([401, 'session_expired']);
    const mcp = sealer.seal({ key: 'abc', version: '2025-11-25', upstream: {}, began: NOW / 1000 });
    expect(code(sessionCaller(`${SESSION_COOKIE}=${mcp}`, deps))).toEqual([401, 'session_expired']);
    // Another replica's key (a secret not shared): not ours.
    const other = new SessionSealer(() => 'another secret').sealValue({ k: 'page', v: verified });
    expect(code(sessionCaller(`${SESSION_COOKIE}=${other}`, deps))).toEqual([401, 'session_expired']);
    // Its provider changed (a group rule removed) or gone: the session ends.
    identities.set([
      { ...sso, spec: { ...sso.spec, profiles: [], profileClaim: { name: 'p', allowed: ['team-ml'] } } },
    ]);
    expect(code(sessionCaller(good, deps))).toEqual([401, 'session_expired']);
    identities.set([]);
    expect(code(sessionCaller(good, deps))).toEqual([401, 'session_expired']);
  });

  it("is refused once its profile's ApiKey expired", () => {
    const { deps, verified, cookie } = setup();
    const expired = { ...deps, profileOf: () => ({ ...teamMl, expiresAt: NOW - 1 }) };
    expect(code(sessionCaller(cookie({ k: 'page', v: verified }), expired))).toEqual([401, 'expired_api_key']);
  });

  it('is 403 when its profile is gone', () => {
    const { deps, verified, cookie } = setup();
    const gone = { ...deps, profileOf: () => undefined };
    expect(code(sessionCaller(cookie({ k: 'page', v: verified }), gone))).toEqual([403, 'profile_not_found']);
  });
});
