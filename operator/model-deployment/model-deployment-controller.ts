import type { V1DaemonSet, V1Deployment, V1PersistentVolumeClaim, V1Pod, V1Service } from '@kubernetes/client-node';
import type { AutoscalerPolicy } from '../../crds/autoscaler-policy.js';
import {
  type Catalog,
  type ClusterInfo,
  deployableGpuTypes,
  loadCatalog,
  resolveModel,
} from '../../crds/catalog/catalog.js';
import {
  AGENT_NAMESPACE,
  API_GROUP,
  API_VERSION,
  AUTOSCALER_POLICY_NAME,
  DEPLOYMENT_TIMEOUT_MS,
  LLM_NODE_TEMPLATE,
  LLMS_NAMESPACE,
  MODEL_DEPLOYMENT_LABEL,
} from '../../crds/constants.js';
import type { EngineName } from '../../crds/engines/engine.js';
import { engineFor } from '../../crds/engines/table.js';
import type { ExternalProvider } from '../../crds/external-provider.js';
import { type Informer, type InformerEvent, keyOf } from '../../crds/kube/informer.js';
import { isConflict, type KubeClient, resourcePath } from '../../crds/kube/kube-client.js';
import type { ModelDeployment } from '../../crds/model-deployment.js';
import { namesMayChange, resolveNames } from '../../crds/model-names.js';
import type { NodeConfiguration } from '../../crds/node-configuration.js';
import type { NodeTemplate } from '../../crds/node-template.js';
import { errorMessage } from '../../crds/observability/log.js';
import { aliasCondition, aliasConflictEvent, withAliasCondition } from '../aliases/alias-condition.js';
import { type AutoscalingCondition, ModelAutoscaler, ProxyLoad, proxyTargets } from '../autoscaler/model-autoscaler.js';
import { collection, platformCollection } from '../runtime/collection.js';
import { containsDesired } from '../runtime/contains-desired.js';
import { type ControllerDeclaration, everyKeyOf, ownerByLabel, watch } from '../runtime/controller-declaration.js';
import type { EventRecorder } from '../runtime/events.js';
import { writeStatusIfChanged } from '../runtime/status-write.js';
import type { ReconcileResult } from '../runtime/work-queue.js';
import { planUnschedulablePods } from './autoscaler-policy.js';
import { type CacheCondition, cacheCondition, type ModelCacheSetting, mountedClaimName } from './model-cache.js';
import { type Blocker, computeStatus } from './model-deployment-status.js';
import { desiredModelServer } from './model-server.js';
import { checkNodeConfiguration, checkTemplateGpus, desiredLlmNodeTemplate } from './node-template.js';
import { checkPrerequisites } from './prerequisites.js';

/**
 * Reconciles one ModelDeployment: reads the cached state, decides with the pure builders,
 * writes only what differs (server-side apply under one field manager), and writes status
 * only when it changed.
 */

const FIELD_MANAGER = 'platform-ai-optimizer-operator';
const CLAIM_RETRY_MS = 30_000;

interface ModelDeploymentCaches {
  modelDeployments: Informer<ModelDeployment>;
  deployments: Informer<V1Deployment>;
  services: Informer<V1Service>;
  pods: Informer<V1Pod>;
  /** All claims in platform-llms: the caches the operator made and the existing ones specs name. */
  claims: Informer<V1PersistentVolumeClaim>;
  nodeTemplates: Informer<NodeTemplate>;
  nodeConfigurations: Informer<NodeConfiguration>;
  policies: Informer<AutoscalerPolicy>;
  daemonSets: Informer<V1DaemonSet>;
}

interface ModelDeploymentControllerOptions {
  /** The autoscaler's Autoscaling condition of a deployment (namespace/name), if it decided one. */
  autoscaling?: (key: string) => AutoscalingCondition | undefined;
  catalog: Catalog;
  cluster: ClusterInfo;
  /** Each engine's image where the chart sets one; else its module's default. */
  images: Partial<Record<EngineName, string>>;
  timeoutMs: number;
  now: () => Date;
  /** A PersistentVolumeClaim per deployment for its model; absent or false: an emptyDir per pod. */
  modelCache?: ModelCacheSetting;
  /** The ExternalProviders as cached, whose models and aliases a deployment's aliases may clash with. */
  providers?: () => readonly ExternalProvider[];
}

const ref = (plural: string, namespace?: string, name?: string, subresource?: string) =>
  resourcePath({
    group: API_GROUP,
    version: API_VERSION,
    plural,
    ...(namespace ? { namespace } : {}),
    ...(name ? { name } : {}),
    ...(subresource ? { subresource } : {}),
  });

