import { afterEach, describe, expect, it } from 'vitest';
import type { ApiKey } from '../../crds/api-key.js';
import type { KubeClient } from '../../crds/kube/kube-client.js';
import { type KubeApiDouble, startKubeApiDouble } from '../../e2e/doubles/kube-api.js';
import { UsageStatusWriter } from './status.js';

/**
 * The status writer's rounds against a loopback API double that takes status patches as the API
 * server does (200, the patch back) and keeps them, in order.
 */

let double: KubeApiDouble | undefined;

afterEach(async () => {
  await double?.close();
  double = undefined;
});

async function apiDouble(): Promise<{ client: KubeClient; patches: Array<{ path: string; body: unknown }> }> {
  const patches: Array<{ path: string; body: unknown }> = [];
  double = await startKubeApiDouble((req, res, body) => {
    patches.push({ path: req.url?.split('?')[0] ?? '', body: JSON.parse(body || 'null') });
    res.writeHead(200, { 'content-type': 'application/json' }).end(body);
  });
  return { client: double.client, patches };
}

const spender: ApiKey = {
  apiVersion: 'ai.platform/v1beta1',
  kind: 'ApiKey',
  metadata: { name: 'spender', namespace: 'platform-agent' },
  spec: { team: 'data', role: 'User', rotation: 0, budget: { usd: 0.002, period: 'Daily' } },
  status: { digest: 'sha256:0' },
};

describe('UsageStatusWriter', () => {
  it('writes, when asked while a round runs, the spend as of the ask: another round follows the running one', async () => {
    const { client, patches } = await apiDouble();
    let spent = 0.001;
    let release: () => void = () => {};
    const held = new Promise<void>((r) => {
      release = r;
    });
    let reads = 0;
    const store = {
      spend: async () => {
        const now = spent;
        // The first round's read is held until the test has asked again.
        if (reads++ === 0) await held;
        return [now];
      },
    };
    const writer = new UsageStatusWriter({ apiKeyObjects: () => [spender], budgetObjects: () => [], client }, store);
    const first = writer.write();
    spent = 0.002;
    const second = writer.write();
    const third = writer.write();
    release();
    await Promise.all([first, second, third]);
    const spends = patches.map((p) => (p.body as { status: { usage: { spendUsd: number } } }).status.usage.spendUsd);
    // The running round's figure, then one more round for both later asks, with the figure they saw.
    expect(spends).toEqual([0.001, 0.002]);
    expect(patches.every((p) => p.path.endsWith('/apikeys/spender/status'))).toBe(true);
  });

  it('runs the round asked for during one that threw, and later asks run rounds of their own', async () => {
    const { client, patches } = await apiDouble();
    let keyReads = 0;
    const source = {
      // The first round's read of the keys throws (an informer's cache torn down mid-round).
      apiKeyObjects: () => {
        if (keyReads++ === 0) throw new Error('cache gone');
        return [spender];
      },
      budgetObjects: () => [],
      client,
    };
    const writer = new UsageStatusWriter(source, { spend: async () => [0.001] });
    const first = writer.write();
    const second = writer.write();
    await expect(first).rejects.toThrow('cache gone');
    await second;
    expect(patches).toHaveLength(1);
    await writer.write();
    expect(keyReads).toBe(3);
  });
});
