import { hostname } from 'node:os';
import { parseArgs } from 'node:util';
import { collectDefaultMetrics } from 'prom-client';
import type { Cloud } from '../crds/catalog/catalog.js';
import { AGENT_NAMESPACE, builtInEmbeddingOn, unsupportedNode } from '../crds/constants.js';
import { parseEngineImages } from '../crds/engines/table.js';
import { loadKubeAccess } from '../crds/kube/kube-access.js';
import { errorMessage, jsonLogger } from '../crds/observability/log.js';
import { tokenFile } from './audit/audit-trail.js';
import { type ModelCacheSetting, parseModelCache } from './model-deployment/model-cache.js';
import { Operator } from './operator.js';

/**
 * Entry point of the operator process. Settings come from flags, or from the environment
 * variables named beside them (the Helm chart sets those).
 */
const { values } = parseArgs({
  options: {
    kubeconfig: { type: 'string' },
    'organization-id': { type: 'string', default: process.env.ORGANIZATION_ID ?? 'default' },
    'cluster-id': { type: 'string', default: process.env.CLUSTER_ID ?? 'default' },
    cloud: { type: 'string', default: process.env.CLOUD ?? 'aws' },
    region: { type: 'string', default: process.env.REGION },
    // Each engine's model server image, "Ollama=image,VLLM=image"; an engine left out gets its
    // module's pinned default (crds/engines/). --ollama-image is the older name of Ollama's.
    'engine-images': { type: 'string', default: process.env.ENGINE_IMAGES ?? '' },
    'ollama-image': { type: 'string', default: process.env.OLLAMA_IMAGE ?? '' },
    port: { type: 'string', default: process.env.PORT ?? '8080' },
    'metrics-port': { type: 'string', default: process.env.METRICS_PORT ?? '9090' },
    'leader-elect': { type: 'string', default: process.env.LEADER_ELECT ?? 'true' },
    'lease-namespace': { type: 'string', default: process.env.POD_NAMESPACE ?? AGENT_NAMESPACE },
    concurrency: { type: 'string', default: process.env.CONCURRENCY ?? '4' },
    'rediscovery-minutes': { type: 'string', default: process.env.REDISCOVERY_MINUTES ?? '10' },
    // pvc: one PersistentVolumeClaim per ModelDeployment keeps its model; off: an emptyDir per pod.
    'model-cache': { type: 'string', default: process.env.MODEL_CACHE ?? 'off' },
    'model-cache-storage-class': { type: 'string', default: process.env.MODEL_CACHE_STORAGE_CLASS },
    'model-cache-access-mode': { type: 'string', default: process.env.MODEL_CACHE_ACCESS_MODE ?? 'ReadWriteMany' },
    'autoscale-interval-seconds': { type: 'string', default: process.env.AUTOSCALE_INTERVAL_SECONDS ?? '5' },
    // Outside a cluster (or to pin them): the proxies' metrics URLs, comma-separated.
    'proxy-load-urls': { type: 'string', default: process.env.PROXY_LOAD_URLS },
    // The audit trail: the proxies' URL its records go to (none: no audit trail), the operator's
    // token for them, and the webhook's Service (in platform-agent) and port.
    'audit-proxy-url': { type: 'string', default: process.env.AUDIT_PROXY_URL },
    'audit-token-file': {
      type: 'string',
      default: process.env.AUDIT_TOKEN_FILE ?? '/var/run/secrets/platform-ai-optimizer/token',
    },
    'audit-webhook-service': { type: 'string', default: process.env.AUDIT_WEBHOOK_SERVICE },
    'audit-webhook-port': { type: 'string', default: process.env.AUDIT_WEBHOOK_PORT ?? '9443' },
  },
});

const log = jsonLogger('operator');
const unsupported = unsupportedNode(process.version);
if (unsupported) {
  log.error(unsupported);
  process.exit(1);
}
const kc = await loadKubeAccess(values.kubeconfig ? { file: values.kubeconfig } : {});

