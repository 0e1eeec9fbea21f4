import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type OllamaDouble, startOllamaDouble } from '../e2e/doubles/ollama.js';
import { MemoryBudget } from './access/memory-budget.js';
import { ProxyError } from './endpoints/errors.js';
import { ReplicaPools } from './serving/replica-pool.js';
import type { InClusterRoute, Unavailable } from './serving/routes.js';
import { OpenAICompatibleUpstream } from './upstreams/openai-compatible.js';
import { unavailableBackend } from './upstreams/unavailable.js';

/**
 * Every 429 and 503 the gateway answers says "retry", so each is answered only where a retry can
 * succeed, and each carries Retry-After in seconds: one case per emitter. Covered where they are
 * tested with their stage: the key's rates and a replica shutting down (admit.test.ts), a spent
 * budget (budgets.test.ts, Retry-After at its reset), a full or timed-out replica queue and a model
 * waking (routing/replica-pool.test.ts), a provider's 429 or 503 (provider-upstream.ts: the
 * provider's Retry-After, else 5 s; none for a spent quota, where waiting does not help).
 * What can never succeed is a 4xx without it: access/memory-budget.test.ts, endpoints.test.ts.
 */

const retryAfter = (err: unknown): number => {
  expect(err).toBeInstanceOf(ProxyError);
  const e = err as ProxyError;
  expect([429, 503]).toContain(e.status);
  const seconds = Number(e.headers['Retry-After']);
  expect(Number.isInteger(seconds) && seconds >= 1).toBe(true);
  return seconds;
};

const thrown = (f: () => unknown): unknown => {
  try {
    f();
  } catch (err) {
    return err;
  }
  throw new Error('nothing thrown');
};

const inCluster = (over: Partial<InClusterRoute> = {}): InClusterRoute => ({
  kind: 'in-cluster',
  model: 'llama3.1:8b',
  baseUrl: 'http://127.0.0.1:1',
  provider: 'platform-llms/llama',
  ...over,
});

describe('every 429 and 503 carries Retry-After', () => {
  it('the memory budget, busy now (what never fits is a 4xx: memory-budget.test.ts)', () => {
    const budget = new MemoryBudget(10);
    budget.take(10);
    expect(retryAfter(thrown(() => budget.take(1)))).toBe(1);
  });

  it('a model still deploying, and a failed one (after the time a fix and a redeploy take)', () => {
    const backend = unavailableBackend(30);
    const entry = (phase: Unavailable['phase']): Unavailable => ({
      kind: 'unavailable',
      model: 'llama3.1:8b',
      provider: 'platform-llms/llama',
      phase,
      reason: 'ImagePullBackOff',
    });
    expect(retryAfter(backend.refuse?.(entry('Deploying')))).toBe(30);
    expect(retryAfter(backend.refuse?.(entry('Failed')))).toBe(60);
  });

  it('a model scaled to zero by hand, and a caller that left while waiting for a replica', async () => {
    const pools = new ReplicaPools({ maxQueued: 3, queueMs: 5_000, lookup: () => undefined, wake: async () => {} });
    const asleep = inCluster({
      replicas: [],
      slots: 1,
      scaling: { namespace: 'platform-llms', name: 'llama', replicas: 0, autoscaled: false, whileWaking: 'Wait' },
    });
    expect(retryAfter(thrown(() => pools.acquire(asleep, new AbortController().signal)))).toBe(60);
    const busy = inCluster({ replicas: ['http://10.0.0.1:11434'], slots: 1 });
    const held = await pools.acquire(busy, new AbortController().signal);
    const leaving = new AbortController();
    const waiting = Promise.resolve(pools.acquire(busy, leaving.signal));
    leaving.abort();
    expect(retryAfter(await waiting.catch((e: unknown) => e))).toBe(1);
    held.release();
  });

  describe('an in-cluster server that answers 429', () => {
    let double: OllamaDouble;
    beforeAll(async () => {
      double = await startOllamaDouble();
    });
    afterAll(async () => {
      await double.close();
    });

    it('passes its Retry-After, and says 1 s where it gave none (Ollama full queue)', async () => {
      const upstream = new OpenAICompatibleUpstream();
      const send = () =>
        upstream
          .send({
            route: inCluster({ baseUrl: double.url }),
            dialect: 'openai-chat',
            body: { model: 'llama3.1:8b', messages: [{ role: 'user', content: 'hi' }] },
            stream: false,
            clientWantsUsage: false,
            signal: new AbortController().signal,
          })
          .catch((e: unknown) => e);
      double.behave({ failWith: { status: 429, retryAfterSeconds: 7 } });
      expect(retryAfter(await send())).toBe(7);
      double.behave({ failWith: { status: 429 } });
      expect(retryAfter(await send())).toBe(1);
      double.reset();
    });
  });
});
