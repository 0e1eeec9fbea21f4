/**
 * Per-API-key rates: a token bucket per key that refills at `requestsPerSecond` up to `burst`
 * (an ApiKey's own limit, or the gateway's default), and the same for tokens per minute. These
 * buckets are this replica's: without Redis a key's cluster-wide rate is its limit times the
 * number of replicas.
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
  /** The limit it last refilled by (keys have limits of their own). */
  rate: number;
  burst: number;
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

  /** Takes one request from the key's budget (its own limit, or the default), or says how long until one is available. */
  take(key: string, limit: RateLimit = this.limit): Admission {
    const { requestsPerSecond: rate, burst } = limit;
    if (rate <= 0) return { ok: true, remaining: burst };
    const b = this.bucket(key, limit);
    if (b.tokens >= 1) {
      b.tokens -= 1;
      return { ok: true, remaining: Math.floor(b.tokens) };
    }
    return { ok: false, retryAfterSeconds: Math.max(1, Math.ceil((1 - b.tokens) / rate)) };
  }

  /**
   * For amounts known only afterwards (tokens): admitted while the bucket is above zero; `debit`
   * then takes what was used, possibly below zero, which later requests wait out.
   */
  admit(key: string, limit: RateLimit): Admission {
    const b = this.bucket(key, limit);
    if (b.tokens > 0) return { ok: true, remaining: Math.floor(b.tokens) };
    return { ok: false, retryAfterSeconds: Math.max(1, Math.ceil((1 - b.tokens) / limit.requestsPerSecond)) };
  }

  debit(key: string, limit: RateLimit, amount: number): void {
    if (amount > 0) this.bucket(key, limit).tokens -= amount;
  }

  /** The key's bucket, refilled to now. */
  private bucket(key: string, { requestsPerSecond: rate, burst }: RateLimit): Bucket {
    const t = this.now();
    let b = this.buckets.get(key);
    if (!b) {
      if (this.buckets.size >= PRUNE_ABOVE) this.prune(t);
      b = { tokens: burst, at: t, rate, burst };
      this.buckets.set(key, b);
    } else {
      b.tokens = Math.min(burst, b.tokens + ((t - b.at) / 1000) * rate);
      b.at = t;
      b.rate = rate;
      b.burst = burst;
    }
    return b;
  }

  private prune(t: number): void {
    for (const [key, b] of this.buckets) {
      if (b.tokens + ((t - b.at) / 1000) * b.rate >= b.burst) this.buckets.delete(key);
    }
  }
}

/** A request's rates: requests per second, and tokens (refilling per second, burst a minute's worth). */
export interface Rates {
  requests?: RateLimit;
  tokens?: RateLimit;
}

export type Verdict = Admission & { which?: 'requests' | 'tokens' };

/**
 * Where buckets live: this replica (LocalRateLimiter), or Redis shared by all replicas
 * (RedisRateLimiter, proxy/access/redis-rate-limit.ts). One admission per request, tokens counted after.
 */
export interface RateLimiter {
  admit(key: string, rates: Rates): Verdict | Promise<Verdict>;
  debit(key: string, tokens: RateLimit, used: number): void;
  close?(): Promise<void>;
}

export class LocalRateLimiter implements RateLimiter {
  private readonly requests: KeyRateLimiter;
  private readonly tokens: KeyRateLimiter;

  constructor(now?: () => number) {
    this.requests = new KeyRateLimiter({ requestsPerSecond: 0, burst: 1 }, now);
    this.tokens = new KeyRateLimiter({ requestsPerSecond: 0, burst: 1 }, now);
  }

  admit(key: string, rates: Rates): Verdict {
    // Tokens first: a request refused for its tokens must not spend a request.
    if (rates.tokens) {
      const t = this.tokens.admit(key, rates.tokens);
      if (!t.ok) return { ...t, which: 'tokens' };
    }
    if (rates.requests && rates.requests.requestsPerSecond > 0) {
      const r = this.requests.take(key, rates.requests);
      return r.ok ? r : { ...r, which: 'requests' };
    }
    return { ok: true, remaining: 0 };
  }

  debit(key: string, tokens: RateLimit, used: number): void {
    this.tokens.debit(key, tokens, used);
  }
}