const cloud = values.cloud as Cloud;
if (!['aws', 'gcp', 'azure'].includes(cloud)) {
  log.error('unknown cloud', { cloud });
  process.exit(2);
}

async function detectRegion(operator: Operator): Promise<string> {
  // Without a configured region, the region most nodes carry in topology.kubernetes.io/region.
  const nodes = await operator.client.list<{ metadata: { labels?: Record<string, string> } }>('/api/v1/nodes');
  const counts = new Map<string, number>();
  for (const n of nodes.items) {
    const r = n.metadata.labels?.['topology.kubernetes.io/region'];
    if (r) counts.set(r, (counts.get(r) ?? 0) + 1);
  }
  const best = [...counts].sort((a, b) => b[1] - a[1])[0]?.[0];
  if (!best) throw new Error('no --region given and no node carries topology.kubernetes.io/region');
  return best;
}

let modelCache: ModelCacheSetting;
try {
  modelCache = parseModelCache(
    values['model-cache'] ?? 'off',
    values['model-cache-storage-class'],
    values['model-cache-access-mode'],
  );
} catch (err) {
  log.error('bad model cache settings', { error: errorMessage(err) });
  process.exit(2);
}

const cluster = {
  organizationId: values['organization-id'] ?? 'default',
  clusterId: values['cluster-id'] ?? 'default',
  cloud,
  region: values.region ?? '',
};
const identity = `${hostname()}-${process.pid}`;
const webhookService = values['audit-webhook-service'];
const audit = values['audit-proxy-url']
  ? {
      proxyUrl: values['audit-proxy-url'],
      token: tokenFile(values['audit-token-file'] ?? ''),
      webhook: webhookService
        ? {
            endpoint: { service: { namespace: AGENT_NAMESPACE, name: webhookService, port: 443 } },
            port: Number(values['audit-webhook-port']),
            names: [
              `${webhookService}.${AGENT_NAMESPACE}.svc`,
              `${webhookService}.${AGENT_NAMESPACE}.svc.cluster.local`,
            ],
          }
        : (false as const),
    }
  : undefined;
const operator = new Operator({
  kubeConfig: kc,
  cluster,
  images: parseEngineImages(values['engine-images'] ?? '', values['ollama-image'] ?? ''),
  port: Number(values.port),
  metricsPort: Number(values['metrics-port']),
  concurrency: Number(values.concurrency),
  rediscoveryMs: Number(values['rediscovery-minutes']) * 60_000,
  modelCache,
  routingBuiltInEmbedding: builtInEmbeddingOn(process.env),
  autoscaleIntervalMs: Math.max(1, Number(values['autoscale-interval-seconds'])) * 1000,
  ...(values['proxy-load-urls']
    ? { proxyLoadUrls: values['proxy-load-urls'].split(',').map((u) => u.trim().replace(/\/+$/, '')) }
    : {}),
  leaderElection:
    values['leader-elect'] === 'false'
      ? false
      : { namespace: values['lease-namespace'] ?? AGENT_NAMESPACE, name: 'platform-ai-optimizer-operator', identity },
  logger: log,
  ...(audit ? { audit } : {}),
});
// Process and Node.js runtime metrics under their standard names (process_*, nodejs_*).
collectDefaultMetrics({ register: operator.registry });

try {
  if (!cluster.region) cluster.region = await detectRegion(operator);
  await operator.start();
  log.info('operator started', {
    url: operator.url(),
    metrics: operator.metricsUrl(),
    cluster: cluster.clusterId,
    cloud,
    region: cluster.region,
    identity,
  });
} catch (err) {
  log.error('operator failed to start', { error: errorMessage(err) });
  process.exit(1);
}

// One shutdown, whatever signals follow (Ctrl-C under `npm run operator` arrives twice: from the
// terminal and relayed by tsx): a second one must not cut the stop short.
let stopping = false;
for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  process.on(signal, () => {
    if (stopping) return;
    stopping = true;
    log.info('shutting down', { signal });
    operator.stop().then(
      () => process.exit(0),
      () => process.exit(1),
    );
  });
}
