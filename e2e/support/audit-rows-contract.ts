import { describe, expect, it } from 'vitest';
import type { AuditRecord } from '../../crds/audit/audit-record.js';
import type { AuditRows } from '../../proxy/audit/audit-rows.js';

/**
 * What every kind of audit rows does (proxy/audit/): SQLite's in the unit tier, PostgreSQL's on a
 * real server in the e2e tier. One record per id, the known author winning; filters, newest
 * first, keyset pages; prune by time.
 */

const record = (id: string, at: string, more: Partial<AuditRecord> = {}): AuditRecord => ({
  id,
  at,
  source: 'kubernetes',
  action: 'updated',
  actor: { kind: 'user', name: 'alice' },
  target: { kind: 'ApiKey', namespace: 'platform-agent', name: 'ml' },
  team: 'ml',
  ...more,
});

export function auditRowsContract(kinds: [string, () => Promise<AuditRows>][]): void {
  describe.each(kinds)('audit rows: %s', (_name, open) => {
    it('keeps one record per id; an author that knows who replaces one that does not, never the reverse', async () => {
      const rows = await open();
      const unknown = record('u@1', '2026-11-29T10:00:00.000Z', { actor: { kind: 'unknown', name: '' } });
      await rows.insert([unknown, unknown]);
      await rows.insert([record('u@1', '2026-11-29T10:00:00.000Z', { actor: { kind: 'user', name: 'bob' } })]);
      await rows.insert([unknown]);
      await rows.insert([record('u@1', '2026-11-29T10:00:00.000Z', { actor: { kind: 'user', name: 'mallory' } })]);
      const found = await rows.query({ limit: 10 });
      expect(found.map((r) => r.actor)).toEqual([{ kind: 'user', name: 'bob' }]);
    });

    it('filters, orders newest first, pages by (at, id), and prunes by time', async () => {
      const rows = await open();
      await rows.insert([
        record('a', '2026-11-29T10:00:00.000Z'),
        record('b', '2026-11-29T10:00:00.000Z', { team: 'web', action: 'deleted' }),
        record('c', '2026-11-29T11:00:00Z', { target: { kind: 'Budget', name: 'ml' } }),
        record('d', '2026-11-29T12:00:00.000Z', { actor: { kind: 'user', name: 'carol' } }),
      ]);
      expect((await rows.query({ limit: 10 })).map((r) => r.id)).toEqual(['d', 'c', 'b', 'a']);
      expect((await rows.query({ limit: 10, team: 'web' })).map((r) => r.id)).toEqual(['b']);
      expect((await rows.query({ limit: 10, kind: 'Budget' })).map((r) => r.id)).toEqual(['c']);
      expect((await rows.query({ limit: 10, actor: 'carol' })).map((r) => r.id)).toEqual(['d']);
      expect((await rows.query({ limit: 10, action: 'deleted' })).map((r) => r.id)).toEqual(['b']);
      expect(
        (await rows.query({ limit: 10, since: '2026-11-29T10:30:00.000Z', until: '2026-11-29T12:00:00.000Z' })).map(
          (r) => r.id,
        ),
      ).toEqual(['c']);
      // Same instant: the id orders them, and a page boundary between them loses neither.
      expect(
        (await rows.query({ limit: 10, after: { at: '2026-11-29T10:00:00.000Z', id: 'b' } })).map((r) => r.id),
      ).toEqual(['a']);
      expect(
        (await rows.query({ limit: 1, after: { at: '2026-11-29T11:00:00.000Z', id: 'c' } })).map((r) => r.id),
      ).toEqual(['b']);
      await rows.prune('2026-11-29T11:00:00.000Z');
      expect((await rows.query({ limit: 10 })).map((r) => r.id)).toEqual(['d', 'c']);
      // Instants are stored as ISO with milliseconds, whatever was sent.
      expect((await rows.query({ limit: 10, kind: 'Budget' }))[0]?.at).toBe('2026-11-29T11:00:00.000Z');
    });
  });
}
