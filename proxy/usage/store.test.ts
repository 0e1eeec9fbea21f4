import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Counter, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import {
  expectRoutedAfterUpgrade,
  range,
  rec,
  routed,
  T0,
  tag,
  toolCall,
  usageStoreContract,
} from '../../e2e/support/usage-store-contract.js';
import { ProxyError } from '../endpoints/errors.js';
import { parseToolCallQuery, parseToolQuery, parseUsageQuery } from './api.js';
import { boundPayload, boundRecord, MAX_PAYLOAD_BYTES, PAYLOAD_CUT } from './record-columns.js';
import { UsageRecorder } from './recorder.js';
import { BUCKET_COLUMNS } from './rollups.js';
import { SqliteUsageStore } from './sqlite-store.js';

const dbFile = () => join(mkdtempSync(join(tmpdir(), 'usage-')), 'usage.db');

/** The store contract on SQLite; on PostgreSQL it runs in the e2e tier (e2e/no-cluster/usage-store-postgres.e2e.test.ts). */
usageStoreContract([
  [
    'SQLite',
    async () => {
      const file = dbFile();
      return { store: new SqliteUsageStore(file), reopen: async () => new SqliteUsageStore(file) };
    },
  ],
]);

describe('UsageRecorder', () => {
  it('writes batches off the request path and drops (counting) when its queue is full', async () => {
    const store = new SqliteUsageStore(':memory:');
    const registry = new Registry();
    const dropped = new Counter({ name: 'dropped', help: 'x', registers: [registry] });
    const recorder = new UsageRecorder({ store, maxQueue: 3, flushMs: 60_000, dropped });
    for (let i = 0; i < 5; i++) recorder.record(rec({ at: T0 }));
    expect(await store.count()).toBe(0);
    expect(recorder.pending).toBe(3);
    await recorder.close();
    expect(await store.count()).toBe(3);
    expect((await dropped.get()).values[0]?.value).toBe(2);
  });

  it('writes a batch of what a flush found: records that come while it writes wait for the next flush', async () => {
    const batches: number[] = [];
    let release: () => void = () => {};
    let hold = true;
    const store = {
      insert: async (records: readonly unknown[]) => {
        batches.push(records.length);
        if (hold) await new Promise<void>((r) => (release = r));
      },
    };
    const recorder = new UsageRecorder({ store, flushMs: 60_000 });
    for (let i = 0; i < 3; i++) recorder.record(rec({ at: T0 }));
    const first = recorder.flush();
    // Two come while the first batch is being written: not a transaction of their own right after it.
    recorder.record(rec({ at: T0 }));
    recorder.record(rec({ at: T0 }));
    hold = false;
    release();
    await first;
    expect(batches).toEqual([3]);
    expect(recorder.pending).toBe(2);

    // A flush asked for while one writes is not answered by that one: it writes what it found, after it.
    hold = true;
    const second = recorder.flush();
    recorder.record(rec({ at: T0 }));
    const third = recorder.flush();
    hold = false;
    release();
    await third;
    await second;
    expect(batches).toEqual([3, 2, 1]);
    expect(recorder.pending).toBe(0);
    await recorder.close();
  });
});

