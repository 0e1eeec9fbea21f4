import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { serve } from '@hono/node-server';
import type {
  KubeConfig,
  V1DaemonSet,
  V1Deployment,
  V1PersistentVolumeClaim,
  V1Pod,
  V1Service,
} from '@kubernetes/client-node';
import { Hono } from 'hono';
import { Counter, Gauge, Registry } from 'prom-client';
import type { ApiKey } from '../crds/api-key.js';
import type { AutoscalerPolicy } from '../crds/autoscaler-policy.js';
import type { Budget } from '../crds/budget.js';
import { type Catalog, type ClusterInfo, loadCatalog } from '../crds/catalog/catalog.js';
import {
  AGENT_NAMESPACE,
  API_GROUP,
  API_VERSION,
  DEPLOYMENT_TIMEOUT_MS,
  LLMS_NAMESPACE,
  MODEL_DEPLOYMENT_LABEL,
} from '../crds/constants.js';
import type { ExternalProvider } from '../crds/external-provider.js';
import { Informer, keyOf } from '../crds/kube/informer.js';
import { KubeClient, type KubeObject, resourcePath } from '../crds/kube/kube-client.js';
import type { NamedSecrets } from '../crds/kube/named-secrets.js';
import type { ModelDeployment } from '../crds/model-deployment.js';
import type { NodeConfiguration } from '../crds/node-configuration.js';
import type { NodeTemplate } from '../crds/node-template.js';
import { errorMessage, jsonLogger, type Logger } from '../crds/observability/log.js';
import { type MetricsServer, serveMetrics } from '../crds/observability/metrics-server.js';
import { type AwsEndpoints, type CredentialProvider, RoleCredentials } from '../crds/providers/aws-credentials.js';
import { ApiKeyController, watchApiKeys } from './api-key-controller.js';
import { BudgetController, watchBudgets } from './budget-controller.js';
import { ControllerMetrics } from './controller-metrics.js';
import { EventRecorder } from './events.js';
import { ExternalProviderController, watchExternalProviders } from './external-provider-controller.js';
import { LeaderElector } from './leader-election.js';
import { managementApi } from './management-api.js';
import { ModelAutoscaler, ProxyLoad, proxyTargets } from './model-autoscaler.js';
import type { ModelCacheSetting } from './model-cache.js';
import {
  type ModelDeploymentCaches,
  ModelDeploymentController,
  watchModelDeployments,
} from './model-deployment-controller.js';
import { WorkQueue } from './work-queue.js';

/**
 * The operator process: an HTTP server (health, metrics, management API) that runs always,
 * and, while this replica holds the leader lease, the informers, the work queue and the
 * ModelDeployment controller.
 */

/** The resource a request path addresses (pods, modeldeployments, leases...), a bounded label. */
export function resourceOf(path: string): string {
  const parts = path.split('/').filter(Boolean);
  const rest = parts[0] === 'api' ? parts.slice(2) : parts.slice(3);
  return (rest[0] === 'namespaces' && rest.length > 2 ? rest[2] : rest[0]) ?? 'unknown';
}

export interface OperatorOptions {
  kubeConfig: KubeConfig;
  cluster: ClusterInfo;
  ollamaImage: string;
  /** HTTP port for /healthz, /readyz and the management API; 0 picks a free one. */
  port: number;
  /** Port of GET /metrics, apart from the API port; 0 picks a free one. */
  metricsPort?: number;
  concurrency?: number;
  resyncMs?: number;
  timeoutMs?: number;
  now?: () => Date;
  leaderElection?: { namespace: string; name: string; identity: string; leaseDurationMs?: number } | false;
  logger?: Logger;
  catalog?: Catalog;
  /** AWS: endpoint overrides (tests) and the base identity for AssumeRole (default chain). */
  aws?: { endpoints?: AwsEndpoints; base?: CredentialProvider };
  /**
   * Where hosted providers' endpoint overrides (PAO_ENDPOINT_URL_*) and workload-identity settings
   * (AZURE_FEDERATED_TOKEN_FILE, GOOGLE_FEDERATED_TOKEN_FILE, ...) are read. Default process.env.
   */
  providerEnv?: NodeJS.ProcessEnv;
  /** How often ExternalProviders are discovered again. Default 10 minutes. */
  rediscoveryMs?: number;
  /** A PersistentVolumeClaim per ModelDeployment for its model; absent or false: an emptyDir per pod. */
  modelCache?: ModelCacheSetting;
  /** How often the model autoscaler reads the proxies' load and decides. Default 5 s. */
  autoscaleIntervalMs?: number;
  /**
   * The proxies' metrics URLs (http://host:port) whose /load the autoscaler reads. Default: the
   * ready endpoints of the chart's proxy metrics Service.
   */
  proxyLoadUrls?: string[];
}

