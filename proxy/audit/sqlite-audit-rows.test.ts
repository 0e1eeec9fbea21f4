import Database from 'better-sqlite3';
import { auditRowsContract } from '../../e2e/support/audit-rows-contract.js';
import { sqliteAuditRows } from './sqlite-audit-rows.js';

auditRowsContract([['SQLite', async () => sqliteAuditRows(new Database(':memory:'))]]);
