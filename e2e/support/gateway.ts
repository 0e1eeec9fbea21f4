import type { Logger } from '../../crds/observability/log.js';
import { composeGateway, type Gateway, type GatewayConfig, type GatewayParts } from '../../proxy/compose.js';

/**
 * A gateway for a test, composed exactly as production composes it (proxy/compose.ts) and
 * listening on a free loopback port: requests go over a real socket to the one front door.
 * Tests replace single parts (routes, keys, a usage sink, an upstream double) and otherwise get
 * what the configuration builds. Quiet unless the test passes a logger.
 */

export interface TestGateway extends Gateway {
  /** http://127.0.0.1:<port> */
  url: string;
  /** fetch() against the gateway: `path` is everything after the host. */
  request(path: string, init?: RequestInit): Promise<Response>;
  /** Closes it at once: no shutdown delay, in-flight requests get a second. */
  stop(): Promise<void>;
}

const quiet: Logger = { info: () => {}, warn: () => {}, error: () => {} };

export async function startGateway(
  config: GatewayConfig = {},
  parts: Partial<GatewayParts> = {},
  /** Serves /metrics and /load too, on a free port (metricsUrl()); `port`: this one, not a free one. */
  opts: { metrics?: boolean; port?: number } = {},
): Promise<TestGateway> {
  const gateway = await composeGateway(
    {
      logger: quiet,
      shutdown: { delayMs: 0, drainMs: 1_000 },
      ...config,
      usage: { db: ':memory:', spoolDir: 'off', ...config.usage },
    },
    parts,
  );
  const url = await gateway.listen({
    port: opts.port ?? 0,
    host: '127.0.0.1',
    ...(opts.metrics ? { metricsPort: 0 } : {}),
  });
  return {
    ...gateway,
    url,
    request: (path, init) => fetch(`${url}${path}`, init),
    stop: async () => {
      gateway.server.closeAllConnections();
      await gateway.close();
    },
  };
}