describe('parseUsageQuery', () => {
  const now = new Date('2026-11-21T12:00:00Z');
  it('defaults to the last 7 days by day, grouped by model', () => {
    const q = parseUsageQuery(new URLSearchParams(), now);
    expect(q).toEqual({
      from: new Date('2026-11-14T12:00:00Z'),
      to: now,
      granularity: 'day',
      groupBy: 'model',
      tags: [],
      limit: 20,
    });
    expect(parseUsageQuery(new URLSearchParams('limit=5'), now)).toMatchObject({ limit: 5 });
    for (const bad of ['0', '101', '2.5', 'x']) {
      expect(parseUsageQuery(new URLSearchParams(`limit=${bad}`), now)).toMatchObject({ status: 400, param: 'limit' });
    }
  });

  it('reads repeated tags and rejects bad parameters with 400', () => {
    const q = parseUsageQuery(
      new URLSearchParams('tag=team:ml&tag=project:x&groupBy=team&from=2026-11-21T00:00:00Z'),
      now,
    );
    expect(q instanceof ProxyError ? q.message : q.tags).toEqual([tag('team', 'ml'), tag('project', 'x')]);
    for (const bad of [
      'from=yesterday',
      'granularity=week',
      'groupBy=a%20b',
      'tag=nocolon',
      'from=2026-11-22T00:00:00Z',
    ]) {
      const r = parseUsageQuery(new URLSearchParams(bad), now);
      expect(r, bad).toBeInstanceOf(ProxyError);
      expect(r instanceof ProxyError && r.status).toBe(400);
    }
  });
});

describe('a SQLite usage file from before teams', () => {
  it('gets the team column in its rollups and keeps every row', async () => {
    const file = dbFile();
    const Database = (await import('better-sqlite3')).default;
    const old = new Database(file);
    old.exec(`CREATE TABLE rollup (hour INTEGER NOT NULL, model TEXT NOT NULL, provider TEXT NOT NULL,
      tag_key TEXT NOT NULL, tag_value TEXT NOT NULL, requests INTEGER NOT NULL, errors INTEGER NOT NULL,
      prompt INTEGER NOT NULL, completion INTEGER NOT NULL, cost REAL NOT NULL, savings REAL NOT NULL,
      b0 INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (hour, model, provider, tag_key, tag_value))`);
    old.exec(
      `INSERT INTO rollup VALUES (${T0}, 'llama3.1:8b', 'platform-llms/llama', '', '', 7, 0, 70, 140, 0.7, 0, 7)`,
    );
    old.close();
    const store = new SqliteUsageStore(file);
    await store.insert([rec({ at: T0, team: 'ml' })]);
    const r = await store.usage({ ...range, granularity: 'day', groupBy: 'model', tags: [] });
    expect(r.totals.requests).toBe(8);
    expect(
      (await store.usage({ ...range, granularity: 'day', groupBy: 'model', tags: [], team: 'ml' })).totals.requests,
    ).toBe(1);
    await store.close();
    // Opening it again changes nothing.
    const again = new SqliteUsageStore(file);
    expect((await again.usage({ ...range, granularity: 'day', groupBy: 'model', tags: [] })).totals.requests).toBe(8);
    await again.close();
  });
});

describe('a SQLite usage file from before endpoints', () => {
  it('gets the endpoint column in its records and rollups, keeping every row under endpoint ""', async () => {
    const file = dbFile();
    const Database = (await import('better-sqlite3')).default;
    const old = new Database(file);
    old.exec(`CREATE TABLE rollup (hour INTEGER NOT NULL, model TEXT NOT NULL, provider TEXT NOT NULL,
      team TEXT NOT NULL DEFAULT '', tag_key TEXT NOT NULL, tag_value TEXT NOT NULL, requests INTEGER NOT NULL,
      errors INTEGER NOT NULL, prompt INTEGER NOT NULL, completion INTEGER NOT NULL, cost REAL NOT NULL,
      savings REAL NOT NULL, b0 INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (hour, model, provider, team, tag_key, tag_value))`);
    old.exec(
      `INSERT INTO rollup VALUES (${T0}, 'llama3.1:8b', 'platform-llms/llama', 'ml', '', '', 7, 0, 70, 140, 0.7, 0, 7)`,
    );
    old.close();
    const store = new SqliteUsageStore(file);
    await store.insert([rec({ at: T0, team: 'ml', endpoint: 'messages' })]);
    const r = await store.usage({ ...range, granularity: 'day', groupBy: 'endpoint', tags: [] });
    expect(r.groups.map((g) => [g.group, g.requests])).toEqual([
      ['', 7],
      ['messages', 1],
    ]);
    await store.close();
  });
});

