import type { V1Deployment, V1Pod } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import type { ModelDeployment } from '../../crds/model-deployment.js';
import { computeStatus } from './model-deployment-status.js';
import { MODEL_ANNOTATION } from './model-server.js';

function md(model = 'llama3.1:8b', generation = 1, status?: ModelDeployment['status']): ModelDeployment {
  return {
    apiVersion: 'ai.platform/v1beta1',
    kind: 'ModelDeployment',
    metadata: { name: 'llama', namespace: 'platform-llms', uid: 'uid-1', generation },
    spec: { model, serviceName: 'llama-svc', port: 8080, replicas: 1 },
    ...(status ? { status } : {}),
  };
}

describe('computeStatus', () => {
  const t0 = new Date('2026-11-21T10:00:00Z');
  const minutes = (n: number) => new Date(t0.getTime() + n * 60_000);
  const timeoutMs = 25 * 60_000;

  function pod(opts: {
    scheduled?: boolean;
    unschedulable?: boolean;
    pulled?: boolean;
    ready?: boolean;
    pullError?: boolean;
    /** The server container runs but its readiness probe fails. */
    silent?: boolean;
    model?: string;
  }): V1Pod {
    const conditions = [];
    if (opts.scheduled) conditions.push({ type: 'PodScheduled', status: 'True' });
    if (opts.unschedulable)
      conditions.push({
        type: 'PodScheduled',
        status: 'False',
        reason: 'Unschedulable',
        message: '0/3 nodes are available: 3 Insufficient nvidia.com/gpu.',
      });
    if (opts.ready) conditions.push({ type: 'Ready', status: 'True' });
    return {
      metadata: { name: 'llama-abc', annotations: { [MODEL_ANNOTATION]: opts.model ?? 'llama3.1:8b' } },
      spec: { nodeName: opts.scheduled ? 'gpu-l4-1' : undefined, containers: [] },
      status: {
        conditions,
        initContainerStatuses: opts.pulled
          ? [
              {
                name: 'pull-model',
                ready: true,
                restartCount: 0,
                image: 'i',
                imageID: '',
                state: { terminated: { exitCode: 0 } },
              },
            ]
          : [],
        containerStatuses: opts.pullError
          ? [
              {
                name: 'ollama',
                ready: false,
                restartCount: 0,
                image: 'ollama/ollama:nope',
                imageID: '',
                state: { waiting: { reason: 'ErrImagePull', message: 'not found' } },
              },
            ]
          : opts.silent
            ? [{ name: 'ollama', ready: false, restartCount: 0, image: 'i', imageID: '', state: { running: {} } }]
            : [],
      },
    } as V1Pod;
  }
  const readyDeployment: V1Deployment = {
    metadata: { generation: 1 },
    status: { observedGeneration: 1, replicas: 1, updatedReplicas: 1, readyReplicas: 1, availableReplicas: 1 },
  };

  it('starts Deploying with the clock running and asks to be woken at the deadline', () => {
    const out = computeStatus({ md: md(), now: t0, timeoutMs, pods: [] });
    expect(out.status.phase).toBe('Deploying');
    expect(out.status.deployingSince).toBe('2026-11-21T10:00:00Z');
    expect(out.requeueAfterMs).toBe(timeoutMs);
    expect(out.event).toEqual({ type: 'Normal', reason: 'Deploying', message: 'deploying model llama3.1:8b' });
    expect(out.status.conditions?.map((c) => [c.type, c.status, c.reason])).toEqual([
      ['Scheduled', 'False', 'Pending'],
      ['ModelPulled', 'False', 'Pending'],
      ['Ready', 'False', 'Deploying'],
    ]);
  });

  it("reports an unschedulable pod with the scheduler's reason", () => {
    const first = computeStatus({ md: md(), now: t0, timeoutMs, pods: [] });
    const out = computeStatus({
      md: md('llama3.1:8b', 1, first.status),
      now: minutes(2),
      timeoutMs,
      pods: [pod({ unschedulable: true })],
    });
    expect(out.status.phase).toBe('Deploying');
    const ready = out.status.conditions?.find((c) => c.type === 'Ready');
    expect(ready?.reason).toBe('Unschedulable');
    expect(ready?.message).toContain('Insufficient nvidia.com/gpu');
    expect(out.requeueAfterMs).toBe(23 * 60_000);
    expect(out.event).toBeUndefined();
  });

  it('goes Running with the endpoint once the rollout is ready, and is then stable', () => {
    const first = computeStatus({ md: md(), now: t0, timeoutMs, pods: [] });
    const pods = [pod({ scheduled: true, pulled: true, ready: true })];
    const running = computeStatus({
      md: md('llama3.1:8b', 1, first.status),
      now: minutes(3),
      timeoutMs,
      pods,
      deployment: readyDeployment,
    });
    expect(running.status.phase).toBe('Running');
    expect(running.status.endpoint).toBe('http://llama-svc.platform-llms.svc.cluster.local:8080');
    expect(running.event?.reason).toBe('Running');
    expect(running.requeueAfterMs).toBeUndefined();
    const again = computeStatus({
      md: md('llama3.1:8b', 1, running.status),
      now: minutes(9),
      timeoutMs,
      pods,
      deployment: readyDeployment,
    });
    expect(again.status).toEqual(running.status);
    expect(again.event).toBeUndefined();
  });

  it('says when a running server does not answer its readiness probe, also after it was Running', () => {
    const first = computeStatus({ md: md(), now: t0, timeoutMs, pods: [] });
    const silent = computeStatus({
      md: md('llama3.1:8b', 1, first.status),
      now: minutes(3),
      timeoutMs,
      pods: [pod({ scheduled: true, pulled: true, silent: true })],
    });
    expect(silent.status.phase).toBe('Deploying');
    const ready = silent.status.conditions?.find((c) => c.type === 'Ready');
    expect(ready?.reason).toBe('ModelNotAnswering');
    expect(ready?.message).toContain('llama3.1:8b does not answer its readiness probe');

    const running = computeStatus({
      md: md('llama3.1:8b', 1, first.status),
      now: minutes(4),
      timeoutMs,
      pods: [pod({ scheduled: true, pulled: true, ready: true })],
      deployment: readyDeployment,
    });
    const lost = computeStatus({
      md: md('llama3.1:8b', 1, running.status),
      now: minutes(30),
      timeoutMs,
      pods: [pod({ scheduled: true, pulled: true, silent: true })],
      deployment: { ...readyDeployment, status: { ...readyDeployment.status, readyReplicas: 0 } },
    });
    expect(lost.status.phase).toBe('Deploying');
    expect(lost.status.conditions?.find((c) => c.type === 'Ready')?.reason).toBe('ModelNotAnswering');
    expect(lost.status.endpoint).toBeUndefined();
  });

  it('names the model cache claim, not a GPU node, when the claim keeps the pod from scheduling', () => {
    const pending = {
      type: 'ModelCache',
      status: 'False' as const,
      reason: 'ClaimPending',
      message: 'PersistentVolumeClaim llama-models is not bound: no volume of class efs-sc',
    };
    const out = computeStatus({ md: md(), now: t0, timeoutMs, pods: [pod({ unschedulable: true })], cache: pending });
    expect(out.status.phase).toBe('Deploying');
    expect(out.status.conditions?.find((c) => c.type === 'Ready')).toMatchObject({
      reason: 'ClaimPending',
      message: pending.message,
    });
    // A bound claim leaves the scheduler's reason.
    const bound = computeStatus({
      md: md(),
      now: t0,
      timeoutMs,
      pods: [pod({ unschedulable: true })],
      cache: { ...pending, status: 'True', reason: 'Bound' },
    });
    expect(bound.status.conditions?.find((c) => c.type === 'Ready')?.reason).toBe('Unschedulable');
  });

  it('fails on an image that cannot be pulled', () => {
    const out = computeStatus({ md: md(), now: t0, timeoutMs, pods: [pod({ scheduled: true, pullError: true })] });
    expect(out.status.phase).toBe('Failed');
    const ready = out.status.conditions?.find((c) => c.type === 'Ready');
    expect(ready?.reason).toBe('ImagePullFailed');
    expect(ready?.message).toBe('image ollama/ollama:nope cannot be pulled (ErrImagePull): not found');
    expect(out.event?.type).toBe('Warning');
  });

  it.each([
    [
      'ollama',
      'CrashLoopBackOff',
      /keeps exiting \(exit 137, OOMKilled; 4 restarts\): kubectl logs -n platform-llms -l ai\.platform\/model-deployment=llama -c ollama --previous/,
    ],
    [
      'pull-model',
      'PullFailed',
      /pulling llama3\.1:8b fails \(exit 1\) and is retried with back-off \(4 restarts\): model missing/,
    ],
  ] as const)('fails at once on a crash loop of %s, while no replica answers', (container, reason, message) => {
    const looping = pod({ scheduled: true });
    const status = {
      name: container,
      ready: false,
      restartCount: 4,
      image: 'i',
      imageID: '',
      state: { waiting: { reason: 'CrashLoopBackOff', message: 'back-off 40s restarting failed container' } },
      lastState: {
        terminated:
          container === 'ollama' ? { exitCode: 137, reason: 'OOMKilled' } : { exitCode: 1, message: 'model missing' },
      },
    };
    if (looping.status) {
      if (container === 'ollama') looping.status.containerStatuses = [status];
      else looping.status.initContainerStatuses = [status];
    }
    const out = computeStatus({ md: md(), now: t0, timeoutMs, pods: [looping] });
    expect(out.status.phase).toBe('Failed');
    const ready = out.status.conditions?.find((c) => c.type === 'Ready');
    expect(ready?.reason).toBe(reason);
    expect(ready?.message).toMatch(message);
    // A second replica that answers keeps the model Running: one crashing replica is not an outage.
    const serving = computeStatus({
      md: md('llama3.1:8b', 2),
      now: t0,
      timeoutMs,
      pods: [looping, pod({ scheduled: true, pulled: true, ready: true })],
    });
    expect(serving.status.phase).toBe('Running');
  });

  it('stays Failed while a crash-looping server runs again between restarts; one restart is not a loop', () => {
    const between = (restartCount: number) => {
      const p = pod({ scheduled: true });
      if (p.status) {
        p.status.containerStatuses = [
          {
            name: 'ollama',
            ready: false,
            restartCount,
            image: 'i',
            imageID: '',
            state: { running: { startedAt: t0 } },
            lastState: { terminated: { exitCode: 137, reason: 'OOMKilled' } },
          },
        ];
      }
      return computeStatus({ md: md(), now: t0, timeoutMs, pods: [p] }).status;
    };
    expect(between(3).phase).toBe('Failed');
    expect(between(3).conditions?.find((c) => c.type === 'Ready')?.reason).toBe('CrashLoopBackOff');
    // A container killed once (a node event, an OOM under a burst) restarts as Deploying.
    expect(between(1).phase).toBe('Deploying');
  });

  it('leaves out the pull errors of an older template: the upgrade that fixed the image is Deploying', () => {
    const old = pod({ scheduled: true, pullError: true });
    old.metadata = { ...old.metadata, labels: { 'pod-template-hash': 'a' }, creationTimestamp: t0 };
    const fresh = pod({ scheduled: true });
    fresh.metadata = {
      ...fresh.metadata,
      name: 'llama-new',
      labels: { 'pod-template-hash': 'b' },
      creationTimestamp: minutes(1),
    };
    const fixed = computeStatus({ md: md(), now: minutes(1), timeoutMs, pods: [old, fresh] });
    expect(fixed.status.phase).toBe('Deploying');
    // Only the old template's pods: theirs is the rollout's error.
    expect(computeStatus({ md: md(), now: t0, timeoutMs, pods: [old] }).status.phase).toBe('Failed');
  });

  it('fails after 25 minutes without becoming ready, and stays failed until the spec changes', () => {
    const first = computeStatus({ md: md(), now: t0, timeoutMs, pods: [] });
    const late = computeStatus({
      md: md('llama3.1:8b', 1, first.status),
      now: minutes(25),
      timeoutMs,
      pods: [pod({ scheduled: true })],
    });
    expect(late.status.phase).toBe('Failed');
    const ready = late.status.conditions?.find((c) => c.type === 'Ready');
    expect(ready?.reason).toBe('DeploymentTimeout');
    expect(ready?.message).toBe('not ready 25 minutes after the rollout began; ModelPulled: pulling model llama3.1:8b');
    const still = computeStatus({
      md: md('llama3.1:8b', 1, late.status),
      now: minutes(26),
      timeoutMs,
      pods: [pod({ scheduled: true })],
    });
    expect(still.status.phase).toBe('Failed');
    const edited = computeStatus({ md: md('qwen2.5:7b', 2, late.status), now: minutes(27), timeoutMs, pods: [] });
    expect(edited.status.phase).toBe('Deploying');
    expect(edited.status.deployingSince).toBe('2026-11-21T10:27:00Z');
  });

  it("fails with the blocker's reason when validation fails", () => {
    const out = computeStatus({
      md: md(),
      now: t0,
      timeoutMs,
      pods: [],
      blocker: { reason: 'ModelNotAvailable', message: 'nope' },
    });
    expect(out.status.phase).toBe('Failed');
    expect(out.status.conditions?.find((c) => c.type === 'Ready')).toMatchObject({
      status: 'False',
      reason: 'ModelNotAvailable',
      message: 'nope',
    });
    expect(out.status.endpoint).toBeUndefined();
  });

  describe('scaling', () => {
    const autoscaling = {
      minReplicas: 0,
      maxReplicas: 3,
      scaleDownDelaySeconds: 60,
      whileWaking: 'Wait' as const,
    };
    const scaled = (replicas: number, generation: number, status?: ModelDeployment['status'], auto = true) => {
      const m = md('llama3.1:8b', generation, status);
      return { ...m, spec: { ...m.spec, replicas, ...(auto ? { autoscaling } : {}) } };
    };
    const readyDeployment = (replicas: number, ready: number): V1Deployment => ({
      metadata: { generation: 1 },
      status: { observedGeneration: 1, replicas, updatedReplicas: replicas, readyReplicas: ready },
    });
    const running = () =>
      computeStatus({
        md: scaled(1, 1),
        now: t0,
        timeoutMs,
        pods: [pod({ scheduled: true, pulled: true, ready: true })],
        deployment: readyDeployment(1, 1),
      }).status;

    it('stays Running while it scales out, with ready and existing replicas for the scale subresource', () => {
      const out = computeStatus({
        md: scaled(3, 2, running()),
        now: minutes(1),
        timeoutMs,
        pods: [pod({ scheduled: true, pulled: true, ready: true }), pod({ scheduled: true }), pod({})],
        deployment: readyDeployment(3, 1),
      });
      expect(out.status).toMatchObject({
        phase: 'Running',
        replicas: 3,
        readyReplicas: 1,
        selector: 'ai.platform/model-deployment=llama',
      });
      expect(out.status.conditions?.find((c) => c.type === 'Ready')?.message).toBe(
        'model llama3.1:8b answers on 1 of 3 replica(s)',
      );
      expect(out.event).toBeUndefined();
    });

    it('is Running with 0 replicas when hibernated, then Waking, then answering again', () => {
      const asleep = computeStatus({ md: scaled(0, 2, running()), now: minutes(10), timeoutMs, pods: [] });
      expect(asleep.status).toMatchObject({ phase: 'Running', replicas: 0, readyReplicas: 0 });
      expect(asleep.status.endpoint).toBe('http://llama-svc.platform-llms.svc.cluster.local:8080');
      expect(asleep.status.conditions?.find((c) => c.type === 'Ready')).toMatchObject({
        status: 'True',
        reason: 'ScaledToZero',
      });
      const waking = computeStatus({
        md: scaled(1, 3, asleep.status),
        now: minutes(20),
        timeoutMs,
        pods: [pod({ scheduled: true })],
        deployment: readyDeployment(1, 0),
      });
      expect(waking.status.phase).toBe('Running');
      expect(waking.status.deployingSince).toBe('2026-11-21T10:20:00Z');
      expect(waking.status.conditions?.find((c) => c.type === 'Ready')).toMatchObject({
        status: 'False',
        reason: 'Waking',
        message: 'waking from zero: waiting for a replica to answer (ModelPulled: pulling model llama3.1:8b)',
      });
      expect(waking.requeueAfterMs).toBe(timeoutMs);
      // A second scale change while waking keeps the clock.
      const still = computeStatus({
        md: scaled(2, 4, waking.status),
        now: minutes(21),
        timeoutMs,
        pods: [pod({ scheduled: true })],
        deployment: readyDeployment(2, 0),
      });
      expect(still.status.deployingSince).toBe('2026-11-21T10:20:00Z');
      const awake = computeStatus({
        md: scaled(2, 4, still.status),
        now: minutes(22),
        timeoutMs,
        pods: [pod({ scheduled: true, pulled: true, ready: true })],
        deployment: readyDeployment(2, 1),
      });
      expect(awake.status.phase).toBe('Running');
      expect(awake.status.conditions?.find((c) => c.type === 'Ready')?.reason).toBe('ModelAnswering');
      expect(awake.event).toBeUndefined();
    });

    it('fails a wake that does not answer within the deployment timeout', () => {
      const asleep = computeStatus({ md: scaled(0, 2, running()), now: minutes(10), timeoutMs, pods: [] });
      const waking = computeStatus({ md: scaled(1, 3, asleep.status), now: minutes(11), timeoutMs, pods: [] });
      const late = computeStatus({
        md: scaled(1, 3, waking.status),
        now: minutes(36),
        timeoutMs,
        pods: [pod({ unschedulable: true })],
      });
      expect(late.status.phase).toBe('Failed');
      expect(late.status.conditions?.find((c) => c.type === 'Ready')?.reason).toBe('DeploymentTimeout');
    });

    it('scaled to zero by hand: Running but not Ready, saying how to serve again', () => {
      const out = computeStatus({ md: scaled(0, 2, running(), false), now: minutes(1), timeoutMs, pods: [] });
      expect(out.status.phase).toBe('Running');
      expect(out.status.conditions?.find((c) => c.type === 'Ready')).toMatchObject({
        status: 'False',
        reason: 'ScaledToZero',
        message: 'spec.replicas is 0: scale it up (kubectl scale) to serve the model',
      });
    });
  });

  it('ignores pods of the previous model during a rollout', () => {
    const first = computeStatus({
      md: md('llama3.1:8b'),
      now: t0,
      timeoutMs,
      pods: [pod({ scheduled: true, pulled: true, ready: true })],
      deployment: readyDeployment,
    });
    expect(first.status.phase).toBe('Running');
    const rolling = computeStatus({
      md: md('qwen2.5:7b', 2, first.status),
      now: minutes(1),
      timeoutMs,
      pods: [pod({ scheduled: true, pulled: true, ready: true })],
      deployment: {
        metadata: { generation: 2 },
        status: { observedGeneration: 2, updatedReplicas: 0, readyReplicas: 1 },
      },
    });
    expect(rolling.status.phase).toBe('Deploying');
    expect(rolling.status.endpoint).toBeUndefined();
  });
});

