import { readFileSync } from 'node:fs';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import type { Hono } from 'hono';
import { type Catalog, catalogModel, loadCatalog, parallelSlots } from '../crds/catalog/catalog.js';
import {
  ACCESS_KEY_ID_KEY,
  DEFAULT_ROUTING_POLICY,
  MCP_SESSIONS_KEY,
  MCP_SESSIONS_SECRET,
  PRODUCT_VERSION,
  SECRET_ACCESS_KEY_KEY,
} from '../crds/constants.js';
import type { ExternalProvider, ProviderType } from '../crds/external-provider.js';
import { clusterIssuerApi } from '../crds/identity/cluster-issuer.js';
import { getJson } from '../crds/identity/get-json.js';
import type { KubeAccess } from '../crds/kube/kube-access.js';
import { MCP_CLIENT_SECRET_KEY, MCP_TOKEN_KEY, mcpAuthProvider } from '../crds/mcp/auth.js';
import { errorMessage, jsonLogger, type Logger } from '../crds/observability/log.js';
import { type MetricsServer, serveMetrics } from '../crds/observability/metrics-server.js';
import { LOAD_PATH } from '../crds/observability/proxy-load.js';
import type { CredentialProvider, SecretLookup } from '../crds/providers/aws-credentials.js';
import { API_KEY_KEY, ProviderCredentials } from '../crds/providers/credentials.js';
import { PROVIDERS } from '../crds/providers/table.js';
import type { RoutingPolicy } from '../crds/routing-policy.js';
import { ApiKeys, standaloneKeys } from './access/auth.js';
import { BudgetGuard, type TagBudget, tagBudgetOf } from './access/budgets.js';
import { MemoryBudget } from './access/memory-budget.js';
import { LocalRateLimiter, type RateLimit, type RateLimiter } from './access/rate-limit.js';
import { RedisRateLimiter } from './access/redis-rate-limit.js';
import type { AdmitDeps } from './admit.js';
import { type OpenAudit, openAudit } from './audit/open.js';
import { type BodyDeps, MAX_BODY_BYTES } from './body.js';
import { type CacheStore, MemoryCacheStore, TieredCacheStore } from './cache/cache-store.js';
import { RedisCacheStore } from './cache/redis-cache-store.js';
import { ResponseCache } from './cache/response-cache.js';
import { SqliteCacheStore } from './cache/sqlite-cache-store.js';
import { type CallDeps, callOne } from './call.js';
import { ENDPOINTS } from './endpoints/endpoints.js';
import { ProxyError } from './endpoints/errors.js';
import {
  type ConnectionLimits,
  createFrontDoor,
  DEFAULT_CONNECTION_LIMITS,
  LISTEN_BACKLOG,
  type McpDoor,
} from './front-door.js';
import type { GuardrailCalls } from './guardrails/checker.js';
import type { GuardDeps } from './guardrails/guard-deps.js';
import { GuardrailSet } from './guardrails/guardrail-set.js';
import { serviceCalls } from './guardrails/services/service-calls.js';
import { Identities } from './identity/identities.js';
import { createMcpGateway, type McpGatewayDeps } from './mcp/mcp-gateway.js';
import type { OriginPolicy } from './mcp/origin.js';
import { McpServerTable } from './mcp/servers.js';
import { SessionSealer } from './mcp/session.js';
import { type AskServer, askModelServer } from './models/model-metadata.js';
import { pagesRoutes } from './pages/pages.js';
import { createPipeline, doorAdmission } from './pipeline.js';
import { planFor } from './route.js';
import { type EmbeddingsCall, gatewayEmbedder } from './routing-policy/embedder.js';
import { type Embedder, RoutingPolicies } from './routing-policy/policies.js';
import { otherRoutes } from './server/routes.js';
import { shutdownGracefully } from './server/shutdown.js';
import { routedPools } from './serving/replica-pool.js';
import { replicaSignals } from './serving/replica-signals.js';
import {
  buildRoutes,
  type ExternalRoute,
  type InClusterRoute,
  type RouteScaling,
  RouteTable,
} from './serving/routes.js';
import { ClusterSource } from './sources/cluster-source.js';
import { ConfigError, loadStandaloneConfig } from './sources/standalone-config.js';
import { openStoredResponses } from './stored-responses/open.js';
import type { StoredResponsesSettings } from './stored-responses/stored-responses.js';
import { ProxyMetrics } from './telemetry/metrics.js';
import { tracerFromEnv } from './telemetry/otel-env.js';
import type { RequestTracer } from './telemetry/tracing.js';
import type { Backends } from './upstreams/backend.js';
import { externalBackend } from './upstreams/external.js';
import { inClusterBackend } from './upstreams/in-cluster.js';
import { OpenAICompatibleUpstream } from './upstreams/openai-compatible.js';
import { ProviderUpstream } from './upstreams/provider-upstream.js';
import { DEFAULT_RETRY, type RetryPolicy } from './upstreams/resilience.js';
import { unavailableBackend } from './upstreams/unavailable.js';
import { DEFAULT_TIMEOUTS, type Timeouts, type Upstream } from './upstreams/upstream.js';
import { loadBedrockPrices, mergePrices, PriceBook, parseBedrockPrices } from './usage/cost.js';
import { startGpuTimeLedger } from './usage/gpu-time.js';
import { isPostgresUrl } from './usage/open-store.js';
import type { UsageSink } from './usage/record.js';
import type { UsageReports } from './usage/reports.js';
import { UsageStatusWriter } from './usage/status.js';
import { openUsageStack, type UsageSettings, type UsageStack } from './usage/usage-stack.js';

