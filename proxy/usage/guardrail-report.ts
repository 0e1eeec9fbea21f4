import { isRecord } from '../../crds/is-record.js';
import type { Finding } from '../guardrails/findings.js';
import type { UsageRecord } from './record.js';
import {
  type GuardrailQuery,
  type GuardrailReport,
  type GuardrailRow,
  MAX_GUARDRAIL_RECORDS,
  MAX_GUARDRAIL_ROWS,
} from './store.js';

/**
 * A request's guardrail findings as both stores keep them (a JSON column, none for requests
 * without), and how either store's rows become the guardrail report (GET /v1/usage/guardrails).
 * Findings are counted, never their text: the record never had it.
 */

/** The most kinds of finding one record keeps (guardrails x categories x actions x places of one request). */
const MAX_FINDINGS = 256;

/** The column's value: the findings as JSON, bounded; null for a request with none. */
export function findingsColumn(r: Pick<UsageRecord, 'findings'>): string | null {
  if (!r.findings?.length) return null;
  return JSON.stringify(
    r.findings.slice(0, MAX_FINDINGS).map((f) => ({
      guardrail: String(f.guardrail).slice(0, 253),
      category: String(f.category).slice(0, 40),
      action: f.action,
      where: f.where,
      count: Math.max(0, Math.round(Number(f.count) || 0)),
    })),
  );
}

/** A stored row of a request with findings: its team, tags ("key:value") and findings column. */
export interface FindingRow {
  team: string;
  tags: readonly string[];
  findings: string;
}

function parsed(column: string): Finding[] {
  try {
    const v: unknown = JSON.parse(column);
    return Array.isArray(v) ? (v.filter(isRecord) as unknown as Finding[]) : [];
  } catch {
    return [];
  }
}

/** The group a record falls in: its guardrail, category, team, or its value of a tag key ('' without). */
function groupOf(q: GuardrailQuery, row: FindingRow, f: Finding): string {
  if (q.groupBy === 'guardrail') return f.guardrail;
  if (q.groupBy === 'category') return f.category;
  if (q.groupBy === 'team') return row.team;
  const prefix = `${q.groupBy}:`;
  return row.tags.find((t) => t.startsWith(prefix))?.slice(prefix.length) ?? '';
}

export function assembleGuardrailReport(q: GuardrailQuery, rows: readonly FindingRow[]): GuardrailReport {
  const byKey = new Map<string, GuardrailRow>();
  let findings = 0;
  let blocked = 0;
  for (const row of rows.slice(0, MAX_GUARDRAIL_RECORDS)) {
    const list = parsed(row.findings);
    if (list.some((f) => f.action === 'Block')) blocked++;
    for (const f of list) {
      const group = groupOf(q, row, f);
      const key = [group, f.guardrail, f.category, f.action, f.where].join('\u0000');
      const had = byKey.get(key);
      const n = Number(f.count) || 0;
      findings += n;
      if (had) {
        had.requests += 1;
        had.findings += n;
      } else
        byKey.set(key, {
          group,
          guardrail: f.guardrail,
          category: f.category,
          action: f.action,
          where: f.where,
          requests: 1,
          findings: n,
        });
    }
  }
  const data = [...byKey.values()]
    .sort((a, b) => b.findings - a.findings || a.group.localeCompare(b.group) || a.guardrail.localeCompare(b.guardrail))
    .slice(0, MAX_GUARDRAIL_ROWS);
  return {
    from: q.from.toISOString(),
    to: q.to.toISOString(),
    groupBy: q.groupBy,
    totals: { requests: Math.min(rows.length, MAX_GUARDRAIL_RECORDS), findings, blocked },
    data,
    truncated: rows.length > MAX_GUARDRAIL_RECORDS,
  };
}
