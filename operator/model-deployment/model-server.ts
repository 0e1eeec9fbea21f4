import type {
  V1Affinity,
  V1Container,
  V1Deployment,
  V1EnvVar,
  V1NodeSelectorTerm,
  V1PersistentVolumeClaim,
  V1Service,
  V1VolumeMount,
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
import type { ModelDeployment } from '../../crds/model-deployment.js';
import { desiredCacheClaim, type ModelCacheSetting, type ModelStore, modelStore } from './model-cache.js';

/**
 * The desired model server of a ModelDeployment: an Ollama Deployment and its Service in
 * platform-llms, as pure data. An init container pulls the model into a volume the server
 * shares, so "ModelPulled" is observable as that container's completion, and the server's
 * readiness probe has the model generate a token, so Ready means the model answers. With the
 * model cache that volume is a claim the pods share (model-cache.ts), also built here.
 */

/** Annotation on pods naming the model they serve, to tell a rollout's old pods from new. */
export const MODEL_ANNOTATION = 'ai.platform/model';
export const PULL_CONTAINER = 'pull-model';
export const SERVER_CONTAINER = 'ollama';
/** Port Ollama listens on inside the pod; the Service maps spec.port to it. */
const CONTAINER_PORT = 11434;

export interface ModelServerOptions {
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
    'app.kubernetes.io/name': 'ollama',
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
export interface ServerSettings {
  numParallel: number;
  maxQueue: number;
  contextLength: number;
  /** CPU each replica requests (a quantity). */
  cpu: string;
}

export function serverSettings(md: ModelDeployment, model: CatalogModel): ServerSettings {
  const own = md.spec.server ?? {};
  return {
    numParallel: own.numParallel ?? model.serving.numParallel,
    maxQueue: own.maxQueue ?? model.serving.maxQueue,
    contextLength: own.contextLength ?? model.serving.contextLength,
    cpu: own.cpu ?? DEFAULT_SERVER_CPU,
  };
}

/**
 * Readiness that proves the model answers, not only that its manifest exists: one request
 * through Ollama's API that needs the model loaded, and the finished answer looked for. A server
 * without the model (404), one that cannot load it, or one that hangs fails the probe. Ollama's
 * image has bash but neither curl nor wget, hence bash's /dev/tcp; HTTP/1.0 makes the server
 * close after answering.
 */
function modelAnswersScript(path: string, body: string, answered: string): string {
  return [
    `body='${body}'`,
    // biome-ignore lint/suspicious/noTemplateCurlyInString: bash parameter expansion (the port of OLLAMA_HOST)
    'exec 3<>"/dev/tcp/127.0.0.1/${OLLAMA_HOST##*:}" || exit 1',
    `printf 'POST ${path} HTTP/1.0\\r\\nHost: localhost\\r\\nContent-Type: application/json\\r\\nContent-Length: %d\\r\\n\\r\\n%s' "\${#body}" "$body" >&3`,
    `head -c 65536 <&3 | grep -q '${answered}'`,
  ].join('\n');
}

/**
 * The probe per kind of model: a chat model generates one token; an embedding model, which
 * Ollama refuses to generate with (400), embeds a word.
 */
export const MODEL_ANSWERS_SCRIPTS: Record<CatalogModel['kind'], string> = {
  chat: modelAnswersScript(
    '/api/generate',
    `{"model":"'"$MODEL"'","prompt":"hi","stream":false,"options":{"num_predict":1}}`,
    '"done":true',
  ),
  embedding: modelAnswersScript('/api/embed', `{"model":"'"$MODEL"'","input":"hi"}`, '"embeddings":\\[\\['),
};

/**
 * The init container: the model from the volume when it is there (a restart, a new replica on
 * the shared cache), else from the registry, unless MODEL_PULL_POLICY is Never (an existing
 * claim filled by hand). Replicas starting together on one shared volume pull one at a time
 * under flock (util-linux, in the image), so two downloads of one blob never interleave, and
 * whoever waited finds the model and pulls nothing; without flock or locks on the volume it
 * pulls unserialized rather than not at all. Failures go to the termination message, which
 * ModelPulled reports. The server it starts for the pull is stopped, so only the exit counts.
 */
export const PULL_MODEL_SCRIPT = [
  'serve_log=$(mktemp)',
  'missing="model $MODEL is not on PersistentVolumeClaim $MODEL_CLAIM (spec.cache.existingClaim), and this deployment never pulls: copy the model onto the claim (README: Model cache), or remove spec.cache"',
  'fail() {',
  '  [ -s "$serve_log" ] && tail -n 20 "$serve_log" >&2',
  '  printf "%s\\n" "$1" >&2',
  // biome-ignore lint/suspicious/noTemplateCurlyInString: shell parameter expansion (the kubelet's default path)
  '  printf "%s" "$1" >"${TERMINATION_MESSAGE_PATH:-/dev/termination-log}"',
  '  kill "$server" 2>/dev/null',
  '  exit 1',
  '}',
  'present() { ollama show "$MODEL" >/dev/null 2>&1; }',
  // An existing claim without Ollama's folders: say so, rather than how serve fails on it (a
  // read-only volume where it cannot make blobs/).
  'if [ "$MODEL_PULL_POLICY" = Never ] && [ ! -d "$OLLAMA_MODELS/manifests" ]; then fail "$missing"; fi',
  'ollama serve >"$serve_log" 2>&1 &',
  'server=$!',
  'until ollama list >/dev/null 2>&1; do',
  '  if ! kill -0 "$server" 2>/dev/null; then',
  '    fail "ollama serve exited before answering: $(grep -v "^ *$" "$serve_log" | tail -n 1)"',
  '  fi',
  '  sleep 0.5',
  'done',
  'if present; then',
  '  echo "$MODEL is on the volume already: nothing to pull"',
  'elif [ "$MODEL_PULL_POLICY" = Never ]; then',
  '  fail "$missing"',
  'else',
  '  if command -v flock >/dev/null 2>&1 && command exec 9>>"$OLLAMA_MODELS/.pull.lock"; then',
  '    flock 9 || echo "cannot lock $OLLAMA_MODELS/.pull.lock: pulling unserialized" >&2',
  '  else',
  '    echo "no lock on $OLLAMA_MODELS (no flock, or the volume refused the lock file): pulling unserialized" >&2',
  '  fi',
  '  if present; then',
  '    echo "$MODEL was pulled by another pod meanwhile: nothing to pull"',
  '  else',
  '    log=$(mktemp)',
  '    { ollama pull "$MODEL" 2>&1; echo $? >"$log.rc"; } | tee "$log"',
  '    [ "$(cat "$log.rc")" = 0 ] || fail "pulling $MODEL failed: $(tr "\\r" "\\n" <"$log" | grep "^Error" | tail -n 1)"',
  '  fi',
  'fi',
  'kill "$server"',
  'wait "$server"',
  'exit 0',
].join('\n');

/** Memory for the server process: the weights are mapped from disk, plus working room. */
function memoryRequest(model: CatalogModel): string {
  return `${Math.ceil(model.sizeGiB) + 4}Gi`;
}

/**
 * Pod Security "restricted": no root, no privilege escalation, no capabilities, the runtime's
 * seccomp profile, and a read-only image (writes go to the volumes).
 */
const HARDENED = {
  allowPrivilegeEscalation: false,
  readOnlyRootFilesystem: true,
  runAsNonRoot: true,
  capabilities: { drop: ['ALL'] },
};

/** The init container that puts the model on the server's volume (or finds it there) before the server starts. */
function pullContainer(
  md: ModelDeployment,
  opts: ModelServerOptions,
  store: ModelStore,
  env: V1EnvVar[],
  mounts: V1VolumeMount[],
): V1Container {
  return {
    name: PULL_CONTAINER,
    image: opts.image,
    command: ['/bin/sh', '-c', PULL_MODEL_SCRIPT],
    env: [
      ...env,
      { name: 'OLLAMA_HOST', value: '127.0.0.1:11434' },
      { name: 'MODEL_PULL_POLICY', value: store.pullPolicy },
      ...(store.claimName ? [{ name: 'MODEL_CLAIM', value: store.claimName }] : []),
    ],
    volumeMounts: mounts,
    securityContext: HARDENED,
    // Never more than the server asks: a pod's request is the larger of its init and its
    // containers' requests, and spec.server.cpu is what the user sized the node for.
    resources: { requests: { cpu: md.spec.server?.cpu ?? '500m', memory: '1Gi' } },
  };
}

/** The Ollama server: its settings, probes (ready means the model answers) and GPU resources. */
function serverContainer(
  md: ModelDeployment,
  model: CatalogModel,
  opts: ModelServerOptions,
  env: V1EnvVar[],
  mounts: V1VolumeMount[],
): V1Container {
  const modelAnswers = { exec: { command: ['/bin/bash', '-c', MODEL_ANSWERS_SCRIPTS[model.kind]] } };
  const settings = serverSettings(md, model);
  return {
    name: SERVER_CONTAINER,
    image: opts.image,
    args: ['serve'],
    env: [
      ...env,
      { name: 'OLLAMA_HOST', value: `0.0.0.0:${CONTAINER_PORT}` },
      // Keep the model loaded: the first request after idle would otherwise pay the load.
      { name: 'OLLAMA_KEEP_ALIVE', value: '-1' },
      { name: 'OLLAMA_NUM_PARALLEL', value: String(settings.numParallel) },
      { name: 'OLLAMA_MAX_QUEUE', value: String(settings.maxQueue) },
      { name: 'OLLAMA_CONTEXT_LENGTH', value: String(settings.contextLength) },
      // One model per server: never unload it to make room for another.
      { name: 'OLLAMA_MAX_LOADED_MODELS', value: '1' },
    ],
    ports: [{ name: 'http', containerPort: CONTAINER_PORT, protocol: 'TCP' }],
    // The first probe loads the model into GPU memory (minutes for 70b): up to 10 min to start.
    startupProbe: { ...modelAnswers, periodSeconds: 10, failureThreshold: 60, timeoutSeconds: 60 },
    // A busy server queues the probe behind real requests: be patient before declaring it unready.
    readinessProbe: { ...modelAnswers, periodSeconds: 15, failureThreshold: 4, timeoutSeconds: 30 },
    livenessProbe: {
      httpGet: { path: '/', port: 'http' },
      periodSeconds: 20,
      failureThreshold: 3,
      timeoutSeconds: 5,
    },
    resources: {
      requests: { cpu: settings.cpu, memory: memoryRequest(model), [GPU_RESOURCE]: String(model.gpu.count) },
      limits: { memory: memoryRequest(model), [GPU_RESOURCE]: String(model.gpu.count) },
    },
    volumeMounts: mounts,
    securityContext: HARDENED,
  };
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
  const env = [
    { name: 'MODEL', value: model.name },
    { name: 'OLLAMA_MODELS', value: '/models' },
    // Ollama writes its identity key under $HOME/.ollama: a writable volume, not the image's /root.
    { name: 'HOME', value: '/home/ollama' },
    // At start Ollama deletes blobs no manifest names: on a shared volume, a pull in progress.
    { name: 'OLLAMA_NOPRUNE', value: '1' },
  ];
  const mounts = [
    { name: 'models', mountPath: '/models' },
    { name: 'home', mountPath: '/home/ollama' },
    { name: 'tmp', mountPath: '/tmp' },
  ];
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
          initContainers: [pullContainer(md, opts, store, env, mounts)],
          containers: [serverContainer(md, model, opts, env, mounts)],
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
