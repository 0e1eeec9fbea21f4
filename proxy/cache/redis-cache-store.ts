import { Redis } from 'ioredis';
import type { CacheStore } from './cache-store.js';

/**
 * The response cache in Redis, shared by every proxy replica: one GET per lookup, one SET with
 * its expiry per answer kept. Redis must never fail a request: commands are refused at once
 * while disconnected (no offline queue) and time out after `timeoutMs`; the cache answers a miss.
 */
export class RedisCacheStore implements CacheStore {
  private readonly redis: Redis;

  constructor(url: string, timeoutMs = 100) {
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
    return (await this.redis.get(key)) ?? undefined;
  }

  async set(key: string, value: string, ttlMs: number): Promise<void> {
    await this.redis.set(key, value, 'PX', Math.max(1, Math.round(ttlMs)));
  }

  async delete(key: string): Promise<void> {
    await this.redis.del(key);
  }

  async close(): Promise<void> {
    this.redis.disconnect();
  }
}
