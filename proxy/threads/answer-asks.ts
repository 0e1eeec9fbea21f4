import { parentPort } from 'node:worker_threads';
import type { Numbered, ThreadAnswer } from './asked-thread.js';

/**
 * The worker's side of AskedThread: each question of a batch run as it comes, in order, and the
 * answers of one event-loop turn posted back together (the request thread wakes once for them).
 */
export function answerAsks<Req>(run: (req: Numbered<Req>) => unknown): void {
  let outbox: ThreadAnswer[] = [];
  const post = () => {
    const batch = outbox;
    outbox = [];
    parentPort?.postMessage(batch);
  };
  const answer = (a: ThreadAnswer) => {
    outbox.push(a);
    if (outbox.length === 1) setImmediate(post);
  };
  parentPort?.on('message', (batch: Array<Numbered<Req>>) => {
    for (const req of batch) {
      let result: Promise<unknown>;
      try {
        // Started here, in the order asked (a put's batch is the turn's, a read sees what came before it).
        result = Promise.resolve(run(req));
      } catch (err) {
        result = Promise.reject(err);
      }
      result.then(
        (r) => answer({ id: req.id, result: r ?? null }),
        (err: unknown) => answer({ id: req.id, error: err instanceof Error ? err.message : String(err) }),
      );
    }
  });
}
