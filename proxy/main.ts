import { hostname } from 'node:os';
import { parseArgs } from 'node:util';
import { builtInEmbeddingOn, PROXY_SERVICE_PORT, unsupportedNode } from '../crds/constants.js';
import { loadKubeAccess } from '../crds/kube/kube-access.js';
import { errorMessage, jsonLogger } from '../crds/observability/log.js';
import { composeGateway, type GatewayConfig } from './compose.js';
import { DEFAULT_CONNECTION_LIMITS } from './front-door.js';
import { normalOrigin, originPolicy } from './mcp/origin.js';
import { ConfigError } from './sources/standalone-config.js';
import { DEFAULT_RETRY } from './upstreams/resilience.js';
import { DEFAULT_TIMEOUTS } from './upstreams/upstream.js';

/**
 * Entry point of the proxy: flags (or the environment variables named beside them, which the
 * Helm chart sets) into a GatewayConfig, the gateway composed from it (proxy/compose.ts), then
 * listening until SIGTERM. With --config it runs standalone: resources from that file, API keys
 * from --keys-file, no cluster. Without it, it watches the cluster it runs in.
 */
const { values } = parseArgs({
  options: {
    config: { type: 'string' },
    'keys-file': { type: 'string', default: process.env.GATEWAY_API_KEYS_FILE },
    'secrets-dir': { type: 'string' },
    // In a cluster: the Secret holding API keys (the chart's apiKeys.existingSecret, or its own).
    'keys-secret': { type: 'string', default: process.env.GATEWAY_API_KEYS_SECRET },
    // An SQLite file path, or postgres://... (the chart takes it from a Secret).
    'usage-db': { type: 'string', default: process.env.USAGE_DB },
    // Records held in memory while the usage store is unreachable; past it they wait in the spool
    // (or, with the spool off, are dropped, counted).
    'usage-buffer': { type: 'string', default: process.env.USAGE_BUFFER_RECORDS },
    // Where usage records wait on local disk until the store has them ('off': memory only).
    'usage-spool-dir': { type: 'string', default: process.env.USAGE_SPOOL_DIR },
    'usage-spool-max-mb': { type: 'string', default: process.env.USAGE_SPOOL_MAX_MB ?? '512' },
    'retention-days': { type: 'string', default: process.env.USAGE_RETENTION_DAYS ?? '30' },
    'rollup-retention-days': { type: 'string', default: process.env.USAGE_ROLLUP_RETENTION_DAYS ?? '400' },
    'prices-file': { type: 'string' },
    'tag-labels': { type: 'string', default: process.env.METRICS_TAG_LABELS ?? 'project,team,environment' },
    host: { type: 'string' },
    port: { type: 'string', default: process.env.PORT },
    'metrics-port': { type: 'string', default: process.env.METRICS_PORT ?? '9090' },
    kubeconfig: { type: 'string' },
    retries: { type: 'string', default: process.env.GATEWAY_RETRIES ?? String(DEFAULT_RETRY.retries) },
    'retry-backoff-ms': {
      type: 'string',
      default: process.env.GATEWAY_RETRY_BACKOFF_MS ?? String(DEFAULT_RETRY.backoffMs),
    },
    'retry-max-backoff-ms': {
      type: 'string',
      default: process.env.GATEWAY_RETRY_MAX_BACKOFF_MS ?? String(DEFAULT_RETRY.maxBackoffMs),
    },
    'rate-limit-rps': { type: 'string', default: process.env.GATEWAY_RATE_LIMIT_RPS ?? '0' },
    'rate-limit-burst': { type: 'string', default: process.env.GATEWAY_RATE_LIMIT_BURST },
    'shutdown-delay-seconds': { type: 'string', default: process.env.GATEWAY_SHUTDOWN_DELAY_SECONDS },
    'drain-seconds': { type: 'string', default: process.env.GATEWAY_DRAIN_SECONDS ?? '25' },
    'first-byte-timeout-seconds': { type: 'string', default: process.env.GATEWAY_FIRST_BYTE_TIMEOUT_SECONDS },
    'idle-timeout-seconds': { type: 'string', default: process.env.GATEWAY_IDLE_TIMEOUT_SECONDS },
    'response-timeout-seconds': { type: 'string', default: process.env.GATEWAY_RESPONSE_TIMEOUT_SECONDS },
    'header-timeout-seconds': { type: 'string', default: process.env.GATEWAY_HEADER_TIMEOUT_SECONDS },
    'body-timeout-seconds': { type: 'string', default: process.env.GATEWAY_BODY_TIMEOUT_SECONDS },
    'keep-alive-timeout-seconds': { type: 'string', default: process.env.GATEWAY_KEEP_ALIVE_TIMEOUT_SECONDS },
    'max-connections': { type: 'string', default: process.env.GATEWAY_MAX_CONNECTIONS },
    'request-memory-mb': { type: 'string', default: process.env.GATEWAY_REQUEST_MEMORY_MB ?? '128' },
    'budget-refresh-ms': { type: 'string', default: process.env.GATEWAY_BUDGET_REFRESH_MS },
    // Stored Responses (proxy/stored-responses/): how long they are kept, the largest one kept.
    'responses-retention-days': { type: 'string', default: process.env.GATEWAY_RESPONSES_RETENTION_DAYS ?? '30' },
    'responses-max-mb': { type: 'string', default: process.env.GATEWAY_RESPONSES_MAX_MB ?? '4' },
    redis: { type: 'string', default: process.env.GATEWAY_REDIS_URL },
    // The response cache (proxy/cache/): the memory its entries may hold in this replica.
    'cache-max-mb': { type: 'string', default: process.env.GATEWAY_CACHE_MAX_MB ?? '64' },
    // Requests one in-cluster model may hold waiting for a replica slot, and how long each may wait.
    'queue-per-model': { type: 'string', default: process.env.GATEWAY_QUEUE_PER_MODEL ?? '100' },
    'queue-timeout-seconds': { type: 'string', default: process.env.GATEWAY_QUEUE_TIMEOUT_SECONDS ?? '300' },
    // MCP's DNS rebinding protection (proxy/mcp/origin.ts): browser origins allowed at /mcp, and
    // on a loopback bind the Host names allowed beside localhost. Comma-separated.
    'mcp-allowed-origins': { type: 'string', default: process.env.GATEWAY_MCP_ALLOWED_ORIGINS ?? '' },
    'mcp-allowed-hosts': { type: 'string', default: process.env.GATEWAY_MCP_ALLOWED_HOSTS ?? '' },
  },
});

