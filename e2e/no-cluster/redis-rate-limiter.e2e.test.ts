import { spawn } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisRateLimiter } from '../../proxy/access/redis-rate-limit.js';
import { type RedisServer, startRedis } from '../redis/server.js';

/**
 * Shared rate limits on a real redis-server (Debian's package): two limiters stand for two
 * proxy replicas. Redis stopped or stalled: each answers with its own buckets, says so once,
 * counts it, and shares again once Redis is back.
 */

let redis: RedisServer;
const limiters: RedisRateLimiter[] = [];
beforeAll(async () => {
  redis = await startRedis();
}, 20_000);
afterAll(async () => {
  for (const l of limiters) await l.close();
  await redis?.destroy();
});

function replica(events: string[] = []) {
  let fallbacks = 0;
  const l = new RedisRateLimiter({
    url: redis.url,
    onFallback: () => events.push('fallback'),
    onRecovered: () => events.push('recovered'),
    fallbacks: { inc: () => void fallbacks++ },
  });
  limiters.push(l);
  return { l, fallbacks: () => fallbacks };
}

const connected = async (l: RedisRateLimiter) => {
  for (let i = 0; i < 250 && !l.shared; i++) await new Promise((r) => setTimeout(r, 20));
  expect(l.shared).toBe(true);
};

describe('rate limits shared through Redis', () => {
  it('two replicas share one bucket per key: a burst of 5 admits 5 in all', async () => {
    const [a, b] = [replica().l, replica().l];
    await Promise.all([connected(a), connected(b)]);
    const rates = { requests: { requestsPerSecond: 0.001, burst: 5 } };
    const verdicts = await Promise.all(Array.from({ length: 20 }, (_, i) => (i % 2 ? a : b).admit('key:ml', rates)));
    expect(verdicts.filter((v) => v.ok)).toHaveLength(5);
    const refused = verdicts.find((v) => !v.ok);
    expect(refused).toMatchObject({ ok: false, which: 'requests' });
    expect(refused && !refused.ok && refused.retryAfterSeconds).toBeGreaterThan(1);
    // Another key has its own bucket.
    expect((await a.admit('key:web', rates)).ok).toBe(true);
  });

  it("tokens per minute: admitted while positive, refused on every replica once one's debit is past it", async () => {
    const [a, b] = [replica().l, replica().l];
    await Promise.all([connected(a), connected(b)]);
    const tokens = { requestsPerSecond: 1000 / 60, burst: 1000 };
    expect((await a.admit('key:tok', { tokens })).ok).toBe(true);
    a.debit('key:tok', tokens, 5000);
    await new Promise((r) => setTimeout(r, 50));
    const v = await b.admit('key:tok', { tokens, requests: { requestsPerSecond: 10, burst: 10 } });
    expect(v).toMatchObject({ ok: false, which: 'tokens' });
    // Refused for tokens, the request bucket was not spent.
    expect(await b.admit('key:tok2', { requests: { requestsPerSecond: 10, burst: 1 } })).toMatchObject({ ok: true });
  });

  it('Redis stopped: each replica limits on its own, says so once, counts, and shares again when Redis is back', async () => {
    const events: string[] = [];
    const { l, fallbacks } = replica(events);
    await connected(l);
    await redis.stop();
    const rates = { requests: { requestsPerSecond: 0.001, burst: 3 } };
    const during = await Promise.all(Array.from({ length: 5 }, () => l.admit('key:outage', rates)));
    // This replica's own bucket: burst 3.
    expect(during.filter((v) => v.ok)).toHaveLength(3);
    expect(events).toEqual(['fallback']);
    expect(fallbacks()).toBe(5);
    await redis.start();
    await connected(l);
    // Shared again: a fresh Redis has a full bucket for the key.
    expect((await l.admit('key:outage', rates)).ok).toBe(true);
    expect(events).toEqual(['fallback', 'recovered']);
  }, 30_000);

  it('Redis stalled: the call gives up after its timeout instead of holding the request', async () => {
    const events: string[] = [];
    const { l } = replica(events);
    await connected(l);
    // The server is busy for 1.5 s; the admission is answered locally long before.
    const sleeper = new Promise((resolve) =>
      spawn('redis-cli', ['-p', String(redis.port), 'DEBUG', 'SLEEP', '1.5']).once('exit', resolve),
    );
    await new Promise((r) => setTimeout(r, 100));
    let settledWhileBusy = false;
    const admitted = l.admit('key:stall', { requests: { requestsPerSecond: 1, burst: 1 } }).then((v) => {
      settledWhileBusy = true;
      return v;
    });
    await new Promise((r) => setTimeout(r, 800));
    expect(settledWhileBusy).toBe(true);
    expect((await admitted).ok).toBe(true);
    expect(events).toContain('fallback');
    await sleeper;
  });
});
