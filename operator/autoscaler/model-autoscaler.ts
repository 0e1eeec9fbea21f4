import { type Catalog, parallelSlots } from '../../crds/catalog/catalog.js';
import { AGENT_NAMESPACE, API_GROUP, API_VERSION, LLMS_NAMESPACE } from '../../crds/constants.js';
import { type EndpointSlice, readyUrls, SERVICE_NAME_LABEL } from '../../crds/kube/endpoint-slices.js';
import type { Informer } from '../../crds/kube/informer.js';
import { type KubeClient, resourcePath } from '../../crds/kube/kube-client.js';
import type { Condition } from '../../crds/meta.js';
import type { ModelDeployment } from '../../crds/model-deployment.js';
import { LOAD_PATH, type ProxyLoadReport } from '../../crds/observability/proxy-load.js';
import type { EventRecorder } from '../runtime/events.js';
import { decideReplicas, type ModelLoad, type ScaleMemory } from './scale-decision.js';

/**
 * The model autoscaler (leader only): every interval it reads each proxy replica's load report
 * (GET /load on its metrics port), sums it per model, decides each autoscaled ModelDeployment's
 * replicas with the pure decideReplicas, writes them through the scale subresource, and records
 * every change as an Event and in the Autoscaling condition. The proxies wake a hibernated model
 * themselves (at once, not at the next tick); this loop does the rest.
 */

/** Service whose ready endpoints are the proxy replicas' metrics ports (the chart's). */
const PROXY_METRICS_SERVICE = 'platform-ai-optimizer-proxy-metrics';

interface Seen {
  startedAt: number;
  at: number;
  requests: Map<string, number>;
}

function parseReport(v: unknown): ProxyLoadReport | undefined {
  const r = v as Partial<ProxyLoadReport> | null;
  if (!r || typeof r.startedAt !== 'number' || !r.models || typeof r.models !== 'object') return undefined;
  for (const l of Object.values(r.models)) {
    if (![l?.inFlight, l?.queued, l?.requests].every((n) => typeof n === 'number' && Number.isFinite(n) && n >= 0))
      return undefined;
  }
  return r as ProxyLoadReport;
}

/**
 * The proxies' load, summed per model. Request counters become arrivals by difference with the
 * previous report of the same process; a restarted process (new startedAt) counts from zero.
 */
export class ProxyLoad {
  private readonly seen = new Map<string, Seen>();

  constructor(
    private readonly targets: () => Promise<string[]>,
    private readonly timeoutMs = 2_000,
  ) {}

  /** Undefined when no proxy answered: the autoscaler then changes nothing. */
  async read(now: number): Promise<Map<string, ModelLoad> | undefined> {
    const urls = await this.targets();
    const reports = await Promise.all(
      urls.map(async (url) => {
        try {
          const res = await fetch(`${url}${LOAD_PATH}`, { signal: AbortSignal.timeout(this.timeoutMs) });
          return res.ok ? { url, report: parseReport(await res.json()) } : { url };
        } catch {
          return { url };
        }
      }),
    );
    const total = new Map<string, ModelLoad>();
    let answered = 0;
    for (const { url, report } of reports) {
      if (!report) continue;
      answered++;
      const prev = this.seen.get(url);
      const same = prev?.startedAt === report.startedAt;
      const seconds = prev ? Math.max(0.001, (now - prev.at) / 1000) : 1;
      for (const [model, l] of Object.entries(report.models)) {
        const before = same ? (prev?.requests.get(model) ?? 0) : 0;
        // First sight of a process: its counter's past is not this interval's.
        const arrived = prev ? Math.max(0, l.requests - before) : 0;
        const sum = total.get(model) ?? { inFlight: 0, queued: 0, arrived: 0, requestsPerSecond: 0 };
        sum.inFlight += l.inFlight;
        sum.queued += l.queued;
        sum.arrived += arrived;
        sum.requestsPerSecond += arrived / seconds;
        total.set(model, sum);
      }
      this.seen.set(url, {
        startedAt: report.startedAt,
        at: now,
        requests: new Map(Object.entries(report.models).map(([m, l]) => [m, l.requests])),
      });
    }
    for (const url of this.seen.keys()) if (!urls.includes(url)) this.seen.delete(url);
    return answered > 0 ? total : undefined;
  }
}

/** The proxy replicas' metrics URLs, from the EndpointSlices of the chart's metrics Service. */
export const proxyTargets = (client: KubeClient) => async (): Promise<string[]> => {
  const slices = await client.list<EndpointSlice>(
    resourcePath({ group: 'discovery.k8s.io', version: 'v1', plural: 'endpointslices', namespace: AGENT_NAMESPACE }),
    { labelSelector: `${SERVICE_NAME_LABEL}=${PROXY_METRICS_SERVICE}` },
  );
  return slices.items.flatMap((s) => readyUrls(s, 'metrics'));
};

