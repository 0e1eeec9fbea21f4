import Database from 'better-sqlite3';
import type { CacheStore } from './cache-store.js';

/**
 * The response cache's entries in the standalone gateway's usage file (its own table), so that a
 * restart keeps them. Expired entries are never read and are deleted as new ones come; past
 * `maxRows` the soonest to expire go first. A busy file (the usage writer's batch) fails a call
 * within `busyMs` rather than holding the request: the cache treats it as a miss.
 */
export class SqliteCacheStore implements CacheStore {
  private readonly db: Database.Database;
  private readonly read: Database.Statement<[string, number], { value: string }>;
  private readonly write: Database.Statement<[string, number, string]>;
  private writes = 0;

  constructor(
    file: string,
    private readonly maxRows = 100_000,
    busyMs = 20,
  ) {
    this.db = new Database(file);
    this.db.pragma('journal_mode = WAL');
    this.db.pragma(`busy_timeout = ${Math.max(0, Math.round(busyMs))}`);
    this.db.exec(
      'CREATE TABLE IF NOT EXISTS response_cache (key TEXT PRIMARY KEY, expires INTEGER NOT NULL, value TEXT NOT NULL)',
    );
    this.db.exec('CREATE INDEX IF NOT EXISTS response_cache_expires ON response_cache(expires)');
    this.read = this.db.prepare('SELECT value FROM response_cache WHERE key = ? AND expires > ?');
    this.write = this.db.prepare('INSERT OR REPLACE INTO response_cache (key, expires, value) VALUES (?, ?, ?)');
  }

  async get(key: string): Promise<string | undefined> {
    return this.read.get(key, Date.now())?.value;
  }

  async set(key: string, value: string, ttlMs: number): Promise<void> {
    this.write.run(key, Date.now() + ttlMs, value);
    this.writes += 1;
    if (this.writes % 1000 === 0) this.prune();
  }

  async delete(key: string): Promise<void> {
    this.db.prepare('DELETE FROM response_cache WHERE key = ?').run(key);
  }

  /** Expired rows out, then the soonest to expire past maxRows. */
  prune(): void {
    this.db.prepare('DELETE FROM response_cache WHERE expires <= ?').run(Date.now());
    this.db
      .prepare(
        `DELETE FROM response_cache WHERE key IN (SELECT key FROM response_cache ORDER BY expires DESC LIMIT -1 OFFSET ?)`,
      )
      .run(this.maxRows);
  }

  async close(): Promise<void> {
    this.db.close();
  }
}
