import Database from 'better-sqlite3';
import { beforeEach, describe, expect, it } from 'vitest';
import { ProxyError } from '../endpoints/errors.js';
import { historyOf } from './history.js';
import { inputItems } from './items.js';
import { pageOf } from './routes.js';
import { itemIdsOf, type ResponseRows, type StoredRow } from './rows.js';
import { sqliteRows } from './sqlite-rows.js';

/** The expansion of previous_response_id over real SQLite rows, and the rows themselves. */

let rows: ResponseRows;
const DAY = 86_400_000;

/** A row put as the gateway puts it, its items listed. */
const put = (row: StoredRow) => rows.put({ ...row, items: itemIdsOf(row.response, row.input) });

/** A stored turn: its own input and one assistant answer, chained to `previous`. */
const turn = (id: string, said: string, answer: string, previous: string | null, over: Partial<StoredRow> = {}) =>
  put({
    id,
    owner: 'team:a',
    created: Date.now(),
    expires: Date.now() + DAY,
    status: 'completed',
    background: false,
    response: JSON.stringify({
      id,
      object: 'response',
      previous_response_id: previous,
      output: [
        { type: 'reasoning', id: 'rs_1', summary: [] },
        {
          type: 'message',
          id: `msg_${id}`,
          role: 'assistant',
          status: 'completed',
          content: [{ type: 'output_text', text: answer }],
        },
      ],
    }),
    input: JSON.stringify(inputItems(said)),
    ...over,
  });

const mine = (row: StoredRow) => row.owner === 'team:a';
const texts = (items: unknown) =>
  (items as Array<{ role: string; content: Array<{ text: string }> }>).map((i) => `${i.role}:${i.content[0]?.text}`);

beforeEach(() => {
  rows = sqliteRows(new Database(':memory:'));
});

describe('historyOf', () => {
  it('walks the chain back to its first turn: inputs and outputs oldest first, without ids or reasoning', async () => {
    await turn('resp_1', 'my word is kiwi', 'noted', null);
    await turn('resp_2', 'and yours?', 'mango', 'resp_1');
    await turn('resp_3', 'repeat both', 'kiwi, mango', 'resp_2');
    const history = await historyOf(rows, 'resp_3', mine);
    expect(texts(history)).toEqual([
      'user:my word is kiwi',
      'assistant:noted',
      'user:and yours?',
      'assistant:mango',
      'user:repeat both',
      'assistant:kiwi, mango',
    ]);
    expect(JSON.stringify(history)).not.toMatch(/"id"|reasoning/);
  });

  it("is OpenAI's 404 for a missing, deleted, expired or another team's response, anywhere along the chain", async () => {
    await turn('resp_1', 'a', 'b', null);
    await turn('resp_2', 'c', 'd', 'resp_1');
    await turn('resp_old', 'e', 'f', null, { expires: Date.now() - 1 });
    await turn('resp_theirs', 'g', 'h', null, { owner: 'team:b' });
    for (const id of ['resp_none', 'resp_old', 'resp_theirs']) {
      const err = await historyOf(rows, id, mine);
      expect(err).toBeInstanceOf(ProxyError);
      expect(err).toMatchObject({ status: 404, code: 'previous_response_not_found', param: 'previous_response_id' });
    }
    await rows.delete('resp_1');
    expect(await historyOf(rows, 'resp_2', mine)).toMatchObject({
      status: 404,
      message: expect.stringContaining('resp_1'),
    });
    // An admin's view (every row) reads another team's.
    expect(texts(await historyOf(rows, 'resp_theirs', () => true))).toEqual(['user:g', 'assistant:h']);
  });

  it('is bounded in turns, items and bytes, and refuses a response still running', async () => {
    await turn('resp_1', 'a', 'b', null);
    await turn('resp_2', 'c', 'd', 'resp_1');
    await turn('resp_3', 'e', 'f', 'resp_2');
    const bounds = { maxTurns: 3, maxItems: 100, maxBytes: 1_000_000 };
    expect(await historyOf(rows, 'resp_3', mine, bounds)).toHaveLength(6);
    expect(await historyOf(rows, 'resp_3', mine, { ...bounds, maxTurns: 2 })).toMatchObject({
      status: 400,
      code: 'conversation_too_long',
    });
    expect(await historyOf(rows, 'resp_3', mine, { ...bounds, maxItems: 5 })).toMatchObject({ status: 400 });
    expect(await historyOf(rows, 'resp_3', mine, { ...bounds, maxBytes: 500 })).toMatchObject({ status: 400 });
    // Bytes, not UTF-16 units: 'é' is two of them.
    await turn('resp_wide', 'é'.repeat(1_000), 'b', null);
    const wide = { ...bounds, maxBytes: 1_500 };
    expect(await historyOf(rows, 'resp_wide', mine, wide)).toMatchObject({
      status: 400,
      code: 'conversation_too_long',
    });
    // A chain that loops (never made by the gateway) ends too.
    await turn('resp_x', 'x', 'y', 'resp_y');
    await turn('resp_y', 'x', 'y', 'resp_x');
    expect(await historyOf(rows, 'resp_x', mine)).toMatchObject({ code: 'conversation_too_long' });
    await turn('resp_q', 'q', 'r', null, { status: 'queued' });
    expect(await historyOf(rows, 'resp_q', mine)).toMatchObject({ status: 400, code: 'previous_response_not_ready' });
  });
});

