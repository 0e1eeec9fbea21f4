import Database from 'better-sqlite3';
import { Hono } from 'hono';
import { beforeEach, describe, expect, it } from 'vitest';
import type { AuditRecord } from '../../crds/audit/audit-record.js';
import { capturedLogger } from '../../e2e/support/capture.js';
import type { Caller } from '../access/auth.js';
import { ProxyError } from '../endpoints/errors.js';
import { auditRoutes } from './audit-routes.js';
import type { AuditRows } from './audit-rows.js';
import { GatewayAudit } from './gateway-audit.js';
import { sqliteAuditRows } from './sqlite-audit-rows.js';

const caller = (name: string, team: string, role: 'Admin' | 'User'): Caller => ({
  keyHashPrefix: `${name}-hash`,
  policy: { name, team, role, tags: [] },
});
const CALLERS: Record<string, Caller> = {
  'sk-admin': caller('platform-admin', 'platform', 'Admin'),
  'sk-ml': caller('ml-key', 'ml', 'User'),
};

const change = (id: string, team: string, at: string, actor = 'alice'): AuditRecord => ({
  id,
  at,
  source: 'kubernetes',
  action: 'updated',
  actor: actor ? { kind: 'user', name: actor } : { kind: 'unknown', name: '' },
  target: { kind: 'ApiKey', namespace: 'platform-agent', name: `${team}-key` },
  team,
  changed: ['spec.budget.usd'],
  before: { spec: { budget: { usd: 10 } } },
  after: { spec: { budget: { usd: 50 } } },
});

let rows: AuditRows;
let audit: GatewayAudit;
let app: Hono;

beforeEach(() => {
  rows = sqliteAuditRows(new Database(':memory:'));
  audit = new GatewayAudit(rows, capturedLogger('audit-routes'));
  app = new Hono();
  app.onError((err, c) =>
    err instanceof ProxyError
      ? c.json({ error: { code: err.code, message: err.message } }, err.status, err.headers)
      : c.text('bug', 500),
  );
  auditRoutes(app, {
    rows,
    audit,
    reader: async (headers) => {
      const found = CALLERS[headers.get('x-api-key') ?? ''];
      if (!found) throw new ProxyError(401, 'authentication_error', 'invalid_api_key', 'no');
      return found;
    },
    writer: async (token) =>
      token === 'operator-token' ? 'operator' : token === 'review-down' ? 'unavailable' : 'other',
  });
});

const post = (body: unknown, auth = 'Bearer operator-token') =>
  app.request('/v1/audit', {
    method: 'POST',
    headers: { authorization: auth, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
const get = async (query: string, key = 'sk-admin') => {
  const res = await app.request(`/v1/audit${query}`, { headers: { 'x-api-key': key } });
  return {
    status: res.status,
    body: (await res.json()) as { data: AuditRecord[]; next_cursor?: string; error?: { code: string } },
  };
};

describe('POST /v1/audit', () => {
  it("takes the operator's records, once per id, the one that knows its author winning", async () => {
    expect((await post([change('u1@8', 'ml', '2026-11-29T10:00:00.000Z', '')])).status).toBe(200);
    expect((await post([change('u1@8', 'ml', '2026-11-29T10:00:00.000Z', 'alice')])).status).toBe(200);
    // Sent again without an author (another replica's, late): the known author stays.
    expect((await post([change('u1@8', 'ml', '2026-11-29T10:00:00.000Z', '')])).status).toBe(200);
    const { body } = await get('');
    expect(body.data).toHaveLength(1);
    expect(body.data[0]?.actor).toEqual({ kind: 'user', name: 'alice' });
    expect(body.data[0]?.after).toEqual({ spec: { budget: { usd: 50 } } });
  });

  it('refuses anyone else, an Admin key included, and records the denial', async () => {
    const res = await app.request('/v1/audit', {
      method: 'POST',
      headers: { 'x-api-key': 'sk-admin', 'content-type': 'application/json' },
      body: JSON.stringify([change('forged', 'ml', '2026-11-29T10:00:00.000Z')]),
    });
    expect(res.status).toBe(403);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('operator_only');
    for (let i = 0; i < 50; i++) expect((await post([], 'Bearer not-the-operator')).status).toBe(403);
    // The API server not answering the TokenReview is no refusal: retry later.
    const down = await post([], 'Bearer review-down');
    expect([down.status, down.headers.get('retry-after')]).toEqual([503, '5']);
    await audit.flush();
    const { body } = await get('?action=denied');
    // Fifty anonymous attempts are one record with their count.
    expect(body.data.map((r) => [r.actor.name, r.reason, r.target.name, r.count]).sort()).toEqual([
      ['', 'operator_only', 'POST /v1/audit', 50],
      ['platform-admin', 'operator_only', 'POST /v1/audit', 1],
    ]);
    expect((await get('?action=updated')).body.data).toEqual([]);
  });

  it('answers records that are not records with 400, naming what is wrong', async () => {
    const res = await post([{ ...change('x', 'ml', '2026-11-29T10:00:00.000Z'), action: 'exploded' }]);
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: { message: string } }).error.message).toMatch(/\/0\/action/);
    expect((await post({ not: 'a list' })).status).toBe(400);
  });
});

