import { describe, expect, it } from 'vitest';
import type { ApiKey, ApiKeySpec, ApiKeyStatus } from '../../crds/api-key.js';
import { apiKeyPlan } from './api-key-status.js';

const NOW = new Date('2026-11-23T12:00:00Z');

function key(spec: Partial<ApiKeySpec>, status?: ApiKeyStatus): ApiKey {
  return {
    apiVersion: 'ai.platform/v1beta1',
    kind: 'ApiKey',
    metadata: { name: 'ml-team', namespace: 'platform-agent', generation: 3 },
    spec: { team: 'ml', role: 'User', rotation: 0, ...spec },
    ...(status ? { status } : {}),
  };
}

const issued: ApiKeyStatus = { digest: `sha256:${'a'.repeat(64)}`, keyHint: 'sk-abcd...wxyz', rotation: 0 };
const cond = (s: ApiKeyStatus, type: string) => s.conditions?.find((c) => c.type === type);

describe('apiKeyPlan', () => {
  const table: Array<{
    name: string;
    spec: Partial<ApiKeySpec>;
    status?: ApiKeyStatus;
    issue: boolean;
    ready: string;
    expired: string;
    exhausted: string;
    requeueMs?: number;
  }> = [
    { name: 'new key: issue it', spec: {}, issue: true, ready: 'True', expired: 'False', exhausted: 'False' },
    {
      name: 'issued, nothing changed',
      spec: {},
      status: issued,
      issue: false,
      ready: 'True',
      expired: 'False',
      exhausted: 'False',
    },
    {
      name: 'rotation changed: issue again',
      spec: { rotation: 1 },
      status: issued,
      issue: true,
      ready: 'True',
      expired: 'False',
      exhausted: 'False',
    },
    {
      name: 'expired: not ready, no new key',
      spec: { expiresAt: '2026-11-23T11:59:59Z' },
      status: issued,
      issue: false,
      ready: 'False',
      expired: 'True',
      exhausted: 'False',
    },
    {
      name: 'expires in an hour: looked at again then',
      spec: { expiresAt: '2026-11-23T12:30:00Z' },
      status: issued,
      issue: false,
      ready: 'True',
      expired: 'False',
      exhausted: 'False',
      requeueMs: 30 * 60_000 + 1000,
    },
    {
      name: 'spend reached the budget this period',
      spec: { budget: { usd: 10, period: 'Daily' } },
      status: { ...issued, usage: { period: 'Daily', periodStart: '2026-11-23T00:00:00Z', spendUsd: 10.5 } },
      issue: false,
      ready: 'True',
      expired: 'False',
      exhausted: 'True',
      requeueMs: 3_600_000 + 1000,
    },
    {
      name: "yesterday's spend does not count",
      spec: { budget: { usd: 10, period: 'Daily' } },
      status: { ...issued, usage: { period: 'Daily', periodStart: '2026-11-22T00:00:00Z', spendUsd: 99 } },
      issue: false,
      ready: 'True',
      expired: 'False',
      exhausted: 'False',
    },
  ];
  for (const t of table) {
    it(t.name, () => {
      const plan = apiKeyPlan(key(t.spec, t.status), NOW);
      expect(plan.issue).toBe(t.issue);
      expect(cond(plan.status, 'Ready')?.status).toBe(t.ready);
      expect(cond(plan.status, 'Expired')?.status).toBe(t.expired);
      expect(cond(plan.status, 'BudgetExhausted')?.status).toBe(t.exhausted);
      if (t.requeueMs !== undefined) expect(plan.requeueAfterMs).toBe(t.requeueMs);
      if (!t.issue) expect(plan.status.digest).toBe(issued.digest);
    });
  }

  it('keeps what the proxies wrote in status.usage', () => {
    const usage = {
      period: 'Monthly' as const,
      periodStart: '2026-11-01T00:00:00Z',
      spendUsd: 1,
      lastUsed: '2026-11-23T11:00:00Z',
    };
    expect(apiKeyPlan(key({}, { ...issued, usage }), NOW).status.usage).toEqual(usage);
  });
});