describe('a SQLite usage file from before tool calls', () => {
  it('gets the byte and payload columns in its records and rollups, rows of before having none', async () => {
    const file = dbFile();
    const Database = (await import('better-sqlite3')).default;
    const old = new Database(file);
    // The tables as they were before (a file of the endpoints' version).
    old.exec(`CREATE TABLE requests (id INTEGER PRIMARY KEY, ts INTEGER NOT NULL, request_id TEXT NOT NULL,
      key_prefix TEXT NOT NULL, model TEXT NOT NULL, provider TEXT NOT NULL, tags TEXT NOT NULL,
      prompt INTEGER NOT NULL, completion INTEGER NOT NULL, cost REAL NOT NULL, savings REAL NOT NULL,
      latency_ms REAL NOT NULL, ttft_ms REAL, status INTEGER NOT NULL, error_type TEXT, stream INTEGER NOT NULL,
      tokens_counted INTEGER NOT NULL DEFAULT 0, unpriced INTEGER NOT NULL DEFAULT 0, team TEXT NOT NULL DEFAULT '',
      api_key TEXT NOT NULL DEFAULT '', endpoint TEXT NOT NULL DEFAULT '')`);
    old.exec(`CREATE TABLE rollup (hour INTEGER NOT NULL, model TEXT NOT NULL, endpoint TEXT NOT NULL DEFAULT '',
      provider TEXT NOT NULL, team TEXT NOT NULL DEFAULT '', tag_key TEXT NOT NULL, tag_value TEXT NOT NULL,
      requests INTEGER NOT NULL, errors INTEGER NOT NULL, prompt INTEGER NOT NULL, completion INTEGER NOT NULL,
      cost REAL NOT NULL, savings REAL NOT NULL, ${BUCKET_COLUMNS.map((c) => `${c} INTEGER NOT NULL DEFAULT 0`).join(', ')},
      PRIMARY KEY (hour, model, endpoint, provider, team, tag_key, tag_value))`);
    old.exec(`INSERT INTO requests (ts, request_id, key_prefix, model, provider, tags, prompt, completion, cost, savings,
      latency_ms, status, stream, endpoint) VALUES (${T0}, 'old', 'k', 'echo', 'everything', '[]', 0, 0, 0, 0, 40, 200, 0, 'mcp')`);
    old.exec(`INSERT INTO rollup (hour, model, endpoint, provider, team, tag_key, tag_value, requests, errors, prompt,
      completion, cost, savings, b6) VALUES (${T0}, 'echo', 'mcp', 'everything', '', '', '', 1, 0, 0, 0, 0, 0, 1)`);
    old.close();
    const store = new SqliteUsageStore(file);
    await store.insert([toolCall({ at: T0 + 1000, bytesIn: 7, bytesOut: 9, payload: '{}' })]);
    const r = await store.tools({ ...range, granularity: 'day', groupBy: 'tool', tags: [] });
    expect(r.groups).toMatchObject([{ server: 'everything', tool: 'echo', calls: 2, bytesIn: 7, bytesOut: 9 }]);
    const [fresh, before] = await store.toolCalls({ ...range, tags: [] });
    expect(fresh).toMatchObject({ bytesIn: 7, bytesOut: 9, payload: '{}' });
    expect(before?.requestId).toBe('old');
    expect(before && ('bytesIn' in before || 'payload' in before)).toBe(false);
    await store.close();
    // Opening it again changes nothing.
    const again = new SqliteUsageStore(file);
    expect((await again.tools({ ...range, granularity: 'day', groupBy: 'tool', tags: [] })).totals.calls).toBe(2);
    await again.close();
  });
});

