import type { Operator } from '../../operator/operator.js';

/**
 * The operator's API request count once what is already under way has settled: a resync of
 * everything, then the count unchanged for half a second (up to 10 s). What a previous step set
 * off (Events, watches reopening, status reaching the cache, a reconcile judged from a cache a
 * moment behind its own last write) then no longer lands in the window a test measures next.
 */
export async function settledRequestCount(op: Operator): Promise<number> {
  op.resyncAll();
  let requests = await op.apiRequestCount();
  for (let i = 0; i < 20; i++) {
    await new Promise((r) => setTimeout(r, 500));
    const now = await op.apiRequestCount();
    if (now === requests) break;
    requests = now;
  }
  return requests;
}
