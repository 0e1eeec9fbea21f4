import type { Env, Hono } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import { parseAuditRecords } from '../../crds/audit/audit-record.js';
import type { Caller } from '../access/auth.js';
import { ProxyError } from '../endpoints/errors.js';
import { remoteOf } from '../server/remote-address.js';
import type { AuditQuery, AuditRows } from './audit-rows.js';
import type { GatewayAudit } from './gateway-audit.js';
import type { WriterCheck } from './operator-writer.js';

/**
 * GET /v1/audit: the audit trail, newest first, in pages (`next_cursor`), or all of it as NDJSON
 * (`format=ndjson`, the export). An Admin reads every record; a User its own team's, and asking
 * for another team's is denied and recorded. POST /v1/audit: the operator's records, from its
 * ServiceAccount token only.
 */

export interface AuditRoutesDeps {
  rows: AuditRows;
  audit: GatewayAudit;
  /** The caller of a read: a key, a token or the pages' session. */
  reader: (headers: Headers) => Promise<Caller>;
  /** Whether a bearer token is the operator's; absent (no cluster): nobody writes records from outside. */
  writer?: ((token: string) => Promise<WriterCheck>) | undefined;
}

const MAX_PAGE = 1_000;
const MAX_EXPORT = 100_000;
/** The operator's batches are at most 4 MiB (operator/audit/audit-sink.ts); one record of two 1.5 MiB objects fits. */
const MAX_POST_BYTES = 8 * 1024 * 1024;
const FILTERS = ['kind', 'namespace', 'name', 'actor', 'action', 'source', 'team'] as const;

const badQuery = (param: string, message: string) =>
  new ProxyError(400, 'invalid_request_error', 'invalid_audit_query', message, param);

function instant(url: URL, param: string): string | undefined {
  const v = url.searchParams.get(param);
  if (v === null) return undefined;
  const t = Date.parse(v);
  if (Number.isNaN(t)) throw badQuery(param, `${param} is not a time: give an ISO 8601 instant (2026-11-29T10:00:00Z)`);
  return new Date(t).toISOString();
}

function queryOf(url: URL): { q: AuditQuery; ndjson: boolean } {
  const q: AuditQuery = { limit: 100 };
  for (const f of FILTERS) {
    const v = url.searchParams.get(f);
    if (v !== null) q[f] = v.slice(0, 300);
  }
  const since = instant(url, 'since');
  const until = instant(url, 'until');
  if (since) q.since = since;
  if (until) q.until = until;
  const limit = url.searchParams.get('limit');
  if (limit !== null) {
    const n = Number(limit);
    if (!Number.isInteger(n) || n < 1 || n > MAX_PAGE)
      throw badQuery('limit', `limit is a whole number from 1 to ${MAX_PAGE}`);
    q.limit = n;
  }
  const cursor = url.searchParams.get('cursor');
  if (cursor !== null) {
    const [at, id] = Buffer.from(cursor, 'base64url').toString().split('\n');
    if (!at || !id || Number.isNaN(Date.parse(at)))
      throw badQuery('cursor', 'cursor is not one this API gave; start again without it');
    q.after = { at, id };
  }
  return { q, ndjson: url.searchParams.get('format') === 'ndjson' };
}

const cursorOf = (r: { at: string; id: string }) => Buffer.from(`${r.at}\n${r.id}`).toString('base64url');

/** Every record the query selects, as lines, page by page: memory holds one page. */
function exportStream(rows: AuditRows, q: AuditQuery): ReadableStream<Uint8Array> {
  let after = q.after;
  let sent = 0;
  const encoder = new TextEncoder();
  return new ReadableStream({
    async pull(controller) {
      const page = await rows.query({ ...q, limit: MAX_PAGE, ...(after ? { after } : {}) });
      if (page.length) controller.enqueue(encoder.encode(page.map((r) => `${JSON.stringify(r)}\n`).join('')));
      sent += page.length;
      const last = page.at(-1);
      if (page.length < MAX_PAGE || !last || sent >= MAX_EXPORT) controller.close();
      else after = { at: last.at, id: last.id };
    },
  });
}

export function auditRoutes<E extends Env>(app: Hono<E>, deps: AuditRoutesDeps): void {
  app.get('/v1/audit', async (c) => {
    const caller = await deps.reader(c.req.raw.headers);
    const { q, ndjson } = queryOf(new URL(c.req.url));
    if (caller.policy.role !== 'Admin') {
      if (q.team !== undefined && q.team !== caller.policy.team) {
        deps.audit.denied(caller, { kind: 'Route', name: 'GET /v1/audit' }, 'admin_only', remoteOf(c));
        throw new ProxyError(
          403,
          'permission_error',
          'admin_only',
          "a User key reads its own team's audit records only",
        );
      }
      q.team = caller.policy.team;
    }
    if (ndjson) {
      return new Response(exportStream(deps.rows, q), {
        headers: {
          'content-type': 'application/x-ndjson',
          'content-disposition': 'attachment; filename="audit.ndjson"',
        },
      });
    }
    const data = await deps.rows.query(q);
    const last = data.length === q.limit ? data.at(-1) : undefined;
    return c.json({ data, ...(last ? { next_cursor: cursorOf(last) } : {}) });
  });

  // Who writes is checked before the body is read: nobody else makes the gateway read 8 MiB.
  app.post(
    '/v1/audit',
    async (c, next) => {
      const token = /^Bearer\s+(\S+)$/i.exec(c.req.header('authorization') ?? '')?.[1];
      const check = token && deps.writer ? await deps.writer(token) : 'other';
      if (check === 'unavailable') {
        throw new ProxyError(
          503,
          'api_error',
          'audit_writer_unverified',
          'the API server did not answer the TokenReview; retry',
          null,
          {
            'Retry-After': '5',
          },
        );
      }
      if (check === 'other') {
        const caller = await deps.reader(c.req.raw.headers).catch(() => undefined);
        deps.audit.denied(caller, { kind: 'Route', name: 'POST /v1/audit' }, 'operator_only', remoteOf(c));
        throw new ProxyError(
          403,
          'permission_error',
          'operator_only',
          "audit records are written by the operator's ServiceAccount only",
        );
      }
      await next();
    },
    bodyLimit({
      maxSize: MAX_POST_BYTES,
      onError: () => {
        throw new ProxyError(
          413,
          'invalid_request_error',
          'request_too_large',
          `audit records over ${MAX_POST_BYTES} bytes`,
        );
      },
    }),
    async (c) => {
      const records = parseAuditRecords(await c.req.json().catch(() => undefined));
      if (typeof records === 'string')
        throw new ProxyError(400, 'invalid_request_error', 'invalid_audit_records', records);
      await deps.rows.insert(records);
      return c.json({ written: records.length });
    },
  );
}
