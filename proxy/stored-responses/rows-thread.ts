import type Database from 'better-sqlite3';
import { AskedThread, besideThis } from '../threads/asked-thread.js';
import type { ResponseRows, StoredRow } from './rows.js';
import { sqliteRows } from './sqlite-rows.js';

/** What the writer thread is asked (each numbered by AskedThread): every change to the rows, and the size (a scan of an index). */
export type RowsWrite =
  | { kind: 'put'; row: StoredRow }
  | { kind: 'settle'; responseId: string; status: string; response: string }
  | { kind: 'delete'; responseId: string }
  | { kind: 'sweep'; now: number }
  | { kind: 'bytes' };

/**
 * Stored Responses in a usage file, written by a thread of their own. Storing a response was the
 * largest cost a Responses request paid on the request thread (an SQLite commit, and the fsync of
 * the checkpoints that follow: 260 µs per request at 16 callers, more than the rest of the
 * request), so it is paid on another thread, as the usage records' inserts are
 * (proxy/usage/reports.ts). A caller still waits for its row's commit, so a response is readable
 * once its answer is out. Reads stay here, on the request thread's own connection (WAL: they
 * never wait for the writer), and see every commit made before them. Should the thread die, the
 * writes are made here.
 */
class RowsThread extends AskedThread<RowsWrite> implements ResponseRows {
  constructor(
    path: string,
    private readonly here: ResponseRows,
  ) {
    super(besideThis(import.meta.url, 'rows-worker'), { path }, 'stored responses writer');
  }

  ready(): Promise<void> {
    return this.here.ready();
  }

  put(row: StoredRow): Promise<void> {
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

  get(id: string): Promise<StoredRow | undefined> {
    return this.here.get(id);
  }

  findItem(itemId: string, owner: string | undefined): Promise<string | undefined> {
    return this.here.findItem(itemId, owner);
  }
}

/** The rows of a usage file: written by a thread of their own, read on `db`, the request thread's connection. */
export function threadRows(db: Database.Database): ResponseRows & { close(): Promise<void> } {
  return new RowsThread(db.name, sqliteRows(db));
}
