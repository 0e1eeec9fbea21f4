import { readFileSync } from 'node:fs';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { serve } from '@hono/node-server';
import { KubeConfig } from '@kubernetes/client-node';
import { providerCredentials, RoleCredentials } from '../crds/aws-credentials.js';
import { loadCatalog } from '../crds/catalog/catalog.js';
import { ACCESS_KEY_ID_KEY, PROXY_SERVICE_PORT, SECRET_ACCESS_KEY_KEY } from '../crds/constants.js';
import { errorMessage, jsonLogger } from '../crds/log.js';
import { createApp } from './app.js';
import { ApiKeys } from './auth.js';
import { ClusterSource } from './cluster-source.js';
import { ConfigError, loadStandaloneConfig } from './config.js';
import { CostMeter, loadBedrockPrices, mergePrices, parseBedrockPrices } from './cost.js';
import { ProxyMetrics } from './metrics.js';
import { buildRoutes, RouteTable } from './routing.js';
import { uiRoutes } from './ui/pages.js';
import { BedrockUpstream } from './upstreams/bedrock.js';
import { OpenAICompatibleUpstream } from './upstreams/openai-compatible.js';
import { UsageRecorder } from './usage-recorder.js';
import { UsageStore } from './usage-store.js';

/**
 * Entry point of the proxy. With --config it runs standalone: resources from that file, API
 * keys from --keys-file, no cluster. Without it, it watches the cluster it runs in.
 */
const { values } = parseArgs({
  options: {
    config: { type: 'string' },
    'keys-file': { type: 'string' },
    'secrets-dir': { type: 'string' },
    'usage-db': { type: 'string', default: process.env.USAGE_DB },
    'retention-days': { type: 'string', default: process.env.USAGE_RETENTION_DAYS ?? '30' },
    'prices-file': { type: 'string' },
    'tag-labels': { type: 'string', default: process.env.METRICS_TAG_LABELS ?? 'project,team,environment' },
    host: { type: 'string' },
    port: { type: 'string', default: process.env.PORT },
    kubeconfig: { type: 'string' },
  },
});

const log = jsonLogger('proxy');
const standalone = values.config !== undefined;
const routes = new RouteTable();
const keys = new ApiKeys();
let source: ClusterSource | undefined;

try {
  if (standalone) {
    const config = loadStandaloneConfig(values.config ?? '');
    routes.set(buildRoutes(config.modelDeployments, { standalone: true }, config.externalProviders));
    const keysFile = values['keys-file'] ?? process.env.GATEWAY_API_KEYS_FILE;
    if (!keysFile) throw new ConfigError('standalone mode needs --keys-file FILE (one API key per line)');
    keys.replace(ApiKeys.parse(readFileSync(keysFile, 'utf8')));
    if (keys.size === 0) throw new ConfigError(`${keysFile} holds no API key`);
  } else {
    const kc = new KubeConfig();
    if (values.kubeconfig) kc.loadFromFile(values.kubeconfig);
    else kc.loadFromDefault();
    source = new ClusterSource({
      kubeConfig: kc,
      routes,
      keys,
      onError: (err) => log.warn('watch failed, retrying', { error: errorMessage(err) }),
    });
    await source.start();
  }
} catch (err) {
  log.error('proxy failed to start', { error: errorMessage(err) });
  process.exit(1);
}

let draining = false;
const metrics = new ProxyMetrics(
  (values['tag-labels'] ?? '')
    .split(',')
    .map((k) => k.trim())
    .filter(Boolean),
);
// Access keys of providers: the watched Secrets in a cluster; standalone, files laid out like a
// mounted Secret (<secrets-dir>/<secret name>/accessKeyId and /secretAccessKey).
const secretsDir = values['secrets-dir'];
const secretData = (name: string): Record<string, string> | undefined => {
  if (source) return source.secretData(name);
  if (!secretsDir) return undefined;
  const data: Record<string, string> = {};
  for (const key of [ACCESS_KEY_ID_KEY, SECRET_ACCESS_KEY_KEY]) {
    try {
      data[key] = readFileSync(join(secretsDir, name, key)).toString('base64');
    } catch {
      return undefined;
    }
  }
  return data;
};
const roles = new RoleCredentials();
const bedrock = new BedrockUpstream({
  credentialsFor: (route) =>
    providerCredentials(route.source, roles, () => secretData(route.source.spec.auth.secretRef?.name ?? '')),
});
// Usage: an SQLite file (a PVC in a cluster), written off the hot path, pruned daily.
const usageDb = values['usage-db'] ?? (standalone ? 'usage.db' : '/var/lib/platform-ai-optimizer/usage.db');
const store = new UsageStore(usageDb);
const retentionDays = Number(values['retention-days']);
const prune = () => store.prune(new Date(Date.now() - retentionDays * 86_400_000));
prune();
setInterval(prune, 3_600_000).unref();
const recorder = new UsageRecorder({
  store,
  dropped: metrics.usageDropped,
  onError: (err) => log.error('usage batch not written', { error: errorMessage(err) }),
});
const basePrices = loadBedrockPrices();
const cost = new CostMeter(
  loadCatalog(),
  values['prices-file']
    ? mergePrices(basePrices, parseBedrockPrices(readFileSync(values['prices-file'], 'utf8')))
    : basePrices,
  store.savingsByProvider(),
);
source?.onPrices((text) => {
  try {
    cost.setPrices(text ? mergePrices(basePrices, parseBedrockPrices(text)) : basePrices);
  } catch (err) {
    log.warn('price overrides not applied', { error: errorMessage(err) });
  }
});

const app = createApp({
  keys,
  routes,
  upstreams: { 'openai-compatible': new OpenAICompatibleUpstream(), bedrock },
  usage: recorder,
  metrics,
  cost,
  store,
  extraRoutes: uiRoutes(),
  ready: () => !draining && (source?.ready() ?? true),
  onError: (err, requestId) => log.error('request failed', { requestId, error: errorMessage(err) }),
});

// Standalone defaults to this machine only; in a cluster the Service reaches port 443 on all interfaces.
const host = values.host ?? (standalone ? '127.0.0.1' : '0.0.0.0');
const port = Number(values.port ?? (standalone ? 8080 : PROXY_SERVICE_PORT));
const server = serve({ fetch: app.fetch, hostname: host, port }, (info: AddressInfo) => {
  log.info('proxy listening', {
    url: `http://${host}:${info.port}`,
    mode: standalone ? 'standalone' : 'cluster',
    models: routes
      .models()
      .map((m) => m.id)
      .join(','),
  });
}) as Server;

for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  process.once(signal, () => {
    draining = true;
    log.info('shutting down', { signal });
    server.close(() => {
      recorder.close();
      store.close();
      void source?.stop().finally(() => process.exit(0));
    });
    // Streams still open after the grace period are cut.
    setTimeout(() => process.exit(0), 25_000).unref();
  });
}