export class Operator {
  readonly registry = new Registry();
  readonly log: Logger;
  readonly client: KubeClient;
  private readonly apiRequests: Counter<'method' | 'resource'>;
  private readonly controllers: ControllerMetrics;
  private server: Server | undefined;
  private metricsServer: MetricsServer | undefined;
  private elector: LeaderElector | undefined;
  private queue: WorkQueue | undefined;
  private providerQueue: WorkQueue | undefined;
  private providers: { eps: Informer<ExternalProvider>; secrets: NamedSecrets } | undefined;
  private keys:
    | { apiKeys: Informer<ApiKey>; budgets: Informer<Budget>; keyQueue: WorkQueue; budgetQueue: WorkQueue }
    | undefined;
  private caches: ModelDeploymentCaches | undefined;
  private autoscaler: ModelAutoscaler | undefined;
  private leading = false;
  private synced = false;
  private stopping = false;

  constructor(private readonly opts: OperatorOptions) {
    this.log = opts.logger ?? jsonLogger('operator');
    this.apiRequests = new Counter({
      name: 'pao_operator_kube_api_requests_total',
      help: 'Requests the operator sent to the Kubernetes API (watches counted when opened, as method WATCH).',
      labelNames: ['method', 'resource'],
      registers: [this.registry],
    });
    this.controllers = new ControllerMetrics(this.registry);
    const self = this;
    // client-go's name for it, as controller-runtime operators export it.
    new Gauge({
      name: 'leader_election_master_status',
      help: 'Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master.',
      labelNames: ['name'],
      registers: [this.registry],
      collect() {
        this.set({ name: self.opts.leaderElection ? self.opts.leaderElection.name : 'none' }, self.leading ? 1 : 0);
      },
    });
    this.client = new KubeClient(opts.kubeConfig, {
      userAgent: 'platform-ai-optimizer-operator',
      onRequest: (method, path) => this.apiRequests.inc({ method, resource: resourceOf(path) }),
    });
  }

  /** API requests sent so far, leader-election renewals excluded, for tests and benchmarks. */
  async apiRequestCount(): Promise<number> {
    const m = await this.apiRequests.get();
    return m.values.filter((v) => v.labels.resource !== 'leases').reduce((n, v) => n + v.value, 0);
  }

  isLeader(): boolean {
    return this.leading;
  }

  /** One autoscaler round now (tests, instead of waiting for the interval). */
  async autoscaleNow(): Promise<void> {
    await this.autoscaler?.tick();
  }

  /** Reconcile everything again now (resync on demand; tests use it after moving the clock). */
  resyncAll(): void {
    for (const md of this.caches?.modelDeployments.list() ?? []) this.queue?.add(keyOf(md));
    for (const ep of this.providers?.eps.list() ?? []) this.providerQueue?.add(keyOf(ep));
    for (const ak of this.keys?.apiKeys.list() ?? []) this.keys?.keyQueue.add(keyOf(ak));
    for (const b of this.keys?.budgets.list() ?? []) this.keys?.budgetQueue.add(keyOf(b));
  }

