import type { V1ContainerStatus, V1Deployment, V1Pod } from '@kubernetes/client-node';
import { LLMS_NAMESPACE, modelServerEndpoint } from '../../crds/constants.js';
import { engineFailure } from '../../crds/engines/engine.js';
import { engineFor } from '../../crds/engines/table.js';
import { type Condition, rfc3339 } from '../../crds/meta.js';
import type { ModelDeployment, ModelDeploymentPhase, ModelDeploymentStatus } from '../../crds/model-deployment.js';
import { findCondition, setCondition } from '../runtime/conditions.js';
import { MODEL_ANNOTATION, PULL_CONTAINER, selectorLabels } from './model-server.js';

/**
 * A ModelDeployment's status as a pure function of what the operator observes: the result
 * of validation, the model server's Deployment and pods, and the time. Phases:
 * Deploying -> Running, or Failed with the reason in the Ready condition.
 */

/** Why a deployment cannot proceed at all (catalog, template, configuration checks). */
export interface Blocker {
  reason: string;
  message: string;
}

export interface StatusInput {
  md: ModelDeployment;
  now: Date;
  timeoutMs: number;
  blocker?: Blocker;
  deployment?: V1Deployment;
  /** Pods of this deployment (all revisions). */
  pods: V1Pod[];
  /** The model cache's condition (also carried as a condition): an unusable claim blocks the pods. */
  cache?: Omit<Condition, 'lastTransitionTime' | 'observedGeneration'>;
  /** Extra conditions to carry, e.g. cluster prerequisite warnings. */
  extraConditions?: Array<Omit<Condition, 'lastTransitionTime'>>;
}

interface PhaseEvent {
  type: 'Normal' | 'Warning';
  reason: string;
  message: string;
}

export interface StatusOutput {
  status: ModelDeploymentStatus;
  /** Reconcile again after this long (the timeout deadline while deploying). */
  requeueAfterMs?: number;
  /** A Kubernetes Event to record when the phase changed. */
  event?: PhaseEvent;
}

/** ModelCache reasons that keep the pods from being scheduled. */
const CLAIM_BLOCKS = new Set(['ClaimPending', 'ClaimNotFound', 'ClaimLost', 'ClaimTerminating']);

const PULL_ERRORS = new Set(['ErrImagePull', 'ImagePullBackOff', 'InvalidImageName', 'ErrImageNeverPull']);

function statuses(pod: V1Pod): V1ContainerStatus[] {
  return [...(pod.status?.initContainerStatuses ?? []), ...(pod.status?.containerStatuses ?? [])];
}

const TEMPLATE_HASH = 'pod-template-hash';

/** The pods of the most recently created pod's template (all of them where pods carry no hash). */
function ofNewestTemplate(pods: V1Pod[]): V1Pod[] {
  let newest: V1Pod | undefined;
  const created = (p: V1Pod) => new Date(p.metadata?.creationTimestamp ?? 0).getTime();
  for (const p of pods) if (!newest || created(p) > created(newest)) newest = p;
  const hash = newest?.metadata?.labels?.[TEMPLATE_HASH];
  return hash === undefined ? pods : pods.filter((p) => p.metadata?.labels?.[TEMPLATE_HASH] === hash);
}

/**
 * A container that keeps failing: in its back-off now, or run again after two failed runs and not
 * (yet) ready. Between restarts the kubelet shows it running, which must not read as recovered.
 */
function crashLooping(c: V1ContainerStatus): boolean {
  if (c.state?.waiting?.reason === 'CrashLoopBackOff') return true;
  const failedBefore = (c.lastState?.terminated?.exitCode ?? 0) !== 0;
  const doneNow = c.state?.terminated?.exitCode === 0;
  return c.restartCount >= 2 && failedBefore && !c.ready && !doneNow;
}

/** The pods' label selector, as kubectl -l and the scale subresource take it. */
function selectorText(md: ModelDeployment): string {
  return Object.entries(selectorLabels(md))
    .map(([k, v]) => `${k}=${v}`)
    .join(',');
}

function podCondition(pod: V1Pod, type: string) {
  return pod.status?.conditions?.find((c) => c.type === type);
}

/** Sets a condition on the status being computed. */
type SetCondition = (type: string, status: Condition['status'], reason: string, message: string) => void;

/** What the readiness verdict reads: the rollout's pods and how long it has been going. */
interface Rollout {
  md: ModelDeployment;
  prev: NonNullable<ModelDeployment['status']>;
  current: V1Pod[];
  latest: V1Pod[];
  scheduled: V1Pod | undefined;
  waking: boolean;
  newRollout: boolean;
  elapsed: number;
  timeoutMs: number;
  cache: StatusInput['cache'];
  conditions: () => Condition[] | undefined;
}

