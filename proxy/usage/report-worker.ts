import { parentPort, workerData } from 'node:worker_threads';
import type { ReportRequest, ReportResponse } from './reports.js';
import { SqliteUsageStore } from './sqlite-store.js';

/** The report (or writer) thread of proxy/usage/reports.ts: its own connection to the usage file. */
const store = new SqliteUsageStore((workerData as { path: string }).path);

parentPort?.on('message', async (req: ReportRequest) => {
  let res: ReportResponse;
  try {
    if (req.kind === 'insert') {
      await store.insert(req.records);
      res = { id: req.id, result: null };
    } else if (req.kind === 'gpu-time') {
      await store.recordGpuTime(req.rows);
      res = { id: req.id, result: null };
    } else if (req.kind === 'tags') {
      res = { id: req.id, result: await store.tags(req.search, req.limit, req.team) };
    } else if (req.kind === 'tools') {
      const q = { ...req.query, from: new Date(req.query.from), to: new Date(req.query.to) };
      res = { id: req.id, result: await store.tools(q) };
    } else if (req.kind === 'guardrails') {
      const q = { ...req.query, from: new Date(req.query.from), to: new Date(req.query.to) };
      res = { id: req.id, result: await store.guardrails(q) };
    } else if (req.kind === 'tool-calls') {
      const q = { ...req.query, from: new Date(req.query.from), to: new Date(req.query.to) };
      res = { id: req.id, result: await store.toolCalls(q) };
    } else {
      const q = { ...req.query, from: new Date(req.query.from), to: new Date(req.query.to) };
      const report =
        req.kind === 'usage' ? store.usage(q) : req.kind === 'routing' ? store.routing(q) : store.analytics(q);
      res = { id: req.id, result: await report };
    }
  } catch (err) {
    res = { id: req.id, error: (err as Error).message };
  }
  parentPort?.postMessage(res);
});