/** A non-negative number flag, or exit with a message naming it. */
function numberFlag(name: string, value: string | undefined, fallback: number): number {
  if (value === undefined || value === '') return fallback;
  const n = Number(value);
  if (!Number.isFinite(n) || n < 0) {
    console.error(`--${name} must be a number >= 0 (got ${JSON.stringify(value)})`);
    process.exit(2);
  }
  return n;
}

/** A flag in seconds that must be more than 0, in ms. */
function positiveSeconds(name: string, value: string | undefined, fallbackMs: number): number {
  const ms = numberFlag(name, value, fallbackMs / 1000) * 1000;
  if (ms <= 0) {
    console.error(`--${name} must be greater than 0`);
    process.exit(2);
  }
  return ms;
}

const log = jsonLogger('proxy');
const unsupported = unsupportedNode(process.version);
if (unsupported) {
  log.error(unsupported);
  process.exit(1);
}
const standalone = values.config !== undefined;

async function source(): Promise<GatewayConfig['source']> {
  if (standalone) {
    const keysFile = values['keys-file'];
    if (!keysFile) throw new ConfigError('standalone mode needs --keys-file FILE (one API key per line)');
    return { kind: 'standalone', configFile: values.config ?? '', keysFile };
  }
  const kubeConfig = await loadKubeAccess(values.kubeconfig ? { file: values.kubeconfig } : {});
  return { kind: 'cluster', kubeConfig, ...(values['keys-secret'] ? { keysSecret: values['keys-secret'] } : {}) };
}

