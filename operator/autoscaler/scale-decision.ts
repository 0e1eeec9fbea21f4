import { DEFAULT_HIBERNATE_AFTER_SECONDS, type ModelAutoscaling } from '../../crds/model-deployment.js';

/**
 * How many replicas a model should have, as a pure function of its autoscaling spec, its
 * current replicas, the load the proxies report, the time, and what the autoscaler remembers
 * from earlier decisions. Like the HPA's behaviour defaults: scale up at once to what the load
 * asks for; scale down only to the highest count asked for during the last scaleDownDelaySeconds,
 * so a burst followed by a lull does not flap; hibernate (0) only after hibernateAfterSeconds
 * without a single request, and never wake without one.
 */

/** The proxies' load on one model, summed over every proxy replica. */
export interface ModelLoad {
  /** Requests being answered by a model server now. */
  inFlight: number;
  /** Requests held in the proxies: all replicas' slots busy, or the model waking from zero. */
  queued: number;
  /** Requests that arrived since the previous report (counter deltas). */
  arrived: number;
  /** Request rate over the last interval, per second. */
  requestsPerSecond: number;
}

export interface ScaleMemory {
  /** Replica counts the load asked for, newest last, within the scale-down window. */
  wanted: Array<{ at: number; replicas: number }>;
  /** Last time a request was seen (or when tracking began: unknown history counts as busy). */
  lastRequestAt: number;
  /** The count decided last: more now means someone woke or scaled it (a proxy, kubectl). */
  replicas: number;
}

export type ScaleReason = 'ScaledUp' | 'ScaledDown' | 'Hibernated' | 'Woken' | 'Steady' | 'NoLoadReports';

export interface ScaleDecision {
  replicas: number;
  reason: ScaleReason;
  message: string;
  memory: ScaleMemory;
}

export interface ScaleInput {
  spec: ModelAutoscaling;
  /** The replica's parallel slots: the default in-flight target. */
  slots: number;
  current: number;
  /** Undefined when no proxy reported (unreachable): nothing is changed on missing data. */
  load: ModelLoad | undefined;
  now: number;
  memory: ScaleMemory | undefined;
}

const clamp = (n: number, lo: number, hi: number) => Math.min(hi, Math.max(lo, n));

export function decideReplicas(input: ScaleInput): ScaleDecision {
  const { spec, current, load, now } = input;
  const windowMs = spec.scaleDownDelaySeconds * 1000;
  // First sight (operator start, failover): assume the current count was asked for just now.
  const memory: ScaleMemory = input.memory
    ? {
        wanted: input.memory.wanted.filter((w) => now - w.at <= windowMs),
        lastRequestAt: input.memory.lastRequestAt,
        replicas: input.memory.replicas,
      }
    : { wanted: [{ at: now, replicas: current }], lastRequestAt: now, replicas: current };
  // Raised by someone else since the last tick: a proxy woke it for a request this tick's load
  // report may have missed. That counts as a request, or the model would go straight back to sleep.
  if (current > memory.replicas) memory.lastRequestAt = now;

  if (!load) {
    memory.replicas = current;
    return {
      replicas: current,
      reason: 'NoLoadReports',
      message: `no proxy reported its load; keeping ${current} replica(s)`,
      memory,
    };
  }

  const target = spec.targetInFlight ?? input.slots;
  const demand = load.inFlight + load.queued;
  const active = demand > 0 || load.arrived > 0;
  if (active) memory.lastRequestAt = now;

  const byInFlight = Math.ceil(demand / target);
  const byRate = spec.targetRequestsPerSecond ? Math.ceil(load.requestsPerSecond / spec.targetRequestsPerSecond) : 0;
  let asked = Math.max(byInFlight, byRate, active ? 1 : 0);

  const hibernateMs = (spec.hibernateAfterSeconds ?? DEFAULT_HIBERNATE_AFTER_SECONDS) * 1000;
  const idleMs = now - memory.lastRequestAt;
  const mayHibernate = spec.minReplicas === 0 && idleMs >= hibernateMs;
  // Idle but not long enough to sleep: keep one replica warm (a hibernated model stays asleep).
  if (asked === 0 && !mayHibernate && current > 0) asked = 1;
  asked = clamp(asked, spec.minReplicas, spec.maxReplicas);
  memory.wanted.push({ at: now, replicas: asked });

  let replicas: number;
  if (asked > current) replicas = asked;
  else if (asked === 0) replicas = 0;
  else replicas = Math.min(current, Math.max(...memory.wanted.map((w) => w.replicas)));
  replicas = clamp(replicas, spec.minReplicas, spec.maxReplicas);
  memory.replicas = replicas;

  const rate = spec.targetRequestsPerSecond
    ? `, ${round(load.requestsPerSecond)} requests/s (target ${spec.targetRequestsPerSecond})`
    : '';
  const why = `${load.inFlight} in flight and ${load.queued} queued (target ${target} per replica)${rate}`;
  let reason: ScaleReason;
  let message: string;
  if (replicas > current) {
    reason = current === 0 ? 'Woken' : 'ScaledUp';
    message = `${current} -> ${replicas} replica(s) for ${why}`;
  } else if (replicas < current) {
    reason = replicas === 0 ? 'Hibernated' : 'ScaledDown';
    message =
      replicas === 0
        ? `${current} -> 0 replicas: no request for ${Math.round(idleMs / 1000)} s (hibernateAfterSeconds ${hibernateMs / 1000})`
        : `${current} -> ${replicas} replica(s) for ${why}, lower for ${spec.scaleDownDelaySeconds} s`;
  } else {
    reason = 'Steady';
    message = `${replicas} replica(s) for ${why}`;
  }
  return { replicas, reason, message, memory };
}

const round = (n: number) => Math.round(n * 100) / 100;