describe('a SQLite usage file from before routing', () => {
  it('gets the routing columns in its records and rollups, rows of before routing nothing', async () => {
    const file = dbFile();
    const Database = (await import('better-sqlite3')).default;
    const old = new Database(file);
    // The tables as they were before (a file of the tool calls' version).
    old.exec(`CREATE TABLE requests (id INTEGER PRIMARY KEY, ts INTEGER NOT NULL, request_id TEXT NOT NULL,
      key_prefix TEXT NOT NULL, model TEXT NOT NULL, provider TEXT NOT NULL, tags TEXT NOT NULL,
      prompt INTEGER NOT NULL, completion INTEGER NOT NULL, cost REAL NOT NULL, savings REAL NOT NULL,
      latency_ms REAL NOT NULL, ttft_ms REAL, status INTEGER NOT NULL, error_type TEXT, stream INTEGER NOT NULL,
      tokens_counted INTEGER NOT NULL DEFAULT 0, unpriced INTEGER NOT NULL DEFAULT 0, team TEXT NOT NULL DEFAULT '',
      api_key TEXT NOT NULL DEFAULT '', endpoint TEXT NOT NULL DEFAULT '', bytes_in INTEGER, bytes_out INTEGER,
      payload TEXT)`);
    old.exec(`CREATE TABLE rollup (hour INTEGER NOT NULL, model TEXT NOT NULL, endpoint TEXT NOT NULL DEFAULT '',
      provider TEXT NOT NULL, team TEXT NOT NULL DEFAULT '', tag_key TEXT NOT NULL, tag_value TEXT NOT NULL,
      requests INTEGER NOT NULL, errors INTEGER NOT NULL, prompt INTEGER NOT NULL, completion INTEGER NOT NULL,
      cost REAL NOT NULL, savings REAL NOT NULL, bytes_in INTEGER NOT NULL DEFAULT 0, bytes_out INTEGER NOT NULL DEFAULT 0,
      ${BUCKET_COLUMNS.map((c) => `${c} INTEGER NOT NULL DEFAULT 0`).join(', ')},
      PRIMARY KEY (hour, model, endpoint, provider, team, tag_key, tag_value))`);
    old.exec(`INSERT INTO requests (ts, request_id, key_prefix, model, provider, tags, prompt, completion, cost, savings,
      latency_ms, status, stream, endpoint, team) VALUES (${T0}, 'old', 'k', 'llama3.1:8b', 'platform-llms/llama',
      '["team:ml"]', 10, 20, 0.3, 0, 40, 200, 0, 'chat', 'ml')`);
    old.exec(`CREATE TABLE request_tags (request INTEGER NOT NULL, tag TEXT NOT NULL, ts INTEGER NOT NULL);
      INSERT INTO request_tags (request, tag, ts) VALUES (1, 'team:ml', ${T0})`);
    old.exec(`INSERT INTO rollup (hour, model, endpoint, provider, team, tag_key, tag_value, requests, errors, prompt,
      completion, cost, savings, b6) VALUES (${T0}, 'llama3.1:8b', 'chat', 'platform-llms/llama', 'ml', '', '', 1, 0, 10,
      20, 0.3, 0, 1), (${T0}, 'llama3.1:8b', 'chat', 'platform-llms/llama', 'ml', 'team', 'ml', 1, 0, 10, 20, 0.3, 0, 1)`);
    old.close();
    const store = new SqliteUsageStore(file);
    await expectRoutedAfterUpgrade(store);
    const q = { ...range, granularity: 'day' as const, groupBy: 'team', tags: [] };
    await store.close();
    // Opening it again changes nothing.
    const again = new SqliteUsageStore(file);
    expect((await again.usage(q)).totals).toMatchObject({ requests: 4, routedRequests: 2, routingSavingsUsd: 0.9 });
    // Its rows were served; an answer a crash cut counts apart, its cost in the cost.
    expect((await again.usage(q)).totals.undeliveredRequests).toBe(0);
    await again.insert([rec({ at: T0, tags: [tag('team', 'ml')], costUsd: 0.5, status: 502, delivered: false })]);
    expect((await again.usage(q)).totals).toMatchObject({ requests: 4, undeliveredRequests: 1 });
    await again.close();
  });
});

