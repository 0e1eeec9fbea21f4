import type pg from 'pg';
import { type ResponseRows, RUNNING, rowBytes, type StoredRow } from './rows.js';

/**
 * Stored Responses in the usage store's PostgreSQL database, shared by the gateway's replicas: a
 * table of their own, made when first used (CREATE ... IF NOT EXISTS under an advisory lock, so
 * replicas starting together make it once). Text, not jsonb: a Response is served byte for byte
 * as it was stored (jsonb would reorder its keys).
 */

const LOCK = 0x5245_5350; // 'RESP'

const SCHEMA = `
  CREATE TABLE IF NOT EXISTS stored_responses (
    id text PRIMARY KEY,
    owner text NOT NULL,
    created bigint NOT NULL,
    expires bigint NOT NULL,
    status text NOT NULL,
    background boolean NOT NULL,
    response text NOT NULL,
    input text NOT NULL,
    bytes bigint NOT NULL
  );
  CREATE INDEX IF NOT EXISTS stored_responses_expires ON stored_responses (expires);
`;

interface Raw {
  id: string;
  owner: string;
  created: string;
  expires: string;
  status: string;
  background: boolean;
  response: string;
  input: string;
}

export function postgresRows(pool: pg.Pool): ResponseRows {
  let made: Promise<void> | undefined;
  const ready = () => {
    made ??= (async () => {
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        await client.query('SELECT pg_advisory_xact_lock($1)', [LOCK]);
        await client.query(SCHEMA);
        await client.query('COMMIT');
      } catch (err) {
        await client.query('ROLLBACK').catch(() => {});
        throw err;
      } finally {
        client.release();
      }
    })().catch((err: unknown) => {
      made = undefined;
      throw err;
    });
    return made;
  };
  const query = async <R extends pg.QueryResultRow>(text: string, params: unknown[]) => {
    await ready();
    return pool.query<R>(text, params);
  };
  const running = RUNNING.map((s) => `'${s}'`).join(', ');
  return {
    ready,
    put: async (row: StoredRow) => {
      await query(
        `INSERT INTO stored_responses (id, owner, created, expires, status, background, response, input, bytes)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
         ON CONFLICT (id) DO UPDATE SET owner = EXCLUDED.owner, created = EXCLUDED.created, expires = EXCLUDED.expires,
           status = EXCLUDED.status, background = EXCLUDED.background, response = EXCLUDED.response,
           input = EXCLUDED.input, bytes = EXCLUDED.bytes`,
        [
          row.id,
          row.owner,
          row.created,
          row.expires,
          row.status,
          row.background,
          row.response,
          row.input,
          rowBytes(row),
        ],
      );
    },
    get: async (id) => {
      const { rows } = await query<Raw>(
        'SELECT id, owner, created, expires, status, background, response, input FROM stored_responses WHERE id = $1',
        [id],
      );
      const raw = rows[0];
      return raw && { ...raw, created: Number(raw.created), expires: Number(raw.expires) };
    },
    delete: async (id) => ((await query('DELETE FROM stored_responses WHERE id = $1', [id])).rowCount ?? 0) > 0,
    settle: async (id, status, response) =>
      ((
        await query(
          `UPDATE stored_responses SET status = $1, response = $2, bytes = $3 + octet_length(input)
           WHERE id = $4 AND status IN (${running})`,
          [status, response, Buffer.byteLength(response), id],
        )
      ).rowCount ?? 0) > 0,
    sweep: async (now) => (await query('DELETE FROM stored_responses WHERE expires < $1', [now])).rowCount ?? 0,
    bytes: async () => {
      const { rows } = await query<{ b: string | null }>('SELECT SUM(bytes)::bigint AS b FROM stored_responses', []);
      return Number(rows[0]?.b ?? 0);
    },
  };
}
