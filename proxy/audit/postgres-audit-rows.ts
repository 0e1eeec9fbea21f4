import type pg from 'pg';
import type { AuditRecord } from '../../crds/audit/audit-record.js';
import { schemaOnce } from '../usage/postgres-schema.js';
import { AUDIT_COLUMNS, type AuditRows, auditRow, auditWhere, KEEP_KNOWN_AUTHOR } from './audit-rows.js';

/**
 * Audit records in the usage store's PostgreSQL database, shared by the replicas: the table made
 * when first used, under an advisory lock so that replicas starting together make it once.
 * `at` is ISO text as in SQLite: one order, one query for both.
 */

const LOCK = 0x4155_4454; // 'AUDT'

const SCHEMA = `
  CREATE TABLE IF NOT EXISTS audit (
    id text PRIMARY KEY,
    at text NOT NULL,
    source text NOT NULL,
    action text NOT NULL,
    actor_kind text NOT NULL,
    actor_name text NOT NULL,
    target_kind text NOT NULL,
    target_namespace text,
    target_name text NOT NULL,
    team text,
    record text NOT NULL
  );
  CREATE INDEX IF NOT EXISTS audit_at ON audit (at, id);
`;

export function postgresAuditRows(pool: pg.Pool): AuditRows {
  const ready = schemaOnce(pool, LOCK, SCHEMA);
  const n = AUDIT_COLUMNS.length;
  return {
    insert: async (records: AuditRecord[]) => {
      if (!records.length) return;
      await ready();
      const values = records.map((_, r) => `(${AUDIT_COLUMNS.map((_c, i) => `$${r * n + i + 1}`).join(', ')})`);
      // One statement, one row per id (ON CONFLICT cannot touch a row twice in one statement): of
      // two records of one id, the one that knows its author, as the conflict rule keeps.
      const byId = new Map<string, AuditRecord>();
      for (const r of records) {
        const seen = byId.get(r.id);
        if (!seen || (seen.actor.kind === 'unknown' && r.actor.kind !== 'unknown')) byId.set(r.id, r);
      }
      const unique = [...byId.values()];
      const rows = unique.flatMap(auditRow);
      await pool.query(
        `INSERT INTO audit (${AUDIT_COLUMNS.join(', ')}) VALUES ${values.slice(0, unique.length).join(', ')} ${KEEP_KNOWN_AUTHOR}`,
        rows,
      );
    },
    query: async (q) => {
      await ready();
      const { where, params } = auditWhere(q, (i) => `$${i}`);
      const res = await pool.query<{ record: string }>(
        `SELECT record FROM audit ${where} ORDER BY at DESC, id DESC LIMIT $${params.length + 1}`,
        [...params, q.limit],
      );
      return res.rows.map((r) => JSON.parse(r.record) as AuditRecord);
    },
    prune: async (before) => {
      await ready();
      await pool.query('DELETE FROM audit WHERE at < $1', [before]);
    },
  };
}