const rps = numberFlag('rate-limit-rps', values['rate-limit-rps'], 0);
const host = values.host ?? (standalone ? '127.0.0.1' : '0.0.0.0');
const list = (v: string | undefined) =>
  (v ?? '')
    .split(',')
    .map((x) => x.trim())
    .filter(Boolean);

/** The allowed MCP origins, each checked at start: a typo stops the proxy with the reason, not silently. */
function allowedOrigins(given: string[]): string[] {
  return given.map((o) => {
    const origin = normalOrigin(o);
    if (origin instanceof Error) {
      log.error('proxy failed to start', { error: origin.message });
      process.exit(2);
    }
    return origin;
  });
}

/**
 * Where this replica's peers reach it (the chart gives the pod's IP): a call's stream or a held
 * 2026-07-28 call is taken up here when another replica gets its client's next request.
 */
function replicaAddress(): { replicaUrl?: string } {
  const given = process.env.GATEWAY_REPLICA_URL;
  if (given) {
    if (!URL.canParse(given) || !/^https?:$/.test(new URL(given).protocol)) {
      console.error(`GATEWAY_REPLICA_URL must be an http(s) URL (got ${JSON.stringify(given)})`);
      process.exit(2);
    }
    return { replicaUrl: given };
  }
  const ip = process.env.POD_IP;
  if (!ip) return {};
  const port = Number(values.port ?? (standalone ? 8080 : PROXY_SERVICE_PORT));
  return { replicaUrl: `http://${ip.includes(':') ? `[${ip}]` : ip}:${port}` };
}

const config = async (): Promise<GatewayConfig> => ({
  source: await source(),
  mcp: {
    origins: originPolicy(host, allowedOrigins(list(values['mcp-allowed-origins'])), list(values['mcp-allowed-hosts'])),
    ...replicaAddress(),
  },
  usage: {
    db: values['usage-db'] ?? (standalone ? 'usage.db' : '/var/lib/platform-ai-optimizer/usage.db'),
    ...(values['usage-spool-dir'] ? { spoolDir: values['usage-spool-dir'] } : {}),
    spoolMaxBytes: numberFlag('usage-spool-max-mb', values['usage-spool-max-mb'], 512) * 1024 * 1024,
    ...(values['usage-buffer'] ? { bufferRecords: numberFlag('usage-buffer', values['usage-buffer'], 0) } : {}),
    retentionDays: numberFlag('retention-days', values['retention-days'], 30),
    rollupRetentionDays: numberFlag('rollup-retention-days', values['rollup-retention-days'], 400),
  },
  ...(values['prices-file'] ? { pricesFile: values['prices-file'] } : {}),
  ...(values['secrets-dir'] ? { secretsDir: values['secrets-dir'] } : {}),
  tagLabels: list(values['tag-labels']),
  retry: {
    retries: Math.floor(numberFlag('retries', values.retries, DEFAULT_RETRY.retries)),
    backoffMs: numberFlag('retry-backoff-ms', values['retry-backoff-ms'], DEFAULT_RETRY.backoffMs),
    maxBackoffMs: numberFlag('retry-max-backoff-ms', values['retry-max-backoff-ms'], DEFAULT_RETRY.maxBackoffMs),
  },
  rateLimit: {
    requestsPerSecond: rps,
    burst: Math.max(1, numberFlag('rate-limit-burst', values['rate-limit-burst'], Math.ceil(rps * 2))),
  },
  ...(values.redis ? { redisUrl: values.redis } : {}),
  cache: { maxBytes: numberFlag('cache-max-mb', values['cache-max-mb'], 64) * 1024 * 1024 },
  // Upstream waits; a ModelDeployment's spec.timeouts overrides the first byte and idle ones for its model.
  timeouts: {
    ...DEFAULT_TIMEOUTS,
    firstByteMs: positiveSeconds(
      'first-byte-timeout-seconds',
      values['first-byte-timeout-seconds'],
      DEFAULT_TIMEOUTS.firstByteMs,
    ),
    idleMs: positiveSeconds('idle-timeout-seconds', values['idle-timeout-seconds'], DEFAULT_TIMEOUTS.idleMs),
    responseMs: positiveSeconds(
      'response-timeout-seconds',
      values['response-timeout-seconds'],
      DEFAULT_TIMEOUTS.responseMs,
    ),
  },
  connections: {
    headersTimeoutMs: positiveSeconds(
      'header-timeout-seconds',
      values['header-timeout-seconds'],
      DEFAULT_CONNECTION_LIMITS.headersTimeoutMs,
    ),
    bodyTimeoutMs: positiveSeconds(
      'body-timeout-seconds',
      values['body-timeout-seconds'],
      DEFAULT_CONNECTION_LIMITS.bodyTimeoutMs,
    ),
    keepAliveTimeoutMs: positiveSeconds(
      'keep-alive-timeout-seconds',
      values['keep-alive-timeout-seconds'],
      DEFAULT_CONNECTION_LIMITS.keepAliveTimeoutMs,
    ),
    maxConnections: Math.max(
      1,
      Math.floor(numberFlag('max-connections', values['max-connections'], DEFAULT_CONNECTION_LIMITS.maxConnections)),
    ),
  },
  requestMemoryBytes: numberFlag('request-memory-mb', values['request-memory-mb'], 128) * 1024 * 1024,
  storedResponses: {
    retentionDays: numberFlag('responses-retention-days', values['responses-retention-days'], 30),
    maxResponseBytes: Math.floor(numberFlag('responses-max-mb', values['responses-max-mb'], 4) * 1024 * 1024),
  },
  ...(values['budget-refresh-ms']
    ? { budgetRefreshMs: numberFlag('budget-refresh-ms', values['budget-refresh-ms'], 2_000) }
    : {}),
  routing: { builtInEmbedding: builtInEmbeddingOn(process.env) },
  queue: {
    perModel: Math.max(1, Math.floor(numberFlag('queue-per-model', values['queue-per-model'], 100))),
    timeoutMs: positiveSeconds('queue-timeout-seconds', values['queue-timeout-seconds'], 300_000),
  },
  shutdown: {
    // In a cluster, endpoints take a few seconds to drop a terminating pod; standalone nobody routes to us.
    delayMs: numberFlag('shutdown-delay-seconds', values['shutdown-delay-seconds'], standalone ? 0 : 5) * 1000,
    drainMs: numberFlag('drain-seconds', values['drain-seconds'], 25) * 1000,
  },
  env: { ...process.env, HOSTNAME: process.env.HOSTNAME ?? hostname() },
  logger: log,
});

