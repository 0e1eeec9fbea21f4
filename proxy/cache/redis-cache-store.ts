import { Redis } from 'ioredis';
import type { CacheStore } from './cache-store.js';

/**
 * The response cache in Redis, shared by every proxy replica: one GET per lookup, one SET with
 * its expiry per answer kept. Redis must never fail a request: commands are refused at once
 * while disconnected (no offline queue) and time out after `timeoutMs`; the cache answers a miss.
 * After a failure the cache leaves Redis alone for `pauseMs` (a Redis that stopped answering
 * would add its timeout to every lookup).
 */
export class RedisCacheStore implements CacheStore {
  private readonly redis: Redis;
  private pausedUntil = 0;

  constructor(
    url: string,
    timeoutMs = 100,
    private readonly pauseMs = 1_000,
  ) {
    this.redis = new Redis(url, {
      enableOfflineQueue: false,
      commandTimeout: timeoutMs,
      maxRetriesPerRequest: 0,
      lazyConnect: false,
      retryStrategy: (times) => Math.min(times * 200, 2_000),
    });
    // A connection error is a miss for the requests it meets, not a crash.
    this.redis.on('error', () => {});
  }

  async get(key: string): Promise<string | undefined> {
    return (await this.guarded(() => this.redis.get(key))) ?? undefined;
  }

  async set(key: string, value: string, ttlMs: number): Promise<void> {
    await this.guarded(() => this.redis.set(key, value, 'PX', Math.max(1, Math.round(ttlMs))));
  }

  async delete(key: string): Promise<void> {
    await this.guarded(() => this.redis.del(key));
  }

  private async guarded<T>(command: () => Promise<T>): Promise<T> {
    if (Date.now() < this.pausedUntil) throw new Error('Redis paused after a failure');
    try {
      return await command();
    } catch (err) {
      this.pausedUntil = Date.now() + this.pauseMs;
      throw err;
    }
  }

  async close(): Promise<void> {
    this.redis.disconnect();
  }
}
