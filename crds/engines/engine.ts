import type { V1Container, V1EnvVar, V1Volume, V1VolumeMount } from '@kubernetes/client-node';
import type { CallerDialect } from '../constants.js';

/**
 * An inference engine as data and a few pure functions: how its model server is started (image,
 * arguments, ports, probes), where its model comes from and how it is cached, which dialects it
 * serves natively, the load signals it exports, and what its failures mean. The operator's pod
 * plan (operator/model-deployment/model-server.ts), its status (model-deployment-status.ts), the
 * proxy's in-cluster upstream and its replica balancing read every engine through this contract
 * (KubeAI's internal/modelcontroller/engine_*.go is the model). Adding an engine is a module
 * beside these, a row in table.ts, its value in the CRD's spec.engine enum and CEL rule, and
 * its catalog rows.
 */

/** spec.engine of a ModelDeployment (crds/ai.platform_modeldeployments.yaml holds the enum). */
export type EngineName = 'Ollama' | 'VLLM';

/** How a replica is started: the spec's server settings over the catalog's serving defaults. */
export interface EngineSettings {
  /** Requests one replica generates at once (Ollama's OLLAMA_NUM_PARALLEL, vLLM's --max-num-seqs). */
  numParallel: number;
  /** Requests one replica holds waiting (Ollama's OLLAMA_MAX_QUEUE; vLLM queues without a bound). */
  maxQueue: number;
  /** Tokens of context per request. */
  contextLength: number;
  /** CPU each replica requests (a quantity). */
  cpu: string;
}

/** What one replica's containers are built from: plain values the operator resolved. */
export interface EngineServerInput {
  /** The model as spec.model names it (Ollama's name:tag, a Hugging Face id). */
  model: string;
  kind: 'chat' | 'embedding';
  image: string;
  settings: EngineSettings;
  /** IfNotPresent: fetch when the volume lacks the model; Never: the volume must hold it. */
  pullPolicy: 'IfNotPresent' | 'Never';
  /** The claim the model volume is, when it is one (named in messages about it). */
  claimName?: string;
  /** The volumes every container mounts: `models` at MODELS_PATH, `home` and `tmp`. */
  mounts: V1VolumeMount[];
  /** CPU the fetch asks (spec.server.cpu, else a little: it mostly waits on the network). */
  fetchCpu: string;
  /** Memory the server asks and is limited to, and its GPUs. */
  memory: string;
  gpus: number;
}

/** Where the model volume is mounted in every engine's pods. */
export const MODELS_PATH = '/models';

/**
 * The load signals a replica exports on its metrics endpoint, in Prometheus' text format: the
 * proxy reads them to route (requests waiting in the engine, KV-cache use) where it has them.
 */
export interface LoadSignals {
  /** Path on the server's port. */
  path: string;
  /** Requests waiting for a batch slot (a gauge). */
  waiting: string;
  /** Requests being generated (a gauge). */
  running: string;
  /** Fraction of the KV cache in use, 0..1 (a gauge). */
  kvCacheUsage: string;
}

/**
 * One failure the engine reports in its container's last words (termination message or log
 * tail), mapped to the Ready condition's reason and a message with its cause and fix.
 */
export interface EngineFailure {
  text: RegExp;
  reason: 'ModelTooLarge' | 'ModelWeightsMissing' | 'GPUUnsupported' | 'ModelNotSupported';
  /** Placeholders: {model}. */
  message: string;
}

/** What the proxy knows of the server a request goes to. */
interface ServerContext {
  /** Tokens of context it runs with (Ollama's OLLAMA_CONTEXT_LENGTH, vLLM's --max-model-len), where known. */
  contextLength?: number;
}

/** How the proxy calls one dialect on the engine natively. */
export interface NativeDialect {
  path: string;
  /** The engine's quirks: the caller's body as this engine must get it. */
  prepare?: (body: Record<string, unknown>, server: ServerContext) => Record<string, unknown>;
}

export interface EngineModule {
  name: EngineName;
  /** The server container's name and the pods' app.kubernetes.io/name. */
  container: string;
  /** The upstream image the chart deploys unless values override it. */
  defaultImage: string;
  /** Port the server listens on in the pod. */
  port: number;
  /** $HOME of its processes: a small writable volume (the image is read-only). */
  home: string;
  /** The model id form spec.model takes with this engine: an example and a rejected one (the CRD's CEL enforces it). */
  modelForm: { describe: string; example: string; rejected: string; pattern: RegExp };
  /** Env every container of the pod gets (where the model is, home directories). */
  env(input: EngineServerInput): V1EnvVar[];
  /** The init container that puts the model on the volume, or finds it there. */
  fetchContainer(input: EngineServerInput): V1Container;
  /** The server: its arguments, ports, probes (ready means the model answers) and resources. */
  serverContainer(input: EngineServerInput): V1Container;
  /** Volumes of its own, besides `models`, `home` and `tmp` (vLLM's shared memory). */
  extraVolumes?: readonly V1Volume[];
  /** Dialects served natively, by the path each is served on. Every other is translated. */
  dialects: Readonly<Partial<Record<CallerDialect, NativeDialect>>>;
  /** Where it counts an Anthropic Messages body's input tokens (vLLM's /v1/messages/count_tokens); absent: the gateway estimates. */
  countTokens?: string;
  /** Where it tells a model's context length: Ollama's POST /api/show, vLLM's GET /v1/models (max_model_len). */
  modelInfo: 'ollama-show' | 'openai-models';
  /** Absent: the engine exports no queue or cache signals; the proxy counts its own in-flight requests. */
  loadSignals?: LoadSignals;
  failures: readonly EngineFailure[];
}

/** The first of an engine's failures its container's last words match, as the Ready condition says it. */
export function engineFailure(
  engine: EngineModule,
  model: string,
  lastWords: string,
): { reason: EngineFailure['reason']; message: string } | undefined {
  const hit = engine.failures.find((f) => f.text.test(lastWords));
  return hit && { reason: hit.reason, message: hit.message.replaceAll('{model}', model) };
}