export function computeStatus(input: StatusInput): StatusOutput {
  const { md, now } = input;
  const prev = md.status ?? {};
  const generation = md.metadata.generation ?? 0;
  const newRollout = prev.observedGeneration !== generation;
  let conditions = prev.conditions;
  const set: SetCondition = (type, status, reason, message) => {
    conditions = setCondition(conditions, { type, status, reason, message, observedGeneration: generation }, now);
  };
  for (const c of input.extraConditions ?? []) set(c.type, c.status, c.reason, c.message);

  const prevReady = findCondition(prev.conditions, 'Ready');
  // Waking from zero: the autoscaler (or the proxy, on a request) raised replicas from 0 and no
  // replica answers yet. The model stays Running (callers are held, not refused); the clock runs.
  const waking =
    md.spec.replicas > 0 &&
    md.spec.autoscaling !== undefined &&
    prev.phase === 'Running' &&
    (prevReady?.reason === 'ScaledToZero' || prevReady?.reason === 'Waking');
  // The 25-minute clock starts with each rollout, and again when a Running server stops answering
  // (scaling alone is no rollout: generation changes, but a waking model keeps its clock).
  const since =
    (newRollout && !(waking && prevReady?.reason === 'Waking')) || !prev.deployingSince || prevReady?.status === 'True'
      ? rfc3339(now)
      : prev.deployingSince;

  let verdict: { phase: ModelDeploymentPhase; requeueAfterMs?: number };
  if (input.blocker) {
    verdict = { phase: 'Failed' };
    set('Ready', 'False', input.blocker.reason, input.blocker.message);
  } else {
    const current = input.pods.filter(
      (p) => !p.metadata?.deletionTimestamp && p.metadata?.annotations?.[MODEL_ANNOTATION] === md.spec.model,
    );
    // Pods of an older template (the chart's image since changed, e.g. by the upgrade that fixed
    // it) are on their way out: their pull errors and crash loops are not the rollout's. The
    // newest pod's ReplicaSet (pod-template-hash) is the current template; images are not
    // compared, since an admission webhook may rewrite them (a registry mirror, a digest pin).
    const latest = ofNewestTemplate(current);
    const scheduled = podConditions(md, current, set);
    verdict = readiness(
      {
        md,
        prev,
        current,
        latest,
        scheduled,
        waking,
        newRollout,
        elapsed: now.getTime() - Date.parse(since),
        timeoutMs: input.timeoutMs,
        cache: input.cache,
        conditions: () => conditions,
      },
      set,
    );
  }
  const { phase, requeueAfterMs } = verdict;

  const status: ModelDeploymentStatus = {
    phase,
    observedGeneration: generation,
    replicas: input.deployment?.status?.replicas ?? 0,
    readyReplicas: input.deployment?.status?.readyReplicas ?? 0,
    selector: selectorText(md),
    deployingSince:
      phase === 'Running' && prev.phase === 'Running' && !newRollout ? (prev.deployingSince ?? since) : since,
    conditions,
  };
  if (phase === 'Running') status.endpoint = modelServerEndpoint(md.spec.serviceName, md.spec.port);
  const event = phase === prev.phase ? undefined : phaseEvent(md, phase, conditions, status.endpoint);
  return requeueAfterMs === undefined
    ? { status, ...(event ? { event } : {}) }
    : { status, requeueAfterMs, ...(event ? { event } : {}) };
}