describe('the SQLite rows', () => {
  it('settle only a running row, sweep the expired ones, and count their bytes', async () => {
    await turn('resp_1', 'a', 'b', null, { status: 'in_progress', background: true });
    await turn('resp_2', 'c', 'd', null, { expires: Date.now() - 1 });
    const before = await rows.bytes();
    expect(before).toBeGreaterThan(0);
    expect(await rows.settle('resp_1', 'cancelled', '{"status":"cancelled"}')).toBe(true);
    expect(await rows.settle('resp_1', 'completed', '{"status":"completed"}')).toBe(false);
    expect(await rows.get('resp_1')).toMatchObject({
      status: 'cancelled',
      background: true,
      response: '{"status":"cancelled"}',
    });
    expect(await rows.bytes()).toBeLessThan(before);
    expect(await rows.sweep(Date.now())).toBe(1);
    expect(await rows.get('resp_2')).toBeUndefined();
    expect(await rows.delete('resp_1')).toBe(true);
    expect(await rows.delete('resp_1')).toBe(false);
    expect(await rows.bytes()).toBe(0);
  });
});

describe('the SQLite rows of concurrent requests', () => {
  it('are committed together, each caller told once its row is in, and read by anyone right after', async () => {
    const many = Array.from({ length: 30 }, (_, i) => turn(`resp_c${i}`, `q${i}`, `a${i}`, null));
    // Not yet awaited: a read commits what waits first, so it never misses a row put before it.
    expect((await rows.get('resp_c29'))?.id).toBe('resp_c29');
    await Promise.all(many);
    for (let i = 0; i < 30; i++) expect((await rows.get(`resp_c${i}`))?.status).toBe('completed');
    expect(await rows.findItem('msg_resp_c7', 'team:a')).toBe('resp_c7');
  });
});

describe('the item index', () => {
  it("finds an item's newest response within its owner (any owner for an admin), and forgets deleted and expired ones", async () => {
    await turn('resp_1', 'a', 'b', null);
    await turn('resp_2', 'c', 'd', null, { owner: 'team:b' });
    expect(await rows.findItem('msg_resp_1', 'team:a')).toBe('resp_1');
    expect(await rows.findItem('msg_resp_2', 'team:a')).toBeUndefined();
    expect(await rows.findItem('msg_resp_2', undefined)).toBe('resp_2');
    const inputId = (JSON.parse((await rows.get('resp_1'))?.input ?? '[]') as Array<{ id: string }>)[0]?.id ?? '';
    expect(inputId).toMatch(/^msg_[0-9a-f]{48}$/);
    expect(await rows.findItem(inputId, 'team:a')).toBe('resp_1');
    // A background response's output is indexed when it settles.
    await turn('resp_bg', 'e', 'f', null, { status: 'in_progress', response: '{"output":[]}' });
    expect(await rows.findItem('msg_late', 'team:a')).toBeUndefined();
    await rows.settle('resp_bg', 'completed', JSON.stringify({ output: [{ id: 'msg_late', type: 'message' }] }));
    expect(await rows.findItem('msg_late', 'team:a')).toBe('resp_bg');
    await rows.delete('resp_1');
    expect(await rows.findItem('msg_resp_1', 'team:a')).toBeUndefined();
    await turn('resp_3', 'g', 'h', null, { expires: Date.now() - 1 });
    await rows.sweep(Date.now());
    expect(await rows.findItem('msg_resp_3', 'team:a')).toBeUndefined();
  });
});