/**
 * The whole gateway, built once from its configuration: where its models and keys come from (a
 * standalone config file, or the cluster it runs in), usage, limits, budgets, backends, the
 * pipeline and the front door. proxy/main.ts turns flags into a GatewayConfig and calls this;
 * tests build their gateway here too, replacing single parts (GatewayParts) where they need a
 * double, so the wiring they test is production's.
 */

export interface GatewayConfig {
  /** Standalone: resources and keys from files; cluster: the cluster this runs in; none: parts only. */
  source?:
    | { kind: 'standalone'; configFile: string; keysFile: string }
    | { kind: 'cluster'; kubeConfig: KubeAccess; keysSecret?: string };
  /** Usage records; default an SQLite file beside the working directory (usage.db). */
  usage?: Partial<Omit<UsageSettings, 'replica'>>;
  /** Stored Responses (proxy/stored-responses/): retention and size bound (--responses-retention-days, --responses-max-mb). */
  storedResponses?: StoredResponsesSettings;
  /** Price overrides over the shipped table (standalone; in a cluster the prices ConfigMap). */
  pricesFile?: string;
  /** Standalone: provider Secrets as files (<dir>/<secret name>/apiKey, /accessKeyId, /secretAccessKey). */
  secretsDir?: string;
  /** Tag keys that become metric labels. */
  tagLabels?: readonly string[];
  retry?: RetryPolicy;
  /** Requests per second of keys that have no rate of their own; 0: unlimited. */
  rateLimit?: RateLimit;
  /** Rate buckets and the response cache shared by every replica in Redis; per replica without. */
  redisUrl?: string;
  /** The response cache (proxy/cache/): the memory its entries may hold in this replica (default 64 MiB). */
  cache?: { maxBytes?: number };
  timeouts?: Timeouts;
  connections?: ConnectionLimits;
  /** Memory all request bodies in flight may hold together. */
  requestMemoryBytes?: number;
  maxBodyBytes?: number;
  budgetRefreshMs?: number;
  /** Requests one in-cluster model may hold waiting for a replica slot, and how long each may wait. */
  queue?: { perModel: number; timeoutMs: number };
  /** The routing scorer's built-in embedding (default on); off, policies without an embedding model score on features. */
  routing?: { builtInEmbedding: boolean };
  deployingRetryAfterSeconds?: number;
  /** Readiness false this long before the listener closes; then in-flight requests get drainMs. */
  shutdown?: { delayMs: number; drainMs: number };
  /** AWS: the base identity roles are assumed with (tests); the SDK's default chain where absent. */
  aws?: { base?: CredentialProvider };
  /** MCP (proxy/mcp/): the secret sealing session ids (shared by replicas: sessions survive any of them), answer bounds. */
  mcp?: {
    sessionSecret?: string;
    maxAnswerBytes?: number;
    origins?: OriginPolicy;
    maxStreamsPerKey?: number;
    /** This replica's address for its peers (proxy/mcp/replica-forward.ts). */
    replicaUrl?: string;
  };
  /**
   * Where OTEL_*, workload-identity settings, endpoint overrides (PAO_ENDPOINT_URL_*, Bedrock's
   * and STS's included) and HOSTNAME are read.
   */
  env?: NodeJS.ProcessEnv;
  logger?: Logger;
}

/** Parts a test (or an embedding) supplies instead of what the configuration would build. */
export interface GatewayParts {
  routes: RouteTable;
  keys: ApiKeys;
  /** Where usage records go; the configured store's recorder by default. */
  usage: UsageSink;
  /** Where the usage APIs read; the configured store's by default. */
  reports: UsageReports;
  metrics: ProxyMetrics;
  tracer: RequestTracer;
  limiter: RateLimiter;
  catalog: Catalog;
  /** The upstream of in-cluster models (a test's recording double, its own timeouts or pools). */
  inCluster: Upstream<InClusterRoute>;
  /** Upstreams of external providers by provider type. */
  providers: Partial<Record<ProviderType, Upstream<ExternalRoute>>>;
  /** Where an in-cluster model server's URL connects (tests stand an engine behind cluster addresses). */
  resolveModelServer: (baseUrl: string) => string;
  /** How model lists ask a model server about a model the catalog does not know. */
  ask: AskServer;
  /** The memory all request bodies in flight may hold together (a test reads and holds it). */
  memory: MemoryBudget;
  /** Without budgets (false): none checked. */
  budgets: BudgetGuard | false;
  pages: Hono | false;
  /** The MCP servers the gateway federates (a test sets them; the source fills them otherwise). */
  mcpServers: McpServerTable;
  /** Where the response cache keeps its entries (a test's, to read or spoil them); the configured store by default. */
  cacheStore: CacheStore;
  /** The Guardrails in force (a test sets them; the source fills them otherwise). */
  guardrails: GuardrailSet;
}

