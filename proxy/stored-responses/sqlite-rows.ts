import type Database from 'better-sqlite3';
import { itemIdsOf, type NewRow, type ResponseRows, RUNNING, rowBytes } from './rows.js';

/** Stored Responses in an SQLite file (their own beside the usage file, or a test's in memory): their tables, made on open. */

// Small columns first: the sweep and the size read `items` and `bytes` without reading through
// a large response's overflow pages. The item index is one B-tree (its key serves both lookups);
// an item leaves it with its response (delete, sweep), which lists its ids in `items`.
const SCHEMA = `
  CREATE TABLE IF NOT EXISTS stored_responses (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    created INTEGER NOT NULL,
    expires INTEGER NOT NULL,
    status TEXT NOT NULL,
    background INTEGER NOT NULL,
    bytes INTEGER NOT NULL,
    items TEXT NOT NULL,
    response TEXT NOT NULL,
    input TEXT NOT NULL
  );
  CREATE INDEX IF NOT EXISTS stored_responses_expires ON stored_responses(expires, bytes);
  CREATE TABLE IF NOT EXISTS stored_response_items (
    item_id TEXT NOT NULL,
    owner TEXT NOT NULL,
    response_id TEXT NOT NULL,
    created INTEGER NOT NULL,
    PRIMARY KEY (item_id, owner)
  ) WITHOUT ROWID;
`;

/** Rows swept per transaction: an hourly sweep of many rows never holds the thread for long. */
const SWEEP_CHUNK = 500;

/** What deleting a row needs: its items' index entries are keyed by item id and owner. */
interface Indexed {
  id: string;
  owner: string;
  created: number;
  items: string;
}

const RAW_COLUMNS = 'id, owner, created, expires, status, background, response, input';

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

/**
 * A file made by an earlier build of this change (never released, but its files exist where it
 * ran: `npm start` keeps usage.db in the working directory) has the rows without their `items`
 * and the item index keyed the other way. Its rows are set aside under EARLIER, put again once
 * the new tables exist, and EARLIER dropped in the same transaction: a crash between the two
 * steps leaves EARLIER for the next start to finish.
 */
const EARLIER = 'stored_responses_earlier';

function setEarlierLayoutAside(db: Database.Database): void {
  const columns = db.prepare<[], { name: string }>("SELECT name FROM pragma_table_info('stored_responses')").all();
  if (columns.length === 0 || columns.some((c) => c.name === 'items')) return;
  db.exec(`
    ALTER TABLE stored_responses RENAME TO ${EARLIER};
    DROP INDEX IF EXISTS stored_responses_expires;
    DROP TABLE IF EXISTS stored_response_items;
  `);
}

