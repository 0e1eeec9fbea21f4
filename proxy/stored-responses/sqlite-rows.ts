import type Database from 'better-sqlite3';
import { itemIdsOf, type ResponseRows, RUNNING, rowBytes, type StoredRow } from './rows.js';

/** Stored Responses in the usage store's SQLite file: a table of their own, made on open. */

const SCHEMA = `
  CREATE TABLE IF NOT EXISTS stored_responses (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    created INTEGER NOT NULL,
    expires INTEGER NOT NULL,
    status TEXT NOT NULL,
    background INTEGER NOT NULL,
    response TEXT NOT NULL,
    input TEXT NOT NULL,
    bytes INTEGER NOT NULL
  );
  CREATE INDEX IF NOT EXISTS stored_responses_expires ON stored_responses(expires);
  CREATE TABLE IF NOT EXISTS stored_response_items (
    owner TEXT NOT NULL,
    item_id TEXT NOT NULL,
    response_id TEXT NOT NULL,
    created INTEGER NOT NULL,
    expires INTEGER NOT NULL,
    PRIMARY KEY (owner, item_id)
  );
  CREATE INDEX IF NOT EXISTS stored_response_items_item ON stored_response_items(item_id, created);
  CREATE INDEX IF NOT EXISTS stored_response_items_response ON stored_response_items(response_id);
  CREATE INDEX IF NOT EXISTS stored_response_items_expires ON stored_response_items(expires);
`;

interface Raw {
  id: string;
  owner: string;
  created: number;
  expires: number;
  status: string;
  background: number;
  response: string;
  input: string;
}

export function sqliteRows(db: Database.Database): ResponseRows {
  db.exec(SCHEMA);
  const put = db.prepare(
    `INSERT OR REPLACE INTO stored_responses (id, owner, created, expires, status, background, response, input, bytes)
     VALUES (@id, @owner, @created, @expires, @status, @background, @response, @input, @bytes)`,
  );
  const get = db.prepare<[string], Raw>(
    'SELECT id, owner, created, expires, status, background, response, input FROM stored_responses WHERE id = ?',
  );
  const index = db.prepare(
    `INSERT OR REPLACE INTO stored_response_items (owner, item_id, response_id, created, expires)
     SELECT owner, ?, id, created, expires FROM stored_responses WHERE id = ?`,
  );
  const findMine = db.prepare<[string, string], { r: string }>(
    'SELECT response_id AS r FROM stored_response_items WHERE item_id = ? AND owner = ? ORDER BY created DESC LIMIT 1',
  );
  const findAny = db.prepare<[string], { r: string }>(
    'SELECT response_id AS r FROM stored_response_items WHERE item_id = ? ORDER BY created DESC LIMIT 1',
  );
  const unindex = db.prepare('DELETE FROM stored_response_items WHERE response_id = ?');
  const sweepItems = db.prepare('DELETE FROM stored_response_items WHERE expires < ?');
  const indexAll = (id: string, items: string[]) => {
    for (const item of items) index.run(item, id);
  };
  const putAll = db.transaction((rows: readonly StoredRow[]) => {
    for (const row of rows) {
      put.run({ ...row, background: row.background ? 1 : 0, bytes: rowBytes(row) });
      indexAll(row.id, itemIdsOf(row.response, row.input));
    }
  });
  // The rows of concurrent requests go in one transaction per event-loop turn: a commit costs more
  // than a row (half the main thread at 16 callers, one commit each). Each caller still waits for
  // its row's commit; every read first commits what waits, so nothing is read around it.
  const waiting: Array<{ row: StoredRow; done: () => void; failed: (err: unknown) => void }> = [];
  let scheduled = false;
  const commit = () => {
    scheduled = false;
    if (waiting.length === 0) return;
    const batch = waiting.splice(0);
    try {
      putAll(batch.map((w) => w.row));
      for (const w of batch) w.done();
    } catch {
      // One row's failure must not fail the others': each alone, with its own error.
      for (const w of batch) {
        try {
          putAll([w.row]);
          w.done();
        } catch (err) {
          w.failed(err);
        }
      }
    }
  };
  const settleAll = db.transaction((id: string, status: string, response: string): boolean => {
    if (settle.run(status, response, Buffer.byteLength(response), id).changes === 0) return false;
    indexAll(id, itemIdsOf(response));
    return true;
  });
  const del = db.prepare('DELETE FROM stored_responses WHERE id = ?');
  const settle = db.prepare(
    `UPDATE stored_responses SET status = ?, response = ?, bytes = ? + length(CAST(input AS BLOB))
     WHERE id = ? AND status IN (${RUNNING.map((s) => `'${s}'`).join(', ')})`,
  );
  const sweep = db.prepare('DELETE FROM stored_responses WHERE expires < ?');
  const bytes = db.prepare<[], { b: number | null }>('SELECT SUM(bytes) AS b FROM stored_responses');
  return {
    ready: async () => {},
    put: (row: StoredRow) =>
      new Promise<void>((done, failed) => {
        waiting.push({ row, done, failed });
        if (scheduled) return;
        scheduled = true;
        setImmediate(commit);
      }),
    findItem: async (itemId, owner) => {
      commit();
      return (owner === undefined ? findAny.get(itemId) : findMine.get(itemId, owner))?.r;
    },
    get: async (id) => {
      commit();
      const raw = get.get(id);
      return raw && { ...raw, background: raw.background === 1 };
    },
    delete: async (id) => {
      commit();
      unindex.run(id);
      return del.run(id).changes > 0;
    },
    settle: async (id, status, response) => {
      commit();
      return settleAll(id, status, response);
    },
    sweep: async (now) => {
      commit();
      sweepItems.run(now);
      return sweep.run(now).changes;
    },
    bytes: async () => {
      commit();
      return bytes.get()?.b ?? 0;
    },
  };
}