export interface Gateway {
  /** The front door (not listening until listen()). */
  server: Server;
  routes: RouteTable;
  keys: ApiKeys;
  metrics: ProxyMetrics;
  usage: UsageSink;
  /** The price tables in force (the prices ConfigMap's overrides over the shipped table, in a cluster). */
  prices: PriceBook;
  /** The configured usage store, where the configuration has one (absent when parts.usage replaced it). */
  stack?: UsageStack;
  /** Spend budgets of keys and tags, where the gateway checks them. */
  budgets?: BudgetGuard;
  /** The RoutingPolicies in force (tests wait for a change to resolve). */
  policies: RoutingPolicies;
  /** Writes ApiKey and Budget status (spend, last use), in a cluster. */
  statusWriter?: UsageStatusWriter;
  /** Listens on the API port and, when given, the metrics port; resolves with the API's base URL. */
  listen(opts: { port: number; host: string; metricsPort?: number }): Promise<string>;
  /** Where GET /metrics and /load are served, once listening with a metrics port. */
  metricsUrl(): string | undefined;
  /** Graceful stop: readiness false, drain, usage flushed, stores and watches closed. */
  close(): Promise<{ cut: boolean; ms: number }>;
}

/** The largest answer an MCP server may send for one request (a tool's result included). */
const MCP_MAX_ANSWER_BYTES = 8 * 1024 * 1024;

export async function composeGateway(config: GatewayConfig = {}, parts: Partial<GatewayParts> = {}): Promise<Gateway> {
  const log = config.logger ?? jsonLogger('proxy');
  const env = config.env ?? process.env;
  const metrics = parts.metrics ?? new ProxyMetrics([...(config.tagLabels ?? ['project', 'team', 'environment'])]);
  const catalog = parts.catalog ?? loadCatalog();
  const routes = parts.routes ?? new RouteTable();
  const keys = parts.keys ?? new ApiKeys();
  // Secrets are read when a call needs a token: the source that holds them is loaded below.
  let secretOf: (name: string) => SecretLookup | undefined = () => undefined;
  const mcpServers = parts.mcpServers ?? new McpServerTable((server) => mcpAuthProvider(server, (n) => secretOf(n)));
  // Budget objects and RoutingPolicies arrive from the source before what applies them exists.
  const tagBudgets = new Handover<TagBudget[]>();
  const routingPolicies = new Handover<RoutingPolicy[]>();
  const handovers = { onBudgets: tagBudgets.give, onRoutingPolicies: routingPolicies.give };
  const guardrails = parts.guardrails ?? guardrailSet(log);
  const resources = await loadResources(config, { routes, keys, catalog, log, mcpServers, guardrails, ...handovers });
  secretOf = providerSecrets(config, resources.source);
  const tracer = parts.tracer ?? (await tracerFromEnv(env, PRODUCT_VERSION));
  const timeouts = config.timeouts ?? DEFAULT_TIMEOUTS;
  const state = { notReady: false, closing: false };

  const accounted = accounting(config, parts, { metrics, keys, resources, env, log });
  const { stack, usage: recorded, budgets, statusWriter } = accounted;
  tagBudgets.bind((b) => budgets?.setTagBudgets(b));
  const prices = priceBook(config, catalog, resources.source, log);
  // In-cluster GPU time for the reports' actual cost: every replica measures it, the store counts it once.
  const gpuTime = stack ? startGpuTimeLedger({ routes, prices, store: stack.gpuTime, log }) : undefined;
  const usage = gpuTime ? gpuTime.sink(recorded) : recorded;
  // Stored Responses live in the usage store's database (an in-memory one under a test's own sink).
  const responses = openStoredResponses(stack?.store, config.storedResponses ?? {}, log, metrics.registry);
  const limiter = parts.limiter ?? rateLimiter(config, metrics, log);

  const { signals, pools } = inClusterPools(config, routes, metrics, resources.source, log);
  const credentials = providerCredentials(config, resources.source, env);
  const backends = composeBackends(config, parts, { catalog, prices, timeouts, pools, credentials });
  const retry = config.retry ?? DEFAULT_RETRY;
  const call = { backends, retry, metrics };
  const embed = gatewayEmbedder(embeddingsCall(routes, call));
  const routing = await routingPoliciesOf(config, routingPolicies, { routes, backends, embed, log });
  const { policies, embeddingModels } = routing;
  const cache = responseCache(config, parts.cacheStore, { metrics, embeddingModels, routes, embed });
  const guard = guardDeps(guardrails, resources.providers, { routes, call, embed, log, env, credentials });

  const requestFailed = (err: unknown, requestId: string) =>
    log.error('request failed', { requestId, error: errorMessage(err) });
  // In a cluster the operator writes the Kubernetes changes, proven by its ServiceAccount token.
  const audit = openAudit(stack?.store, log, resources.source && clusterIssuerApi(resources.source.client));
  const admission = admissionOf(config, parts, { keys, limiter, metrics, state, statusWriter, audit });
  const pipeline = createPipeline({
    ...admission,
    ...(tracer ? { tracer } : {}),
    routes,
    ...call,
    policies,
    embed,
    ...(budgets ? { budgets } : {}),
    ...guard.deps,
    ...(cache.cache ? { cache: cache.cache } : {}),
    usage,
    storedResponses: responses.stored,
    onUnpriced: unpricedWarning(log),
    onError: requestFailed,
  });
  // One key seals MCP sessions and the pages' sign-in cookies: every replica opens both.
  const sealer = new SessionSealer(sessionSecret(config, env, resources.source));
  const others = otherRoutes({
    keys,
    routes,
    backends,
    policies,
    ...((parts.reports ?? stack?.reports) ? { reports: parts.reports ?? stack?.reports } : {}),
    ...(parts.pages !== false ? { pages: parts.pages ?? pagesRoutes() } : {}),
    ready: () => !state.notReady && (resources.source?.ready() ?? true),
    storedResponses: responses.stored,
    sessions: { identities: () => keys.identities, sealer, profileOf: (name: string) => keys.profile(name) },
    audit: audit.routes,
    onError: requestFailed,
  });
  const mcp = mcpGateway(config, {
    sealer,
    guard: guard.deps,
    authorizationServer: () => keys.identities?.authorizationServer(),
    servers: mcpServers,
    limiter,
    metrics,
    ...(tracer ? { tracer } : {}),
    usage,
    log,
  });
  const server = createFrontDoor(pipeline, others, config.connections ?? DEFAULT_CONNECTION_LIMITS, {
    admission: doorAdmission(admission),
    ...mcp,
  } satisfies McpDoor);
  return {
    server,
    routes,
    keys,
    metrics,
    usage,
    prices,
    policies,
    ...(stack ? { stack } : {}),
    ...(budgets ? { budgets } : {}),
    ...(statusWriter ? { statusWriter } : {}),
    ...lifecycle(config, log, state, server, pools, metrics, async () => {
      budgets?.stop();
      statusWriter?.stop();
      await limiter.close?.();
      await cache.close();
      await guard.close();
      await gpuTime?.stop();
      await responses.close();
      await audit.close();
      await stack?.close();
      await resources.source?.stop().catch(() => {});
      await signals.close();
      await tracer?.shutdown().catch(() => {});
    }),
  };
}

