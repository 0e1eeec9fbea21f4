import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { itemIdsOf, type NewRow, type StoredRow } from './rows.js';
import { threadRows } from './rows-thread.js';

/** The rows of a usage file written by their own thread, read on the request thread's connection. */

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function usageFile(): Database.Database {
  const dir = mkdtempSync(join(tmpdir(), 'rows-thread-'));
  dirs.push(dir);
  const db = new Database(join(dir, 'usage.db'));
  db.pragma('journal_mode = WAL');
  return db;
}

const row = (id: string, over: Partial<StoredRow> = {}): NewRow => {
  const made: StoredRow = {
    id,
    owner: 'team:a',
    created: Date.now(),
    expires: Date.now() + 60_000,
    status: 'completed',
    background: false,
    response: JSON.stringify({ id, output: [{ id: `msg_${id}`, type: 'message' }] }),
    input: JSON.stringify([{ id: `in_${id}`, type: 'message' }]),
    ...over,
  };
  // As the gateway puts it: its items listed by its maker (a null input, on purpose, lists none).
  return { ...made, items: typeof made.input === 'string' ? itemIdsOf(made.response, made.input) : [] };
};

describe('stored Responses written by their own thread', () => {
  it('are readable here once put resolves: get, items, settle, delete, sweep and the size', async () => {
    const db = usageFile();
    const rows = threadRows(db);
    try {
      await Promise.all(Array.from({ length: 20 }, (_, i) => rows.put(row(`resp_${i}`))));
      for (let i = 0; i < 20; i++) expect((await rows.get(`resp_${i}`))?.id).toBe(`resp_${i}`);
      expect(await rows.findItem('msg_resp_3', 'team:a')).toBe('resp_3');
      expect(await rows.findItem('in_resp_3', 'team:b')).toBeUndefined();
      await rows.put(row('resp_bg', { status: 'in_progress', background: true, response: '{"output":[]}' }));
      expect(await rows.settle('resp_bg', 'completed', '{"output":[{"id":"msg_late"}]}')).toBe(true);
      expect(await rows.settle('resp_bg', 'cancelled', '{}')).toBe(false);
      expect(await rows.findItem('msg_late', undefined)).toBe('resp_bg');
      expect(await rows.delete('resp_3')).toBe(true);
      expect(await rows.get('resp_3')).toBeUndefined();
      expect(await rows.findItem('msg_resp_3', 'team:a')).toBeUndefined();
      await rows.put(row('resp_old', { expires: 1 }));
      expect(await rows.sweep(Date.now())).toBe(1);
      const bytes = await rows.bytes();
      const sum = db.prepare('SELECT SUM(bytes) AS b FROM stored_responses').get() as { b: number };
      expect(bytes).toBe(sum.b);
      // Committed to the file, read on the request thread's connection.
      expect(db.prepare('SELECT count(*) AS n FROM stored_responses').get()).toEqual({ n: 20 });
    } finally {
      await rows.close();
      db.close();
    }
  });

  it('are written on a connection of their own: a put waits for a lock held here, the thread not', async () => {
    const db = usageFile();
    const rows = threadRows(db);
    try {
      await rows.put(row('resp_first'));
      db.exec('BEGIN IMMEDIATE');
      let stored = false;
      const put = rows.put(row('resp_locked')).then(() => {
        stored = true;
      });
      // Made here, the put would go into this connection's open transaction at once.
      await new Promise((r) => setTimeout(r, 300));
      expect(stored).toBe(false);
      db.exec('COMMIT');
      await put;
      expect((await rows.get('resp_locked'))?.id).toBe('resp_locked');
    } finally {
      await rows.close();
      db.close();
    }
  });

  it("asked together, each is answered alone: one row's failure is its own", async () => {
    const db = usageFile();
    const rows = threadRows(db);
    try {
      // One turn's questions travel as one message: the bad row (no input) must not take the others down.
      const asked = [
        rows.put(row('resp_a')),
        rows.put(row('resp_bad', { input: null as unknown as string })),
        rows.put(row('resp_b')),
        rows.bytes(),
      ];
      const [a, bad, b, bytes] = await Promise.allSettled(asked);
      expect([a?.status, bad?.status, b?.status, bytes?.status]).toEqual([
        'fulfilled',
        'rejected',
        'fulfilled',
        'fulfilled',
      ]);
      // The thread's own error, carried back.
      expect(bad?.status === 'rejected' && String(bad.reason)).toMatch(/Received null/);
      expect((await rows.get('resp_a'))?.id).toBe('resp_a');
      expect((await rows.get('resp_b'))?.id).toBe('resp_b');
      expect(await rows.get('resp_bad')).toBeUndefined();
    } finally {
      await rows.close();
      db.close();
    }
  });

  it('closes once what it was handed is committed', async () => {
    const db = usageFile();
    const rows = threadRows(db);
    const puts = Array.from({ length: 50 }, (_, i) => rows.put(row(`resp_late${i}`)));
    await rows.close();
    await Promise.all(puts);
    expect(db.prepare('SELECT count(*) AS n FROM stored_responses').get()).toEqual({ n: 50 });
    db.close();
  });

  it('are written here once the thread is gone, and nothing put is lost', async () => {
    const db = usageFile();
    const rows = threadRows(db);
    await rows.put(row('resp_before'));
    await rows.close();
    await rows.put(row('resp_after'));
    expect(await rows.delete('resp_before')).toBe(true);
    expect((await rows.get('resp_after'))?.id).toBe('resp_after');
    expect(await rows.findItem('msg_resp_after', 'team:a')).toBe('resp_after');
    db.close();
  });
});
