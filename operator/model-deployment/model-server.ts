import type {
  V1Affinity,
  V1Deployment,
  V1NodeSelectorTerm,
  V1PersistentVolumeClaim,
  V1Service,
} from '@kubernetes/client-node';
import type { Catalog, CatalogModel } from '../../crds/catalog/catalog.js';
import {
  API_GROUP_VERSION,
  GPU_MODEL_LABEL,
  GPU_RESOURCE,
  LLMS_NAMESPACE,
  MANAGED_BY_LABEL,
  MANAGED_BY_VALUE,
  MODEL_DEPLOYMENT_LABEL,
  MODEL_SERVER_UID,
  NODE_TEMPLATE_KEY,
} from '../../crds/constants.js';
import { type EngineServerInput, type EngineSettings, MODELS_PATH } from '../../crds/engines/engine.js';
import { engineFor } from '../../crds/engines/table.js';
import type { ModelDeployment } from '../../crds/model-deployment.js';
import { desiredCacheClaim, type ModelCacheSetting, type ModelStore, modelStore } from './model-cache.js';

/**
 * The desired model server of a ModelDeployment: its engine's Deployment and its Service in
 * platform-llms, as pure data. What is the engine's (image, arguments, probes, how the model is
 * fetched: crds/engines/) comes from its module; what every engine shares is here: an init
 * container puts the model on a volume the server shares, so "ModelPulled" is observable as that
 * container's completion, readiness means the model answers, the GPU node's affinity and
 * tolerations, Pod Security restricted, and the model cache's claim (model-cache.ts).
 */

/** Annotation on pods naming the model they serve, to tell a rollout's old pods from new. */
export const MODEL_ANNOTATION = 'ai.platform/model';
/** Every engine's init container that puts the model on the volume. */
export const PULL_CONTAINER = 'pull-model';

export interface ModelServerOptions {
  /** The engine's image (the chart's value, else the module's default). */
  image: string;
  /** Node template whose nodes run the server. */
  template: string;
  /** GPU types that fit the model and the region, from the catalog. */
  gpuTypes: string[];
  /** One PersistentVolumeClaim per deployment for the model; absent or false: an emptyDir per pod. */
  modelCache?: ModelCacheSetting;
  /** The pods' claim as the API server has it (ours or spec.cache.existingClaim), if it exists. */
  observedClaim?: V1PersistentVolumeClaim;
}

export interface ModelServer {
  deployment: V1Deployment;
  service: V1Service;
  /** The model cache's claim to apply before the Deployment; absent without one of our own. */
  claim?: V1PersistentVolumeClaim;
  /** What the pods keep the model on (the ModelCache condition describes it). */
  store: ModelStore;
}

function ownerReference(md: ModelDeployment) {
  return {
    apiVersion: API_GROUP_VERSION,
    kind: 'ModelDeployment',
    name: md.metadata.name ?? '',
    uid: md.metadata.uid ?? '',
    controller: true,
    blockOwnerDeletion: true,
  };
}

export function selectorLabels(md: ModelDeployment): Record<string, string> {
  return { [MODEL_DEPLOYMENT_LABEL]: md.metadata.name ?? '' };
}

function labels(md: ModelDeployment): Record<string, string> {
  return {
    'app.kubernetes.io/name': engineFor(md.spec).container,
    'app.kubernetes.io/instance': md.metadata.name ?? '',
    'app.kubernetes.io/component': 'model-server',
    [MANAGED_BY_LABEL]: MANAGED_BY_VALUE,
    ...selectorLabels(md),
  };
}

/**
 * Node affinity: the template's nodes, with a GPU type that fits. One term per architecture
 * so that arm64 nodes are only chosen with GPUs the catalog allows there (compute capability
 * 8.0+); the scheduler ORs the terms.
 */
function nodeSelectorTerms(catalog: Catalog, template: string, gpuTypes: string[]): V1NodeSelectorTerm[] {
  const terms: V1NodeSelectorTerm[] = [];
  for (const arch of ['amd64', 'arm64'] as const) {
    const types = gpuTypes.filter((g) => catalog.gpus[g]?.arch === arch);
    if (types.length === 0) continue;
    terms.push({
      matchExpressions: [
        { key: NODE_TEMPLATE_KEY, operator: 'In', values: [template] },
        { key: 'kubernetes.io/arch', operator: 'In', values: [arch] },
        { key: GPU_MODEL_LABEL, operator: 'In', values: [...types].sort() },
      ],
    });
  }
  return terms;
}

/** CPU a model server requests unless spec.server.cpu says otherwise. */
const DEFAULT_SERVER_CPU = '2';

/** How the server is started: the ModelDeployment's spec.server over the catalog's serving defaults. */
export type ServerSettings = EngineSettings;

