import Database from 'better-sqlite3';
import { Gauge, type Registry } from 'prom-client';
import { PostgresUsageStore } from '../usage/postgres-store.js';
import { openUsageFile, SqliteUsageStore } from '../usage/sqlite-store.js';
import type { UsageStore } from '../usage/store.js';
import { postgresRows } from './postgres-rows.js';
import type { ResponseRows } from './rows.js';
import { threadRows } from './rows-thread.js';
import { moveRowsFrom, sqliteRows } from './sqlite-rows.js';
import { StoredResponses, type StoredResponsesLog, type StoredResponsesSettings } from './stored-responses.js';

/**
 * The stored Responses' own SQLite file, beside the usage file. One file each: two writer threads
 * on one file take turns at SQLite's lock, and the one that finds it taken sleeps in SQLite's busy
 * handler for 1, 2, 5, 10, ... ms; at 16 callers they slept 122 times in 5 s (one of them 709 ms),
 * and a caller waits for its row's commit (e2e/bench/RESULTS.md 31).
 */
export const responsesFileOf = (usageFile: string): string => `${usageFile}-responses`;

/**
 * The stored Responses' rows: standalone, in a file of their own written by a thread of their own
 * (rows an earlier build kept in the usage file moved there first); in the store's database for
 * PostgreSQL and for an in-memory store (a test's); none for a store of another kind.
 */
function responseRowsOf(
  store: UsageStore,
  log: StoredResponsesLog,
): (ResponseRows & { close?(): Promise<void> }) | undefined {
  if (store instanceof PostgresUsageStore) return postgresRows(store.pool);
  if (!(store instanceof SqliteUsageStore)) return undefined;
  if (store.db.memory) return sqliteRows(store.db);
  const db = openUsageFile(responsesFileOf(store.db.name));
  const moved = moveRowsFrom(store.db, db);
  if (moved > 0) log.info?.('stored responses moved from the usage file to their own', { rows: moved });
  const rows = threadRows(db);
  return {
    ...rows,
    close: async () => {
      await rows.close();
      db.close();
    },
  };
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
  const fromStore = store && responseRowsOf(store, log);
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
