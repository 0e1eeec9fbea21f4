import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { KubeConfig } from '@kubernetes/client-node';
import { loadCatalog, parallelSlots } from '../crds/catalog/catalog.js';
import {
  ACCESS_KEY_ID_KEY,
  PRODUCT_VERSION,
  PROXY_SERVICE_PORT,
  SECRET_ACCESS_KEY_KEY,
  unsupportedNode,
} from '../crds/constants.js';
import { errorMessage, jsonLogger } from '../crds/observability/log.js';
import { serveMetrics } from '../crds/observability/metrics-server.js';
import { LOAD_PATH } from '../crds/observability/proxy-load.js';
import { providerCredentials, RoleCredentials, type SecretLookup } from '../crds/providers/aws-credentials.js';
import { API_KEY_KEY, HostedCredentials } from '../crds/providers/credentials.js';
import { ApiKeys, standaloneKeys } from './access/auth.js';
import { BudgetGuard, type TagBudget, tagBudgetOf } from './access/budgets.js';
import { MemoryBudget } from './access/memory-budget.js';
import { RedisRateLimiter } from './access/redis-rate-limit.js';
import { createGateway } from './app.js';
import { uiRoutes } from './pages/pages.js';
import { routedPools } from './routing/replica-pool.js';
import { buildRoutes, type RouteScaling, RouteTable } from './routing/routes.js';
import { createProxyServer, DEFAULT_CONNECTION_LIMITS, LISTEN_BACKLOG } from './serve.js';
import { shutdownGracefully } from './server/shutdown.js';
import { ClusterSource } from './sources/cluster-source.js';
import { ConfigError, loadStandaloneConfig } from './sources/standalone-config.js';
import { ProxyMetrics } from './telemetry/metrics.js';
import { tracerFromEnv } from './telemetry/otel-env.js';
import { BedrockUpstream } from './upstreams/bedrock.js';
import { HostedUpstream } from './upstreams/hosted.js';
import { OpenAICompatibleUpstream } from './upstreams/openai-compatible.js';
import { DEFAULT_RETRY } from './upstreams/resilience.js';
import { DEFAULT_TIMEOUTS } from './upstreams/upstream.js';
import { CostMeter, loadBedrockPrices, mergePrices, parseBedrockPrices } from './usage/cost.js';
import { isPostgresUrl, openUsageStore } from './usage/open-store.js';
import type { UsageRecord } from './usage/record.js';
import { UsageRecorder } from './usage/recorder.js';
import { WorkerInserts, WorkerReports } from './usage/reports.js';
import { Spool } from './usage/spool.js';
import { UsageStatusWriter } from './usage/status.js';

/**
 * Entry point of the proxy. With --config it runs standalone: resources from that file, API
 * keys from --keys-file, no cluster. Without it, it watches the cluster it runs in.
 */
const { values } = parseArgs({
  options: {
    config: { type: 'string' },
    'keys-file': { type: 'string' },
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
    redis: { type: 'string', default: process.env.GATEWAY_REDIS_URL },
    // Requests one in-cluster model may hold waiting for a replica slot, and how long each may wait.
    'queue-per-model': { type: 'string', default: process.env.GATEWAY_QUEUE_PER_MODEL ?? '100' },
    'queue-timeout-seconds': { type: 'string', default: process.env.GATEWAY_QUEUE_TIMEOUT_SECONDS ?? '300' },
  },
});

/**
 * Where the spool goes when not told: beside an SQLite file; for PostgreSQL, under the temp
 * directory in a folder named for the database (host, port, name; never its credentials), so
 * that a standalone proxy's records are replayed only into the database they were meant for.
 */
function defaultSpool(usageDb: string): string {
  if (usageDb === ':memory:') return 'off';
  if (!isPostgresUrl(usageDb)) return `${usageDb}-spool`;
  const u = new URL(usageDb);
  const id = createHash('sha256').update(`${u.hostname}:${u.port}${u.pathname}`).digest('hex').slice(0, 16);
  return join(tmpdir(), 'platform-ai-optimizer', `usage-spool-${id}`);
}

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

