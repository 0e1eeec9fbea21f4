import type { EngineName } from './engines/engine.js';
import type { CommonStatus, Resource } from './meta.js';

export interface ModelDeploymentSpec {
  /** The engine that serves the model; the schema defaults it to Ollama. */
  engine?: EngineName;
  /** The model in its engine's form, from the hosted-model catalog: llama3.1:8b (Ollama), meta-llama/Llama-3.1-8B-Instruct (VLLM). */
  model: string;
  /** Service in platform-llms that exposes the model server; immutable. */
  serviceName: string;
  /** Service port; defaults to 11434; immutable. */
  port: number;
  /** Existing NodeTemplate; omitted means llms-by-platform. */
  nodeTemplate?: string;
  /** Defaults to 1; 0 hibernates. With autoscaling the operator writes it. */
  replicas: number;
  autoscaling?: ModelAutoscaling;
  /** Standalone proxy mode only: an already running model server of the engine. */
  endpoint?: string;
  /** Models tried in order when this one is not Running or fails before answering. */
  fallback?: string[];
  /** The proxy's waits for this model's server; omitted fields take the proxy's flags. */
  timeouts?: { firstByteSeconds?: number; idleSeconds?: number; queueSeconds?: number };
  /** Other names callers may send for this model; unique across the cluster (crds/model-names.ts). */
  aliases?: string[];
  /** In the CLI model list (GET /v1/models/metadata?include_in_cli=true); defaults to true. */
  includeInCLI?: boolean;
  /** Model server settings; omitted fields come from the catalog's serving defaults. */
  server?: { numParallel?: number; maxQueue?: number; contextLength?: number; cpu?: string };
  /** Where the model is kept; omitted: the operator's model cache (or an emptyDir without one). */
  cache?: { existingClaim?: string };
}

/** spec.autoscaling; defaults applied by the schema. */
export interface ModelAutoscaling {
  minReplicas: number;
  maxReplicas: number;
  /** In-flight + queued requests per replica; omitted: the replica's parallel slots. */
  targetInFlight?: number;
  targetRequestsPerSecond?: number;
  scaleDownDelaySeconds: number;
  /** With minReplicas 0; omitted: DEFAULT_HIBERNATE_AFTER_SECONDS. */
  hibernateAfterSeconds?: number;
  whileWaking: 'Wait' | 'Fallback';
}

export const DEFAULT_HIBERNATE_AFTER_SECONDS = 600;

export type ModelDeploymentPhase = 'Deploying' | 'Running' | 'Failed';

export interface ModelDeploymentStatus extends CommonStatus {
  phase?: ModelDeploymentPhase;
  endpoint?: string;
  /** Pods that exist, ready ones, and their selector (the scale subresource reads these). */
  replicas?: number;
  readyReplicas?: number;
  selector?: string;
  deployingSince?: string;
}

export type ModelDeployment = Resource<'ModelDeployment', ModelDeploymentSpec, ModelDeploymentStatus>;