class ModelDeploymentController {
  constructor(
    private readonly client: KubeClient,
    private readonly caches: ModelDeploymentCaches,
    private readonly events: EventRecorder,
    private readonly opts: ModelDeploymentControllerOptions,
  ) {}

  /** Applies `desired` unless the cached object already holds every desired field. */
  private async applyIfChanged<T extends object>(path: string, cached: unknown, desired: T): Promise<void> {
    if (cached && containsDesired(cached, desired)) return;
    await this.client.apply(path, desired, FIELD_MANAGER);
  }

  private async ensureLlmTemplate(): Promise<NodeTemplate | undefined> {
    const gpuTypes = deployableGpuTypes(this.opts.catalog, this.opts.cluster);
    const archs = [...new Set(gpuTypes.map((g) => this.opts.catalog.gpus[g]?.arch ?? 'amd64'))].sort();
    const desired = desiredLlmNodeTemplate([...gpuTypes].sort(), archs);
    await this.applyIfChanged(
      ref('nodetemplates', undefined, LLM_NODE_TEMPLATE),
      this.caches.nodeTemplates.get(LLM_NODE_TEMPLATE),
      desired,
    );
    return this.caches.nodeTemplates.get(LLM_NODE_TEMPLATE) ?? desired;
  }

  private async ensurePolicy(templateName: string): Promise<void> {
    const policy = this.caches.policies.get(AUTOSCALER_POLICY_NAME);
    const plan = planUnschedulablePods(policy, this.caches.nodeTemplates.list(), templateName);
    for (const t of plan.templates) {
      await this.client.mergePatch(ref('nodetemplates', undefined, t.name), { spec: { enabled: t.enabled } });
    }
    if (plan.createPolicy) {
      try {
        await this.client.create(ref('autoscalerpolicies'), {
          apiVersion: `${API_GROUP}/${API_VERSION}`,
          kind: 'AutoscalerPolicy',
          metadata: { name: AUTOSCALER_POLICY_NAME },
          spec: { unschedulablePods: { enabled: true } },
        });
      } catch (err) {
        // Another worker's reconcile created it first (deployments applied together all find none
        // in the cache): not a failure. Its informer event brings every deployment back here, to
        // plan against the policy as it is.
        if (!isConflict(err)) throw err;
      }
    } else if (plan.switchOn) {
      await this.client.mergePatch(ref('autoscalerpolicies', undefined, AUTOSCALER_POLICY_NAME), {
        spec: { unschedulablePods: { enabled: true } },
      });
    }
  }

  /** The reason this deployment cannot proceed, or undefined; may create llms-by-platform. */
  private async blocker(md: ModelDeployment): Promise<{ blocker?: Blocker; template?: string; gpuTypes?: string[] }> {
    if (md.metadata.namespace !== LLMS_NAMESPACE) {
      return {
        blocker: {
          reason: 'WrongNamespace',
          message: `ModelDeployments are served from namespace ${LLMS_NAMESPACE}; recreate this one there`,
        },
      };
    }
    if (md.spec.endpoint) {
      return {
        blocker: {
          reason: 'EndpointNotAllowed',
          message:
            'spec.endpoint is for the standalone proxy only; in a cluster the operator deploys the model server itself, remove the field',
        },
      };
    }
    const resolved = resolveModel(this.opts.catalog, this.opts.cluster, md.spec.model, md.spec.engine);
    if (!resolved.ok) return { blocker: { reason: resolved.reason, message: resolved.message } };
    const maxContext = resolved.model.contextLength;
    if ((md.spec.server?.contextLength ?? 0) > maxContext) {
      return {
        blocker: {
          reason: 'ContextTooLong',
          message: `spec.server.contextLength ${md.spec.server?.contextLength} is more than ${md.spec.model} supports (${maxContext} tokens); lower it or omit it for the catalog's ${resolved.model.serving.contextLength}`,
        },
      };
    }

    let template: NodeTemplate | undefined;
    if (md.spec.nodeTemplate) {
      template = this.caches.nodeTemplates.get(md.spec.nodeTemplate);
      if (!template) {
        return {
          blocker: {
            reason: 'NodeTemplateNotFound',
            message: `NodeTemplate ${md.spec.nodeTemplate} does not exist; create it or omit spec.nodeTemplate to use ${LLM_NODE_TEMPLATE}`,
          },
        };
      }
    } else {
      template = await this.ensureLlmTemplate();
    }
    const templateName = template?.metadata.name ?? LLM_NODE_TEMPLATE;
    if (template) {
      const gpus = checkTemplateGpus(template, resolved.gpuTypes);
      if (!gpus.ok) return { blocker: gpus };
      const configName = template.spec.configurationRef?.name;
      if (configName) {
        const config = this.caches.nodeConfigurations.get(configName);
        if (!config) {
          return {
            blocker: {
              reason: 'NodeConfigurationNotFound',
              message: `NodeConfiguration ${configName} linked from node template ${templateName} does not exist`,
            },
          };
        }
        const check = checkNodeConfiguration(config, this.opts.cluster.cloud);
        if (!check.ok) return { blocker: check };
      }
    }
    const service = this.caches.services.get(`${LLMS_NAMESPACE}/${md.spec.serviceName}`);
    const owner = service?.metadata?.ownerReferences?.find((o) => o.controller);
    if (service && owner?.uid !== md.metadata.uid) {
      return {
        blocker: {
          reason: 'ServiceNameConflict',
          message: `Service ${md.spec.serviceName} in ${LLMS_NAMESPACE} already exists and belongs to ${owner ? `${owner.kind} ${owner.name}` : 'no ModelDeployment'}; choose another serviceName`,
        },
      };
    }
    return { template: templateName, gpuTypes: resolved.gpuTypes };
  }

