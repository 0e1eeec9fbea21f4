import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { SqliteUsageStore } from '../usage/sqlite-store.js';
import { openStoredResponses, responsesFileOf } from './open.js';
import { itemIdsOf, type NewRow } from './rows.js';
import { sqliteRows } from './sqlite-rows.js';

/**
 * Where a standalone gateway keeps its stored Responses: a file of their own beside the usage file
 * (its own writer never waits on the usage records' writer), with what an earlier build kept
 * in the usage file moved there at start.
 */

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function usagePath(): string {
  const dir = mkdtempSync(join(tmpdir(), 'stored-open-'));
  dirs.push(dir);
  return join(dir, 'usage.db');
}

const row = (id: string): NewRow => {
  const response = JSON.stringify({ id, output: [{ id: `msg_${id}`, type: 'message' }] });
  const input = JSON.stringify([{ id: `in_${id}`, type: 'message' }]);
  const now = Date.now();
  return {
    id,
    owner: 'team:a',
    created: now,
    expires: now + 60_000,
    status: 'completed',
    background: false,
    response,
    input,
    items: itemIdsOf(response, input),
  };
};

const tables = (path: string): string[] => {
  const db = new Database(path, { readonly: true });
  try {
    return db
      .prepare<[], { name: string }>("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
      .all()
      .map((t) => t.name);
  } finally {
    db.close();
  }
};

const log = () => {
  const lines: Array<[string, Record<string, unknown> | undefined]> = [];
  return { lines, warn: () => {}, info: (m: string, f?: Record<string, unknown>) => lines.push([m, f]) };
};

describe('a standalone gateway’s stored Responses', () => {
  it('are written to a file of their own beside the usage file, and read back from it', async () => {
    const path = usagePath();
    const store = new SqliteUsageStore(path);
    const { stored, close } = openStoredResponses(store, {}, log());
    await stored.rows.put(row('resp_1'));
    expect((await stored.rows.get('resp_1'))?.id).toBe('resp_1');
    expect(await stored.rows.findItem('msg_resp_1', 'team:a')).toBe('resp_1');
    await close();
    await store.close();
    expect(existsSync(responsesFileOf(path))).toBe(true);
    expect(tables(responsesFileOf(path))).toContain('stored_responses');
    expect(tables(path)).not.toContain('stored_responses');
  });

  it('kept in the usage file by an earlier build are moved there once, items and all', async () => {
    const path = usagePath();
    const store = new SqliteUsageStore(path);
    // As an earlier build kept them: the tables in the usage file itself.
    const earlier = sqliteRows(store.db);
    await Promise.all(Array.from({ length: 1_203 }, (_, i) => earlier.put(row(`resp_${i}`))));
    const first = log();
    const opened = openStoredResponses(store, {}, first);
    expect(first.lines).toEqual([['stored responses moved from the usage file to their own', { rows: 1_203 }]]);
    expect((await opened.stored.rows.get('resp_1202'))?.status).toBe('completed');
    expect(await opened.stored.rows.findItem('in_resp_7', 'team:a')).toBe('resp_7');
    expect(tables(path).filter((t) => t.startsWith('stored_response'))).toEqual([]);
    await opened.close();

    // The next start finds nothing to move and keeps what was moved.
    const second = log();
    const again = openStoredResponses(store, {}, second);
    expect(second.lines).toEqual([]);
    expect((await again.stored.rows.get('resp_0'))?.id).toBe('resp_0');
    await again.close();
    await store.close();
  });
});