/** Scheduled and ModelPulled, from the rollout's pods; the pod that is scheduled, if one is. */
function podConditions(md: ModelDeployment, current: V1Pod[], set: SetCondition): V1Pod | undefined {
  const scheduled = current.find((p) => podCondition(p, 'PodScheduled')?.status === 'True');
  const unschedulable = current.find((p) => podCondition(p, 'PodScheduled')?.reason === 'Unschedulable');
  if (scheduled) {
    set(
      'Scheduled',
      'True',
      'Scheduled',
      `model server pod ${scheduled.metadata?.name} runs on node ${scheduled.spec?.nodeName}`,
    );
  } else if (unschedulable) {
    set(
      'Scheduled',
      'False',
      'Unschedulable',
      `waiting for a GPU node: ${podCondition(unschedulable, 'PodScheduled')?.message ?? 'no node fits the pod'}`,
    );
  } else {
    set('Scheduled', 'False', 'Pending', 'waiting for the model server pod to be created');
  }

  // ModelPulled: the pull init container finished, or a server container already runs.
  const pulled = current.find((p) => {
    const pull = p.status?.initContainerStatuses?.find((s) => s.name === PULL_CONTAINER);
    return pull?.state?.terminated?.exitCode === 0 || pull?.ready === true;
  });
  const pullFailed = current
    .map((p) => p.status?.initContainerStatuses?.find((s) => s.name === PULL_CONTAINER))
    .find((s) => (s?.state?.terminated && s.state.terminated.exitCode !== 0) || s?.lastState?.terminated?.exitCode);
  if (pulled) set('ModelPulled', 'True', 'Pulled', `model ${md.spec.model} is on the server's volume`);
  else if (pullFailed) {
    const t = pullFailed.state?.terminated ?? pullFailed.lastState?.terminated;
    set(
      'ModelPulled',
      'False',
      'PullFailed',
      `pulling ${md.spec.model} failed (exit ${t?.exitCode}): ${t?.message ?? t?.reason ?? ''}`.trim(),
    );
  } else if (scheduled) set('ModelPulled', 'False', 'Pulling', `pulling model ${md.spec.model}`);
  else set('ModelPulled', 'False', 'Pending', 'the model is pulled once the pod is scheduled');
  return scheduled;
}

/** The phase and the Ready condition: failed for good, running, or deploying (and when to look again). */
function readiness(r: Rollout, set: SetCondition): { phase: ModelDeploymentPhase; requeueAfterMs?: number } {
  const { md, latest } = r;
  const pullError = latest
    .flatMap(statuses)
    .find((s) => s.state?.waiting?.reason && PULL_ERRORS.has(s.state.waiting.reason));
  const want = md.spec.replicas;
  // One replica of the current model answering is enough to serve: scaling out (or losing one of
  // several replicas) must not take the model out of routing.
  const answering = r.current.filter((p) => podCondition(p, 'Ready')?.status === 'True').length;
  // A container that keeps exiting: the kubelet restarts it with back-off, which never ends by
  // itself. Failed now with its last exit, instead of Deploying until the rollout times out.
  const crashLoop = answering > 0 ? undefined : latest.flatMap(statuses).find(crashLooping);
  const waitingStep = () =>
    [findCondition(r.conditions(), 'Scheduled'), findCondition(r.conditions(), 'ModelPulled')].find(
      (c) => c?.status !== 'True',
    );

  if (pullError) {
    const w = pullError.state?.waiting;
    set(
      'Ready',
      'False',
      'ImagePullFailed',
      `image ${pullError.image} cannot be pulled (${w?.reason}): ${w?.message ?? ''}`.trim(),
    );
    return { phase: 'Failed' };
  }
  // What the engine said as its container exited, when it is a failure it names (the model does
  // not fit, its weights are missing, the GPU is the wrong kind): Failed at the first such exit,
  // since a restart cannot change it, with the cause and the fix.
  const known =
    answering > 0
      ? undefined
      : latest
          .flatMap(statuses)
          .map((s) => recognized(md, s))
          .find(Boolean);
  if (known) {
    set('Ready', 'False', known.reason, known.message);
    return { phase: 'Failed' };
  }
  if (crashLoop) {
    crashLoopCondition(md, crashLoop, set);
    return { phase: 'Failed' };
  }
  if (want === 0) {
    if (md.spec.autoscaling) {
      set(
        'Ready',
        'True',
        'ScaledToZero',
        `hibernated with 0 replicas; the next request for ${md.spec.model} wakes it`,
      );
    } else {
      set('Ready', 'False', 'ScaledToZero', 'spec.replicas is 0: scale it up (kubectl scale) to serve the model');
    }
    return { phase: 'Running' };
  }
  if (answering > 0) {
    set('Ready', 'True', 'ModelAnswering', `model ${md.spec.model} answers on ${answering} of ${want} replica(s)`);
    return { phase: 'Running' };
  }
  if (r.waking && r.elapsed < r.timeoutMs) {
    const step = waitingStep();
    set(
      'Ready',
      'False',
      'Waking',
      `waking from zero: waiting for a replica to answer${step ? ` (${step.type}: ${step.message})` : ''}`,
    );
    return { phase: 'Running', requeueAfterMs: Math.max(1000, r.timeoutMs - r.elapsed) };
  }
  // A timed-out rollout stays failed until the spec changes.
  if (
    r.prev.phase === 'Failed' &&
    findCondition(r.prev.conditions, 'Ready')?.reason === 'DeploymentTimeout' &&
    !r.newRollout
  )
    return { phase: 'Failed' };
  if (r.elapsed >= r.timeoutMs) {
    const waiting = waitingStep();
    set(
      'Ready',
      'False',
      'DeploymentTimeout',
      `not ready ${Math.round(r.timeoutMs / 60000)} minutes after the rollout began` +
        (waiting ? `; ${waiting.type}: ${waiting.message}` : ''),
    );
    return { phase: 'Failed' };
  }
  deployingCondition(r, waitingStep(), set);
  return { phase: 'Deploying', requeueAfterMs: Math.max(1000, r.timeoutMs - r.elapsed) };
}