/** Told once per model of a request that used tokens of a model without a price. */
const unpricedWarning = (log: Logger) =>
  oncePerModel((model, provider) =>
    log.warn('model has no price: its requests are recorded with cost 0 and marked unpriced', { model, provider }),
  );

/** The Guardrails in force, filled by the source; a pattern that does not compile is logged and skipped. */
const guardrailSet = (log: Logger) =>
  new GuardrailSet([], (guardrail, problem) =>
    log.warn('guardrail pattern skipped: it does not compile', {
      guardrail,
      pattern: problem.name,
      error: problem.message,
    }),
  );

/**
 * The guard stage's part: the Guardrails, how their judges call models and their services are
 * called, and a judge or service that did not answer counted and logged (its onFailure decided).
 */
function guardDeps(
  guardrails: GuardrailSet,
  providers: () => readonly ExternalProvider[],
  ctx: {
    routes: RouteTable;
    call: CallDeps;
    embed: Embedder;
    log: Logger;
    env: NodeJS.ProcessEnv;
    credentials: ProviderCredentials;
  },
): { deps: GuardDeps; close: () => Promise<void> } {
  const services = serviceCalls({
    provider: (name) => providers().find((p) => p.metadata.name === name),
    credentials: ctx.credentials,
    env: ctx.env,
  });
  const judges: GuardrailCalls = { ...judgeCalls(ctx.routes, ctx.call, ctx.embed), post: services.post };
  const deps: GuardDeps = {
    guardrails,
    judges,
    onJudgeFailed: (guardrail, detector, why) => {
      ctx.call.metrics.guardrailCheckFailures.inc({ guardrail, detector });
      ctx.log.warn('guardrail check did not answer', { guardrail, detector, error: why });
    },
  };
  // A Classifier's examples embedded as its Guardrail is applied (and once its model routes), not
  // on the first request's time.
  guardrails.warmWith(judges);
  ctx.routes.onChange(() => guardrails.warm());
  return { deps, close: services.close };
}

/**
 * The RoutingPolicies as they arrive from the source, resolved; and each one's embedding model as
 * written (the resolved policy names it only once its classifier is trained), for the cache.
 */
async function routingPoliciesOf(
  config: GatewayConfig,
  arriving: Handover<RoutingPolicy[]>,
  ctx: { routes: RouteTable; backends: Backends; embed: Embedder; log: Logger },
): Promise<{ policies: RoutingPolicies; embeddingModels: ReadonlyMap<string, string> }> {
  const policies = new RoutingPolicies(
    ctx.routes,
    ctx.backends,
    (err) => ctx.log.warn('routing policy not resolved', { error: errorMessage(err) }),
    ctx.embed,
    config.routing?.builtInEmbedding ?? true,
  );
  const embeddingModels = new Map<string, string>();
  arriving.bind((p) => {
    embeddingModels.clear();
    for (const policy of p) {
      const model = policy.spec.scorer?.semantic?.embeddingModel;
      if (model && policy.metadata.name) embeddingModels.set(policy.metadata.name, model);
    }
    policies.set(p);
  });
  await policies.ready();
  return { policies, embeddingModels };
}