const log = jsonLogger('proxy');
const unsupported = unsupportedNode(process.version);
if (unsupported) {
  log.error(unsupported);
  process.exit(1);
}
const standalone = values.config !== undefined;
const routes = new RouteTable();
const keys = new ApiKeys();
let source: ClusterSource | undefined;
let tagBudgets: TagBudget[] = [];
let onBudgets: (budgets: TagBudget[]) => void = (b) => {
  tagBudgets = b;
};

try {
  if (standalone) {
    const config = loadStandaloneConfig(values.config ?? '');
    routes.set(
      buildRoutes(
        config.modelDeployments,
        { standalone: true, loadedAt: Math.floor(Date.now() / 1000) },
        config.externalProviders,
      ),
    );
    const keysFile = values['keys-file'] ?? process.env.GATEWAY_API_KEYS_FILE;
    if (!keysFile) throw new ConfigError('standalone mode needs --keys-file FILE (one API key per line)');
    keys.replaceAll(standaloneKeys(config.apiKeys, readFileSync(keysFile, 'utf8')));
    if (keys.size === 0) throw new ConfigError(`${keysFile} holds no API key`);
    tagBudgets = config.budgets.flatMap((b) => tagBudgetOf(b) ?? []);
  } else {
    const kc = new KubeConfig();
    if (values.kubeconfig) kc.loadFromFile(values.kubeconfig);
    else kc.loadFromDefault();
    const catalog = loadCatalog();
    source = new ClusterSource({
      kubeConfig: kc,
      routes,
      keys,
      slotsOf: (md) => parallelSlots(catalog, md),
      ...(values['keys-secret'] ? { keysSecret: values['keys-secret'] } : {}),
      onBudgets: (b) => onBudgets(b),
      onError: (err) => log.warn('watch failed, retrying', { error: errorMessage(err) }),
    });
    await source.start();
  }
} catch (err) {
  log.error('proxy failed to start', { error: errorMessage(err) });
  process.exit(1);
}

const retry = {
  retries: Math.floor(numberFlag('retries', values.retries, DEFAULT_RETRY.retries)),
  backoffMs: numberFlag('retry-backoff-ms', values['retry-backoff-ms'], DEFAULT_RETRY.backoffMs),
  maxBackoffMs: numberFlag('retry-max-backoff-ms', values['retry-max-backoff-ms'], DEFAULT_RETRY.maxBackoffMs),
};
const rps = numberFlag('rate-limit-rps', values['rate-limit-rps'], 0);
const rateLimit = {
  requestsPerSecond: rps,
  burst: Math.max(1, numberFlag('rate-limit-burst', values['rate-limit-burst'], Math.ceil(rps * 2))),
};
// In a cluster, endpoints take a few seconds to drop a terminating pod; standalone nobody routes to us.
const shutdownDelayMs =
  numberFlag('shutdown-delay-seconds', values['shutdown-delay-seconds'], standalone ? 0 : 5) * 1000;
const drainMs = numberFlag('drain-seconds', values['drain-seconds'], 25) * 1000;
/** A flag in seconds that must be more than 0, in ms. */
const positiveSeconds = (name: string, value: string | undefined, fallbackMs: number): number => {
  const ms = numberFlag(name, value, fallbackMs / 1000) * 1000;
  if (ms <= 0) {
    console.error(`--${name} must be greater than 0`);
    process.exit(2);
  }
  return ms;
};
// Upstream waits; a ModelDeployment's spec.timeouts overrides the first byte and idle ones for its model.
const timeouts = {
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
};