describe('computeStatus of a vLLM deployment', () => {
  const t0 = new Date('2026-11-21T10:00:00Z');
  const vllmMd = (): ModelDeployment => ({
    apiVersion: 'ai.platform/v1beta1',
    kind: 'ModelDeployment',
    metadata: { name: 'llama', namespace: 'platform-llms', uid: 'uid-1', generation: 1 },
    spec: { engine: 'VLLM', model: 'meta-llama/Llama-3.1-8B-Instruct', serviceName: 's', port: 8000, replicas: 1 },
  });
  const exited = (message: string): V1Pod =>
    ({
      metadata: { name: 'llama-abc', annotations: { [MODEL_ANNOTATION]: 'meta-llama/Llama-3.1-8B-Instruct' } },
      spec: { nodeName: 'gpu-t4-1', containers: [] },
      status: {
        conditions: [{ type: 'PodScheduled', status: 'True' }],
        initContainerStatuses: [
          {
            name: 'pull-model',
            ready: true,
            restartCount: 0,
            image: 'i',
            imageID: '',
            state: { terminated: { exitCode: 0 } },
          },
        ],
        containerStatuses: [
          {
            name: 'vllm',
            ready: false,
            restartCount: 1,
            image: 'i',
            imageID: '',
            state: { running: {} },
            lastState: { terminated: { exitCode: 1, reason: 'Error', message } },
          },
        ],
      },
    }) as V1Pod;

  it('fails at the first exit the engine explains (the GPU is the wrong kind), with the cause and the fix', () => {
    const words =
      'INFO loading\nValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your Tesla T4 GPU has compute capability 7.5.\n';
    const out = computeStatus({ md: vllmMd(), now: t0, timeoutMs: 25 * 60_000, pods: [exited(words)] });
    expect(out.status.phase).toBe('Failed');
    const ready = out.status.conditions?.find((c) => c.type === 'Ready');
    expect(ready?.reason).toBe('GPUUnsupported');
    expect(ready?.message).toMatch(/needs compute capability 8\.0\+.*choose a node template/);
    expect(ready?.message).toContain('VLLM said: ValueError: Bfloat16 is only supported');
  });

  it('keeps deploying through an exit it cannot explain (the kubelet restarts it)', () => {
    const out = computeStatus({ md: vllmMd(), now: t0, timeoutMs: 25 * 60_000, pods: [exited('Killed\n')] });
    expect(out.status.phase).toBe('Deploying');
  });
});
