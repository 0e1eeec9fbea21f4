import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { postgresAuditRows } from '../../proxy/audit/postgres-audit-rows.js';
import type { Tag } from '../../proxy/endpoints/tags.js';
import { MIGRATIONS, PostgresUsageStore } from '../../proxy/usage/postgres-store.js';
import { type Postgres, startPostgres } from '../postgres/server.js';
import { auditRowsContract } from '../support/audit-rows-contract.js';
import {
  expectRoutedAfterUpgrade,
  range,
  rec,
  routed,
  T0,
  tag,
  toolCall,
  usageStoreContract,
} from '../support/usage-store-contract.js';

/**
 * The UsageStore contract on a real PostgreSQL server (Debian's package; one server per run of
 * this file, a fresh database per store), and the PostgreSQL schema's own migrations.
 */
let pg: Postgres | undefined;
let databases = 0;
beforeAll(async () => {
  pg = await startPostgres();
}, 60_000);
const stores: PostgresUsageStore[] = [];
afterAll(async () => {
  for (const s of stores) await s.close();
  await pg?.destroy();
});

usageStoreContract([
  [
    'PostgreSQL',
    async () => {
      const name = `usage_${++databases}`;
      pg?.psql(`CREATE DATABASE ${name}`);
      const url = pg?.url.replace(/\/postgres$/, `/${name}`) ?? '';
      return { store: await PostgresUsageStore.open(url), reopen: () => PostgresUsageStore.open(url) };
    },
  ],
]);

auditRowsContract([
  [
    'PostgreSQL',
    async () => {
      const name = `audit_${++databases}`;
      pg?.psql(`CREATE DATABASE ${name}`);
      const store = await PostgresUsageStore.open(pg?.url.replace(/\/postgres$/, `/${name}`) ?? '');
      stores.push(store);
      return postgresAuditRows(store.pool);
    },
  ],
]);