let notReady = false;
let closing = false;
const metrics = new ProxyMetrics(
  (values['tag-labels'] ?? '')
    .split(',')
    .map((k) => k.trim())
    .filter(Boolean),
);
metrics.collectProcessMetrics();
// OpenTelemetry traces, when an OTLP endpoint is configured (OTEL_EXPORTER_OTLP_ENDPOINT).
const tracer = await tracerFromEnv(process.env, PRODUCT_VERSION);
// Keys of providers: the watched Secrets in a cluster; standalone, files laid out like a mounted
// Secret (<secrets-dir>/<secret name>/accessKeyId and /secretAccessKey, or /apiKey).
const secretsDir = values['secrets-dir'];
const secret = (name: string): SecretLookup | undefined => {
  if (source) return source.secret(name);
  if (!secretsDir) return undefined;
  const data: Record<string, string> = {};
  for (const key of [ACCESS_KEY_ID_KEY, SECRET_ACCESS_KEY_KEY, API_KEY_KEY]) {
    try {
      data[key] = readFileSync(join(secretsDir, name, key)).toString('base64');
    } catch {
      // absent: a Secret holds an access key pair or an API key
    }
  }
  return Object.keys(data).length > 0 ? { data } : undefined;
};
const roles = new RoleCredentials();
const bedrock = new BedrockUpstream({
  credentialsFor: (route) =>
    providerCredentials(route.auth, route.region, roles, () => secret(route.auth.secretRef?.name ?? '')),
});
// OpenAI, Anthropic, Azure OpenAI, Vertex AI and OpenAI-compatible servers: keys from the same
// Secrets, workload-identity tokens cached per identity.
const hosted = new HostedUpstream({
  credentials: new HostedCredentials(secret, { env: process.env }),
  timeouts,
});
// Usage: an SQLite file (a PVC in a cluster) or PostgreSQL (replicas on several nodes), written
// off the hot path, pruned hourly.
const usageDb = values['usage-db'] ?? (standalone ? 'usage.db' : '/var/lib/platform-ai-optimizer/usage.db');
const store = openUsageStore(usageDb, (err) =>
  log.warn('usage database unreachable at start: serving anyway, holding records', { error: errorMessage(err) }),
);
const retentionDays = Number(values['retention-days']);
// Rollups outlive raw records (reports span up to 400 days) but are bounded too.
const rollupRetentionDays = numberFlag('rollup-retention-days', values['rollup-retention-days'], 400);
const prune = () =>
  store
    .prune(
      new Date(Date.now() - retentionDays * 86_400_000),
      new Date(Date.now() - Math.max(retentionDays, rollupRetentionDays) * 86_400_000),
    )
    .catch((err: unknown) => log.warn('usage retention not applied', { error: errorMessage(err) }));
void prune();
setInterval(prune, 3_600_000).unref();
// A file's inserts go to a thread of their own; PostgreSQL's run in the database already.
const inserts = usageDb === ':memory:' || isPostgresUrl(usageDb) ? undefined : new WorkerInserts(usageDb, store);
// The spool: each record on local disk from the moment it is made until the store has it, so a
// crash (OOM kill, node failure) loses none; replayed here before serving.
const spoolRoot = values['usage-spool-dir'] ?? defaultSpool(usageDb);
const spool =
  spoolRoot === 'off'
    ? undefined
    : new Spool({
        root: spoolRoot,
        // A pod's name: its container restarts find their own spool; a pod gone is adopted by another.
        replica: (process.env.HOSTNAME ?? hostname()).replace(/[^A-Za-z0-9._-]/g, '_') || 'proxy',
        maxBytes: numberFlag('usage-spool-max-mb', values['usage-spool-max-mb'], 512) * 1024 * 1024,
        onSkipped: (_file, skipped) => {
          metrics.usageSpoolSkipped.inc(skipped.records);
          log.warn('usage spool: damaged or torn records skipped', { records: skipped.records, bytes: skipped.bytes });
        },
        onWriteError: (err) =>
          log.error('usage spool not writable: records held in memory only until it is', {
            error: errorMessage(err),
          }),
        onWriteRecovered: () => log.info('usage spool writable again'),
        // The recorder is made below, after the spool's replay (whose writes may fail too).
        onUnwritten: (records) => unwrittenHook(records),
      });