  url(): string {
    const addr = this.server?.address() as AddressInfo | undefined;
    return `http://127.0.0.1:${addr?.port ?? 0}`;
  }

  /** Where GET /metrics is served (its own port). */
  metricsUrl(): string {
    return this.metricsServer?.url ?? '';
  }

  private httpApp(): Hono {
    const app = new Hono();
    app.get('/healthz', (c) => c.text('ok'));
    app.get('/readyz', (c) => {
      // A standby replica is ready to take over; a leader is ready once its caches are filled.
      const ready = !this.stopping && (!this.leading || this.synced);
      return c.text(ready ? 'ok' : 'not ready', ready ? 200 : 503);
    });
    app.route('/', managementApi(this.opts.catalog ?? loadCatalog(), this.opts.cluster));
    return app;
  }

  async start(): Promise<void> {
    await new Promise<void>((resolve) => {
      this.server = serve({ fetch: this.httpApp().fetch, port: this.opts.port, hostname: '0.0.0.0' }, () =>
        resolve(),
      ) as Server;
    });
    this.metricsServer = await serveMetrics(this.registry, this.opts.metricsPort ?? 0, '0.0.0.0');
    const le = this.opts.leaderElection;
    if (le === false || le === undefined) {
      await this.startLeading();
      return;
    }
    this.elector = new LeaderElector(this.client, {
      ...le,
      onStartedLeading: () => {
        this.log.info('started leading', { identity: le.identity });
        void this.startLeading().catch((err) =>
          this.log.error('controllers failed to start', { error: errorMessage(err) }),
        );
      },
      onStoppedLeading: () => {
        this.log.warn('stopped leading', { identity: le.identity });
        void this.stopLeading();
      },
      onError: (err) => this.log.warn('leader election', { error: errorMessage(err) }),
    });
    this.elector.start();
  }

  private informer<T extends KubeObject>(path: string, labelSelector?: string): Informer<T> {
    return new Informer<T>(this.client, {
      path,
      ...(labelSelector ? { labelSelector } : {}),
      resyncMs: this.opts.resyncMs ?? 10 * 60_000,
      onError: (err) => this.log.warn('watch failed, retrying', { path, error: errorMessage(err) }),
    });
  }