describe('the SQLite rows in numbers', () => {
  it('sweep more than one chunk of expired rows with their items, and read the size from an index', async () => {
    const db = new Database(':memory:');
    rows = sqliteRows(db);
    await Promise.all(
      Array.from({ length: 1_200 }, (_, i) => turn(`resp_old${i}`, `q${i}`, `a${i}`, null, { expires: 1 })),
    );
    await turn('resp_kept', 'q', 'a', null);
    expect(await rows.sweep(Date.now())).toBe(1_200);
    const count = (table: string) => (db.prepare(`SELECT count(*) AS n FROM ${table}`).get() as { n: number }).n;
    expect(count('stored_responses')).toBe(1);
    // Its input, reasoning and message items: nothing of the swept rows is left in the index.
    expect(count('stored_response_items')).toBe(3);
    expect(await rows.findItem('msg_resp_kept', 'team:a')).toBe('resp_kept');
    // The size gauge reads every row: from a narrow index, not through the responses' pages.
    const plan = db.prepare('EXPLAIN QUERY PLAN SELECT SUM(bytes) AS b FROM stored_responses').all();
    expect(JSON.stringify(plan)).toContain('COVERING INDEX');
  });
});

describe('a file of the earlier layout', () => {
  it('is rebuilt on open, every row kept and its items indexed', async () => {
    const db = new Database(':memory:');
    // The layout of an earlier, unreleased build: no items column, the index keyed (owner, item_id).
    db.exec(`
      CREATE TABLE stored_responses (id TEXT PRIMARY KEY, owner TEXT NOT NULL, created INTEGER NOT NULL,
        expires INTEGER NOT NULL, status TEXT NOT NULL, background INTEGER NOT NULL, response TEXT NOT NULL,
        input TEXT NOT NULL, bytes INTEGER NOT NULL);
      CREATE INDEX stored_responses_expires ON stored_responses(expires);
      CREATE TABLE stored_response_items (owner TEXT NOT NULL, item_id TEXT NOT NULL, response_id TEXT NOT NULL,
        created INTEGER NOT NULL, expires INTEGER NOT NULL, PRIMARY KEY (owner, item_id));
    `);
    const response = JSON.stringify({ id: 'resp_old', output: [{ id: 'msg_old', type: 'message' }] });
    db.prepare('INSERT INTO stored_responses VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)').run(
      'resp_old',
      'team:a',
      1,
      Date.now() + DAY,
      'completed',
      0,
      response,
      '[{"id":"msg_in","type":"message"}]',
      10,
    );
    rows = sqliteRows(db);
    expect(await rows.get('resp_old')).toMatchObject({ id: 'resp_old', owner: 'team:a', response, background: false });
    expect(await rows.findItem('msg_old', 'team:a')).toBe('resp_old');
    expect(await rows.findItem('msg_in', 'team:a')).toBe('resp_old');
    const plan = db.prepare('EXPLAIN QUERY PLAN SELECT SUM(bytes) AS b FROM stored_responses').all();
    expect(JSON.stringify(plan)).toContain('COVERING INDEX');
    expect(db.prepare("SELECT name FROM sqlite_master WHERE name = 'stored_responses_earlier'").get()).toBeUndefined();
    // Opened again, nothing changes.
    rows = sqliteRows(db);
    expect((await rows.get('resp_old'))?.id).toBe('resp_old');
  });
});

describe('pageOf', () => {
  const items = ['a', 'b', 'c', 'd', 'e'].map((id) => ({ id }));
  const page = (q: string) => pageOf(items, new URLSearchParams(q));
  it('pages as the spec lists: newest first by default, after an id, has_more', () => {
    expect(page('')).toEqual({
      object: 'list',
      data: [...items].reverse(),
      first_id: 'e',
      last_id: 'a',
      has_more: false,
    });
    expect(page('limit=2')).toMatchObject({ first_id: 'e', last_id: 'd', has_more: true });
    expect(page('limit=2&after=d')).toMatchObject({ first_id: 'c', last_id: 'b', has_more: true });
    expect(page('order=asc&after=d')).toMatchObject({ data: [{ id: 'e' }], has_more: false });
    expect(page('order=asc&after=e')).toEqual({
      object: 'list',
      data: [],
      first_id: null,
      last_id: null,
      has_more: false,
    });
    for (const bad of ['limit=0', 'limit=101', 'limit=x', 'order=up', 'after=zz'])
      expect(() => page(bad)).toThrow(ProxyError);
  });
});
