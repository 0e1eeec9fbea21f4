import type { CommonStatus, Resource } from './meta.js';

type TaintEffect = 'NoSchedule' | 'PreferNoSchedule' | 'NoExecute';

interface Taint {
  key: string;
  value?: string;
  effect: TaintEffect;
}

interface GpuConstraints {
  manufacturer: 'NVIDIA';
  models?: string[];
  minCount?: number;
  maxCount?: number;
  minMemoryGiB?: number;
  /** e.g. "8.0". */
  minComputeCapability?: string;
}

interface NodeConstraints {
  architectures: Array<'amd64' | 'arm64'>;
  spot: boolean;
  gpu?: GpuConstraints;
}

export interface NodeTemplateSpec {
  /** Defaults to true. */
  enabled: boolean;
  configurationRef?: { name: string };
  constraints?: NodeConstraints;
  labels?: Record<string, string>;
  taints?: Taint[];
}

export type NodeTemplate = Resource<'NodeTemplate', NodeTemplateSpec, CommonStatus>;