  async reconcile(key: string): Promise<ReconcileResult> {
    const md = this.caches.modelDeployments.get(key);
    // Deleted: the Deployment and Service go with it through their owner references.
    if (!md || md.metadata.deletionTimestamp) return;
    const name = md.metadata.name ?? '';

    const { blocker, template, gpuTypes } = await this.blocker(md);
    let cache: CacheCondition | undefined;
    if (!blocker && template && gpuTypes) {
      const resolved = resolveModel(this.opts.catalog, this.opts.cluster, md.spec.model, md.spec.engine);
      if (resolved.ok) {
        if (md.status?.phase !== 'Running') await this.ensurePolicy(template);
        const claimName = mountedClaimName(md, this.opts.modelCache);
        const observedClaim = claimName ? this.caches.claims.get(`${LLMS_NAMESPACE}/${claimName}`) : undefined;
        const desired = desiredModelServer(md, resolved.model, this.opts.catalog, {
          image: this.opts.images[engineFor(md.spec).name] ?? engineFor(md.spec).defaultImage,
          template,
          gpuTypes,
          ...(this.opts.modelCache ? { modelCache: this.opts.modelCache } : {}),
          ...(observedClaim ? { observedClaim } : {}),
        });
        // The claim before the Deployment, so its pods find it. A claim that cannot be written
        // (a class without expansion refusing to grow, missing RBAC) must not hold back the
        // Deployment: the ModelCache condition says why and the reconcile is retried.
        let claimError: string | undefined;
        if (desired.claim && claimName && !observedClaim?.metadata?.deletionTimestamp) {
          try {
            await this.applyIfChanged(
              resourcePath({
                group: '',
                version: 'v1',
                plural: 'persistentvolumeclaims',
                namespace: LLMS_NAMESPACE,
                name: claimName,
              }),
              observedClaim,
              desired.claim,
            );
          } catch (err) {
            claimError = errorMessage(err);
          }
        }
        cache = cacheCondition(md, desired.store, observedClaim, claimError);
        await this.applyIfChanged(
          resourcePath({ group: 'apps', version: 'v1', plural: 'deployments', namespace: LLMS_NAMESPACE, name }),
          this.caches.deployments.get(`${LLMS_NAMESPACE}/${name}`),
          desired.deployment,
        );
        await this.applyIfChanged(
          resourcePath({
            group: '',
            version: 'v1',
            plural: 'services',
            namespace: LLMS_NAMESPACE,
            name: md.spec.serviceName,
          }),
          this.caches.services.get(`${LLMS_NAMESPACE}/${md.spec.serviceName}`),
          desired.service,
        );
      }
    }

    const autoscaling = md.spec.autoscaling ? this.opts.autoscaling?.(key) : undefined;
    const pods = this.caches.pods.list().filter((p) => p.metadata?.labels?.[MODEL_DEPLOYMENT_LABEL] === name);
    const out = computeStatus({
      md,
      now: this.opts.now(),
      timeoutMs: this.opts.timeoutMs,
      ...(blocker ? { blocker } : {}),
      deployment: this.caches.deployments.get(`${LLMS_NAMESPACE}/${name}`),
      pods,
      ...(cache ? { cache } : {}),
      extraConditions: [
        checkPrerequisites(this.caches.daemonSets.list(), this.caches.policies.get(AUTOSCALER_POLICY_NAME)),
        ...(cache ? [cache] : []),
        ...(autoscaling ? [autoscaling] : []),
      ],
    });
    const aliases = aliasCondition(
      md,
      resolveNames(this.caches.modelDeployments.list(), this.opts.providers?.() ?? []),
    );
    const conditions = withAliasCondition(out.status.conditions, aliases, this.opts.now());
    const status = conditions ? { ...out.status, conditions } : out.status;
    await writeStatusIfChanged(this.client, 'modeldeployments', md, status);
    if (out.event) await this.events.record(md, out.event.type, out.event.reason, out.event.message);
    const clash = aliasConflictEvent(md.status?.conditions, aliases);
    if (clash) await this.events.record(md, 'Warning', clash.reason, clash.message);
    // A claim the API refused is tried again soon, not only at the next event.
    const retry = cache?.reason === 'ClaimNotApplied' ? CLAIM_RETRY_MS : undefined;
    const after = [out.requeueAfterMs, retry].filter((ms): ms is number => ms !== undefined);
    return after.length ? { requeueAfterMs: Math.min(...after) } : undefined;
  }
}

