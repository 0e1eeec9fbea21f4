import type { CommonStatus, Resource } from './meta.js';

export interface ModelDeploymentSpec {
  /** Ollama model name with tag, from the hosted-model catalog (e.g. llama3.1:8b). */
  model: string;
  /** Service in platform-llms that exposes the model server; immutable. */
  serviceName: string;
  /** Service port; defaults to 11434; immutable. */
  port: number;
  /** Existing NodeTemplate; omitted means llms-by-platform. */
  nodeTemplate?: string;
  /** Defaults to 1. */
  replicas: number;
  /** Standalone proxy mode only: an already running Ollama server. */
  endpoint?: string;
  /** Models tried in order when this one is not Running or fails before answering. */
  fallback?: string[];
  /** The proxy's waits for this model's server; omitted fields take the proxy's flags. */
  timeouts?: { firstByteSeconds?: number; idleSeconds?: number };
  /** Ollama server settings; omitted fields come from the catalog's serving defaults. */
  server?: { numParallel?: number; maxQueue?: number; contextLength?: number };
}

export type ModelDeploymentPhase = 'Deploying' | 'Running' | 'Failed';

export interface ModelDeploymentStatus extends CommonStatus {
  phase?: ModelDeploymentPhase;
  endpoint?: string;
  deployingSince?: string;
}

/** Condition types of a ModelDeployment. */
export const MODEL_DEPLOYMENT_CONDITIONS = ['Scheduled', 'ModelPulled', 'Ready'] as const;

export type ModelDeployment = Resource<'ModelDeployment', ModelDeploymentSpec, ModelDeploymentStatus>;