/** The admit and body stages' part, one for every door: the model endpoints' and MCP's. */
function admissionOf(
  config: GatewayConfig,
  parts: Partial<GatewayParts>,
  ctx: Pick<AdmitDeps, 'keys' | 'limiter' | 'metrics'> & {
    state: { closing: boolean };
    statusWriter: ReturnType<typeof accounting>['statusWriter'];
    audit: OpenAudit;
  },
): AdmitDeps & BodyDeps {
  const { keys, limiter, metrics, state, statusWriter, audit } = ctx;
  return {
    keys,
    rateLimit: config.rateLimit ?? { requestsPerSecond: 0, burst: 1 },
    limiter,
    metrics,
    maxBodyBytes: config.maxBodyBytes ?? MAX_BODY_BYTES,
    ...((parts.memory ?? config.requestMemoryBytes)
      ? { memory: parts.memory ?? new MemoryBudget(config.requestMemoryBytes ?? 0) }
      : {}),
    draining: () => state.closing,
    onCaller: (caller) => statusWriter?.used(caller.policy.name),
    onRefused: (refusal, remote) => audit.gateway.refused(refusal, remote),
  };
}

/**
 * Where usage goes and what reads it: the configured store's stack (or a test's sink), the
 * budgets over its spend, and the ApiKey and Budget status writer in a cluster.
 */
function accounting(
  config: GatewayConfig,
  parts: Partial<GatewayParts>,
  ctx: {
    metrics: ProxyMetrics;
    keys: ApiKeys;
    resources: { source?: ClusterSource };
    env: NodeJS.ProcessEnv;
    log: Logger;
  },
): { stack?: UsageStack; usage: UsageSink; budgets?: BudgetGuard; statusWriter?: UsageStatusWriter } {
  const { log } = ctx;
  const stack = parts.usage
    ? undefined
    : openUsageStack({ db: ':memory:', ...config.usage, replica: ctx.env.HOSTNAME ?? 'proxy' }, ctx.metrics, log);
  const usage = parts.usage ?? (stack?.recorder as UsageSink);
  const budgets =
    parts.budgets === false
      ? undefined
      : (parts.budgets ?? (stack ? budgetGuard(config, stack, ctx.keys, log) : undefined));
  const source = ctx.resources.source;
  const statusWriter =
    source && stack
      ? new UsageStatusWriter(source, stack.store, {
          onError: (err) => log.warn('ApiKey or Budget status not written', { error: errorMessage(err) }),
        })
      : undefined;
  statusWriter?.start();
  return {
    ...(stack ? { stack } : {}),
    usage,
    ...(budgets ? { budgets } : {}),
    ...(statusWriter ? { statusWriter } : {}),
  };
}

/** Listening (the API port, and the metrics port with the load report), and the graceful stop. */
function lifecycle(
  config: GatewayConfig,
  log: Logger,
  state: { notReady: boolean; closing: boolean },
  server: Server,
  pools: ReturnType<typeof routedPools>,
  metrics: ProxyMetrics,
  release: () => Promise<void>,
): Pick<Gateway, 'listen' | 'metricsUrl' | 'close'> {
  let metricsServer: MetricsServer | undefined;
  return {
    listen: async ({ port, host, metricsPort }) => {
      if (metricsPort !== undefined) {
        // The operator's autoscaler sums these over the proxy replicas.
        metricsServer = await serveMetrics(metrics.registry, metricsPort, host, { [LOAD_PATH]: () => pools.report() });
      }
      await new Promise<void>((resolve) => server.listen({ port, host, backlog: LISTEN_BACKLOG }, resolve));
      return `http://${host.includes(':') ? `[${host}]` : host}:${(server.address() as AddressInfo).port}`;
    },
    metricsUrl: () => metricsServer?.url,
    close: async () => {
      const drained = await shutdownGracefully({
        server,
        delayMs: config.shutdown?.delayMs ?? 0,
        graceMs: config.shutdown?.drainMs ?? 25_000,
        onNotReady: () => {
          state.notReady = true;
        },
        onClosing: () => {
          state.closing = true;
        },
        log: (msg, fields) => log.warn(msg, fields),
      });
      // Streams cut at the end of the grace period settle their usage on the next turns.
      await new Promise((r) => setTimeout(r, 50));
      await release();
      await metricsServer?.close();
      return drained;
    },
  };
}

/**
 * In-cluster models: a long prompt's prefix to the replica that holds it in its cache (bounded
 * by load; the engines' queue and KV-cache gauges where they export them), else least in-flight
 * over ready replicas; the excess held here; a request for a hibernated model wakes it.
 */