describe('routed requests in SQLite', () => {
  it('keeps what was asked, the policy, the reason, whole escalations and a finite counterfactual on each record', async () => {
    const file = dbFile();
    const store = new SqliteUsageStore(file);
    const ml = [tag('team', 'ml')];
    await store.insert([
      { ...routed({ at: T0, escalations: 1.6, counterfactualCostUsd: 0.25, tags: ml }), requestId: 'r1' },
      // Garbage from a producer: negative escalations, a counterfactual that is no number. Not a routing saving.
      { ...routed({ at: T0, escalations: -3, counterfactualCostUsd: Number.NaN, tags: ml }), requestId: 'r2' },
      { ...rec({ at: T0, tags: ml }), requestId: 'plain' },
    ]);
    const Database = (await import('better-sqlite3')).default;
    const db = new Database(file, { readonly: true });
    const rows = db
      .prepare(
        `SELECT request_id, requested_model, routing_policy, routing_reason, escalations, counterfactual FROM requests
         ORDER BY request_id`,
      )
      .all();
    db.close();
    expect(rows).toEqual([
      {
        request_id: 'plain',
        requested_model: null,
        routing_policy: null,
        routing_reason: null,
        escalations: null,
        counterfactual: null,
      },
      {
        request_id: 'r1',
        requested_model: 'gpt-4o',
        routing_policy: 'cheap',
        routing_reason: 'cheapest',
        escalations: 2,
        counterfactual: 0.25,
      },
      {
        request_id: 'r2',
        requested_model: 'gpt-4o',
        routing_policy: 'cheap',
        routing_reason: 'cheapest',
        escalations: 0,
        counterfactual: null,
      },
    ]);
    // The rollups and the raw records agree on them.
    const q = { ...range, granularity: 'day' as const, groupBy: 'model', tags: [] };
    const rolled = await store.routing(q);
    const raw = await store.routing({ ...q, tags: [...ml, ...ml] });
    expect(rolled.totals).toMatchObject({ routedRequests: 2, escalatedRequests: 1, routedCostUsd: 0.001 });
    expect(rolled.totals.routingSavingsUsd).toBeCloseTo(0.249, 9);
    expect(raw.totals).toEqual(rolled.totals);
    await store.close();
  });
});

describe('boundPayload', () => {
  it('keeps a payload within 16 KiB as it is, and cuts a longer one on a character boundary', () => {
    expect(boundPayload('{"a":1}')).toBe('{"a":1}');
    const exact = 'a'.repeat(MAX_PAYLOAD_BYTES);
    expect(boundPayload(exact)).toBe(exact);
    for (const unit of ['a', 'é', '€', '😀']) {
      const long = `{"x":"${unit.repeat(MAX_PAYLOAD_BYTES)}"}`;
      const cut = boundPayload(long);
      const bytes = Buffer.byteLength(cut);
      expect(bytes, unit).toBeLessThanOrEqual(MAX_PAYLOAD_BYTES);
      expect(bytes, unit).toBeGreaterThan(MAX_PAYLOAD_BYTES - 4);
      expect(cut.endsWith(PAYLOAD_CUT), unit).toBe(true);
      // No broken character: what was kept is a prefix of what was sent.
      expect(long.startsWith(cut.slice(0, -PAYLOAD_CUT.length)), unit).toBe(true);
      expect(cut).not.toContain('\uFFFD');
    }
    const small = { ...toolCall({ at: T0, payload: 'x' }) };
    expect(boundRecord(small)).toBe(small);
    expect(boundRecord({ ...small, payload: 'x'.repeat(20_000) }).payload?.length).toBeLessThan(20_000);
  });
});

