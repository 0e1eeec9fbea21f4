import type { API_GROUP_VERSION } from './constants.js';

/** Object metadata as the API server sends it (timestamps are RFC 3339 strings). */
interface ObjectMeta {
  name?: string;
  namespace?: string;
  uid?: string;
  resourceVersion?: string;
  generation?: number;
  creationTimestamp?: string;
  deletionTimestamp?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  ownerReferences?: Array<{
    apiVersion: string;
    kind: string;
    name: string;
    uid: string;
    controller?: boolean;
    blockOwnerDeletion?: boolean;
  }>;
}

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
  metadata: ObjectMeta;
  spec: Spec;
  status?: Status;
}

/** Kubernetes time format (RFC 3339, whole seconds), as metav1.Time serialises. */
export const rfc3339 = (d: Date): string => d.toISOString().replace(/\.\d+Z$/, 'Z');
