import Database from 'better-sqlite3';
import { Gauge, type Registry } from 'prom-client';
import { PostgresUsageStore } from '../usage/postgres-store.js';
import { SqliteUsageStore } from '../usage/sqlite-store.js';
import type { UsageStore } from '../usage/store.js';
import { postgresRows } from './postgres-rows.js';
import type { ResponseRows } from './rows.js';
import { threadRows } from './rows-thread.js';
import { sqliteRows } from './sqlite-rows.js';
import { StoredResponses, type StoredResponsesLog, type StoredResponsesSettings } from './stored-responses.js';

/**
 * The stored Responses' rows in the usage store's own database (a file's written by a thread of
 * their own); none for a store of another kind (a test's).
 */
function responseRowsOf(store: UsageStore): (ResponseRows & { close?(): Promise<void> }) | undefined {
  if (store instanceof SqliteUsageStore) return store.db.memory ? sqliteRows(store.db) : threadRows(store.db);
  if (store instanceof PostgresUsageStore) return postgresRows(store.pool);
  return undefined;
}

/**
 * The gateway's stored Responses over its usage store (an in-memory database where the store is a
 * test's own), swept hourly; `close` settles what runs in the background and stops the sweep.
 */
export function openStoredResponses(
  store: UsageStore | undefined,
  settings: StoredResponsesSettings,
  log: StoredResponsesLog,
  registry?: Registry,
): { stored: StoredResponses; close(): Promise<void> } {
  const fromStore = store && responseRowsOf(store);
  const own = fromStore ? undefined : new Database(':memory:');
  const rows = fromStore ?? sqliteRows(own ?? new Database(':memory:'));
  const stored = new StoredResponses(rows, settings, log);
  const stop = stored.sweepHourly();
  if (registry) bytesGauge(registry, rows);
  return {
    stored,
    close: async () => {
      stop();
      await stored.close();
      await fromStore?.close?.();
      own?.close();
    },
  };
}

/** The stored responses' share of the usage database's size, read when scraped (a sum over one indexed table). */
function bytesGauge(registry: Registry, rows: ResponseRows): void {
  let last = 0;
  new Gauge({
    name: 'pao_gateway_stored_responses_bytes',
    help: 'Bytes of stored Responses (their Response objects and input items) in the usage database, kept until they expire.',
    registers: [registry],
    async collect() {
      // A database that does not answer shows the last size read, not 0.
      last = await rows.bytes().catch(() => last);
      this.set(last);
    },
  });
}