export function serverSettings(md: ModelDeployment, model: CatalogModel): ServerSettings {
  const own = md.spec.server ?? {};
  return {
    numParallel: own.numParallel ?? model.serving.numParallel,
    maxQueue: own.maxQueue ?? model.serving.maxQueue,
    contextLength: own.contextLength ?? model.serving.contextLength,
    cpu: own.cpu ?? DEFAULT_SERVER_CPU,
  };
}

/** Memory for the server process: the weights are mapped from disk, plus working room. */
function memoryRequest(model: CatalogModel): string {
  return `${Math.ceil(model.sizeGiB) + 4}Gi`;
}

export function desiredModelServer(
  md: ModelDeployment,
  model: CatalogModel,
  catalog: Catalog,
  opts: ModelServerOptions,
): ModelServer {
  const name = md.metadata.name ?? '';
  const meta = {
    namespace: LLMS_NAMESPACE,
    labels: labels(md),
    ownerReferences: [ownerReference(md)],
  };
  const store = modelStore(md, model, opts.modelCache, opts.observedClaim);
  const engine = engineFor(md.spec);
  const input: EngineServerInput = {
    model: model.name,
    kind: model.kind,
    image: opts.image,
    settings: serverSettings(md, model),
    pullPolicy: store.pullPolicy,
    ...(store.claimName ? { claimName: store.claimName } : {}),
    mounts: [
      { name: 'models', mountPath: MODELS_PATH },
      { name: 'home', mountPath: engine.home },
      { name: 'tmp', mountPath: '/tmp' },
    ],
    // Never more than the server asks: a pod's request is the larger of its init and its
    // containers' requests, and spec.server.cpu is what the user sized the node for.
    fetchCpu: md.spec.server?.cpu ?? '500m',
    memory: memoryRequest(model),
    gpus: model.gpu.count,
  };
  const nodeAffinity = {
    requiredDuringSchedulingIgnoredDuringExecution: {
      nodeSelectorTerms: nodeSelectorTerms(catalog, opts.template, opts.gpuTypes),
    },
  };
  // A ReadWriteOnce volume attaches to one node: a replica elsewhere would wait for it forever.
  const affinity: V1Affinity = store.singleNode
    ? {
        nodeAffinity,
        podAffinity: {
          requiredDuringSchedulingIgnoredDuringExecution: [
            { labelSelector: { matchLabels: selectorLabels(md) }, topologyKey: 'kubernetes.io/hostname' },
          ],
        },
      }
    : { nodeAffinity };

  const deployment: V1Deployment = {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name, ...meta },
    spec: {
      replicas: md.spec.replicas,
      selector: { matchLabels: selectorLabels(md) },
      // The new server must answer before the old one goes: no gap in service on a model change.
      // Except on a one-node volume, where the new pod could wait for the old one's node forever.
      strategy: {
        type: 'RollingUpdate',
        rollingUpdate: store.singleNode ? { maxSurge: 0, maxUnavailable: 1 } : { maxSurge: 1, maxUnavailable: 0 },
      },
      template: {
        metadata: { labels: labels(md), annotations: { [MODEL_ANNOTATION]: model.name } },
        spec: {
          affinity,
          tolerations: [
            { key: NODE_TEMPLATE_KEY, operator: 'Exists' },
            { key: GPU_RESOURCE, operator: 'Exists', effect: 'NoSchedule' },
          ],
          initContainers: [engine.fetchContainer(input)],
          containers: [engine.serverContainer(input)],
          securityContext: {
            runAsNonRoot: true,
            runAsUser: MODEL_SERVER_UID,
            runAsGroup: MODEL_SERVER_UID,
            fsGroup: MODEL_SERVER_UID,
            // A claim keeps its files: re-owning a model's every blob at each mount would delay each start.
            ...(store.claimName ? { fsGroupChangePolicy: 'OnRootMismatch' } : {}),
            seccompProfile: { type: 'RuntimeDefault' },
          },
          // Model servers talk to nobody but their callers: no API token in the pod.
          automountServiceAccountToken: false,
          volumes: [
            store.volume,
            { name: 'home', emptyDir: { sizeLimit: '64Mi' } },
            { name: 'tmp', emptyDir: { sizeLimit: '1Gi' } },
            ...(engine.extraVolumes ?? []),
          ],
          terminationGracePeriodSeconds: 30,
        },
      },
    },
  };

  const service: V1Service = {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name: md.spec.serviceName, ...meta },
    spec: {
      type: 'ClusterIP',
      selector: selectorLabels(md),
      ports: [{ name: 'http', port: md.spec.port, targetPort: 'http', protocol: 'TCP' }],
    },
  };
  const claim = desiredCacheClaim(md, model, opts.modelCache, meta, opts.observedClaim);
  return claim ? { deployment, service, claim, store } : { deployment, service, store };
}