// Until the recorder exists: records whose spool write failed during the replay, held for it.
const unwrittenAtStart: UsageRecord[] = [];
let unwrittenHook = (records: UsageRecord[]) => {
  unwrittenAtStart.push(...records);
};
const backlogSpend: UsageRecord[] = [];
const backlog = spool?.start((rec) => {
  if (rec.costUsd > 0) backlogSpend.push(rec);
});
if (spool) {
  metrics.usageSpoolBytes = () => spool.bytes();
  const { records, cutStreams, adopted } = spool.replayed;
  if (records > 0 || cutStreams > 0 || adopted > 0)
    log.info('usage spool replayed: writing its records to the store', {
      records,
      cutStreams,
      adoptedReplicas: adopted,
      skipped: spool.skipped,
    });
}
const recorder = new UsageRecorder({
  store: inserts ?? store,
  maxQueue: numberFlag('usage-buffer', values['usage-buffer'], spool ? 2_000 : 50_000),
  ...(spool ? { spool } : {}),
  ...(backlog ? { backlog } : {}),
  dropped: metrics.usageDropped,
  onError: (err) =>
    log.error(`usage store failing: holding records ${spool ? 'in the spool' : 'in memory'} until it answers`, {
      error: errorMessage(err),
      buffer: recorder.pending,
    }),
  onDropping: () =>
    log.error(
      `usage ${spool ? 'spool' : 'buffer'} full: dropping records until the store answers, oldest first (counted in pao_gateway_usage_records_dropped_total)`,
      {
        buffer: recorder.pending,
      },
    ),
  onRecovered: (held, dropped) => log.info('usage store answering again', { held, dropped }),
  // budgets is made below, before the recorder's first write (its timer).
  onWritten: (records) => budgets.written(records),
});
unwrittenHook = (records) => recorder.unwritten(records);
// Streams cut by a crash, recorded at start on a disk that took no write: in memory now.
recorder.hold(unwrittenAtStart);
unwrittenAtStart.length = 0;
const basePrices = loadBedrockPrices();
const cost = new CostMeter(
  loadCatalog(),
  values['prices-file']
    ? mergePrices(basePrices, parseBedrockPrices(readFileSync(values['prices-file'], 'utf8')))
    : basePrices,
);
source?.onPrices((text) => {
  try {
    cost.setPrices(text ? mergePrices(basePrices, parseBedrockPrices(text)) : basePrices);
  } catch (err) {
    log.warn('price overrides not applied', { error: errorMessage(err) });
  }
});

// Reports on their own thread and connection, so they never hold chat traffic.
const budgets = new BudgetGuard(store, () => keys.policies(), {
  refreshMs: numberFlag('budget-refresh-ms', values['budget-refresh-ms'], 2_000),
  onError: (err) => log.warn('budget spend not refreshed: using the last figures', { error: errorMessage(err) }),
});
budgets.setTagBudgets(tagBudgets);
onBudgets = (b) => budgets.setTagBudgets(b);
// The spool's backlog counts toward budgets until it is written, as buffered records do.
budgets.unwrittenRecords(backlogSpend);
backlogSpend.length = 0;
budgets.start();
const statusWriter = source
  ? new UsageStatusWriter(source, store, {
      onError: (err) => log.warn('ApiKey or Budget status not written', { error: errorMessage(err) }),
    })
  : undefined;
statusWriter?.start();

// Without Redis every replica keeps its own buckets: a key's cluster-wide rate is its limit
// times the number of replicas.
const limiter = values.redis
  ? new RedisRateLimiter({
      url: values.redis,
      fallbacks: metrics.rateLimitFallbacks,
      onFallback: (err) =>
        log.warn('Redis not answering: rate limits are per replica until it does', { error: errorMessage(err) }),
      onRecovered: () => log.info('Redis answering again: rate limits shared by all replicas'),
    })
  : undefined;