  private async startLeading(): Promise<void> {
    if (this.leading || this.stopping) return;
    this.leading = true;
    const crd = (plural: string, namespace?: string) =>
      resourcePath({ group: API_GROUP, version: API_VERSION, plural, ...(namespace ? { namespace } : {}) });
    const owned = MODEL_DEPLOYMENT_LABEL;
    const caches: ModelDeploymentCaches = {
      modelDeployments: this.informer<ModelDeployment>(crd('modeldeployments')),
      deployments: this.informer<V1Deployment>(
        resourcePath({ group: 'apps', version: 'v1', plural: 'deployments', namespace: LLMS_NAMESPACE }),
        owned,
      ),
      services: this.informer<V1Service>(
        resourcePath({ group: '', version: 'v1', plural: 'services', namespace: LLMS_NAMESPACE }),
      ),
      pods: this.informer<V1Pod>(
        resourcePath({ group: '', version: 'v1', plural: 'pods', namespace: LLMS_NAMESPACE }),
        owned,
      ),
      // Unfiltered: a spec.cache.existingClaim is the user's and carries no label of ours.
      claims: this.informer<V1PersistentVolumeClaim>(
        resourcePath({ group: '', version: 'v1', plural: 'persistentvolumeclaims', namespace: LLMS_NAMESPACE }),
      ),
      nodeTemplates: this.informer<NodeTemplate>(crd('nodetemplates')),
      nodeConfigurations: this.informer<NodeConfiguration>(crd('nodeconfigurations')),
      policies: this.informer<AutoscalerPolicy>(crd('autoscalerpolicies')),
      daemonSets: this.informer<V1DaemonSet>(resourcePath({ group: 'apps', version: 'v1', plural: 'daemonsets' })),
    };
    this.caches = caches;
    const agentPath = (plural: string) =>
      resourcePath({ group: API_GROUP, version: API_VERSION, plural, namespace: AGENT_NAMESPACE });
    const providers = this.informer<ExternalProvider>(agentPath('externalproviders'));
    const apiKeys = this.informer<ApiKey>(agentPath('apikeys'));
    const budgets = this.informer<Budget>(agentPath('budgets'));
    const queue = this.workQueue('modeldeployment', ['modeldeployment'], 'reconcile failed');
    const providerQueue = this.workQueue('externalprovider', ['externalprovider'], 'provider reconcile failed');
    const keyQueue = this.workQueue('apikey', ['apikey'], 'key reconcile failed');
    const budgetQueue = this.workQueue('budget', ['budget'], 'budget reconcile failed');
    this.queue = queue;
    this.providerQueue = providerQueue;
    this.keys = { apiKeys, budgets, keyQueue, budgetQueue };

    // What each controller watches and how events map to its keys is declared beside its
    // reconcile; here the informers and queues are only wired to them.
    watchModelDeployments(caches, providers, (key) => queue.add(key));
    const providerWatches = watchExternalProviders(
      this.client,
      { providers, modelDeployments: caches.modelDeployments },
      (key) => providerQueue.add(key),
      (error) => this.log.warn('Secret watch failed, retrying', { error }),
    );
    this.providers = { eps: providers, secrets: providerWatches.secrets };
    watchApiKeys(apiKeys, (key) => keyQueue.add(key));
    watchBudgets(budgets, (key) => budgetQueue.add(key));

    await Promise.all(Object.values(caches).map((i: Informer<KubeObject>) => i.start()));
    if (!this.leading) return;
    this.synced = true;
    const events = new EventRecorder(this.client, 'platform-ai-optimizer-operator', (err) =>
      this.log.warn('event not recorded', { error: errorMessage(err) }),
    );
    const catalog = this.opts.catalog ?? loadCatalog();
    const urls = this.opts.proxyLoadUrls;
    const autoscaler = new ModelAutoscaler(this.client, caches.modelDeployments, events, {
      catalog,
      intervalMs: this.opts.autoscaleIntervalMs ?? 5_000,
      load: new ProxyLoad(urls ? async () => urls : proxyTargets(this.client)),
      now: () => (this.opts.now?.() ?? new Date()).getTime(),
      onCondition: (key) => queue.add(key),
      onError: (err) => this.log.warn('autoscaler round failed', { error: errorMessage(err) }),
    });
    this.autoscaler = autoscaler;
    const controller = new ModelDeploymentController(this.client, caches, events, {
      autoscaling: (key) => autoscaler.condition(key),
      catalog,
      cluster: this.opts.cluster,
      ollamaImage: this.opts.ollamaImage,
      timeoutMs: this.opts.timeoutMs ?? DEPLOYMENT_TIMEOUT_MS,
      now: this.opts.now ?? (() => new Date()),
      ...(this.opts.modelCache ? { modelCache: this.opts.modelCache } : {}),
      providers: () => this.providers?.eps.list() ?? [],
    });
    queue.run(this.controllers.instrument('modeldeployment', (key) => controller.reconcile(key)));
    for (const md of caches.modelDeployments.list()) queue.add(keyOf(md));
    autoscaler.start();
    await this.startProviders(providers, providerWatches.secrets, providerWatches.track, providerQueue);
    await this.startKeys(apiKeys, budgets, keyQueue, budgetQueue);
    this.log.info('controllers running', { namespace: LLMS_NAMESPACE, agentNamespace: AGENT_NAMESPACE });
  }

  /** A work queue of `--concurrency` workers whose failures are logged and whose metrics are exported. */
  private workQueue(name: string, controllers: string[], failure: string): WorkQueue {
    const concurrency = this.opts.concurrency ?? 4;
    const queue = new WorkQueue({
      concurrency,
      onError: (key, err, attempt) => this.log.warn(failure, { key, attempt, error: errorMessage(err) }),
      observer: this.controllers.queueObserver(name, controllers),
    });
    this.controllers.watchQueue(name, controllers, queue, concurrency);
    return queue;
  }

