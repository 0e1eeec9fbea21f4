import type Database from 'better-sqlite3';
import { AskedThread, besideThis } from '../threads/asked-thread.js';
import type { NewRow, ResponseRows } from './rows.js';
import { sqliteRows } from './sqlite-rows.js';

/** What the writer thread is asked (each numbered by AskedThread): every change to the rows, and the size (a scan of an index). */
export type RowsWrite =
  | { kind: 'put'; row: NewRow }
  | { kind: 'settle'; responseId: string; status: string; response: string }
  | { kind: 'delete'; responseId: string }
  | { kind: 'sweep'; now: number }
  | { kind: 'bytes' };

/** The writer thread: every change to the rows, made here instead once it is gone. */
class RowsThread extends AskedThread<RowsWrite> {
  constructor(
    path: string,
    private readonly here: ResponseRows,
  ) {
    super(besideThis(import.meta.url, 'rows-worker'), { path }, 'stored responses writer');
  }

  put(row: NewRow): Promise<void> {
    return this.dead ? this.here.put(row) : this.ask({ kind: 'put', row });
  }

  settle(id: string, status: string, response: string): Promise<boolean> {
    return this.dead
      ? this.here.settle(id, status, response)
      : this.ask({ kind: 'settle', responseId: id, status, response });
  }

  delete(id: string): Promise<boolean> {
    return this.dead ? this.here.delete(id) : this.ask({ kind: 'delete', responseId: id });
  }

  sweep(now: number): Promise<number> {
    return this.dead ? this.here.sweep(now) : this.ask({ kind: 'sweep', now });
  }

  bytes(): Promise<number> {
    return this.dead ? this.here.bytes() : this.ask({ kind: 'bytes' });
  }
}

/**
 * Stored Responses in their SQLite file, written by a thread of their own. Storing a response was the
 * largest cost a Responses request paid on the request thread (an SQLite commit, and the fsync of
 * the checkpoints that follow: 260 µs per request at 16 callers, more than the rest of the
 * request), so it is paid on another thread, as the usage records' inserts are
 * (proxy/usage/reports.ts). A caller still waits for its row's commit, so a response is readable
 * once its answer is out. Reads stay on `db`, the request thread's own connection (WAL: they never
 * wait for the writer), and see every commit made before them. The thread starts with the first
 * row written (a gateway never asked to store a response runs none); should it die, writes are
 * made here.
 */
export function threadRows(db: Database.Database): ResponseRows & { close(): Promise<void> } {
  const here = sqliteRows(db);
  let thread: RowsThread | undefined;
  const writer = () => {
    thread ??= new RowsThread(db.name, here);
    return thread;
  };
  return {
    ready: () => here.ready(),
    get: (id) => here.get(id),
    findItem: (itemId, owner) => here.findItem(itemId, owner),
    put: (row) => writer().put(row),
    settle: (id, status, response) => writer().settle(id, status, response),
    delete: (id) => writer().delete(id),
    // Before the first write these run here: the sweep at start (in chunks, between requests)
    // and the size a scrape reads must not start a thread for a gateway never asked to store.
    sweep: (now) => (thread ? thread.sweep(now) : here.sweep(now)),
    bytes: () => (thread ? thread.bytes() : here.bytes()),
    close: async () => {
      await thread?.close();
    },
  };
}
