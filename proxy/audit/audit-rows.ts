import type { AuditRecord } from '../../crds/audit/audit-record.js';

/**
 * Where audit records are kept: a table of the usage store's database (an SQLite file, or the
 * PostgreSQL the replicas share), since that is the one database the product runs. One row per
 * record id: a change sent by two operator replicas, or again after a lost answer, is kept once,
 * and the record that knows its author replaces one that does not.
 */

export interface AuditQuery {
  /** ISO instants, since inclusive, until exclusive. */
  since?: string;
  until?: string;
  kind?: string;
  namespace?: string;
  name?: string;
  actor?: string;
  action?: string;
  source?: string;
  /** A User's reads: only its team's records. */
  team?: string;
  /** Newest first; the page after the record this names (its `at` and id). */
  after?: { at: string; id: string };
  limit: number;
}

export interface AuditRows {
  insert(records: AuditRecord[]): Promise<void>;
  /** Newest first. */
  query(q: AuditQuery): Promise<AuditRecord[]>;
  /** Records older than this instant are removed. */
  prune(before: string): Promise<void>;
}

/** The columns a record is filtered by, beside its whole JSON. */
export const AUDIT_COLUMNS = [
  'id',
  'at',
  'source',
  'action',
  'actor_kind',
  'actor_name',
  'target_kind',
  'target_namespace',
  'target_name',
  'team',
  'record',
] as const;

/** A record's column values, in AUDIT_COLUMNS' order; `at` normalized so that text order is time order. */
export function auditRow(r: AuditRecord): (string | null)[] {
  const at = new Date(r.at).toISOString();
  return [
    r.id,
    at,
    r.source,
    r.action,
    r.actor.kind,
    r.actor.name,
    r.target.kind,
    r.target.namespace ?? null,
    r.target.name,
    r.team ?? null,
    JSON.stringify({ ...r, at }),
  ];
}

/** The WHERE clause of a query and its parameters, `p(i)` naming the i-th parameter in the database's syntax. */
export function auditWhere(q: AuditQuery, p: (i: number) => string): { where: string; params: string[] } {
  const params: string[] = [];
  const parts: string[] = [];
  const eq: [keyof AuditQuery, string][] = [
    ['kind', 'target_kind'],
    ['namespace', 'target_namespace'],
    ['name', 'target_name'],
    ['actor', 'actor_name'],
    ['action', 'action'],
    ['source', 'source'],
    ['team', 'team'],
  ];
  for (const [field, column] of eq) {
    const v = q[field];
    if (typeof v === 'string') {
      params.push(v);
      parts.push(`${column} = ${p(params.length)}`);
    }
  }
  if (q.since) {
    params.push(q.since);
    parts.push(`at >= ${p(params.length)}`);
  }
  if (q.until) {
    params.push(q.until);
    parts.push(`at < ${p(params.length)}`);
  }
  if (q.after) {
    params.push(q.after.at, q.after.at, q.after.id);
    const n = params.length;
    parts.push(`(at < ${p(n - 2)} OR (at = ${p(n - 1)} AND id < ${p(n)}))`);
  }
  return { where: parts.length ? `WHERE ${parts.join(' AND ')}` : '', params };
}

/** An author that knows who wins over one that does not; otherwise the first record stays. */
export const KEEP_KNOWN_AUTHOR = `ON CONFLICT (id) DO UPDATE SET at = excluded.at, actor_kind = excluded.actor_kind,
  actor_name = excluded.actor_name, record = excluded.record
  WHERE audit.actor_kind = 'unknown' AND excluded.actor_kind <> 'unknown'`;
