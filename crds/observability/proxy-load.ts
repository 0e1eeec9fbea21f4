/**
 * The load report every proxy replica serves on its metrics port and the operator's model
 * autoscaler reads and sums: per in-cluster model, requests in flight, held waiting for a replica
 * slot, and received so far.
 */

export const LOAD_PATH = '/load';

export interface ModelLoadReport {
  inFlight: number;
  queued: number;
  /** Requests since the process started (a counter: the autoscaler takes differences). */
  requests: number;
}

export interface ProxyLoadReport {
  /** When the process started (ms since the epoch): a new value means its counters restarted. */
  startedAt: number;
  models: Record<string, ModelLoadReport>;
}
