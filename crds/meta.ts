import type { V1ObjectMeta } from '@kubernetes/client-node';
import type { API_GROUP_VERSION } from './constants.js';

/** A condition in the standard Kubernetes shape (metav1.Condition). */
export interface Condition {
  type: string;
  status: 'True' | 'False' | 'Unknown';
  observedGeneration?: number;
  /** RFC 3339 time. */
  lastTransitionTime: string;
  reason: string;
  message: string;
}

/** Status fields every kind of this API carries. */
export interface CommonStatus {
  observedGeneration?: number;
  conditions?: Condition[];
}

/** The envelope every object of this API shares. */
export interface Resource<K extends string, Spec, Status> {
  apiVersion: typeof API_GROUP_VERSION;
  kind: K;
  metadata: V1ObjectMeta;
  spec: Spec;
  status?: Status;
}
