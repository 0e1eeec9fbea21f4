import { isDeepStrictEqual } from 'node:util';
import { AGENT_NAMESPACE, API_GROUP } from '../../crds/constants.js';
import type { ExternalProvider } from '../../crds/external-provider.js';
import type { Guardrail, GuardrailStatus } from '../../crds/guardrail.js';
import type { Informer, InformerEvent } from '../../crds/kube/informer.js';
import type { KubeClient } from '../../crds/kube/kube-client.js';
import type { ModelDeployment } from '../../crds/model-deployment.js';
import { platformCollection } from '../runtime/collection.js';
import { setCondition } from '../runtime/conditions.js';
import { type ControllerDeclaration, everyKeyOf, watch } from '../runtime/controller-declaration.js';
import type { EventRecorder } from '../runtime/events.js';
import { writeStatusIfChanged } from '../runtime/status-write.js';
import type { ReconcileResult } from '../runtime/work-queue.js';
import { guardrailStatus } from './guardrail-status.js';

/**
 * Reconciles a Guardrail: whether each of its detectors runs (guardrail-status.ts) and Ready,
 * written when they changed, with an Event when Ready changes. The proxies read the Guardrail
 * itself; this tells its author what they will skip. A Presidio analyzer's health is asked here.
 */
class GuardrailController {
  constructor(
    private readonly client: KubeClient,
    private readonly caches: {
      guardrails: Informer<Guardrail>;
      deployments: Informer<ModelDeployment>;
      providers: Informer<ExternalProvider>;
    },
    private readonly events: EventRecorder,
    private readonly now: () => Date,
    private readonly probe: AnalyzerProbe = probeAnalyzer,
  ) {}

  async reconcile(key: string): Promise<ReconcileResult> {
    const g = this.caches.guardrails.get(key);
    if (!g || g.metadata.deletionTimestamp) return;
    const analyzers = await analyzersOf(g, this.probe);
    const { detectors, ready } = guardrailStatus(g, {
      deployments: this.caches.deployments.list(),
      providers: this.caches.providers.list(),
      analyzers,
    });
    const status: GuardrailStatus = {
      observedGeneration: g.metadata.generation ?? 0,
      detectors,
      conditions: setCondition(g.status?.conditions, ready, this.now()),
    };
    await writeStatusIfChanged(this.client, 'guardrails', g, status);
    const before = g.status?.conditions?.find((c) => c.type === 'Ready');
    if (before?.status !== ready.status || before.reason !== ready.reason) {
      await this.events.record(g, ready.status === 'True' ? 'Normal' : 'Warning', ready.reason, ready.message);
    }
    // An analyzer is asked again: soon when it did not answer (it may start after the Guardrail),
    // now and then when it did (it may stop).
    if (analyzers.size === 0) return undefined;
    return { requeueAfterMs: [...analyzers.values()].every((h) => h === true) ? HEALTHY_RECHECK_MS : RECHECK_MS };
  }
}

/** How often an unhealthy Presidio analyzer is checked again, and a healthy one. */
const RECHECK_MS = 60_000;
const HEALTHY_RECHECK_MS = 300_000;

/** A Presidio analyzer's health: GET <url>/health answers 200 (true), or why not. */
type AnalyzerProbe = (url: string) => Promise<true | string>;

const probeAnalyzer: AnalyzerProbe = async (url) => {
  try {
    const res = await fetch(`${url.replace(/\/+$/, '')}/health`, { signal: AbortSignal.timeout(3_000) });
    await res.body?.cancel();
    return res.ok ? true : `the analyzer's health check answered ${res.status}`;
  } catch {
    return 'the analyzer did not answer its health check';
  }
};

async function analyzersOf(g: Guardrail, probe: AnalyzerProbe): Promise<Map<string, true | string>> {
  const urls = [...new Set((g.spec.detectors.services ?? []).flatMap((s) => s.presidio?.url ?? []))];
  return new Map(await Promise.all(urls.map(async (url) => [url, await probe(url)] as const)));
}

const GUARDRAILS = platformCollection<Guardrail>('guardrails', AGENT_NAMESPACE);
/** The collections the other controllers watch: their informers are shared. */
const MODEL_DEPLOYMENTS = platformCollection<ModelDeployment>('modeldeployments');
const EXTERNAL_PROVIDERS = platformCollection<ExternalProvider>('externalproviders', AGENT_NAMESPACE);

/** What serves a model: a deployment's or provider's spec, not its replicas' churn. */
const specChanged = <T extends ModelDeployment | ExternalProvider>(event: InformerEvent, obj: T, old?: T) =>
  event !== 'resync' && (event !== 'update' || !old || !isDeepStrictEqual(obj.spec, old.spec));

/** A provider's spec, or whether it is Ready (a service calls with its credentials). */
const providerChanged = (event: InformerEvent, obj: ExternalProvider, old?: ExternalProvider) =>
  specChanged(event, obj, old) || (event === 'update' && readyOf(obj) !== readyOf(old));

const readyOf = (p?: ExternalProvider) => p?.status?.conditions?.find((c) => c.type === 'Ready')?.status;

/** The Guardrail controller: each Guardrail; every one when what serves models changes (a judge's model). */
export const guardrailController: ControllerDeclaration = {
  name: 'guardrail',
  for: GUARDRAILS,
  watches: [
    watch(MODEL_DEPLOYMENTS, everyKeyOf(GUARDRAILS, specChanged)),
    watch(EXTERNAL_PROVIDERS, everyKeyOf(GUARDRAILS, providerChanged)),
  ],
  rbac: [
    {
      scope: AGENT_NAMESPACE,
      apiGroups: [API_GROUP],
      resources: ['guardrails/status'],
      verbs: ['get', 'patch', 'update'],
      reason: "the detectors' readiness and Ready, written by merge patch when they changed",
    },
    {
      scope: AGENT_NAMESPACE,
      apiGroups: [''],
      resources: ['events'],
      verbs: ['create', 'patch'],
      reason: 'Events on Guardrails',
    },
  ],
  failure: 'guardrail reconcile failed',
  async start(ctx) {
    const controller = new GuardrailController(
      ctx.client,
      {
        guardrails: ctx.caches.of(GUARDRAILS),
        deployments: ctx.caches.of(MODEL_DEPLOYMENTS),
        providers: ctx.caches.of(EXTERNAL_PROVIDERS),
      },
      ctx.events,
      ctx.now,
    );
    return { reconcile: (key) => controller.reconcile(key) };
  },
};
