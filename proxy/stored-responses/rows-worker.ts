import { parentPort, workerData } from 'node:worker_threads';
import type { Numbered, ThreadAnswer } from '../threads/asked-thread.js';
import { openUsageFile } from '../usage/sqlite-store.js';
import type { RowsWrite } from './rows-thread.js';
import { sqliteRows } from './sqlite-rows.js';

/** The writer thread of proxy/stored-responses/rows-thread.ts: its own connection to the usage file. */
const rows = sqliteRows(openUsageFile((workerData as { path: string }).path));

async function run(req: RowsWrite): Promise<unknown> {
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
}

parentPort?.on('message', async (req: Numbered<RowsWrite>) => {
  let answer: ThreadAnswer;
  try {
    answer = { id: req.id, result: (await run(req)) ?? null };
  } catch (err) {
    answer = { id: req.id, error: (err as Error).message };
  }
  parentPort?.postMessage(answer);
});
