import { LRUCache } from 'lru-cache';

/**
 * Where the response cache keeps its entries (text, by key, with a time to live): memory, bounded
 * in bytes and least recently used first out; the usage file beside it standalone
 * (sqlite-cache-store.ts); Redis shared by replicas in a cluster (redis-cache-store.ts). A store
 * that fails throws: the cache counts it and answers a miss.
 */
export interface CacheStore {
  get(key: string): Promise<string | undefined>;
  set(key: string, value: string, ttlMs: number): Promise<void>;
  delete(key: string): Promise<void>;
  close(): Promise<void>;
}

export class MemoryCacheStore implements CacheStore {
  private readonly lru: LRUCache<string, string>;

  constructor(maxBytes: number) {
    this.lru = new LRUCache<string, string>({
      maxSize: maxBytes,
      // UTF-16: two bytes a unit, the key's too.
      sizeCalculation: (value, key) => 2 * (value.length + key.length) + 64,
      ttlAutopurge: false,
    });
  }

  async get(key: string): Promise<string | undefined> {
    return this.lru.get(key);
  }

  async set(key: string, value: string, ttlMs: number): Promise<void> {
    this.lru.set(key, value, { ttl: ttlMs });
  }

  async delete(key: string): Promise<void> {
    this.lru.delete(key);
  }

  async close(): Promise<void> {
    this.lru.clear();
  }

  /** Bytes held (the bound's measure). */
  get bytes(): number {
    return this.lru.calculatedSize;
  }
}

const PROMOTED_TTL_MS = 60_000;

/** Memory first, then a slower store that outlives the process; a hit there is brought back to memory. */
export class TieredCacheStore implements CacheStore {
  constructor(
    private readonly near: CacheStore,
    private readonly far: CacheStore,
  ) {}

  async get(key: string): Promise<string | undefined> {
    const near = await this.near.get(key);
    if (near !== undefined) return near;
    const far = await this.far.get(key);
    // Brought back to memory for a while (the far store keeps its own expiry).
    if (far !== undefined) await this.near.set(key, far, PROMOTED_TTL_MS);
    return far;
  }

  async set(key: string, value: string, ttlMs: number): Promise<void> {
    await this.near.set(key, value, ttlMs);
    await this.far.set(key, value, ttlMs);
  }

  async delete(key: string): Promise<void> {
    await Promise.all([this.near.delete(key), this.far.delete(key)]);
  }

  async close(): Promise<void> {
    await Promise.all([this.near.close(), this.far.close()]);
  }
}
