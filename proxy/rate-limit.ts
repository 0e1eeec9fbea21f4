/**
 * Per-API-key request budget: a token bucket per key that refills at `requestsPerSecond` up to
 * `burst`. Each proxy replica keeps its own buckets, so a key's cluster-wide budget is the
 * configured rate times the number of replicas.
 */

export interface RateLimit {
  /** Sustained requests per second per key; 0 turns the limit off. */
  requestsPerSecond: number;
  /** Requests a key may send at once after being idle. */
  burst: number;
}

export type Admission = { ok: true; remaining: number } | { ok: false; retryAfterSeconds: number };

interface Bucket {
  tokens: number;
  at: number;
}

/** Above this many buckets, full ones (keys idle long enough to have refilled) are forgotten. */
const PRUNE_ABOVE = 10_000;

export class KeyRateLimiter {
  private readonly buckets = new Map<string, Bucket>();

  constructor(
    readonly limit: RateLimit,
    private readonly now: () => number = () => performance.now(),
  ) {
    if (!(limit.requestsPerSecond >= 0) || !(limit.burst >= 1)) {
      throw new Error('rate limit: requestsPerSecond must be >= 0 and burst >= 1');
    }
  }

  get enabled(): boolean {
    return this.limit.requestsPerSecond > 0;
  }

  /** Takes one request from the key's budget, or says how long until one is available. */
  take(key: string): Admission {
    const { requestsPerSecond: rate, burst } = this.limit;
    if (rate <= 0) return { ok: true, remaining: burst };
    const t = this.now();
    let b = this.buckets.get(key);
    if (!b) {
      if (this.buckets.size >= PRUNE_ABOVE) this.prune(t);
      b = { tokens: burst, at: t };
      this.buckets.set(key, b);
    } else {
      b.tokens = Math.min(burst, b.tokens + ((t - b.at) / 1000) * rate);
      b.at = t;
    }
    if (b.tokens >= 1) {
      b.tokens -= 1;
      return { ok: true, remaining: Math.floor(b.tokens) };
    }
    return { ok: false, retryAfterSeconds: Math.max(1, Math.ceil((1 - b.tokens) / rate)) };
  }

  private prune(t: number): void {
    const { requestsPerSecond: rate, burst } = this.limit;
    for (const [key, b] of this.buckets) {
      if (b.tokens + ((t - b.at) / 1000) * rate >= burst) this.buckets.delete(key);
    }
  }
}