function inClusterPools(
  config: GatewayConfig,
  routes: RouteTable,
  metrics: ProxyMetrics,
  source: ClusterSource | undefined,
  log: Logger,
) {
  const signals = replicaSignals(routes);
  const pools = routedPools(routes, metrics, {
    signals,
    maxQueued: config.queue?.perModel ?? 100,
    queueMs: config.queue?.timeoutMs ?? 300_000,
    ...(source ? { wake: (s: RouteScaling) => source.wake(s.namespace, s.name) } : {}),
    onWakeError: (model, err) => log.warn('could not wake the model', { model, error: errorMessage(err) }),
  });
  return { signals, pools };
}

/** A value a source hands over before what applies it exists: kept, then handed on from bind() on. */
class Handover<T> {
  private last: T | undefined;
  private to: ((value: T) => void) | undefined;
  readonly give = (value: T): void => {
    this.last = value;
    this.to?.(value);
  };
  bind(to: (value: T) => void): void {
    this.to = to;
    if (this.last !== undefined) to(this.last);
  }
}

/**
 * The response cache: Redis, shared by the replicas, where the gateway has one; else this
 * replica's memory (--cache-max-mb; 0: none), with the usage file behind it standalone (a restart
 * keeps it). A semantic lookup embeds with the key's routing policy's embedding model (the
 * router's), in the cluster where the text must stay there; without one, lookups are exact only
 * (the built-in embedding, an average of its tokens' vectors, cannot tell "USD to EUR" from
 * "EUR to USD").
 */
function responseCache(
  config: GatewayConfig,
  given: CacheStore | undefined,
  ctx: { metrics: ProxyMetrics; embeddingModels: ReadonlyMap<string, string>; routes: RouteTable; embed: Embedder },
): { cache?: ResponseCache; close: () => Promise<void> } {
  const maxBytes = Math.floor(config.cache?.maxBytes ?? DEFAULT_CACHE_BYTES);
  const memory = maxBytes >= 1024 * 1024 ? new MemoryCacheStore(maxBytes) : undefined;
  const db = config.usage?.db;
  const file = db && db !== ':memory:' && !isPostgresUrl(db) ? new SqliteCacheStore(db) : undefined;
  const store: CacheStore | undefined =
    given ??
    (config.redisUrl
      ? new RedisCacheStore(config.redisUrl)
      : memory && file
        ? new TieredCacheStore(memory, file)
        : (memory ?? file));
  if (!store) return { close: async () => {} };
  const cache = new ResponseCache({
    store,
    embed: async (policyName, text, inClusterOnly, signal) => {
      const model = ctx.embeddingModels.get(policyName ?? DEFAULT_ROUTING_POLICY);
      if (model === undefined || (inClusterOnly && ctx.routes.lookup(model)?.kind !== 'in-cluster')) return undefined;
      const [v] = await ctx.embed(model, [text], AbortSignal.any([signal, AbortSignal.timeout(2_000)]));
      return v && unit(v);
    },
    onResult: (result, kind) => ctx.metrics.cacheLookups.inc({ kind, result }),
  });
  return { cache, close: () => store.close() };
}

const DEFAULT_CACHE_BYTES = 64 * 1024 * 1024;

/** A vector scaled to unit length (an embedding model's need not be). */
function unit(v: Float32Array): Float32Array {
  let norm = 0;
  for (const x of v) norm += x * x;
  if (norm === 0) return v;
  const inv = 1 / Math.sqrt(norm);
  return v.map((x) => x * inv);
}

/** The routes, keys and tag budgets of the configured source, loaded (a cluster's watches started). */
async function loadResources(
  config: GatewayConfig,
  into: {
    routes: RouteTable;
    keys: ApiKeys;
    catalog: Catalog;
    log: Logger;
    onBudgets: (budgets: TagBudget[]) => void;
    onRoutingPolicies: (policies: RoutingPolicy[]) => void;
    mcpServers: McpServerTable;
    guardrails: GuardrailSet;
  },
): Promise<{ source?: ClusterSource; providers: () => readonly ExternalProvider[] }> {
  const source = config.source;
  if (!source) return { providers: () => [] };
  if (source.kind === 'standalone') {
    const resources = loadStandaloneConfig(source.configFile);
    into.routes.set(
      buildRoutes(
        resources.modelDeployments,
        { standalone: true, loadedAt: Math.floor(Date.now() / 1000), ...(config.env ? { env: config.env } : {}) },
        resources.externalProviders,
      ),
    );
    into.keys.replaceAll(standaloneKeys(resources.apiKeys, readFileSync(source.keysFile, 'utf8')));
    into.keys.identities ??= new Identities({
      getJson,
      onError: (provider, what, err) =>
        into.log.warn('IdentityProvider not readable', { provider, what, error: errorMessage(err) }),
    });
    into.keys.identities.set(resources.identityProviders);
    into.mcpServers.set(resources.mcpServers);
    into.onRoutingPolicies(resources.routingPolicies);
    into.onBudgets(resources.budgets.flatMap((b) => tagBudgetOf(b) ?? []));
    into.guardrails.replace(resources.guardrails);
    if (into.keys.size === 0 && resources.identityProviders.length === 0)
      throw new ConfigError(`${source.keysFile} holds no API key (and the config no IdentityProvider)`);
    return { providers: () => resources.externalProviders };
  }
  const cluster = new ClusterSource({
    kubeConfig: source.kubeConfig,
    routes: into.routes,
    keys: into.keys,
    slotsOf: (md) => parallelSlots(into.catalog, md),
    contextOf: (md) => catalogModel(into.catalog, md.spec.model, md.spec.engine)?.serving.contextLength,
    ...(source.keysSecret ? { keysSecret: source.keysSecret } : {}),
    onBudgets: into.onBudgets,
    onMcpServers: (servers) => into.mcpServers.set(servers),
    onRoutingPolicies: into.onRoutingPolicies,
    onGuardrails: (g) => into.guardrails.replace(g),
    onError: (err) => into.log.warn('watch failed, retrying', { error: errorMessage(err) }),
    ...(config.env ? { env: config.env } : {}),
  });
  await cluster.start();
  return { source: cluster, providers: () => cluster.externalProviders() };
}

