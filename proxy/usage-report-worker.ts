import { parentPort, workerData } from 'node:worker_threads';
import type { ReportRequest, ReportResponse } from './usage-reports.js';
import { UsageStore } from './usage-store.js';

/** The report thread of proxy/usage-reports.ts: its own connection to the usage file. */
const store = new UsageStore((workerData as { path: string }).path);

parentPort?.on('message', (req: ReportRequest) => {
  let res: ReportResponse;
  try {
    if (req.kind === 'tags') {
      res = { id: req.id, result: store.tags(req.search, req.limit) };
    } else {
      const q = { ...req.query, from: new Date(req.query.from), to: new Date(req.query.to) };
      res = { id: req.id, result: req.kind === 'usage' ? store.usage(q) : store.analytics(q) };
    }
  } catch (err) {
    res = { id: req.id, error: (err as Error).message };
  }
  parentPort?.postMessage(res);
});