describe('parseToolQuery and parseToolCallQuery', () => {
  const now = new Date('2026-11-21T12:00:00Z');
  it('default to a group per server and tool over the last 7 days, with optional filters', () => {
    expect(parseToolQuery(new URLSearchParams(), now)).toEqual({
      from: new Date('2026-11-14T12:00:00Z'),
      to: now,
      granularity: 'day',
      groupBy: 'tool',
      tags: [],
      limit: 20,
    });
    expect(
      parseToolQuery(new URLSearchParams('groupBy=server&server=everything&tool=echo&tag=team:ml&limit=5'), now),
    ).toMatchObject({ groupBy: 'server', server: 'everything', tool: 'echo', tags: [tag('team', 'ml')], limit: 5 });
    expect(parseToolCallQuery(new URLSearchParams('server=memory'), now)).toEqual({
      from: new Date('2026-11-14T12:00:00Z'),
      to: now,
      tags: [],
      server: 'memory',
      limit: 100,
    });
    expect(parseToolCallQuery(new URLSearchParams('limit=1000'), now)).toMatchObject({ limit: 1000 });
  });

  it('reject bad parameters with 400', () => {
    for (const bad of ['groupBy=model', 'granularity=week', 'server=a%0Ab', `tool=${'x'.repeat(257)}`, 'limit=101']) {
      const r = parseToolQuery(new URLSearchParams(bad), now);
      expect(r, bad).toBeInstanceOf(ProxyError);
      expect(r instanceof ProxyError && r.status).toBe(400);
    }
    for (const bad of ['limit=1001', 'limit=0', 'tag=nocolon', 'from=2026-11-22T00:00:00Z']) {
      const r = parseToolCallQuery(new URLSearchParams(bad), now);
      expect(r, bad).toBeInstanceOf(ProxyError);
    }
  });
});

describe('two proxy processes sharing one usage file', () => {
  it('both write and every record counts (SQLite locking, busy timeout)', async () => {
    const file = dbFile();
    await new SqliteUsageStore(file).close();
    const script = `
      import { SqliteUsageStore } from './proxy/usage/sqlite-store.ts';
      const store = new SqliteUsageStore(${JSON.stringify(file)});
      for (let b = 0; b < 20; b++) {
        await store.insert(Array.from({ length: 100 }, (_, i) => ({
          time: new Date(${T0}).toISOString(), requestId: 'child-' + b + '-' + i, keyHashPrefix: 'k', model: 'm', provider: 'child',
          tags: [{ key: 'team', value: 'child' }], promptTokens: 1, completionTokens: 1, costUsd: 0, savingsUsd: 0,
          latencyMs: 1, status: 200, stream: false,
        })));
        await new Promise((r) => setTimeout(r, 2));
      }
      await store.close();
    `;
    const { spawn } = await import('node:child_process');
    const { fileURLToPath } = await import('node:url');
    const root = fileURLToPath(new URL('../..', import.meta.url));
    const child = spawn(join(root, 'node_modules/.bin/tsx'), ['--input-type=module', '-e', script], {
      cwd: root,
      stdio: 'inherit',
    });
    const done = new Promise<number | null>((resolve) => child.once('exit', resolve));
    const parent = new SqliteUsageStore(file);
    for (let b = 0; b < 20; b++) {
      await parent.insert(
        Array.from({ length: 100 }, () => rec({ at: T0, provider: 'parent', tags: [tag('team', 'parent')] })),
      );
      await new Promise((r) => setTimeout(r, 2));
    }
    expect(await done).toBe(0);
    expect(await parent.count()).toBe(4000);
    const byTeam = await parent.usage({ ...range, granularity: 'day', groupBy: 'team', tags: [] });
    expect(byTeam.groups.map((g) => [g.group, g.requests])).toEqual([
      ['child', 2000],
      ['parent', 2000],
    ]);
    await parent.close();
  }, 30_000);
});
