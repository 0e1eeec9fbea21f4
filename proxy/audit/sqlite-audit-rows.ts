import type Database from 'better-sqlite3';
import type { AuditRecord } from '../../crds/audit/audit-record.js';
import { AUDIT_COLUMNS, type AuditRows, auditRow, auditWhere, KEEP_KNOWN_AUTHOR } from './audit-rows.js';

/**
 * Audit records in the usage file. Written on the calling thread: changes and sign-ins are few,
 * and refusals and denials arrive counted, every 10 s (proxy/audit/gateway-audit.ts).
 */

const SCHEMA = `
  CREATE TABLE IF NOT EXISTS audit (
    id TEXT PRIMARY KEY,
    at TEXT NOT NULL,
    source TEXT NOT NULL,
    action TEXT NOT NULL,
    actor_kind TEXT NOT NULL,
    actor_name TEXT NOT NULL,
    target_kind TEXT NOT NULL,
    target_namespace TEXT,
    target_name TEXT NOT NULL,
    team TEXT,
    record TEXT NOT NULL
  );
  CREATE INDEX IF NOT EXISTS audit_at ON audit (at, id);
`;

export function sqliteAuditRows(db: Database.Database): AuditRows {
  db.exec(SCHEMA);
  const insert = db.prepare(
    `INSERT INTO audit (${AUDIT_COLUMNS.join(', ')}) VALUES (${AUDIT_COLUMNS.map(() => '?').join(', ')}) ${KEEP_KNOWN_AUTHOR}`,
  );
  const insertAll = db.transaction((records: AuditRecord[]) => {
    for (const r of records) insert.run(...auditRow(r));
  });
  return {
    insert: async (records) => {
      insertAll(records);
    },
    query: async (q) => {
      const { where, params } = auditWhere(q, () => '?');
      const rows = db
        .prepare(`SELECT record FROM audit ${where} ORDER BY at DESC, id DESC LIMIT ?`)
        .all(...params, q.limit) as { record: string }[];
      return rows.map((r) => JSON.parse(r.record) as AuditRecord);
    },
    prune: async (before) => {
      db.prepare('DELETE FROM audit WHERE at < ?').run(before);
    },
  };
}
