import { isDeepStrictEqual } from 'node:util';
import { loadCatalog } from '../../crds/catalog/catalog.js';
import { type BedrockPriceTable, loadBedrockPrices } from '../../crds/catalog/prices.js';
import { AGENT_NAMESPACE, API_GROUP, PRICES_CONFIGMAP, ROUTING_EXAMPLES_LABEL } from '../../crds/constants.js';
import type { ExternalProvider } from '../../crds/external-provider.js';
import { type Informer, type InformerEvent, keyOf } from '../../crds/kube/informer.js';
import type { KubeClient } from '../../crds/kube/kube-client.js';
import type { ModelDeployment } from '../../crds/model-deployment.js';
import type { RoutingPolicy } from '../../crds/routing-policy.js';
import { MODELS_RETIRING, retiringEvent } from '../lifecycle/models-retiring.js';
import { collection, platformCollection } from '../runtime/collection.js';
import { findCondition } from '../runtime/conditions.js';
import { type ControllerDeclaration, everyKeyOf, watch } from '../runtime/controller-declaration.js';
import type { EventRecorder } from '../runtime/events.js';
import { priceTableIn } from '../runtime/price-table.js';
import type { Caches } from '../runtime/shared-informers.js';
import { writeStatusIfChanged } from '../runtime/status-write.js';
import type { ReconcileResult } from '../runtime/work-queue.js';
import { routingPolicyStatus } from './routing-policy-status.js';

/**
 * Reconciles a RoutingPolicy: resolves its pool against the cached ModelDeployments and
 * ExternalProviders and the price table (routing-policy-status.ts), checks that its examplesFrom
 * ConfigMap holds its key, and writes the status when it changed, with an Event when Ready changes.
 * It writes nothing else: the proxies read the policy itself.
 */

interface ConfigMap {
  apiVersion?: string;
  kind?: string;
  metadata?: { name?: string; namespace?: string; labels?: Record<string, string> };
  data?: Record<string, string>;
}

interface RoutingCaches {
  policies: Informer<RoutingPolicy>;
  deployments: Informer<ModelDeployment>;
  providers: Informer<ExternalProvider>;
  examples: Informer<ConfigMap>;
}

class RoutingPolicyController {
  private readonly basePrices = loadBedrockPrices();

  constructor(
    private readonly client: KubeClient,
    private readonly caches: RoutingCaches,
    private readonly events: EventRecorder,
    private readonly now: () => Date,
    private readonly builtInEmbedding = true,
  ) {}

  /** The shipped price table with the prices ConfigMap over it, as the proxies price with. */
  private prices(): Promise<BedrockPriceTable> {
    return priceTableIn(this.client, this.basePrices);
  }

  async reconcile(key: string): Promise<ReconcileResult> {
    const policy = this.caches.policies.get(key);
    if (!policy || policy.metadata.deletionTimestamp) return;
    const namespace = policy.metadata.namespace ?? AGENT_NAMESPACE;
    const status = routingPolicyStatus(
      policy,
      {
        deployments: this.caches.deployments.list(),
        providers: this.caches.providers.list(),
        prices: await this.prices(),
        catalog: loadCatalog(),
        examples: (name) => {
          const cm = this.caches.examples.get(`${namespace}/${name}`);
          return cm ? (cm.data ?? {}) : undefined;
        },
        builtInEmbedding: this.builtInEmbedding,
      },
      this.now(),
    );
    await writeStatusIfChanged(this.client, 'routingpolicies', policy, status);
    const before = policy.status?.conditions?.find((c) => c.type === 'Ready');
    const ready = status.conditions?.find((c) => c.type === 'Ready');
    if (ready && (before?.status !== ready.status || before.reason !== ready.reason)) {
      await this.events.record(policy, ready.status === 'True' ? 'Normal' : 'Warning', ready.reason, ready.message);
    }
    const retiring = retiringEvent(policy.status?.conditions, findCondition(status.conditions, MODELS_RETIRING));
    if (retiring) await this.events.record(policy, 'Warning', retiring.reason, retiring.message);
    return undefined;
  }
}

