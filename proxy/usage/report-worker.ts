import { workerData } from 'node:worker_threads';
import { answerAsks } from '../threads/answer-asks.js';
import type { ReportRequest } from './reports.js';
import { SqliteUsageStore } from './sqlite-store.js';

/** The report (or writer) thread of proxy/usage/reports.ts: its own connection to the usage file. */
const store = new SqliteUsageStore((workerData as { path: string }).path);

/** A query's epoch-ms bounds as the Dates the store takes. */
const dated = <Q extends { from: number; to: number }>(q: Q) => ({ ...q, from: new Date(q.from), to: new Date(q.to) });

answerAsks<ReportRequest>(async (req) => {
  switch (req.kind) {
    case 'insert':
      return store.insert(req.records);
    case 'gpu-time':
      return store.recordGpuTime(req.rows);
    case 'tags':
      return store.tags(req.search, req.limit, req.team);
    case 'tools':
      return store.tools(dated(req.query));
    case 'guardrails':
      return store.guardrails(dated(req.query));
    case 'tool-calls':
      return store.toolCalls(dated(req.query));
    case 'usage':
      return store.usage(dated(req.query));
    case 'routing':
      return store.routing(dated(req.query));
    case 'analytics':
      return store.analytics(dated(req.query));
  }
});
