import Database from 'better-sqlite3';
import type { CacheStore } from './cache-store.js';

/**
 * The response cache's entries in the standalone gateway's usage file (its own table), so that a
 * restart keeps them. Expired entries are never read and are deleted as new ones come; past
 * `maxBytes` the soonest to expire go first. A file the usage writer holds fails a write at once
 * (no wait on the request thread): the answer is then kept in memory only.
 */
export class SqliteCacheStore implements CacheStore {
  private readonly db: Database.Database;
  private readonly read: Database.Statement<[string, number], { value: string }>;
  private readonly write: Database.Statement<[string, number, number, string]>;
  private writes = 0;

  constructor(
    file: string,
    private readonly maxBytes = 256 * 1024 * 1024,
  ) {
    this.db = new Database(file);
    this.db.pragma('journal_mode = WAL');
    this.db.pragma('busy_timeout = 0');
    // The table of an earlier build (no size column): its entries are only a cache.
    const columns = this.db.prepare('PRAGMA table_info(response_cache)').all() as { name: string }[];
    if (columns.length > 0 && !columns.some((c) => c.name === 'size')) this.db.exec('DROP TABLE response_cache');
    this.db.exec(
      'CREATE TABLE IF NOT EXISTS response_cache (key TEXT PRIMARY KEY, expires INTEGER NOT NULL, size INTEGER NOT NULL, value TEXT NOT NULL)',
    );
    this.db.exec('CREATE INDEX IF NOT EXISTS response_cache_expires ON response_cache(expires)');
    this.read = this.db.prepare('SELECT value FROM response_cache WHERE key = ? AND expires > ?');
    this.write = this.db.prepare(
      'INSERT OR REPLACE INTO response_cache (key, expires, size, value) VALUES (?, ?, ?, ?)',
    );
  }

  async get(key: string): Promise<string | undefined> {
    return this.read.get(key, Date.now())?.value;
  }

  async set(key: string, value: string, ttlMs: number): Promise<void> {
    this.write.run(key, Date.now() + ttlMs, 2 * (key.length + value.length), value);
    this.writes += 1;
    if (this.writes % 200 === 0) this.prune();
  }

  async delete(key: string): Promise<void> {
    this.db.prepare('DELETE FROM response_cache WHERE key = ?').run(key);
  }

  /** Expired rows out, then the soonest to expire past maxBytes. */
  prune(): void {
    this.db.prepare('DELETE FROM response_cache WHERE expires <= ?').run(Date.now());
    this.db
      .prepare(
        `DELETE FROM response_cache WHERE key IN (
           SELECT key FROM (SELECT key, SUM(size) OVER (ORDER BY expires DESC, key) AS running FROM response_cache)
           WHERE running > ?)`,
      )
      .run(this.maxBytes);
  }

  async close(): Promise<void> {
    this.db.close();
  }
}
