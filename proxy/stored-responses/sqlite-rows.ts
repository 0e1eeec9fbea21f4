import type Database from 'better-sqlite3';
import { type ResponseRows, RUNNING, rowBytes, type StoredRow } from './rows.js';

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
  const del = db.prepare('DELETE FROM stored_responses WHERE id = ?');
  const settle = db.prepare(
    `UPDATE stored_responses SET status = ?, response = ?, bytes = ? + length(CAST(input AS BLOB))
     WHERE id = ? AND status IN (${RUNNING.map((s) => `'${s}'`).join(', ')})`,
  );
  const sweep = db.prepare('DELETE FROM stored_responses WHERE expires < ?');
  const bytes = db.prepare<[], { b: number | null }>('SELECT SUM(bytes) AS b FROM stored_responses');
  return {
    ready: async () => {},
    put: async (row: StoredRow) => {
      put.run({ ...row, background: row.background ? 1 : 0, bytes: rowBytes(row) });
    },
    get: async (id) => {
      const raw = get.get(id);
      return raw && { ...raw, background: raw.background === 1 };
    },
    delete: async (id) => del.run(id).changes > 0,
    settle: async (id, status, response) => settle.run(status, response, Buffer.byteLength(response), id).changes > 0,
    sweep: async (now) => sweep.run(now).changes,
    bytes: async () => bytes.get()?.b ?? 0,
  };
}
