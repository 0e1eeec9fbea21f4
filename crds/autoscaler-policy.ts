import type { CommonStatus, Resource } from './meta.js';

type OptimizationMode = 'ReadOnly' | 'Automated';

export interface AutoscalerPolicySpec {
  /** Defaults to ReadOnly. */
  optimizationMode: OptimizationMode;
  unschedulablePods: {
    /** Defaults to false. */
    enabled: boolean;
  };
}

export type AutoscalerPolicy = Resource<'AutoscalerPolicy', AutoscalerPolicySpec, CommonStatus>;