describe('PostgreSQL schema', () => {
  it('a database of the first version gets teams and keeps its records', async () => {
    pg?.psql('CREATE DATABASE migrate_v1');
    pg?.psql(
      `CREATE TABLE usage_migrations (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now());
      ${MIGRATIONS[0]}; INSERT INTO usage_migrations (version) VALUES (1);
      CREATE TABLE usage_requests_20261120 PARTITION OF usage_requests
        FOR VALUES FROM (${Date.parse('2026-11-20T00:00:00Z')}) TO (${Date.parse('2026-11-21T00:00:00Z')});
      INSERT INTO usage_requests (ts, request_id, key_prefix, model, provider, tags, prompt, completion, cost, savings,
        latency_ms, status, stream, tokens_counted, unpriced)
        VALUES (${T0}, 'old', 'k', 'llama3.1:8b', 'platform-llms/llama', '{team:ml,project:a}', 1, 2, 0.5, 0, 40, 200, false, false, false);
      INSERT INTO usage_rollup (hour, model, provider, tag_key, tag_value, requests, errors, prompt, completion, cost, savings, b4)
        VALUES (${T0}, 'llama3.1:8b', 'platform-llms/llama', '', '', 1, 0, 1, 2, 0.5, 0, 1),
               (${T0}, 'llama3.1:8b', 'platform-llms/llama', 'team', 'ml', 1, 0, 1, 2, 0.5, 0, 1);`,
      'migrate_v1',
    );
    const store = await PostgresUsageStore.open(pg?.url.replace(/\/postgres$/, '/migrate_v1') ?? '');
    await store.insert([rec({ at: T0 + 60_000, team: 'ml', apiKey: 'k1', tags: [tag('team', 'ml')] })]);
    const q = { ...range, granularity: 'day' as const, groupBy: 'model', tags: [] as Tag[] };
    expect((await store.usage(q)).totals.requests).toBe(2);
    expect((await store.usage({ ...q, tags: [tag('team', 'ml')] })).totals.requests).toBe(2);
    // Records from before teams belong to no team.
    expect((await store.usage({ ...q, team: 'ml' })).totals.requests).toBe(1);
    expect((await store.usage({ ...q, team: '' })).totals.requests).toBe(1);
    expect((await store.usage({ ...q, tags: [tag('team', 'ml'), tag('project', 'a')] })).totals.requests).toBe(1);
    await store.close();
  });

  it('a database of before tool calls (migration 4) gets their bytes and payloads, rows of before having none', async () => {
    pg?.psql('CREATE DATABASE migrate_v4');
    pg?.psql(
      `CREATE TABLE usage_migrations (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now());
      ${MIGRATIONS.slice(0, 4).join(';\n')};
      INSERT INTO usage_migrations (version) VALUES (1), (2), (3), (4);
      CREATE TABLE usage_requests_20261120 PARTITION OF usage_requests
        FOR VALUES FROM (${Date.parse('2026-11-20T00:00:00Z')}) TO (${Date.parse('2026-11-21T00:00:00Z')});
      INSERT INTO usage_requests (ts, request_id, key_prefix, model, provider, tags, prompt, completion, cost, savings,
        latency_ms, status, stream, tokens_counted, unpriced, endpoint)
        VALUES (${T0}, 'old', 'k', 'echo', 'everything', '{}', 0, 0, 0, 0, 40, 200, false, false, false, 'mcp');
      INSERT INTO usage_rollup (hour, model, endpoint, provider, tag_key, tag_value, requests, errors, prompt, completion,
        cost, savings, b6) VALUES (${T0}, 'echo', 'mcp', 'everything', '', '', 1, 0, 0, 0, 0, 0, 1);`,
      'migrate_v4',
    );
    const store = await PostgresUsageStore.open(pg?.url.replace(/\/postgres$/, '/migrate_v4') ?? '');
    await store.insert([toolCall({ at: T0 + 1000, bytesIn: 7, bytesOut: 9, payload: '{}' })]);
    const r = await store.tools({ ...range, granularity: 'day', groupBy: 'tool', tags: [] });
    expect(r.groups).toMatchObject([{ server: 'everything', tool: 'echo', calls: 2, bytesIn: 7, bytesOut: 9 }]);
    const [fresh, before] = await store.toolCalls({ ...range, tags: [] });
    expect(fresh).toMatchObject({ bytesIn: 7, bytesOut: 9, payload: '{}' });
    expect(before?.requestId).toBe('old');
    expect(before && ('bytesIn' in before || 'payload' in before)).toBe(false);
    // Tool calls stay out of the model reports.
    expect((await store.usage({ ...range, granularity: 'day', groupBy: 'model', tags: [] })).totals.requests).toBe(0);
    await store.close();
  });

  it('a database of before routing (migration 5) gets the routing columns, rows of before routing nothing', async () => {
    pg?.psql('CREATE DATABASE migrate_v5');
    pg?.psql(
      `CREATE TABLE usage_migrations (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now());
      ${MIGRATIONS.slice(0, 5).join(';\n')};
      INSERT INTO usage_migrations (version) VALUES (1), (2), (3), (4), (5);
      CREATE TABLE usage_requests_20261120 PARTITION OF usage_requests
        FOR VALUES FROM (${Date.parse('2026-11-20T00:00:00Z')}) TO (${Date.parse('2026-11-21T00:00:00Z')});
      INSERT INTO usage_requests (ts, request_id, key_prefix, model, provider, tags, prompt, completion, cost, savings,
        latency_ms, status, stream, tokens_counted, unpriced, endpoint, team)
        VALUES (${T0}, 'old', 'k', 'llama3.1:8b', 'platform-llms/llama', '{team:ml}', 10, 20, 0.3, 0, 40, 200, false,
          false, false, 'chat', 'ml');
      INSERT INTO usage_rollup (hour, model, endpoint, provider, team, tag_key, tag_value, requests, errors, prompt,
        completion, cost, savings, b6)
        VALUES (${T0}, 'llama3.1:8b', 'chat', 'platform-llms/llama', 'ml', '', '', 1, 0, 10, 20, 0.3, 0, 1),
               (${T0}, 'llama3.1:8b', 'chat', 'platform-llms/llama', 'ml', 'team', 'ml', 1, 0, 10, 20, 0.3, 0, 1);`,
      'migrate_v5',
    );
    const store = await PostgresUsageStore.open(pg?.url.replace(/\/postgres$/, '/migrate_v5') ?? '');
    await expectRoutedAfterUpgrade(store);
    await store.close();
  });

  it('a database of before delivery marks (migration 6) counts its rows as served, and new undelivered ones apart', async () => {
    pg?.psql('CREATE DATABASE migrate_v6');
    pg?.psql(
      `CREATE TABLE usage_migrations (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now());
      ${MIGRATIONS.slice(0, 6).join(';\n')};
      INSERT INTO usage_migrations (version) VALUES (1), (2), (3), (4), (5), (6);
      CREATE TABLE usage_requests_20261120 PARTITION OF usage_requests
        FOR VALUES FROM (${Date.parse('2026-11-20T00:00:00Z')}) TO (${Date.parse('2026-11-21T00:00:00Z')});
      INSERT INTO usage_requests (ts, request_id, key_prefix, model, provider, tags, prompt, completion, cost, savings,
        latency_ms, status, stream, tokens_counted, unpriced, endpoint, team)
        VALUES (${T0}, 'old', 'k', 'llama3.1:8b', 'platform-llms/llama', '{}', 10, 20, 0.3, 0, 40, 200, false,
          false, false, 'chat', 'ml');
      INSERT INTO usage_rollup (hour, model, endpoint, provider, team, tag_key, tag_value, requests, errors, prompt,
        completion, cost, savings, b6)
        VALUES (${T0}, 'llama3.1:8b', 'chat', 'platform-llms/llama', 'ml', '', '', 1, 0, 10, 20, 0.3, 0, 1);`,
      'migrate_v6',
    );
    const store = await PostgresUsageStore.open(pg?.url.replace(/\/postgres$/, '/migrate_v6') ?? '');
    await store.insert([
      {
        ...rec({ at: T0, endpoint: 'chat', team: 'ml', costUsd: 0.5, status: 502, delivered: false }),
        requestId: 'cut',
      },
    ]);
    const day = { ...range, granularity: 'day' as const, groupBy: 'model', tags: [] as Tag[] };
    expect((await store.usage(day)).totals).toMatchObject({ requests: 1, undeliveredRequests: 1, costUsd: 0.8 });
    // Rows of before: delivered, as far as anyone knew.
    expect(
      pg?.psql('SELECT request_id, delivered FROM usage_requests ORDER BY request_id', 'migrate_v6').trim().split('\n'),
    ).toEqual(['cut|f', 'old|t']);
    await store.close();
  });

  it('keeps what was asked, the policy, the reason, whole escalations and a finite counterfactual on each record', async () => {
    pg?.psql('CREATE DATABASE routed_columns');
    const store = await PostgresUsageStore.open(pg?.url.replace(/\/postgres$/, '/routed_columns') ?? '');
    await store.insert([
      { ...routed({ at: T0, escalations: 1.6, counterfactualCostUsd: 0.25 }), requestId: 'r1' },
      // Garbage from a producer: a count past PostgreSQL's integer, a counterfactual that is no number.
      { ...routed({ at: T0, escalations: 1e20, counterfactualCostUsd: Number.POSITIVE_INFINITY }), requestId: 'r2' },
      { ...rec({ at: T0 }), requestId: 'plain' },
    ]);
    const rows = pg?.psql(
      `SELECT request_id, coalesce(requested_model, '-'), coalesce(routing_policy, '-'), coalesce(routing_reason, '-'),
         coalesce(escalations::text, '-'), coalesce(counterfactual::text, '-')
       FROM usage_requests ORDER BY request_id`,
      'routed_columns',
    );
    expect(rows?.trim().split('\n')).toEqual([
      'plain|-|-|-|-|-',
      'r1|gpt-4o|cheap|cheapest|2|0.25',
      'r2|gpt-4o|cheap|cheapest|2147483647|-',
    ]);
    const totals = (await store.routing({ ...range, granularity: 'day', groupBy: 'model', tags: [] })).totals;
    expect(totals).toMatchObject({ routedRequests: 2, escalatedRequests: 2, routedCostUsd: 0.001 });
    expect(totals.routingSavingsUsd).toBeCloseTo(0.249, 9);
    await store.close();
  });

  it('replicas starting together apply each migration once (advisory lock), into daily partitions', async () => {
    pg?.psql('CREATE DATABASE migrate_race');
    const url = pg?.url.replace(/\/postgres$/, '/migrate_race') ?? '';
    const stores = await Promise.all(Array.from({ length: 4 }, () => PostgresUsageStore.open(url)));
    expect(
      pg?.psql("SELECT string_agg(version::text, ',' ORDER BY version) FROM usage_migrations", 'migrate_race').trim(),
    ).toBe(MIGRATIONS.map((_, i) => i + 1).join(','));
    // Concurrent writers of the same new day create its partition once between them.
    await Promise.all(stores.map((s, i) => s.insert([{ ...rec({ at: T0 }), requestId: `r${i}` }])));
    expect(
      pg?.psql("SELECT count(*) FROM pg_inherits WHERE inhparent = 'usage_requests'::regclass", 'migrate_race').trim(),
    ).toBe('1');
    expect(await stores[0]?.count()).toBe(4);
    await Promise.all(stores.map((s) => s.close()));
  });
});