describe('GET /v1/audit', () => {
  beforeEach(async () => {
    const records = Array.from({ length: 5 }, (_, i) =>
      change(`r${i}`, i % 2 ? 'web' : 'ml', `2026-11-29T10:0${i}:00.000Z`),
    );
    expect((await post(records)).status).toBe(200);
  });

  it('gives an Admin every record, newest first, in pages', async () => {
    const first = await get('?limit=2');
    expect(first.body.data.map((r) => r.id)).toEqual(['r4', 'r3']);
    const second = await get(`?limit=2&cursor=${first.body.next_cursor}`);
    expect(second.body.data.map((r) => r.id)).toEqual(['r2', 'r1']);
    const last = await get(`?limit=2&cursor=${second.body.next_cursor}`);
    expect(last.body.data.map((r) => r.id)).toEqual(['r0']);
    expect(last.body.next_cursor).toBeUndefined();
    expect((await get('?since=2026-11-29T10:01:00Z&until=2026-11-29T10:03:00Z')).body.data.map((r) => r.id)).toEqual([
      'r2',
      'r1',
    ]);
  });

  it("gives a User its own team's records; another team's is denied and recorded", async () => {
    expect((await get('', 'sk-ml')).body.data.map((r) => r.id)).toEqual(['r4', 'r2', 'r0']);
    const denied = await get('?team=web', 'sk-ml');
    expect(denied.status).toBe(403);
    expect(denied.body.error?.code).toBe('admin_only');
    await audit.flush();
    const seen = await get('?action=denied');
    expect(seen.body.data[0]).toMatchObject({
      actor: { kind: 'api-key', name: 'ml-key' },
      team: 'ml',
      reason: 'admin_only',
    });
  });

  it('exports every selected record as NDJSON', async () => {
    const res = await app.request('/v1/audit?format=ndjson&team=ml', { headers: { 'x-api-key': 'sk-admin' } });
    expect(res.headers.get('content-type')).toBe('application/x-ndjson');
    const lines = (await res.text())
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as AuditRecord);
    expect(lines.map((r) => r.id)).toEqual(['r4', 'r2', 'r0']);
  });

  it('answers a bad query with 400 naming the parameter, and no credentials with 401', async () => {
    for (const q of ['?limit=0', '?limit=5000', '?since=yesterday', '?cursor=zzz']) {
      const { status, body } = await get(q);
      expect([q, status, body.error?.code]).toEqual([q, 400, 'invalid_audit_query']);
    }
    expect((await get('', 'sk-nobody')).status).toBe(401);
  });
});

describe('GatewayAudit', () => {
  it('counts refusals per code and address: a flood is a few records', async () => {
    const refusal = new ProxyError(401, 'authentication_error', 'expired_token', 'expired');
    for (let i = 0; i < 1_000; i++) audit.refused(refusal, '10.0.0.9');
    audit.refused(new ProxyError(401, 'authentication_error', 'invalid_api_key', 'no'), '10.0.0.7');
    await audit.flush();
    const { body } = await get('?action=refused');
    expect(body.data.map((r) => [r.reason, r.from, r.count]).sort()).toEqual([
      ['expired_token', '10.0.0.9', 1000],
      ['invalid_api_key', '10.0.0.7', 1],
    ]);
  });
});
