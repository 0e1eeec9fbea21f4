import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Registry } from 'prom-client';

/**
 * Prometheus metrics on a port of their own, for both components. Metrics name models, tags and
 * teams: they are for the monitoring system, which a NetworkPolicy can admit to this port alone,
 * never for the callers of the API port.
 */

export interface MetricsServer {
  server: Server;
  /** http://127.0.0.1:PORT */
  url: string;
  close(): Promise<void>;
}

/**
 * `json` adds GET routes answering JSON (the proxy's /load, which the operator's autoscaler
 * reads): machine-to-machine numbers of the same kind as the metrics, on the same guarded port.
 */
export async function serveMetrics(
  registry: Registry,
  port: number,
  host: string,
  json: Record<string, () => unknown> = {},
): Promise<MetricsServer> {
  const server = createServer((req, res) => {
    const path = (req.url ?? '').split('?')[0] ?? '';
    const route = req.method === 'GET' && Object.hasOwn(json, path) ? json[path] : undefined;
    if (route) {
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(route()));
      return;
    }
    if (req.method !== 'GET' || path !== '/metrics') {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('only GET /metrics is served on this port\n');
      return;
    }
    registry.metrics().then(
      (text) => res.writeHead(200, { 'content-type': registry.contentType }).end(text),
      () => res.writeHead(500, { 'content-type': 'text/plain' }).end('metrics unavailable\n'),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
  });
  const { port: bound } = server.address() as AddressInfo;
  return {
    server,
    url: `http://127.0.0.1:${bound}`,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
