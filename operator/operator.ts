import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { serve } from '@hono/node-server';
import { Hono } from 'hono';
import { Counter, Gauge, Registry } from 'prom-client';
import { type Catalog, type ClusterInfo, loadCatalog } from '../crds/catalog/catalog.js';
import { AGENT_NAMESPACE, LLMS_NAMESPACE } from '../crds/constants.js';
import type { EngineName } from '../crds/engines/engine.js';
import { keyOf } from '../crds/kube/informer.js';
import type { KubeAccess } from '../crds/kube/kube-access.js';
import { KubeClient } from '../crds/kube/kube-client.js';
import { errorMessage, jsonLogger, type Logger } from '../crds/observability/log.js';
import { type MetricsServer, serveMetrics } from '../crds/observability/metrics-server.js';
import type { CredentialProvider } from '../crds/providers/aws-credentials.js';
import { type AuditTrailOptions, type RunningAuditTrail, startAuditTrail } from './audit/audit-trail.js';
import { CONTROLLERS } from './controllers.js';
import { managementApi } from './management-api.js';
import type { ModelCacheSetting } from './model-deployment/model-cache.js';
import { type ControllerDeclaration, type RunningController, watchesOf } from './runtime/controller-declaration.js';
import { ControllerMetrics } from './runtime/controller-metrics.js';
import { EventRecorder } from './runtime/events.js';
import { LeaderElector } from './runtime/leader-election.js';
import { SharedInformers } from './runtime/shared-informers.js';
import { WorkQueue } from './runtime/work-queue.js';

/**
 * The operator process: an HTTP server (health, metrics, management API) that runs always,
 * and, while this replica holds the leader lease, the controllers the registry declares
 * (controllers.ts), built alike from their declarations: one informer per watched collection
 * shared between them, a work queue each with its metrics, resync and teardown.
 */

/** The resource a request path addresses (pods, modeldeployments, leases...), a bounded label. */
export function resourceOf(path: string): string {
  const parts = path.split('/').filter(Boolean);
  const rest = parts[0] === 'api' ? parts.slice(2) : parts.slice(3);
  return (rest[0] === 'namespaces' && rest.length > 2 ? rest[2] : rest[0]) ?? 'unknown';
}

export interface OperatorOptions {
  /** The API server and credentials: a kubeconfig's, or the pod's own (crds/kube/kube-access.ts). */
  kubeConfig: KubeAccess;
  cluster: ClusterInfo;
  /** Each engine's model server image where set (--engine-images); else the engine module's default. */
  images: Partial<Record<EngineName, string>>;
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
  /** AWS: the base identity for AssumeRole (tests); the SDK's default chain where absent. */
  aws?: { base?: CredentialProvider };
  /**
   * Where providers' endpoint overrides (PAO_ENDPOINT_URL_*, Bedrock's and STS's included, and
   * AWS's own AWS_ENDPOINT_URL_*) and workload-identity settings (AZURE_FEDERATED_TOKEN_FILE,
   * GOOGLE_FEDERATED_TOKEN_FILE, ...) are read. Default process.env.
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
  /** Whether the proxies run with the routing scorer's built-in embedding (Helm value routing.builtInEmbedding). Default true. */
  routingBuiltInEmbedding?: boolean;
  /** The audit trail of changes to our objects (operator/audit/); none where absent. */
  audit?: AuditTrailOptions;
}

/** A controller of one leadership term: its queue, and what runs once it started. */
interface TermController {
  declaration: ControllerDeclaration;
  queue: WorkQueue;
  running?: RunningController;
}

/** What runs while this replica leads; a new term builds all of it anew. */
interface Term {
  informers: SharedInformers;
  controllers: TermController[];
  /** Queues every object of the controller's kind (at start and resyncAll). */
  enqueueAll(c: TermController): void;
}

export class Operator {
  readonly registry = new Registry();
  readonly log: Logger;
  readonly client: KubeClient;
  private readonly apiRequests: Counter<'method' | 'resource'>;
  private readonly controllerMetrics: ControllerMetrics;
  private server: Server | undefined;
  private metricsServer: MetricsServer | undefined;
  private elector: LeaderElector | undefined;
  private term: Term | undefined;
  private auditTrail: Promise<RunningAuditTrail | undefined> | undefined;
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
    this.controllerMetrics = new ControllerMetrics(this.registry);
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

  /**
   * API requests sent so far, for tests and benchmarks: what reconciles send. Leader-election
   * renewals and watches opened again (the API server ends each after a while) are left out.
   */
  async apiRequestCount(): Promise<number> {
    const m = await this.apiRequests.get();
    return m.values
      .filter((v) => v.labels.resource !== 'leases' && v.labels.method !== 'WATCH')
      .reduce((n, v) => n + v.value, 0);
  }

