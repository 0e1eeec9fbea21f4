import { describe, expect, it } from 'vitest';
import type { IdentityProvider } from '../../crds/identity-provider.js';
import { missingProfiles, readyCondition } from './identity-provider-status.js';

const ip = (spec: Partial<IdentityProvider['spec']>): IdentityProvider => ({
  apiVersion: 'ai.platform/v1beta1',
  kind: 'IdentityProvider',
  metadata: { name: 'sso', namespace: 'platform-agent', generation: 3 },
  spec: { issuer: 'https://sso.example', audiences: ['a'], ...spec },
});

describe('an IdentityProvider is Ready', () => {
  const sso = ip({
    profiles: [{ apiKey: 'team-ml', claim: { name: 'groups', values: ['ml'] } }],
    profileClaim: { name: 'p', allowed: ['team-ops', 'team-ml'] },
  });

  it('once its keys are read and every ApiKey it names exists', () => {
    expect(missingProfiles(sso, new Set(['team-ml']))).toEqual(['team-ops']);
    const ready = readyCondition(sso, { keys: 2 }, [], 3);
    expect(ready).toMatchObject({ status: 'True', reason: 'KeysRead', observedGeneration: 3 });
    expect(ready.message).toContain('2 signing keys');
  });

  it('not while its discovery, its keys or a profile is missing, each with its reason', () => {
    const reasons = [
      readyCondition(sso, { failed: 'Discovery', error: 'timeout' }, [], 3),
      readyCondition(sso, { failed: 'Keys', error: '404' }, [], 3),
      readyCondition(sso, { keys: 0 }, [], 3),
      readyCondition(sso, { keys: 1 }, ['team-ops'], 3),
    ].map((c) => [c.status, c.reason]);
    expect(reasons).toEqual([
      ['False', 'DiscoveryFailed'],
      ['False', 'KeysUnreadable'],
      ['False', 'NoSigningKeys'],
      ['False', 'ApiKeyNotFound'],
    ]);
    expect(
      readyCondition(ip({ issuer: undefined, kubernetes: {} }), { failed: 'Keys', error: 'x' }, [], 1).message,
    ).toContain("the API server's");
  });
});