/** The transactions that change the rows, each over its prepared statements. */
function writesOf(db: Database.Database) {
  const put = db.prepare<[string, string, number, number, string, number, number, string, string, string]>(
    `INSERT OR REPLACE INTO stored_responses (id, owner, created, expires, status, background, bytes, items, response, input)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
  );
  const index = db.prepare<[string, string, string, number]>(
    'INSERT OR REPLACE INTO stored_response_items (item_id, owner, response_id, created) VALUES (?, ?, ?, ?)',
  );
  const indexed = db.prepare<[string], Indexed>('SELECT id, owner, created, items FROM stored_responses WHERE id = ?');
  const unindex = db.prepare<[string, string, string]>(
    'DELETE FROM stored_response_items WHERE item_id = ? AND owner = ? AND response_id = ?',
  );
  const del = db.prepare<[string]>('DELETE FROM stored_responses WHERE id = ?');
  const settleRow = db.prepare<[string, string, number, string, string]>(
    `UPDATE stored_responses SET status = ?, response = ?, bytes = ? + length(CAST(input AS BLOB)), items = ?
     WHERE id = ? AND status IN (${RUNNING.map((s) => `'${s}'`).join(', ')})`,
  );
  /** Deletes a response and the index entries that still point at it. */
  const remove = (row: Indexed): boolean => {
    for (const item of JSON.parse(row.items) as string[]) unindex.run(item, row.owner, row.id);
    return del.run(row.id).changes > 0;
  };
  return {
    indexed,
    putAll: db.transaction((rows: readonly NewRow[]) => {
      for (const r of rows) {
        const items = JSON.stringify(r.items);
        put.run(
          r.id,
          r.owner,
          r.created,
          r.expires,
          r.status,
          r.background ? 1 : 0,
          rowBytes(r),
          items,
          r.response,
          r.input,
        );
        for (const item of r.items) index.run(item, r.owner, r.id, r.created);
      }
    }),
    removeOne: db.transaction(remove),
    removeAll: db.transaction((rows: readonly Indexed[]) => {
      for (const row of rows) remove(row);
    }),
    settleAll: db.transaction((id: string, status: string, response: string): boolean => {
      const row = indexed.get(id);
      if (!row) return false;
      const added = itemIdsOf(response);
      const items = [...new Set([...(JSON.parse(row.items) as string[]), ...added])];
      if (settleRow.run(status, response, Buffer.byteLength(response), JSON.stringify(items), id).changes === 0)
        return false;
      for (const item of added) index.run(item, row.owner, id, row.created);
      return true;
    }),
  };
}

/**
 * The rows of concurrent requests put in one transaction per event-loop turn: a commit costs more
 * than a row (half the main thread at 16 callers, one commit each). Each caller still waits for
 * its row's commit; `commit` puts what waits now (every read calls it first, so nothing is read
 * around a row put before it).
 */
function batchedPuts(putAll: (rows: readonly NewRow[]) => void) {
  const waiting: Array<{ row: NewRow; done: () => void; failed: (err: unknown) => void }> = [];
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
  const put = (row: NewRow) =>
    new Promise<void>((done, failed) => {
      waiting.push({ row, done, failed });
      if (scheduled) return;
      scheduled = true;
      setImmediate(commit);
    });
  return { put, commit };
}

/** Rows moved per transaction of the stored Responses' file. */
const MOVE_CHUNK = 500;

/**
 * The rows that builds before the stored Responses had a file of their own (none released) kept
 * in the usage file (in either layout), moved into `db` and their tables dropped from the usage
 * file, once.
 * In one write transaction of the usage file, so that replicas starting together move them once;
 * a crash before the drop moves them again at the next start (a put replaces a row by its id).
 * The number of rows moved.
 */
export function moveRowsFrom(usage: Database.Database, db: Database.Database): number {
  const present = (name: string) =>
    usage
      .prepare<[string], { name: string }>("SELECT name FROM sqlite_master WHERE type = 'table' AND name = ?")
      .get(name);
  const tables = ['stored_responses', EARLIER].filter(present);
  if (tables.length === 0) return 0;
  sqliteRows(db);
  const { putAll } = writesOf(db);
  let moved = 0;
  usage
    .transaction(() => {
      for (const table of tables) {
        const read = usage.prepare<[number, number], Raw & { rowid: number }>(
          `SELECT rowid, ${RAW_COLUMNS} FROM ${table} WHERE rowid > ? ORDER BY rowid LIMIT ?`,
        );
        for (let chunk = read.all(0, MOVE_CHUNK); chunk.length > 0; ) {
          putAll(
            chunk.map(({ rowid: _, ...r }) => ({
              ...r,
              background: r.background === 1,
              items: itemIdsOf(r.response, r.input),
            })),
          );
          moved += chunk.length;
          chunk = chunk.length < MOVE_CHUNK ? [] : read.all((chunk.at(-1) as { rowid: number }).rowid, MOVE_CHUNK);
        }
      }
      usage.exec(
        `DROP TABLE IF EXISTS stored_response_items; DROP TABLE IF EXISTS stored_responses; DROP TABLE IF EXISTS ${EARLIER};`,
      );
    })
    .immediate();
  return moved;
}

export function sqliteRows(db: Database.Database): ResponseRows {
  db.transaction(() => {
    setEarlierLayoutAside(db);
    db.exec(SCHEMA);
  }).immediate();
  const { indexed, putAll, removeOne, removeAll, settleAll } = writesOf(db);
  if (db.prepare(`SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '${EARLIER}'`).get())
    db.transaction(() => {
      const rows = db.prepare<[], Raw>(`SELECT ${RAW_COLUMNS} FROM ${EARLIER}`).all();
      putAll(rows.map((r) => ({ ...r, background: r.background === 1, items: itemIdsOf(r.response, r.input) })));
      db.exec(`DROP TABLE ${EARLIER}`);
    }).immediate();
  const get = db.prepare<[string], Raw>(`SELECT ${RAW_COLUMNS} FROM stored_responses WHERE id = ?`);
  const findMine = db.prepare<[string, string], { r: string }>(
    'SELECT response_id AS r FROM stored_response_items WHERE item_id = ? AND owner = ?',
  );
  const findAny = db.prepare<[string], { r: string }>(
    'SELECT response_id AS r FROM stored_response_items WHERE item_id = ? ORDER BY created DESC LIMIT 1',
  );
  const expired = db.prepare<[number, number], Indexed>(
    'SELECT id, owner, created, items FROM stored_responses WHERE expires < ? LIMIT ?',
  );
  const bytes = db.prepare<[], { b: number | null }>('SELECT SUM(bytes) AS b FROM stored_responses');
  const { put, commit } = batchedPuts(putAll);
  return {
    ready: async () => {},
    put,
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
      const row = indexed.get(id);
      return row !== undefined && removeOne.immediate(row);
    },
    settle: async (id, status, response) => {
      commit();
      // Immediate: it reads before it writes, and a read transaction that later wants to write
      // fails at once (no busy wait) when another connection wrote in between (the usage inserts'
      // thread shares the file); taking the write lock first waits as every other write does.
      return settleAll.immediate(id, status, response);
    },
    sweep: async (now) => {
      commit();
      let swept = 0;
      for (;;) {
        const rows = expired.all(now, SWEEP_CHUNK);
        removeAll.immediate(rows);
        swept += rows.length;
        if (rows.length < SWEEP_CHUNK) return swept;
        // Requests run between chunks.
        await new Promise((r) => setImmediate(r));
      }
    },
    bytes: async () => {
      commit();
      return bytes.get()?.b ?? 0;
    },
  };
}
