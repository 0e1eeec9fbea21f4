import { Redis } from 'ioredis';
import { LocalRateLimiter, type RateLimit, type RateLimiter, type Rates, type Verdict } from './rate-limit.js';

/**
 * Rate limits shared by every proxy replica: the token buckets live in Redis and one Lua script
 * call per request (one round trip) refills, checks and takes, on Redis's clock (replicas'
 * clocks may differ). Redis must never take the gateway down: a call that fails or takes longer
 * than `timeoutMs` is answered by this replica's own buckets instead (logged once per outage,
 * counted), and Redis is used again as soon as it answers.
 *
 * Client: ioredis: scripts by EVALSHA with the EVAL fallback built in, auto-pipelined (the calls
 * of one event-loop turn share a write), commands refused at once
 * while disconnected (no offline queue: a request never waits for a reconnect), reconnects with
 * backoff, and Sentinel and Cluster support for production Redis.
 */

// KEYS[1] request bucket, KEYS[2] token bucket; ARGV rate, burst, token rate, token burst (0: none).
// Returns {ok, remaining, retryAfterSeconds, which (1 requests, 2 tokens)}.
const ADMIT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function level(key, rate, burst)
  local v = redis.call('HMGET', key, 'tokens', 'at')
  local tokens = tonumber(v[1]) or burst
  local at = tonumber(v[2]) or now
  return math.min(burst, tokens + math.max(0, now - at) / 1000 * rate)
end
local function keep(key, tokens, rate, burst)
  redis.call('HSET', key, 'tokens', tostring(tokens), 'at', tostring(now))
  redis.call('PEXPIRE', key, math.ceil((burst - math.min(tokens, 0)) / rate * 1000) + 1000)
end
local rate, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local trate, tburst = tonumber(ARGV[3]), tonumber(ARGV[4])
if trate > 0 then
  local tt = level(KEYS[2], trate, tburst)
  if tt <= 0 then return {0, 0, math.max(1, math.ceil((1 - tt) / trate)), 2} end
end
if rate > 0 then
  local rt = level(KEYS[1], rate, burst)
  if rt < 1 then
    return {0, 0, math.max(1, math.ceil((1 - rt) / rate)), 1}
  end
  keep(KEYS[1], rt - 1, rate, burst)
  return {1, math.floor(rt - 1), 0, 0}
end
return {1, 0, 0, 0}
`;

// KEYS[1] token bucket; ARGV rate, burst, used.
const DEBIT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rate, burst, used = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local v = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(v[1]) or burst
local at = tonumber(v[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - at) / 1000 * rate) - used
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil((burst - math.min(tokens, 0)) / rate * 1000) + 1000)
return 1
`;

type Scripted = Redis & {
  paoAdmit(k1: string, k2: string, ...args: number[]): Promise<[number, number, number, number]>;
  paoDebit(k1: string, ...args: number[]): Promise<number>;
};

export interface RedisRateLimiterOptions {
  url: string;
  /** Longest wait for Redis before this replica's buckets answer. Default 100 ms. */
  timeoutMs?: number;
  /** Redis stopped answering: this replica limits on its own until it answers again (said once). */
  onFallback?: (err: unknown) => void;
  onRecovered?: () => void;
  /** Counts requests admitted by this replica's buckets because Redis did not answer. */
  fallbacks?: { inc(): void };
}

export class RedisRateLimiter implements RateLimiter {
  private readonly redis: Scripted;
  private readonly local = new LocalRateLimiter();
  private failing = false;

  constructor(private readonly opts: RedisRateLimiterOptions) {
    const redis = new Redis(opts.url, {
      enableOfflineQueue: false,
      commandTimeout: opts.timeoutMs ?? 100,
      maxRetriesPerRequest: 0,
      retryStrategy: (times) => Math.min(2_000, 50 * 2 ** Math.min(times, 6)),
      lazyConnect: false,
      // The admits of one event-loop turn go out in one write: a syscall per request to Redis was
      // 16 % of the proxy's CPU at c=16 (e2e/bench/RESULTS.md 11).
      enableAutoPipelining: true,
    });
    // Connection errors are expected while Redis is away; commands report them where it matters.
    redis.on('error', () => {});
    redis.defineCommand('paoAdmit', { numberOfKeys: 2, lua: ADMIT });
    redis.defineCommand('paoDebit', { numberOfKeys: 1, lua: DEBIT });
    this.redis = redis as Scripted;
  }

  /** Connected to Redis (limits shared); false while reconnecting. */
  get shared(): boolean {
    return this.redis.status === 'ready';
  }

  /** Hash-tagged so both of a key's buckets live on one Redis Cluster slot. */
  private keys(key: string): [string, string] {
    return [`pao:rl:{${key}}:r`, `pao:rl:{${key}}:t`];
  }

  async admit(key: string, rates: Rates): Promise<Verdict> {
    const r = rates.requests && rates.requests.requestsPerSecond > 0 ? rates.requests : undefined;
    const t = rates.tokens;
    if (!r && !t) return { ok: true, remaining: 0 };
    try {
      const [ok, remaining, retry, which] = await this.redis.paoAdmit(
        ...this.keys(key),
        r?.requestsPerSecond ?? 0,
        r?.burst ?? 0,
        t?.requestsPerSecond ?? 0,
        t?.burst ?? 0,
      );
      this.recovered();
      return ok === 1
        ? { ok: true, remaining }
        : { ok: false, retryAfterSeconds: retry, which: which === 2 ? 'tokens' : 'requests' };
    } catch (err) {
      this.fellBack(err);
      return this.local.admit(key, rates);
    }
  }

  debit(key: string, tokens: RateLimit, used: number): void {
    if (used <= 0) return;
    this.local.debit(key, tokens, used);
    const [, bucket] = this.keys(key);
    this.redis.paoDebit(bucket, tokens.requestsPerSecond, tokens.burst, used).then(
      () => this.recovered(),
      (err: unknown) => this.fellBack(err),
    );
  }

  private fellBack(err: unknown): void {
    this.opts.fallbacks?.inc();
    if (this.failing) return;
    this.failing = true;
    this.opts.onFallback?.(err);
  }

  private recovered(): void {
    if (!this.failing) return;
    this.failing = false;
    this.opts.onRecovered?.();
  }

  async close(): Promise<void> {
    this.redis.disconnect();
  }
}
