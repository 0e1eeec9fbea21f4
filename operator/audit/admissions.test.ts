import { describe, expect, it } from 'vitest';
import { fingerprint } from '../../crds/audit/object-change.js';
import type { KubeObject } from '../../crds/kube/kube-client.js';
import { Admissions, answerReview } from './admissions.js';

const obj = (usd: number): KubeObject =>
  ({ metadata: { name: 'ml', namespace: 'platform-agent', uid: 'u-1' }, spec: { budget: { usd } } }) as KubeObject;

const review = (request: Record<string, unknown>) => ({
  apiVersion: 'admission.k8s.io/v1',
  kind: 'AdmissionReview',
  request: { uid: 'r-1', kind: { kind: 'ApiKey' }, ...request },
});

describe('answerReview', () => {
  it('always allows, answering the request uid, and names who asked', () => {
    const out = answerReview(
      review({
        operation: 'UPDATE',
        object: obj(5),
        userInfo: { username: 'alice', groups: ['admins', 'system:authenticated'] },
      }),
    );
    if (typeof out === 'string') throw new Error(out);
    expect(out.answer).toEqual({
      apiVersion: 'admission.k8s.io/v1',
      kind: 'AdmissionReview',
      response: { uid: 'r-1', allowed: true },
    });
    expect(out.object).toBe('u-1');
    expect(out.admission?.actor).toEqual({ kind: 'user', name: 'alice', groups: ['admins'] });
    expect(out.admission?.fingerprint).toBe(fingerprint(obj(5)));
  });

  it('names a ServiceAccount by namespace/name, and forgets a dry run', () => {
    const sa = answerReview(
      review({ operation: 'DELETE', oldObject: obj(5), userInfo: { username: 'system:serviceaccount:ci:deployer' } }),
    );
    expect(typeof sa !== 'string' && sa.admission?.actor).toEqual({ kind: 'service-account', name: 'ci/deployer' });
    const dry = answerReview(
      review({ operation: 'CREATE', object: obj(5), dryRun: true, userInfo: { username: 'alice' } }),
    );
    expect(typeof dry !== 'string' && dry.admission).toBeUndefined();
    expect(answerReview({ request: {} })).toMatch(/not an AdmissionReview/);
  });
});

describe('Admissions', () => {
  it('matches a stored change to the admission of the same object, once', () => {
    const a = new Admissions();
    const at = Date.now();
    a.remember('u-1', {
      operation: 'UPDATE',
      actor: { kind: 'user', name: 'alice' },
      fingerprint: fingerprint(obj(5)),
      at,
    });
    a.remember('u-1', {
      operation: 'UPDATE',
      actor: { kind: 'user', name: 'bob' },
      fingerprint: fingerprint(obj(9)),
      at,
    });
    expect(a.take(['u-1'], false, fingerprint(obj(9)))?.actor.name).toBe('bob');
    expect(a.take(['u-1'], false, fingerprint(obj(9)))).toBeUndefined();
    expect(a.take(['u-1'], false, fingerprint(obj(5)))?.actor.name).toBe('alice');
    a.remember('u-1', { operation: 'DELETE', actor: { kind: 'user', name: 'carol' }, at });
    expect(a.take(['u-1'], true, 'any')?.actor.name).toBe('carol');
  });

  it('forgets admissions past their time', () => {
    const a = new Admissions(1_000);
    a.remember('u-1', { operation: 'DELETE', actor: { kind: 'user', name: 'old' }, at: Date.now() - 5_000 });
    a.remember('u-2', { operation: 'DELETE', actor: { kind: 'user', name: 'new' }, at: Date.now() });
    expect(a.take(['u-1'], true, '')).toBeUndefined();
  });
});
