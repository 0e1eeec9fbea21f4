import Database from 'better-sqlite3';
import type { ClusterIssuerApi } from '../../crds/identity/cluster-issuer.js';
import type { Logger } from '../../crds/observability/log.js';
import { PostgresUsageStore } from '../usage/postgres-store.js';
import { SqliteUsageStore } from '../usage/sqlite-store.js';
import type { UsageStore } from '../usage/store.js';
import type { AuditRows } from './audit-rows.js';
import { GatewayAudit } from './gateway-audit.js';
import { operatorWriter, type WriterCheck } from './operator-writer.js';
import { postgresAuditRows } from './postgres-audit-rows.js';
import { sqliteAuditRows } from './sqlite-audit-rows.js';

/**
 * The audit trail of a gateway: its rows in the usage store's database (an in-memory one where
 * the store is a test's own, or there is none), the gateway's own records, and the hourly prune
 * of records past `retentionDays` (default 400: a year's review and some).
 */

export interface OpenAudit {
  rows: AuditRows;
  gateway: GatewayAudit;
  /** What GET and POST /v1/audit need beside the caller (proxy/server/routes.ts). */
  routes: { rows: AuditRows; gateway: GatewayAudit; writer?: (token: string) => Promise<WriterCheck> };
  close(): Promise<void>;
}

function rowsOf(store: UsageStore | undefined): { rows: AuditRows; own?: Database.Database } {
  if (store instanceof SqliteUsageStore) return { rows: sqliteAuditRows(store.db) };
  if (store instanceof PostgresUsageStore) return { rows: postgresAuditRows(store.pool) };
  const own = new Database(':memory:');
  return { rows: sqliteAuditRows(own), own };
}

/** `cluster`: the API server, whose TokenReview says which token is the operator's (none standalone: nobody writes). */
export function openAudit(
  store: UsageStore | undefined,
  log: Logger,
  cluster?: Pick<ClusterIssuerApi, 'review'>,
  retentionDays = 400,
): OpenAudit {
  const { rows, own } = rowsOf(store);
  const gateway = new GatewayAudit(rows, log);
  const prune = () =>
    rows
      .prune(new Date(Date.now() - retentionDays * 86_400_000).toISOString())
      .catch(() => log.warn('audit records not pruned; trying again in an hour'));
  const timer = setInterval(prune, 3_600_000);
  timer.unref();
  return {
    rows,
    gateway,
    routes: { rows, gateway, ...(cluster ? { writer: operatorWriter(cluster) } : {}) },
    close: async () => {
      clearInterval(timer);
      await gateway.close();
      own?.close();
    },
  };
}
