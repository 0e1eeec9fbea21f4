import { describe, expect, it } from 'vitest';
import { KeyRateLimiter } from './rate-limit.js';

/** A key's token bucket: burst, refill at the rate, keys kept apart. */

describe('per-key rate limit', () => {
  it('lets a burst through, refuses the next with the wait, refills at the rate, and keeps keys apart', () => {
    let t = 0;
    const limiter = new KeyRateLimiter({ requestsPerSecond: 2, burst: 3 }, () => t);
    expect([1, 2, 3].map(() => limiter.take('a').ok)).toEqual([true, true, true]);
    expect(limiter.take('a')).toEqual({ ok: false, retryAfterSeconds: 1 });
    expect(limiter.take('b').ok).toBe(true);
    t = 499;
    expect(limiter.take('a').ok).toBe(false);
    t = 500;
    expect(limiter.take('a')).toEqual({ ok: true, remaining: 0 });
    t = 100_000;
    expect(limiter.take('a')).toEqual({ ok: true, remaining: 2 });
  });

  it('is off at 0 requests per second and refuses a nonsensical configuration', () => {
    const off = new KeyRateLimiter({ requestsPerSecond: 0, burst: 1 });
    expect(Array.from({ length: 100 }, () => off.take('a').ok).every(Boolean)).toBe(true);
    expect(() => new KeyRateLimiter({ requestsPerSecond: -1, burst: 1 })).toThrow(/requestsPerSecond/);
    expect(() => new KeyRateLimiter({ requestsPerSecond: 1, burst: 0 })).toThrow(/burst/);
  });
});