  private async startProviders(
    eps: Informer<ExternalProvider>,
    secrets: NamedSecrets,
    track: () => Promise<void>,
    queue: WorkQueue,
  ): Promise<void> {
    await eps.start();
    await track();
    if (!this.leading) return;
    const controller = new ExternalProviderController(
      this.client,
      eps,
      secrets,
      new EventRecorder(this.client, 'platform-ai-optimizer-operator', (err) =>
        this.log.warn('event not recorded', { error: errorMessage(err) }),
      ),
      {
        roles: new RoleCredentials({
          ...(this.opts.aws?.base ? { base: this.opts.aws.base } : {}),
          ...(this.opts.aws?.endpoints?.sts ? { endpoint: this.opts.aws.endpoints.sts } : {}),
        }),
        ...(this.opts.aws?.endpoints ? { endpoints: this.opts.aws.endpoints } : {}),
        rediscoveryMs: this.opts.rediscoveryMs ?? 10 * 60_000,
        ...(this.opts.providerEnv ? { env: this.opts.providerEnv } : {}),
        deployments: () => this.caches?.modelDeployments.list() ?? [],
        now: this.opts.now ?? (() => new Date()),
      },
    );
    queue.run(this.controllers.instrument('externalprovider', (key) => controller.reconcile(key)));
    for (const ep of eps.list()) queue.add(keyOf(ep));
  }

  private async startKeys(
    apiKeys: Informer<ApiKey>,
    budgets: Informer<Budget>,
    keyQueue: WorkQueue,
    budgetQueue: WorkQueue,
  ): Promise<void> {
    await Promise.all([apiKeys.start(), budgets.start()]);
    if (!this.leading) return;
    const events = new EventRecorder(this.client, 'platform-ai-optimizer-operator', (err) =>
      this.log.warn('event not recorded', { error: errorMessage(err) }),
    );
    const now = this.opts.now ?? (() => new Date());
    const keyController = new ApiKeyController(this.client, apiKeys, events, { now });
    const budgetController = new BudgetController(this.client, budgets, events, { now });
    keyQueue.run(this.controllers.instrument('apikey', (key) => keyController.reconcile(key)));
    budgetQueue.run(this.controllers.instrument('budget', (key) => budgetController.reconcile(key)));
    for (const ak of apiKeys.list()) keyQueue.add(keyOf(ak));
    for (const b of budgets.list()) budgetQueue.add(keyOf(b));
  }

  private async stopLeading(): Promise<void> {
    this.leading = false;
    this.synced = false;
    const queue = this.queue;
    const caches = this.caches;
    this.queue = undefined;
    this.caches = undefined;
    const providerQueue = this.providerQueue;
    const providers = this.providers;
    this.providerQueue = undefined;
    this.providers = undefined;
    const keys = this.keys;
    this.keys = undefined;
    const autoscaler = this.autoscaler;
    this.autoscaler = undefined;
    await autoscaler?.stop();
    await Promise.all([
      queue?.shutdown(),
      providerQueue?.shutdown(),
      keys?.keyQueue.shutdown(),
      keys?.budgetQueue.shutdown(),
    ]);
    await Promise.all([
      ...Object.values(caches ?? {}).map((i: Informer<KubeObject>) => i.stop()),
      providers?.eps.stop(),
      providers?.secrets.stop(),
      keys?.apiKeys.stop(),
      keys?.budgets.stop(),
    ]);
  }

  /** Graceful shutdown: not ready, finish running reconciles, release the lease, close HTTP. */
  async stop(): Promise<void> {
    this.stopping = true;
    // Drain while still holding the lease: a successor must not start before the last of
    // this replica's reconciles has finished writing.
    await this.stopLeading();
    if (this.elector) await this.elector.stop();
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
    await this.metricsServer?.close();
  }
}