/** The shipped price table, the standalone overrides file over it, the cluster's ConfigMap over it as it changes. */
function priceBook(config: GatewayConfig, catalog: Catalog, source: ClusterSource | undefined, log: Logger): PriceBook {
  const base = loadBedrockPrices();
  const prices = new PriceBook(
    catalog,
    config.pricesFile ? mergePrices(base, parseBedrockPrices(readFileSync(config.pricesFile, 'utf8'))) : base,
  );
  source?.onPrices((text) => {
    try {
      prices.setTable(text ? mergePrices(base, parseBedrockPrices(text)) : base);
    } catch (err) {
      log.warn('price overrides not applied', { error: errorMessage(err) });
    }
  });
  return prices;
}

/** Spend budgets of keys and tags, from the store's spend with bounded staleness. */
function budgetGuard(config: GatewayConfig, stack: UsageStack, keys: ApiKeys, log: Logger): BudgetGuard {
  const budgets = new BudgetGuard(stack.store, () => keys.policies(), {
    refreshMs: config.budgetRefreshMs ?? 2_000,
    onError: (err) => log.warn('budget spend not refreshed: using the last figures', { error: errorMessage(err) }),
  });
  stack.onWritten((records) => budgets.written(records));
  // The spool's backlog counts toward budgets until it is written, as buffered records do.
  budgets.unwrittenRecords(stack.backlogSpend);
  stack.backlogSpend.length = 0;
  budgets.start();
  return budgets;
}

/**
 * Without Redis every replica keeps its own buckets: a key's cluster-wide rate is its limit
 * times the number of replicas.
 */
function rateLimiter(config: GatewayConfig, metrics: ProxyMetrics, log: Logger): RateLimiter {
  if (!config.redisUrl) return new LocalRateLimiter();
  return new RedisRateLimiter({
    url: config.redisUrl,
    fallbacks: metrics.rateLimitFallbacks,
    onFallback: (err) =>
      log.warn('Redis not answering: rate limits are per replica until it does', { error: errorMessage(err) }),
    onRecovered: () => log.info('Redis answering again: rate limits shared by all replicas'),
  });
}

/**
 * Every provider's credentials, Bedrock's included: keys from the same Secrets, workload-identity
 * tokens and AWS role sessions cached per identity, each call signed or keyed by its module's style.
 */
function providerCredentials(
  config: GatewayConfig,
  source: ClusterSource | undefined,
  env: NodeJS.ProcessEnv,
): ProviderCredentials {
  return new ProviderCredentials(providerSecrets(config, source), {
    env,
    ...(config.aws?.base ? { awsBase: config.aws.base } : {}),
  });
}

/** Every kind of route's backend, with the upstreams that carry their calls. */
function composeBackends(
  config: GatewayConfig,
  parts: Partial<GatewayParts>,
  ctx: {
    catalog: Catalog;
    prices: PriceBook;
    timeouts: Timeouts;
    pools: ReturnType<typeof routedPools>;
    credentials: ProviderCredentials;
  },
): Backends {
  const upstream = new ProviderUpstream({ credentials: ctx.credentials, timeouts: ctx.timeouts });
  const every = Object.fromEntries(Object.keys(PROVIDERS).map((type) => [type, upstream]));
  const providers = { ...every, ...parts.providers } as Record<ProviderType, Upstream<ExternalRoute>>;
  return {
    'in-cluster': inClusterBackend({
      upstream:
        parts.inCluster ??
        new OpenAICompatibleUpstream({
          timeouts: ctx.timeouts,
          pools: ctx.pools,
          ...(parts.resolveModelServer ? { resolve: parts.resolveModelServer } : {}),
        }),
      prices: ctx.prices,
      catalog: ctx.catalog,
      ask: parts.ask ?? askModelServer(),
    }),
    external: externalBackend({ upstreams: providers, prices: ctx.prices }),
    unavailable: unavailableBackend(config.deployingRetryAfterSeconds),
  };
}

/**
 * Keys of providers and MCP servers: the watched Secrets in a cluster; standalone, files laid out
 * like a mounted Secret (<secrets-dir>/<secret name>/accessKeyId and /secretAccessKey, /apiKey,
 * /token, /clientSecret).
 */
