import type { Server } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import type { LogFields } from '../../crds/observability/log.js';

/**
 * Graceful stop of an HTTP server behind a Kubernetes Service, in the order that loses no
 * request: readiness goes false first and the server keeps serving for `delayMs`, because
 * endpoints and kube-proxy take a moment to stop sending traffic; then the listener closes and
 * requests still arriving on kept-alive connections are refused (503, Connection: close); then
 * in-flight requests and streams get up to `graceMs` to finish; whatever is left is cut, so its
 * stream ends and is accounted for as abandoned.
 */

export interface ShutdownOptions {
  server: Server;
  /** Serving on with readiness false, before the listener closes. */
  delayMs: number;
  /** Longest wait for in-flight requests once the listener closed. */
  graceMs: number;
  /** Readiness false from now on. */
  onNotReady: () => void;
  /** New requests on open connections are refused from now on. */
  onClosing: () => void;
  log?: (msg: string, fields?: LogFields) => void;
}

/** Resolves once every connection is gone: `cut` tells whether the grace period ran out. */
export async function shutdownGracefully(opts: ShutdownOptions): Promise<{ cut: boolean; ms: number }> {
  const started = performance.now();
  opts.onNotReady();
  if (opts.delayMs > 0) await sleep(opts.delayMs);
  opts.onClosing();
  const closed = new Promise<void>((resolve) => opts.server.close(() => resolve()));
  // A connection whose request finished goes idle and would hold close() open until its
  // keep-alive timeout: close idle ones as they appear.
  const sweep = setInterval(() => opts.server.closeIdleConnections(), 100);
  const grace = new AbortController();
  const timedOut = sleep(opts.graceMs, undefined, { signal: grace.signal }).then(
    () => 'timeout' as const,
    () => 'drained' as const,
  );
  const outcome = await Promise.race([closed.then(() => 'drained' as const), timedOut]);
  grace.abort();
  clearInterval(sweep);
  if (outcome === 'timeout') {
    opts.log?.('grace period over, cutting the remaining connections', { graceMs: opts.graceMs });
    opts.server.closeAllConnections();
    await closed;
  }
  return { cut: outcome === 'timeout', ms: Math.round(performance.now() - started) };
}
