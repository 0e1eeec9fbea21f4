import { describe, expect, it } from 'vitest';
import type { KubeObject } from '../kube/kube-client.js';
import { changeOf, fingerprint, REDACTED, redact } from './object-change.js';

const apiKey = (spec: Record<string, unknown>, meta: Record<string, unknown> = {}): KubeObject =>
  ({
    apiVersion: 'ai.platform/v1beta1',
    kind: 'ApiKey',
    metadata: { name: 'ml', namespace: 'platform-agent', uid: 'u-1', resourceVersion: '7', ...meta },
    spec,
  }) as KubeObject;

describe('redact', () => {
  it('hides Secret names, ARNs, account ids, tokens and env values; keeps limits named for tokens', () => {
    const out = redact({
      auth: { method: 'APIKey', secretRef: { name: 'openai-prod' } },
      bedrock: { roleArn: 'arn:aws:iam::123456789012:role/x', accountId: '123456789012' },
      rateLimit: { tokensPerMinute: 1000 },
      maxTokens: 10,
      bearerToken: 'abc',
      stdio: { env: [{ name: 'LOG', value: 'debug' }] },
      assumeRole: { externalId: 'platform-ai-optimizer' },
      url: 'https://bot:hunter2@mcp.example.com/mcp?token=abc',
      plain: 'https://mcp.example.com/mcp',
    });
    expect(out).toEqual({
      auth: { method: 'APIKey', secretRef: REDACTED },
      bedrock: { roleArn: REDACTED, accountId: REDACTED },
      rateLimit: { tokensPerMinute: 1000 },
      maxTokens: 10,
      bearerToken: REDACTED,
      stdio: { env: [{ name: 'LOG', value: REDACTED }] },
      assumeRole: { externalId: REDACTED },
      url: `https://${REDACTED}@mcp.example.com/mcp?${REDACTED}`,
      plain: 'https://mcp.example.com/mcp',
    });
  });
});

describe('changeOf', () => {
  it('records a spec change with the paths that changed, before and after', () => {
    const old = apiKey({ team: 'ml', budget: { usd: 10, period: 'Monthly' } });
    const now = apiKey({ team: 'ml', budget: { usd: 50, period: 'Monthly' } }, { resourceVersion: '8' });
    const c = changeOf('update', now, old);
    expect(c).toMatchObject({
      id: 'u-1@8',
      action: 'updated',
      changed: ['spec.budget.usd'],
      before: { spec: { budget: { usd: 10 } } },
      after: { spec: { budget: { usd: 50 } } },
    });
  });

  it('ignores what only the system changed: status, resourceVersion, managedFields, kubectl’s last-applied copy', () => {
    const old = apiKey({ team: 'ml' });
    const now = {
      ...apiKey(
        { team: 'ml' },
        {
          resourceVersion: '9',
          annotations: { 'kubectl.kubernetes.io/last-applied-configuration': '{}' },
          managedFields: [{ manager: 'kubectl', time: '2026-11-29T00:00:00Z' }],
        },
      ),
      status: { digest: 'sha256:00' },
    } as KubeObject;
    expect(changeOf('update', now, old)).toBeUndefined();
    expect(fingerprint(now)).toBe(fingerprint(old));
  });

  it('tells a changed Secret name apart without showing either name', () => {
    const old = apiKey({ auth: { secretRef: { name: 'a' } } });
    const now = apiKey({ auth: { secretRef: { name: 'b' } } }, { resourceVersion: '8' });
    const c = changeOf('update', now, old);
    expect(c?.changed).toEqual(['spec.auth.secretRef.name']);
    expect(JSON.stringify(c)).not.toMatch(/"(a|b)"/);
  });

  it('a deletion asked for (finalizers pending) and its end share one id', () => {
    const old = apiKey({ team: 'ml' });
    const deleting = apiKey({ team: 'ml' }, { deletionTimestamp: '2026-11-29T00:00:00Z', resourceVersion: '8' });
    expect(changeOf('update', deleting, old)).toMatchObject({ id: 'u-1@deleted', action: 'deleted' });
    expect(changeOf('delete', deleting)).toMatchObject({ id: 'u-1@deleted', action: 'deleted' });
  });

  it('names the last field manager of the spec, not of the status', () => {
    const obj = apiKey(
      { team: 'ml' },
      {
        managedFields: [
          { manager: 'kubectl-edit', time: '2026-11-29T10:00:00Z' },
          { manager: 'operator', time: '2026-11-29T11:00:00Z', subresource: 'status' },
        ],
      },
    );
    expect(changeOf('add', obj)?.manager).toBe('kubectl-edit');
    expect(changeOf('resync', obj)).toBeUndefined();
  });
});
