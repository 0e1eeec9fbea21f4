import { describe, expect, it } from 'vitest';
import type { IdentityProvider } from '../../crds/identity-provider.js';
import {
  FAILED_RECHECK_MS,
  missingProfiles,
  RECHECK_MS,
  readyCondition,
  recheckIn,
} from './identity-provider-status.js';

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

describe('recheckIn', () => {
  const read = { generation: 3, at: 1_000_000, check: { keys: 2 } };
  const failed = { generation: 3, at: 1_000_000, check: { failed: 'Discovery' as const, error: 'refused' } };

  it('reads an issuer never read, or whose spec changed, now', () => {
    expect(recheckIn(undefined, 3, 1_000_000)).toBe(0);
    expect(recheckIn(read, 4, 1_000_001)).toBe(0);
  });

  it('reuses a reading until its recheck is due: 10 minutes, 30 s after a failure', () => {
    expect(recheckIn(read, 3, 1_000_000 + 1_000)).toBe(RECHECK_MS - 1_000);
    expect(recheckIn(read, 3, 1_000_000 + RECHECK_MS)).toBe(0);
    expect(recheckIn(failed, 3, 1_000_000 + 1_000)).toBe(FAILED_RECHECK_MS - 1_000);
    expect(recheckIn(failed, 3, 1_000_000 + FAILED_RECHECK_MS + 5)).toBe(0);
    expect(FAILED_RECHECK_MS).toBeLessThan(RECHECK_MS);
  });
});