const MODEL_DEPLOYMENTS = platformCollection<ModelDeployment>('modeldeployments');
/** What the operator creates for a deployment carries its name in this label. */
const owned = { namespace: LLMS_NAMESPACE, labelSelector: MODEL_DEPLOYMENT_LABEL };
const DEPLOYMENTS = collection<V1Deployment>({ group: 'apps', version: 'v1', plural: 'deployments', ...owned });
const SERVICES = collection<V1Service>({ group: '', version: 'v1', plural: 'services', namespace: LLMS_NAMESPACE });
const PODS = collection<V1Pod>({ group: '', version: 'v1', plural: 'pods', ...owned });
// Unfiltered: a spec.cache.existingClaim is the user's and carries no label of ours.
const CLAIMS = collection<V1PersistentVolumeClaim>({
  group: '',
  version: 'v1',
  plural: 'persistentvolumeclaims',
  namespace: LLMS_NAMESPACE,
});
const NODE_TEMPLATES = platformCollection<NodeTemplate>('nodetemplates');
const NODE_CONFIGURATIONS = platformCollection<NodeConfiguration>('nodeconfigurations');
const POLICIES = platformCollection<AutoscalerPolicy>('autoscalerpolicies');
const DAEMON_SETS = collection<V1DaemonSet>({ group: 'apps', version: 'v1', plural: 'daemonsets' });
const EXTERNAL_PROVIDERS = platformCollection<ExternalProvider>('externalproviders', AGENT_NAMESPACE);

const byOwner = ownerByLabel(MODEL_DEPLOYMENT_LABEL, LLMS_NAMESPACE);
const unlessResync = (event: InformerEvent) => event !== 'resync';

/**
 * The ModelDeployment controller, and beside it the model autoscaler, which decides the
 * replicas of the same deployments. Its watches requeue (namespace/name): a deployment itself;
 * what it owns (its Deployment, Service, pods and claim, by the label it puts on them); an
 * existing claim a spec names; a provider whose models or aliases change, which may free or
 * take a deployment's alias; and node templates, node configurations, the autoscaler policy and
 * device-plugin DaemonSets, which decide where and whether any deployment can run (every
 * deployment).
 */
