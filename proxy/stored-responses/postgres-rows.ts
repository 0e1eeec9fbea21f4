import type pg from 'pg';
import { schemaOnce } from '../usage/postgres-schema.js';
import { itemIdsOf, type NewRow, type ResponseRows, RUNNING, rowBytes } from './rows.js';

/**
 * Stored Responses in the usage store's PostgreSQL database, shared by the gateway's replicas: a
 * table of their own, made when first used (CREATE ... IF NOT EXISTS under an advisory lock, so
 * replicas starting together make it once). Text, not jsonb: a Response is served byte for byte
 * as it was stored (jsonb would reorder its keys).
 */

const LOCK = 0x5245_5350; // 'RESP'

// As in SQLite (sqlite-rows.ts): the item index is its primary key alone; an item leaves it with
// its response (delete, sweep), which lists its ids in `items`; the size is read from an index.
const SCHEMA = `
  CREATE TABLE IF NOT EXISTS stored_responses (
    id text PRIMARY KEY,
    owner text NOT NULL,
    created bigint NOT NULL,
    expires bigint NOT NULL,
    status text NOT NULL,
    background boolean NOT NULL,
    bytes bigint NOT NULL,
    items text[] NOT NULL,
    response text NOT NULL,
    input text NOT NULL
  );
  CREATE INDEX IF NOT EXISTS stored_responses_expires ON stored_responses (expires) INCLUDE (bytes);
  CREATE TABLE IF NOT EXISTS stored_response_items (
    item_id text NOT NULL,
    owner text NOT NULL,
    response_id text NOT NULL,
    created bigint NOT NULL,
    PRIMARY KEY (item_id, owner)
  );
`;

/** Each item id of the response `r` (a CTE returning id, owner, created) indexed, in the same statement. */
const INDEX_ITEMS = (param: string) => `
  INSERT INTO stored_response_items (item_id, owner, response_id, created)
  SELECT i, r.owner, r.id, r.created FROM r, unnest(${param}::text[]) AS i
  ON CONFLICT (item_id, owner) DO UPDATE SET response_id = EXCLUDED.response_id, created = EXCLUDED.created`;

/**
 * The index entries still pointing at the responses of `gone` (a CTE returning id, owner, items),
 * deleted: one key lookup per item (unnested first, so the planner joins on the key).
 */
const UNINDEX_ITEMS = `
  DELETE FROM stored_response_items i
  USING (SELECT unnest(items) AS item_id, owner, id FROM gone) g
  WHERE i.item_id = g.item_id AND i.owner = g.owner AND i.response_id = g.id`;

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
  const ready = schemaOnce(pool, LOCK, SCHEMA);
  const query = async <R extends pg.QueryResultRow>(text: string, params: unknown[]) => {
    await ready();
    return pool.query<R>(text, params);
  };
  const running = RUNNING.map((s) => `'${s}'`).join(', ');
  return {
    ready,
    put: async (row: NewRow) => {
      await query(
        `WITH r AS (
           INSERT INTO stored_responses (id, owner, created, expires, status, background, bytes, items, response, input)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
           ON CONFLICT (id) DO UPDATE SET owner = EXCLUDED.owner, created = EXCLUDED.created, expires = EXCLUDED.expires,
             status = EXCLUDED.status, background = EXCLUDED.background, bytes = EXCLUDED.bytes,
             items = EXCLUDED.items, response = EXCLUDED.response, input = EXCLUDED.input
           RETURNING id, owner, created)
         ${INDEX_ITEMS('$8')}`,
        [
          row.id,
          row.owner,
          row.created,
          row.expires,
          row.status,
          row.background,
          rowBytes(row),
          row.items,
          row.response,
          row.input,
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
    findItem: async (itemId, owner) => {
      const { rows } = await (owner === undefined
        ? query<{ r: string }>(
            'SELECT response_id AS r FROM stored_response_items WHERE item_id = $1 ORDER BY created DESC LIMIT 1',
            [itemId],
          )
        : query<{ r: string }>('SELECT response_id AS r FROM stored_response_items WHERE item_id = $1 AND owner = $2', [
            itemId,
            owner,
          ]));
      return rows[0]?.r;
    },
    delete: async (id) => {
      const { rows } = await query<{ n: number }>(
        `WITH gone AS (DELETE FROM stored_responses WHERE id = $1 RETURNING id, owner, items),
         i AS (${UNINDEX_ITEMS})
         SELECT count(*)::int AS n FROM gone`,
        [id],
      );
      return (rows[0]?.n ?? 0) > 0;
    },
    settle: async (id, status, response) => {
      const { rows } = await query<{ n: number }>(
        `WITH r AS (
           UPDATE stored_responses SET status = $1, response = $2, bytes = $3 + octet_length(input),
             items = ARRAY(SELECT DISTINCT unnest(items || $5::text[]))
           WHERE id = $4 AND status IN (${running})
           RETURNING id, owner, created),
         i AS (${INDEX_ITEMS('$5')})
         SELECT count(*)::int AS n FROM r`,
        [status, response, Buffer.byteLength(response), id, itemIdsOf(response)],
      );
      return (rows[0]?.n ?? 0) > 0;
    },
    sweep: async (now) => {
      const { rows } = await query<{ n: number }>(
        `WITH gone AS (DELETE FROM stored_responses WHERE expires < $1 RETURNING id, owner, items),
         i AS (${UNINDEX_ITEMS})
         SELECT count(*)::int AS n FROM gone`,
        [now],
      );
      return rows[0]?.n ?? 0;
    },
    bytes: async () => {
      const { rows } = await query<{ b: string | null }>('SELECT SUM(bytes)::bigint AS b FROM stored_responses', []);
      return Number(rows[0]?.b ?? 0);
    },
  };
}
