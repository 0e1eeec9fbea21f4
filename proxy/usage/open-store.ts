import { PostgresUsageStore } from './postgres-store.js';
import { SqliteUsageStore } from './sqlite-store.js';
import type { UsageStore } from './store.js';

/** `postgres://` or `postgresql://` selects PostgreSQL; anything else is an SQLite file path (or `:memory:`). */
export const isPostgresUrl = (target: string): boolean => /^postgres(?:ql)?:\/\//.test(target);

/**
 * PostgreSQL is connected lazily: the gateway starts and serves while its database is down
 * (records are held), and `onUnreachable` hears why the first attempt failed.
 */
export function openUsageStore(target: string, onUnreachable?: (err: unknown) => void): UsageStore {
  if (!isPostgresUrl(target)) return new SqliteUsageStore(target);
  const store = PostgresUsageStore.connect(target);
  store.ensureSchema().catch((err: unknown) => onUnreachable?.(err));
  return store;
}