const gateway = await config()
  .then((c) => composeGateway(c))
  .catch((err: unknown) => {
    log.error('proxy failed to start', { error: errorMessage(err) });
    process.exit(1);
  });
// Standalone defaults to this machine only; in a cluster the Service reaches port 443 on all interfaces.
const url = await gateway
  .listen({
    port: Number(values.port ?? (standalone ? 8080 : PROXY_SERVICE_PORT)),
    host,
    // Metrics on their own port: never reachable through the API port callers use.
    metricsPort: Math.floor(numberFlag('metrics-port', values['metrics-port'], 9090)),
  })
  .catch((err: unknown) => {
    log.error('proxy failed to listen', { error: errorMessage(err) });
    process.exit(1);
  });
log.info('proxy listening', {
  url,
  metrics: gateway.metricsUrl(),
  mode: standalone ? 'standalone' : 'cluster',
  tracing: process.env.OTEL_EXPORTER_OTLP_ENDPOINT || process.env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT ? 'otlp' : 'off',
  models: gateway.routes
    .models()
    .map((m) => m.id)
    .join(','),
});

// One shutdown, whatever signals follow: Ctrl-C reaches the gateway both from the terminal and
// relayed by tsx under `npm start`, and a second signal must not kill the drain under way.
let stopping = false;
for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  process.on(signal, async () => {
    if (stopping) return;
    stopping = true;
    log.info('shutting down', { signal });
    const { cut, ms } = await gateway.close();
    log.info('stopped', {
      drainedMs: ms,
      cut,
      usageRecordsWritten: gateway.stack?.recorder.written ?? 0,
      usageRecordsDropped: gateway.stack?.recorder.droppedCount ?? 0,
    });
    process.exit(0);
  });
}