const ROUTING_POLICIES = platformCollection<RoutingPolicy>('routingpolicies', AGENT_NAMESPACE);
/** The same collections the ModelDeployment and ExternalProvider controllers watch, so their informers are shared. */
const MODEL_DEPLOYMENTS = platformCollection<ModelDeployment>('modeldeployments');
const EXTERNAL_PROVIDERS = platformCollection<ExternalProvider>('externalproviders', AGENT_NAMESPACE);
/** Only the ConfigMaps labelled as routing examples: the proxies read no others for a policy either. */
const EXAMPLES = collection<ConfigMap>({
  group: '',
  version: 'v1',
  plural: 'configmaps',
  namespace: AGENT_NAMESPACE,
  labelSelector: `${ROUTING_EXAMPLES_LABEL}=true`,
});

/**
 * What of a serving resource the pool reads: a ModelDeployment's spec (model, engine, aliases,
 * slots, context), a provider's spec and what discovery found; not the status churn of replicas.
 */
const servingOf = (o: ModelDeployment | ExternalProvider) => [
  o.metadata.creationTimestamp,
  o.spec,
  o.kind === 'ExternalProvider' ? [o.status?.models, o.status?.availableModels] : undefined,
];

const servingMayChange = <T extends ModelDeployment | ExternalProvider>(event: InformerEvent, obj: T, old?: T) =>
  event !== 'resync' && (event !== 'update' || !old || !isDeepStrictEqual(servingOf(obj), servingOf(old)));

/** The policies whose examplesFrom names a ConfigMap. */
const policiesReading = (_event: InformerEvent, cm: ConfigMap, _old: ConfigMap | undefined, caches: Caches) =>
  caches
    .of(ROUTING_POLICIES)
    .list()
    .filter((p) => p.spec.scorer?.semantic?.examplesFrom?.configMapName === cm.metadata?.name)
    .map(keyOf);

/**
 * The RoutingPolicy controller. Its watches requeue: a policy itself; every policy when a
 * ModelDeployment or ExternalProvider that may serve a pool model changes; and the policies whose
 * examplesFrom names a labelled ConfigMap that changed, came or went.
 */
export const routingPolicyController: ControllerDeclaration = {
  name: 'routingpolicy',
  for: ROUTING_POLICIES,
  watches: [
    watch(MODEL_DEPLOYMENTS, everyKeyOf(ROUTING_POLICIES, servingMayChange)),
    watch(EXTERNAL_PROVIDERS, everyKeyOf(ROUTING_POLICIES, servingMayChange)),
    watch(EXAMPLES, policiesReading),
  ],
  rbac: [
    {
      scope: AGENT_NAMESPACE,
      apiGroups: [API_GROUP],
      resources: ['routingpolicies/status'],
      verbs: ['get', 'patch', 'update'],
      reason: 'status written by merge patch when it changed',
    },
    {
      scope: AGENT_NAMESPACE,
      apiGroups: [''],
      resources: ['configmaps'],
      verbs: ['get'],
      resourceNames: [PRICES_CONFIGMAP],
      reason: 'the price overrides, read at each reconcile (which pool models have a price)',
    },
    {
      scope: AGENT_NAMESPACE,
      apiGroups: [''],
      resources: ['events'],
      verbs: ['create', 'patch'],
      reason: 'Events on RoutingPolicies',
    },
  ],
  failure: 'routing policy reconcile failed',
  async start(ctx) {
    const controller = new RoutingPolicyController(
      ctx.client,
      {
        policies: ctx.caches.of(ROUTING_POLICIES),
        deployments: ctx.caches.of(MODEL_DEPLOYMENTS),
        providers: ctx.caches.of(EXTERNAL_PROVIDERS),
        examples: ctx.caches.of(EXAMPLES),
      },
      ctx.events,
      ctx.now,
      ctx.options.routingBuiltInEmbedding ?? true,
    );
    return { reconcile: (key) => controller.reconcile(key) };
  },
};