export const modelDeploymentController: ControllerDeclaration = {
  name: 'modeldeployment',
  for: MODEL_DEPLOYMENTS,
  watches: [
    watch(DEPLOYMENTS, byOwner),
    watch(SERVICES, byOwner),
    watch(PODS, byOwner),
    watch(CLAIMS, (event, claim, _old, caches) => [
      ...byOwner(event, claim),
      ...caches
        .of(MODEL_DEPLOYMENTS)
        .list()
        .filter((md) => md.spec.cache?.existingClaim === claim.metadata?.name)
        .map(keyOf),
    ]),
    watch(NODE_TEMPLATES, everyKeyOf(MODEL_DEPLOYMENTS, unlessResync)),
    watch(NODE_CONFIGURATIONS, everyKeyOf(MODEL_DEPLOYMENTS, unlessResync)),
    watch(POLICIES, everyKeyOf(MODEL_DEPLOYMENTS, unlessResync)),
    watch(DAEMON_SETS, everyKeyOf(MODEL_DEPLOYMENTS, unlessResync)),
    watch(EXTERNAL_PROVIDERS, everyKeyOf(MODEL_DEPLOYMENTS, namesMayChange)),
  ],
  rbac: [
    {
      scope: 'cluster',
      apiGroups: [API_GROUP],
      resources: ['modeldeployments/status'],
      verbs: ['get', 'patch', 'update'],
      reason: 'status written by merge patch when it changed',
    },
    {
      scope: 'cluster',
      apiGroups: [API_GROUP],
      resources: ['modeldeployments/scale'],
      verbs: ['get', 'patch'],
      reason: 'the model autoscaler sets replicas through the scale subresource, as HPA would',
    },
    {
      scope: 'cluster',
      apiGroups: [API_GROUP],
      resources: ['nodetemplates'],
      verbs: ['create', 'patch', 'update'],
      reason: 'creates and server-side-applies llms-by-platform, enables and disables the others',
    },
    {
      scope: 'cluster',
      apiGroups: [API_GROUP],
      resources: ['autoscalerpolicies'],
      verbs: ['create', 'patch'],
      reason: 'creates the cluster policy or switches its unschedulablePods on',
    },
    {
      scope: LLMS_NAMESPACE,
      apiGroups: ['apps'],
      resources: ['deployments'],
      verbs: ['create', 'patch', 'update'],
      reason: "the model server's Deployment, server-side applied",
    },
    {
      scope: LLMS_NAMESPACE,
      apiGroups: [''],
      resources: ['services'],
      verbs: ['create', 'patch', 'update'],
      reason: "the model server's Service, server-side applied",
    },
    {
      scope: LLMS_NAMESPACE,
      apiGroups: [API_GROUP],
      resources: ['modeldeployments/finalizers'],
      verbs: ['update'],
      reason: 'blockOwnerDeletion on the ModelDeployment under OwnerReferencesPermissionEnforcement',
    },
    {
      scope: LLMS_NAMESPACE,
      apiGroups: [''],
      resources: ['persistentvolumeclaims'],
      verbs: ['create', 'patch'],
      reason: 'the model cache claim, created and grown by server-side apply, never deleted',
    },
    {
      scope: LLMS_NAMESPACE,
      apiGroups: [''],
      resources: ['events'],
      verbs: ['create', 'patch'],
      reason: "Events on ModelDeployments, the controller's and the autoscaler's",
    },
    {
      scope: AGENT_NAMESPACE,
      apiGroups: ['discovery.k8s.io'],
      resources: ['endpointslices'],
      verbs: ['list'],
      reason: "the autoscaler finds the proxy replicas (the metrics Service's endpoints) whose /load it reads",
    },
  ],
  failure: 'reconcile failed',
  async start(ctx) {
    const opts = ctx.options;
    const caches: ModelDeploymentCaches = {
      modelDeployments: ctx.caches.of(MODEL_DEPLOYMENTS),
      deployments: ctx.caches.of(DEPLOYMENTS),
      services: ctx.caches.of(SERVICES),
      pods: ctx.caches.of(PODS),
      claims: ctx.caches.of(CLAIMS),
      nodeTemplates: ctx.caches.of(NODE_TEMPLATES),
      nodeConfigurations: ctx.caches.of(NODE_CONFIGURATIONS),
      policies: ctx.caches.of(POLICIES),
      daemonSets: ctx.caches.of(DAEMON_SETS),
    };
    const catalog = opts.catalog ?? loadCatalog();
    const urls = opts.proxyLoadUrls;
    const autoscaler = new ModelAutoscaler(ctx.client, caches.modelDeployments, ctx.events, {
      catalog,
      intervalMs: opts.autoscaleIntervalMs ?? 5_000,
      load: new ProxyLoad(urls ? async () => urls : proxyTargets(ctx.client)),
      now: () => ctx.now().getTime(),
      onCondition: ctx.enqueue,
      onError: (err) => ctx.log.warn('autoscaler round failed', { error: errorMessage(err) }),
    });
    const providers = ctx.caches.of(EXTERNAL_PROVIDERS);
    const controller = new ModelDeploymentController(ctx.client, caches, ctx.events, {
      autoscaling: (key) => autoscaler.condition(key),
      catalog,
      cluster: opts.cluster,
      images: opts.images,
      timeoutMs: opts.timeoutMs ?? DEPLOYMENT_TIMEOUT_MS,
      now: ctx.now,
      ...(opts.modelCache ? { modelCache: opts.modelCache } : {}),
      providers: () => providers.list(),
    });
    return { reconcile: (key) => controller.reconcile(key), loop: autoscaler };
  },
};
