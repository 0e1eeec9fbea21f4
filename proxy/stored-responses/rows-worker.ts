import { workerData } from 'node:worker_threads';
import { answerAsks } from '../threads/answer-asks.js';
import { openUsageFile } from '../usage/sqlite-store.js';
import type { RowsWrite } from './rows-thread.js';
import { sqliteRows } from './sqlite-rows.js';

/** The writer thread of proxy/stored-responses/rows-thread.ts: its own connection to the stored Responses' file. */
const rows = sqliteRows(openUsageFile((workerData as { path: string }).path));

answerAsks<RowsWrite>((req) => {
  switch (req.kind) {
    case 'put':
      return rows.put(req.row);
    case 'settle':
      return rows.settle(req.responseId, req.status, req.response);
    case 'delete':
      return rows.delete(req.responseId);
    case 'sweep':
      return rows.sweep(req.now);
    case 'bytes':
      return rows.bytes();
  }
});