/** The engine's failure in a container's last exit (its termination message or log tail), if it names one. */
function recognized(md: ModelDeployment, c: V1ContainerStatus): { reason: string; message: string } | undefined {
  const t = c.state?.terminated ?? c.lastState?.terminated;
  if (!t?.message || t.exitCode === 0) return undefined;
  const engine = engineFor(md.spec);
  // The server's: the fetch's failures already say their cause and fix (ModelPulled, PullFailed).
  if (c.name !== engine.container) return undefined;
  const hit = engineFailure(engine, md.spec.model, t.message);
  if (!hit) return undefined;
  // The engine's own line, so the message shows what was seen; bounded, one line.
  const line = t.message.split('\n').find((l) => engine.failures.some((f) => f.text.test(l)));
  const said = line ? `; ${engine.name} said: ${line.trim().slice(0, 240)}` : '';
  return { reason: hit.reason, message: `${hit.message} (container ${c.name}, exit ${t.exitCode}${said})` };
}

/** A container of the newest template that keeps exiting: the pull's or the server's. */
function crashLoopCondition(md: ModelDeployment, crashLoop: ReturnType<typeof statuses>[number], set: SetCondition) {
  const t = crashLoop.lastState?.terminated;
  const exit = `exit ${t?.exitCode ?? '?'}${t?.reason ? `, ${t.reason}` : ''}`;
  if (crashLoop.name === PULL_CONTAINER) {
    set(
      'Ready',
      'False',
      'PullFailed',
      `pulling ${md.spec.model} fails (${exit}) and is retried with back-off (${crashLoop.restartCount} restarts): ${t?.message ?? ''}`.trim(),
    );
    return;
  }
  set(
    'Ready',
    'False',
    'CrashLoopBackOff',
    `the model server container ${crashLoop.name} keeps exiting (${exit}; ${crashLoop.restartCount} restarts): kubectl logs -n ${LLMS_NAMESPACE} -l ${selectorText(md)} -c ${crashLoop.name} --previous`,
  );
}

/** Still deploying: what it waits for (the model silent, the cache's claim, a node, the pull). */
function deployingCondition(r: Rollout, step: Condition | undefined, set: SetCondition): void {
  // The server process runs but its readiness probe (one generated token) fails: the model is
  // missing, cannot load, or the server hangs. Seen after a rollout too, when a Running server stops answering.
  const silent = r.current.find((p) =>
    p.status?.containerStatuses?.some((c) => c.name === engineFor(r.md.spec).container && c.state?.running && !c.ready),
  );
  // A pod that cannot be scheduled because its model cache claim is not usable: the claim is
  // the reason, not "a GPU node" (the scheduler only says "unbound PersistentVolumeClaims").
  const cache = r.cache;
  if (!step && silent) {
    set(
      'Ready',
      'False',
      'ModelNotAnswering',
      `the model server ${silent.metadata?.name} runs but ${r.md.spec.model} does not answer its readiness probe (generating one token)`,
    );
  } else if (!r.scheduled && cache?.status === 'False' && CLAIM_BLOCKS.has(cache.reason)) {
    set('Ready', 'False', cache.reason, cache.message);
  } else {
    set(
      'Ready',
      'False',
      step?.reason === 'Unschedulable' ? 'Unschedulable' : 'Deploying',
      step?.message ?? 'waiting for the model to answer',
    );
  }
}

/** The Event of a phase change. */
function phaseEvent(
  md: ModelDeployment,
  phase: ModelDeploymentPhase,
  conditions: Condition[] | undefined,
  endpoint: string | undefined,
): PhaseEvent {
  const ready = findCondition(conditions, 'Ready');
  if (phase === 'Failed')
    return { type: 'Warning', reason: ready?.reason ?? 'Failed', message: ready?.message ?? 'deployment failed' };
  if (phase === 'Running')
    return { type: 'Normal', reason: 'Running', message: `model ${md.spec.model} is serving at ${endpoint}` };
  return { type: 'Normal', reason: 'Deploying', message: `deploying model ${md.spec.model}` };
}