function providerSecrets(
  config: GatewayConfig,
  source: ClusterSource | undefined,
): (name: string) => SecretLookup | undefined {
  return (name) => {
    if (source) return source.secret(name);
    if (!config.secretsDir) return undefined;
    const data: Record<string, string> = {};
    for (const key of [ACCESS_KEY_ID_KEY, SECRET_ACCESS_KEY_KEY, API_KEY_KEY, MCP_TOKEN_KEY, MCP_CLIENT_SECRET_KEY]) {
      try {
        data[key] = readFileSync(join(config.secretsDir, name, key)).toString('base64');
      } catch {
        // absent: a Secret holds an access key pair or an API key
      }
    }
    return Object.keys(data).length > 0 ? { data } : undefined;
  };
}

/**
 * The MCP gateway (/mcp, /mcp/<server>): the model routes' keys, limiter, usage, metrics and
 * tracer, the McpServers of the source, sessions sealed with the shared secret.
 */
function mcpGateway(
  config: GatewayConfig,
  ctx: Pick<
    McpGatewayDeps,
    'servers' | 'limiter' | 'metrics' | 'tracer' | 'usage' | 'authorizationServer' | 'sealer' | 'guard'
  > & {
    log: Logger;
  },
): Omit<McpDoor, 'admission'> {
  const { log, ...deps } = ctx;
  return createMcpGateway({
    ...deps,
    rateLimit: config.rateLimit ?? { requestsPerSecond: 0, burst: 1 },
    maxAnswerBytes: config.mcp?.maxAnswerBytes ?? MCP_MAX_ANSWER_BYTES,
    ...(config.mcp?.maxStreamsPerKey !== undefined ? { maxStreamsPerKey: config.mcp.maxStreamsPerKey } : {}),
    ...(config.mcp?.replicaUrl ? { replica: config.mcp.replicaUrl } : {}),
    // No browser origin by default; server-side clients send none.
    origins: config.mcp?.origins ?? { allowedOrigins: [] },
    onError: (err, requestId) => log.error('MCP request failed', { requestId, error: errorMessage(err) }),
  });
}

/**
 * The secret MCP sessions are sealed with: the configuration's, else PAO_MCP_SESSION_SECRET, else
 * (in a cluster) the operator's Secret, read as it is watched.
 */
function sessionSecret(
  config: GatewayConfig,
  env: NodeJS.ProcessEnv,
  source: ClusterSource | undefined,
): () => string | undefined {
  const fixed = config.mcp?.sessionSecret ?? env.PAO_MCP_SESSION_SECRET;
  if (fixed) return () => fixed;
  return () => {
    const value = source?.secret(MCP_SESSIONS_SECRET)?.data?.[MCP_SESSIONS_KEY];
    return value ? Buffer.from(value, 'base64').toString('utf8') : undefined;
  };
}

/** A hook called at most once per model (bounded: a flood of made-up names stays small). */
function oncePerModel(hook: (model: string, provider: string) => void): (model: string, provider: string) => void {
  const seen = new Set<string>();
  return (model, provider) => {
    if (seen.has(model) || seen.size >= 1000) return;
    seen.add(model);
    hook(model, provider);
  };
}

/**
 * How guardrails' judges call their models: through the gateway's routes and backends as any
 * request (translators, retries), as the gateway's own calls (no key, no usage record).
 */
function judgeCalls(routes: RouteTable, deps: CallDeps, embed: Embedder): Omit<GuardrailCalls, 'post'> {
  return {
    chat: async (model, messages, signal) => {
      const entry = routes.lookup(model);
      if (!entry || entry.kind === 'unavailable') throw new Error(`the judge model ${model} does not route`);
      const plan = planFor(deps.backends, ENDPOINTS.chat, entry);
      if (plan instanceof ProxyError) throw plan;
      const body = { model: entry.model, messages, temperature: 0, max_tokens: 16 };
      const result = await callOne(
        deps,
        { route: entry, plan },
        { body, stream: false, clientWantsUsage: false, signal },
        undefined,
      );
      if (result.kind !== 'json') throw new Error(`the judge model ${model} answered a stream`);
      const content = (result.body as { choices?: { message?: { content?: unknown } }[] }).choices?.[0]?.message
        ?.content;
      if (typeof content !== 'string') throw new Error(`the judge model ${model} answered no text`);
      return content;
    },
    embed: async (model, texts, signal) => (await embed(model, texts, signal)).map(unit),
  };
}

/**
 * The gateway's own embeddings call (the routing scorer's): planned and made as a caller's
 * request to the model would be, by the call stage, with no key and no usage record.
 */
function embeddingsCall(routes: RouteTable, deps: CallDeps): EmbeddingsCall {
  return async (model, input, signal) => {
    const entry = routes.lookup(model);
    if (!entry || entry.kind === 'unavailable') throw new Error(`the embedding model ${model} does not route`);
    const plan = planFor(deps.backends, ENDPOINTS.embeddings, entry);
    if (plan instanceof ProxyError) throw plan;
    const body = { model: entry.model, input };
    const result = await callOne(
      deps,
      { route: entry, plan },
      { body, stream: false, clientWantsUsage: false, signal },
      undefined,
    );
    if (result.kind !== 'json') throw new Error(`the embedding model ${model} answered a stream`);
    return result.body;
  };
}