  isLeader(): boolean {
    return this.leading;
  }

  /** One autoscaler round now (tests, instead of waiting for the interval). */
  async autoscaleNow(): Promise<void> {
    await Promise.all((this.term?.controllers ?? []).map((c) => c.running?.loop?.tick()));
  }

  /** Reconcile everything again now (resync on demand; tests use it after moving the clock). */
  resyncAll(): void {
    const term = this.term;
    for (const c of term?.controllers ?? []) term?.enqueueAll(c);
  }

  /** The audit trail once it watches (undefined without one, or where it failed to start). */
  audit(): Promise<RunningAuditTrail | undefined> {
    return this.auditTrail ?? Promise.resolve(undefined);
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
    // Not awaited: its watches list on their own, and an API server that refuses them is retried
    // there without holding up the controllers.
    if (this.opts.audit) {
      this.auditTrail = startAuditTrail(this.client, this.opts.audit, this.log).catch((err: unknown) => {
        this.log.error('audit trail not started', { error: errorMessage(err) });
        return undefined;
      });
    }
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

  /** A leadership term's informers and a queue per controller, wired by the declared watches; nothing runs yet. */
  private wire(): Term {
    const informers = new SharedInformers(this.client, {
      resyncMs: this.opts.resyncMs ?? 10 * 60_000,
      onError: (path, err) => this.log.warn('watch failed, retrying', { path, error: errorMessage(err) }),
    });
    const controllers = CONTROLLERS.map((declaration): TermController => {
      const queue = this.workQueue(declaration.name, declaration.failure);
      for (const w of watchesOf(declaration)) {
        informers.of(w.collection).on((event, obj, old) => {
          for (const key of w.keys(event, obj, old, informers)) queue.add(key);
        });
      }
      return { declaration, queue };
    });
    const enqueueAll = (c: TermController) => {
      for (const obj of informers.of(c.declaration.for).list()) c.queue.add(keyOf(obj));
    };
    return { informers, controllers, enqueueAll };
  }

  private async startLeading(): Promise<void> {
    if (this.leading || this.stopping) return;
    this.leading = true;
    const term = this.wire();
    this.term = term;
    await term.informers.start();
    if (this.term !== term) return;
    this.synced = true;
    const events = new EventRecorder(this.client, 'platform-ai-optimizer-operator', (err) =>
      this.log.warn('event not recorded', { error: errorMessage(err) }),
    );
    // One after another, in the registry's order: a controller that waits for more than its
    // caches (the ExternalProvider one, for its Secrets) holds back only those after it.
    for (const c of term.controllers) {
      const running = await c.declaration.start({
        client: this.client,
        caches: term.informers,
        events,
        options: this.opts,
        now: this.opts.now ?? (() => new Date()),
        log: this.log,
        enqueue: (key) => c.queue.add(key),
      });
      if (this.term !== term) {
        // Leadership ended while it started: the teardown did not know of its own watches.
        await running.watches?.stop();
        return;
      }
      c.running = running;
      c.queue.run(this.controllerMetrics.instrument(c.declaration.name, running.reconcile));
      term.enqueueAll(c);
      running.loop?.start();
    }
    this.log.info('controllers running', { namespace: LLMS_NAMESPACE, agentNamespace: AGENT_NAMESPACE });
  }

  /** A work queue of `--concurrency` workers whose failures are logged and whose metrics are exported. */
  private workQueue(name: string, failure: string): WorkQueue {
    const concurrency = this.opts.concurrency ?? 4;
    const queue = new WorkQueue({
      concurrency,
      onError: (key, err, attempt) => this.log.warn(failure, { key, attempt, error: errorMessage(err) }),
      observer: this.controllerMetrics.queueObserver(name, [name]),
    });
    this.controllerMetrics.watchQueue(name, [name], queue, concurrency);
    return queue;
  }

  /**
   * Ends the term: loops that write stop first, then running reconciles finish, then the
   * informers and the controllers' own watches close.
   */
  private async stopLeading(): Promise<void> {
    this.leading = false;
    this.synced = false;
    const term = this.term;
    this.term = undefined;
    const controllers = term?.controllers ?? [];
    await Promise.all(controllers.map((c) => c.running?.loop?.stop()));
    await Promise.all(controllers.map((c) => c.queue.shutdown()));
    await Promise.all([term?.informers.stop(), ...controllers.map((c) => c.running?.watches?.stop())]);
  }

  /** Graceful shutdown: not ready, finish running reconciles, release the lease, close HTTP. */
  async stop(): Promise<void> {
    this.stopping = true;
    // Drain while still holding the lease: a successor must not start before the last of
    // this replica's reconciles has finished writing.
    await this.stopLeading();
    if (this.elector) await this.elector.stop();
    await (await this.auditTrail)?.stop();
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
    await this.metricsServer?.close();
  }
}
