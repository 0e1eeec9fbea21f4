import { isRecord } from '../../crds/is-record.js';
/**
 * Stored Responses as rows of the usage store's database (proxy/usage/): one row per response,
 * its Response object as the caller saw it and its own input items, both as JSON text, owned by
 * the team of the key that made it (or that key alone, where it has no team). The SQL of each
 * database lives beside this file (sqlite-rows.ts, postgres-rows.ts); who may see a row is
 * decided above it (stored-responses.ts), never in SQL.
 */

export interface StoredRow {
  /** The gateway's id, `resp_...`: the one the caller saw. */
  id: string;
  /** `team:<name>`, or `key:<hash prefix>` for a key of no team. */
  owner: string;
  /** ms since the epoch. */
  created: number;
  /** ms since the epoch: swept after it. */
  expires: number;
  /** The Response's status: queued, in_progress, completed, incomplete, failed, cancelled. */
  status: string;
  background: boolean;
  /** The Response object, JSON. */
  response: string;
  /** This request's own input items (each with an id), a JSON array. */
  input: string;
}

/**
 * A row as it is put: with its items' ids, listed by its maker from the values it holds parsed
 * (a store need not parse the row's text again: on the writer thread that parse was a tenth of a
 * stored Response's cost, e2e/bench/RESULTS.md 29).
 */
export interface NewRow extends StoredRow {
  items: readonly string[];
}

/** The statuses a background response may still leave. */
export const RUNNING = ['queued', 'in_progress'] as const;

export interface ResponseRows {
  /** Creates the table where it is missing (idempotent, once per process). */
  ready(): Promise<void>;
  /** Inserts or replaces the row, and indexes its items' ids (its input's and its output's). */
  put(row: NewRow): Promise<void>;
  /** The newest response of the owner (any owner: undefined) holding an item of that id. */
  findItem(itemId: string, owner: string | undefined): Promise<string | undefined>;
  get(id: string): Promise<StoredRow | undefined>;
  /** Whether a row was deleted. */
  delete(id: string): Promise<boolean>;
  /** Sets a still running row's status and response (its output's items indexed); false where it had left `queued`/`in_progress`. */
  settle(id: string, status: string, response: string): Promise<boolean>;
  /** Deletes the rows that expired before `now`; how many. */
  sweep(now: number): Promise<number>;
  /** The bytes of every stored row (its response and input text). */
  bytes(): Promise<number>;
}

/** A row's size as counted against the bound and in the store's size. */
export const rowBytes = (row: Pick<StoredRow, 'response' | 'input'>): number =>
  Buffer.byteLength(row.response) + Buffer.byteLength(row.input);

/** The ids of a response's items, its input's and its output's: what item_reference may name. */
export function itemIds(response: unknown, input?: unknown): string[] {
  // A loop, not flatMap and spreads: it runs on the request thread for every stored Response.
  const ids = new Set<string>();
  for (const items of [input, isRecord(response) ? response.output : undefined])
    if (Array.isArray(items)) for (const i of items) if (isRecord(i) && typeof i.id === 'string') ids.add(i.id);
  return [...ids];
}

/** The same of a stored row's text (a settled response, a row of an earlier layout). */
export const itemIdsOf = (response: string, input?: string): string[] =>
  itemIds(JSON.parse(response), input === undefined ? undefined : JSON.parse(input));
