import type { GatewayConfig, GatewayParts } from '../../proxy/compose.js';
import { API_KEYS_SECRET } from '../../proxy/sources/cluster-source.js';
import { startGateway, type TestGateway } from './gateway.js';
import { applyObjects, eventually, kubeConfig, kubectl } from './kube.js';

/** The API keys Secret the chart makes, holding `key`: what a cluster-mode gateway reads its keys from. */
export function applyKeysSecret(key: string): void {
  applyObjects({
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: { name: API_KEYS_SECRET, namespace: 'platform-agent' },
    stringData: { keys: `${key}\n` },
  });
}

/**
 * A gateway in cluster mode as the chart runs it, on the suite's control plane: its API key from
 * the Secret the chart makes (applied here with `key`), its models from the cluster's
 * ModelDeployments and ExternalProviders. Resolves once the key is loaded; `stop()` also deletes
 * the Secret.
 */
export async function startClusterGateway(
  key: string,
  config: Omit<GatewayConfig, 'source'> = {},
  parts: Partial<GatewayParts> = {},
): Promise<TestGateway> {
  applyKeysSecret(key);
  const gateway = await startGateway({ ...config, source: { kind: 'cluster', kubeConfig: kubeConfig() } }, parts);
  await eventually('the gateway has its key', 10_000, () => (gateway.keys.size > 0 ? true : undefined));
  return {
    ...gateway,
    stop: async () => {
      await gateway.stop();
      kubectl(['delete', 'secret', API_KEYS_SECRET, '-n', 'platform-agent', '--ignore-not-found']);
    },
  };
}
