import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
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

/** A resource document of the standalone config file, its spec as flow-style YAML. */
export const resourceDoc = (kind: string, name: string, spec: Record<string, unknown>): string =>
  `apiVersion: ai.platform/v1beta1\nkind: ${kind}\nmetadata: {name: ${name}}\nspec: ${JSON.stringify(spec)}`;

const HOSTED = {
  openai: { displayName: 'OpenAI', auth: { method: 'APIKey', secretRef: { name: 'openai-key' } } },
  anthropic: { displayName: 'Anthropic', auth: { method: 'APIKey', secretRef: { name: 'anthropic-key' } } },
  bedrock: {
    displayName: 'Bedrock',
    region: 'us-east-1',
    auth: { method: 'AccessKey', secretRef: { name: 'aws-keys' } },
  },
} as const;

/**
 * The ExternalProvider of a provider's double, named for the provider, with `models`: its key in
 * the Secret `openai-key` or `anthropic-key`, Bedrock's key pair in `aws-keys` (us-east-1).
 */
export const hostedProviderDoc = (provider: keyof typeof HOSTED, models: string[]): string =>
  resourceDoc('ExternalProvider', provider, { provider, ...HOSTED[provider], models });

/**
 * A standalone gateway as a user configures one: `documents` in its --config file, `keys` in its
 * keys file, each of `secrets` (Secret name -> API key, or its keys' values) a directory of
 * --secrets-dir; its files removed when it stops.
 */
export async function startStandaloneGateway(
  opts: {
    documents: string[];
    keys: string;
    secrets?: Record<string, string | Record<string, string>>;
    env?: NodeJS.ProcessEnv;
  },
  parts: Partial<GatewayParts> = {},
): Promise<TestGateway> {
  const dir = mkdtempSync(join(tmpdir(), 'standalone-gateway-'));
  for (const [name, value] of Object.entries(opts.secrets ?? {})) {
    mkdirSync(join(dir, 'secrets', name), { recursive: true });
    const data = typeof value === 'string' ? { apiKey: value } : value;
    for (const [key, v] of Object.entries(data)) writeFileSync(join(dir, 'secrets', name, key), v);
  }
  writeFileSync(join(dir, 'config.yaml'), opts.documents.join('\n---\n'));
  writeFileSync(join(dir, 'keys.txt'), opts.keys);
  const gateway = await startGateway(
    {
      source: { kind: 'standalone', configFile: join(dir, 'config.yaml'), keysFile: join(dir, 'keys.txt') },
      secretsDir: join(dir, 'secrets'),
      ...(opts.env ? { env: opts.env } : {}),
    },
    parts,
  );
  return {
    ...gateway,
    stop: async () => {
      await gateway.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