// In-cluster models: least in-flight over ready replicas, the excess held here; a request for a
// hibernated model wakes it.
const pools = routedPools(routes, metrics, {
  maxQueued: Math.max(1, Math.floor(numberFlag('queue-per-model', values['queue-per-model'], 100))),
  queueMs: positiveSeconds('queue-timeout-seconds', values['queue-timeout-seconds'], 300_000),
  ...(source ? { wake: (s: RouteScaling) => (source as ClusterSource).wake(s.namespace, s.name) } : {}),
  onWakeError: (model, err) => log.warn('could not wake the model', { model, error: errorMessage(err) }),
});

const reports = usageDb === ':memory:' || isPostgresUrl(usageDb) ? undefined : new WorkerReports(usageDb);
const gateway = createGateway({
  keys,
  routes,
  upstreams: { 'openai-compatible': new OpenAICompatibleUpstream({ timeouts, pools }), bedrock, hosted },
  usage: recorder,
  metrics,
  cost,
  store,
  reports,
  retry,
  rateLimit,
  ...(limiter ? { limiter } : {}),
  extraRoutes: uiRoutes(),
  budgets,
  onCaller: (caller) => statusWriter?.used(caller.policy.name),
  ...(tracer ? { tracer } : {}),
  budget: new MemoryBudget(numberFlag('request-memory-mb', values['request-memory-mb'], 128) * 1024 * 1024),
  ready: () => !notReady && (source?.ready() ?? true),
  draining: () => closing,
  onError: (err, requestId) => log.error('request failed', { requestId, error: errorMessage(err) }),
  onUnpriced: (model, provider) =>
    log.warn('model has no price: its requests are recorded with cost 0 and marked unpriced', { model, provider }),
});

// Standalone defaults to this machine only; in a cluster the Service reaches port 443 on all interfaces.
const host = values.host ?? (standalone ? '127.0.0.1' : '0.0.0.0');
const port = Number(values.port ?? (standalone ? 8080 : PROXY_SERVICE_PORT));
const server = createProxyServer(gateway, {
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
});
// Metrics on their own port: never reachable through the API port callers use.
const metricsServer = await serveMetrics(
  metrics.registry,
  Math.floor(numberFlag('metrics-port', values['metrics-port'], 9090)),
  host,
  // The operator's autoscaler sums these over the proxy replicas.
  { [LOAD_PATH]: () => pools.report() },
).catch((err: unknown) => {
  log.error('metrics port unavailable', { error: errorMessage(err) });
  process.exit(1);
});
server.listen({ port, host, backlog: LISTEN_BACKLOG }, () => {
  const info = server.address() as AddressInfo;
  log.info('proxy listening', {
    url: `http://${host}:${info.port}`,
    metrics: metricsServer.url,
    mode: standalone ? 'standalone' : 'cluster',
    tracing: tracer ? 'otlp' : 'off',
    models: routes
      .models()
      .map((m) => m.id)
      .join(','),
  });
});

for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  process.once(signal, async () => {
    log.info('shutting down', { signal, delayMs: shutdownDelayMs, drainMs });
    const { cut, ms } = await shutdownGracefully({
      server,
      delayMs: shutdownDelayMs,
      graceMs: drainMs,
      onNotReady: () => {
        notReady = true;
      },
      onClosing: () => {
        closing = true;
      },
      log: (msg, fields) => log.warn(msg, fields),
    });
    // Streams cut at the end of the grace period settle their usage on the next turns.
    await new Promise((r) => setTimeout(r, 50));
    budgets.stop();
    statusWriter?.stop();
    await limiter?.close();
    await recorder.close();
    await inserts?.close();
    await reports?.close();
    await store.close();
    await source?.stop().catch(() => {});
    await tracer?.shutdown().catch(() => {});
    log.info('stopped', {
      drainedMs: ms,
      cut,
      usageRecordsWritten: recorder.written,
      usageRecordsDropped: recorder.droppedCount,
    });
    process.exit(0);
  });
}