export interface ModelAutoscalerOptions {
  catalog: Catalog;
  intervalMs: number;
  load: ProxyLoad;
  now: () => number;
  /** A deployment's Autoscaling condition changed: reconcile it so its status says so. */
  onCondition: (key: string) => void;
  onError: (err: unknown) => void;
}

export type AutoscalingCondition = Omit<Condition, 'lastTransitionTime'>;

export class ModelAutoscaler {
  private readonly memory = new Map<string, ScaleMemory>();
  private readonly conditions = new Map<string, AutoscalingCondition>();
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;

  constructor(
    private readonly client: KubeClient,
    private readonly mds: Informer<ModelDeployment>,
    private readonly events: EventRecorder,
    private readonly opts: ModelAutoscalerOptions,
  ) {}

  start(): void {
    this.timer = setInterval(() => void this.tick(), this.opts.intervalMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.running;
  }

  /** The Autoscaling condition of a deployment (namespace/name), for its status. */
  condition(key: string): AutoscalingCondition | undefined {
    return this.conditions.get(key);
  }

  /** One round; rounds never overlap (a slow one makes the next wait). */
  tick(): Promise<void> {
    this.running ??= this.round()
      .catch((err) => this.opts.onError(err))
      .finally(() => {
        this.running = undefined;
      });
    return this.running;
  }

  private async round(): Promise<void> {
    const now = this.opts.now();
    // Nothing autoscaled: no proxy to ask (an idle operator sends the API server nothing).
    if (!this.mds.list().some((md) => md.spec.autoscaling)) {
      this.memory.clear();
      return;
    }
    const loads = await this.opts.load.read(now);
    const live = new Set<string>();
    // The proxies report load per model name; it belongs to the deployment they route that name
    // to: the first Running one by name (proxy/serving/routes.ts). Others of the same model get none.
    const routed = new Map<string, string>();
    for (const md of [...this.mds.list()].sort((x, y) =>
      (x.metadata.name ?? '').localeCompare(y.metadata.name ?? ''),
    )) {
      if (md.status?.phase === 'Running' && !routed.has(md.spec.model))
        routed.set(md.spec.model, md.metadata.uid ?? '');
    }
    for (const md of this.mds.list()) {
      const spec = md.spec.autoscaling;
      const uid = md.metadata.uid ?? '';
      const key = `${md.metadata.namespace}/${md.metadata.name}`;
      // Only a model that served once is scaled: a first rollout is the controller's to finish.
      if (!spec || md.metadata.deletionTimestamp || md.metadata.namespace !== LLMS_NAMESPACE) continue;
      if (md.status?.phase !== 'Running') continue;
      live.add(uid);
      const zero = { inFlight: 0, queued: 0, arrived: 0, requestsPerSecond: 0 };
      const before0 = this.memory.get(uid)?.replicas;
      if (before0 === 0 && md.spec.replicas > 0) {
        const message = `a request woke the model: 0 -> ${md.spec.replicas} replica(s)`;
        await this.events.record(md, 'Normal', 'Woken', message);
        this.conditions.set(key, { type: 'Autoscaling', status: 'True', reason: 'Woken', message });
        this.opts.onCondition(key);
      }
      const d = decideReplicas({
        spec,
        slots: parallelSlots(this.opts.catalog, md) ?? 1,
        current: md.spec.replicas,
        load: loads ? ((routed.get(md.spec.model) === uid ? loads.get(md.spec.model) : undefined) ?? zero) : undefined,
        now,
        memory: this.memory.get(uid),
      });
      this.memory.set(uid, d.memory);
      if (d.replicas !== md.spec.replicas) {
        await this.client.mergePatch(
          resourcePath({
            group: API_GROUP,
            version: API_VERSION,
            plural: 'modeldeployments',
            namespace: LLMS_NAMESPACE,
            name: md.metadata.name ?? '',
            subresource: 'scale',
          }),
          { spec: { replicas: d.replicas } },
        );
        await this.events.record(md, 'Normal', d.reason, d.message);
      }
      const before = this.conditions.get(key);
      // Steady rounds keep the last change's condition: its message says what happened and why.
      const next: AutoscalingCondition | undefined =
        d.reason === 'NoLoadReports'
          ? { type: 'Autoscaling', status: 'False', reason: d.reason, message: d.message }
          : d.reason !== 'Steady' || !before || before.reason === 'NoLoadReports'
            ? { type: 'Autoscaling', status: 'True', reason: d.reason, message: d.message }
            : undefined;
      if (next && (next.reason !== before?.reason || next.message !== before?.message)) {
        this.conditions.set(key, next);
        this.opts.onCondition(key);
      }
    }
    for (const uid of this.memory.keys()) if (!live.has(uid)) this.memory.delete(uid);
  }
}
