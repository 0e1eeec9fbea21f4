import type { V1Deployment, V1Pod } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import type { AutoscalerPolicy } from '../crds/autoscaler-policy.js';
import { type ClusterInfo, loadCatalog, resolveModel } from '../crds/catalog/catalog.js';
import type { ModelDeployment } from '../crds/model-deployment.js';
import type { NodeConfiguration } from '../crds/node-configuration.js';
import type { NodeTemplate } from '../crds/node-template.js';
import { planUnschedulablePods } from './autoscaler-policy.js';
import { containsDesired } from './model-deployment-controller.js';
import { computeStatus } from './model-deployment-status.js';
import { desiredModelServer, MODEL_ANNOTATION, MODEL_ANSWERS_SCRIPTS, serverSettings } from './model-server.js';
import {
  checkNodeConfiguration,
  checkTemplateGpus,
  desiredLlmNodeTemplate,
  GKE_NVIDIA_IMAGE,
} from './node-template.js';

const catalog = loadCatalog();
const cluster: ClusterInfo = { organizationId: 'o', clusterId: 'c', cloud: 'aws', region: 'us-east-1' };

function md(model = 'llama3.1:8b', generation = 1, status?: ModelDeployment['status']): ModelDeployment {
  return {
    apiVersion: 'ai.platform/v1beta1',
    kind: 'ModelDeployment',
    metadata: { name: 'llama', namespace: 'platform-llms', uid: 'uid-1', generation },
    spec: { model, serviceName: 'llama-svc', port: 8080, replicas: 1 },
    ...(status ? { status } : {}),
  };
}

function server(model = 'llama3.1:8b') {
  const r = resolveModel(catalog, cluster, model);
  if (!r.ok) throw new Error(r.message);
  return desiredModelServer(md(model), r.model, catalog, {
    image: 'ollama/ollama:test',
    template: 'llms-by-platform',
    gpuTypes: r.gpuTypes,
  });
}

describe('desiredModelServer', () => {
  it('builds an owned Deployment that requests the GPUs, tolerates the template taint and pulls first', () => {
    const { deployment } = server();
    expect(deployment.metadata?.namespace).toBe('platform-llms');
    expect(deployment.metadata?.ownerReferences).toEqual([
      {
        apiVersion: 'ai.platform/v1beta1',
        kind: 'ModelDeployment',
        name: 'llama',
        uid: 'uid-1',
        controller: true,
        blockOwnerDeletion: true,
      },
    ]);
    const pod = deployment.spec?.template.spec;
    expect(pod?.tolerations).toContainEqual({ key: 'scheduling.platform/node-template', operator: 'Exists' });
    expect(pod?.containers[0]?.resources?.limits?.['nvidia.com/gpu']).toBe('1');
    expect(pod?.containers[0]?.image).toBe('ollama/ollama:test');
    expect(pod?.initContainers?.[0]?.command?.join(' ')).toContain('ollama pull "$MODEL"');
    // Readiness generates a token: the model answers, not only its manifest exists (run for real in e2e/no-cluster/ollama.e2e.test.ts).
    expect(pod?.containers[0]?.readinessProbe?.exec?.command).toEqual(['/bin/bash', '-c', MODEL_ANSWERS_SCRIPTS.chat]);
    expect(pod?.containers[0]?.startupProbe?.exec?.command).toEqual(['/bin/bash', '-c', MODEL_ANSWERS_SCRIPTS.chat]);
    expect(MODEL_ANSWERS_SCRIPTS.chat).toContain('POST /api/generate');
    const env = Object.fromEntries((pod?.containers[0]?.env ?? []).map((e) => [e.name, e.value]));
    // The catalog's serving defaults for llama3.1:8b.
    expect(env).toMatchObject({ OLLAMA_NUM_PARALLEL: '4', OLLAMA_MAX_QUEUE: '512', OLLAMA_CONTEXT_LENGTH: '8192' });
    expect(deployment.spec?.template.metadata?.annotations?.[MODEL_ANNOTATION]).toBe('llama3.1:8b');
  });

  it('probes an embedding model by embedding, since Ollama refuses to generate with it', () => {
    const r = resolveModel(catalog, cluster, 'nomic-embed-text');
    if (!r.ok) throw new Error(r.message);
    const pod = desiredModelServer(md('nomic-embed-text'), r.model, catalog, {
      image: 'ollama',
      template: 't',
      gpuTypes: ['L4'],
    }).deployment.spec?.template.spec;
    const probe = pod?.containers[0]?.readinessProbe?.exec?.command?.[2];
    expect(probe).toBe(MODEL_ANSWERS_SCRIPTS.embedding);
    expect(probe).toContain('POST /api/embed');
    expect(probe).not.toContain('/api/generate');
  });

  it.each([
    ['catalog defaults', 'llama3.1:8b', undefined, { numParallel: 4, maxQueue: 512, contextLength: 8192, cpu: '2' }],
    ['70b: fewer slots', 'llama3.1:70b', undefined, { numParallel: 2, maxQueue: 256, contextLength: 8192, cpu: '2' }],
    [
      'spec overrides one field',
      'llama3.1:8b',
      { numParallel: 1 },
      { numParallel: 1, maxQueue: 512, contextLength: 8192, cpu: '2' },
    ],
    [
      'spec overrides all',
      'qwen2.5:0.5b',
      { numParallel: 8, maxQueue: 16, contextLength: 32768, cpu: '500m' },
      { numParallel: 8, maxQueue: 16, contextLength: 32768, cpu: '500m' },
    ],
  ] as const)('server settings: %s', (_, model, own, want) => {
    const r = resolveModel(catalog, cluster, model);
    if (!r.ok) throw new Error(r.message);
    const d = md(model);
    if (own) d.spec.server = { ...own };
    expect(serverSettings(d, r.model)).toEqual(want);
    // The server container requests that CPU (spec.server.cpu fits a small model onto a shared node).
    const pod = desiredModelServer(d, r.model, catalog, { image: 'ollama', template: 't', gpuTypes: ['L4'] }).deployment
      .spec?.template.spec;
    expect(pod?.containers[0]?.resources?.requests?.cpu).toBe(want.cpu);
    // The pull asks no more than the server: a pod is scheduled on the larger of the two.
    expect(pod?.initContainers?.[0]?.resources?.requests?.cpu).toBe(own && 'cpu' in own ? own.cpu : '500m');
  });

  it('passes Pod Security restricted: non-root, no escalation, no capabilities, seccomp, read-only image', () => {
    const pod = server().deployment.spec?.template.spec;
    expect(pod?.securityContext).toEqual({
      runAsNonRoot: true,
      runAsUser: 10001,
      runAsGroup: 10001,
      fsGroup: 10001,
      seccompProfile: { type: 'RuntimeDefault' },
    });
    for (const c of [...(pod?.initContainers ?? []), ...(pod?.containers ?? [])]) {
      expect(c.securityContext, c.name).toEqual({
        allowPrivilegeEscalation: false,
        readOnlyRootFilesystem: true,
        runAsNonRoot: true,
        capabilities: { drop: ['ALL'] },
      });
      // Everything Ollama writes goes to volumes: the models, HOME (its key) and /tmp.
      expect(c.volumeMounts?.map((m) => m.mountPath).sort(), c.name).toEqual(['/home/ollama', '/models', '/tmp']);
    }
    expect(pod?.volumes?.every((v) => v.emptyDir !== undefined)).toBe(true);
    expect(pod?.automountServiceAccountToken).toBe(false);
  });

  it('pins nodes to the template, amd64 with any fitting GPU, arm64 only with compute capability 8.0+', () => {
    const terms =
      server().deployment.spec?.template.spec?.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution
        ?.nodeSelectorTerms;
    expect(terms).toEqual([
      {
        matchExpressions: [
          { key: 'scheduling.platform/node-template', operator: 'In', values: ['llms-by-platform'] },
          { key: 'kubernetes.io/arch', operator: 'In', values: ['amd64'] },
          {
            key: 'scheduling.platform/gpu-model',
            operator: 'In',
            values: ['A100', 'A10G', 'B200', 'H100', 'H200', 'L4', 'L40S', 'T4'],
          },
        ],
      },
      {
        matchExpressions: [
          { key: 'scheduling.platform/node-template', operator: 'In', values: ['llms-by-platform'] },
          { key: 'kubernetes.io/arch', operator: 'In', values: ['arm64'] },
          { key: 'scheduling.platform/gpu-model', operator: 'In', values: ['GH200'] },
        ],
      },
    ]);
  });

  it('exposes spec.port on the Service named serviceName', () => {
    const { service } = server();
    expect(service.metadata?.name).toBe('llama-svc');
    expect(service.spec?.ports).toEqual([{ name: 'http', port: 8080, targetPort: 'http', protocol: 'TCP' }]);
    expect(service.spec?.selector).toEqual({ 'ai.platform/model-deployment': 'llama' });
  });

  it('changes the pod template when the model changes, which rolls the Deployment', () => {
    const a = server('llama3.1:8b').deployment.spec?.template;
    const b = server('qwen2.5:7b').deployment.spec?.template;
    expect(a).not.toEqual(b);
    expect(server('llama3.1:8b').deployment).toEqual(server('llama3.1:8b').deployment);
  });
});

describe('node templates and configurations', () => {
  const config = (image?: string, imageFamily?: NodeConfiguration['spec']['imageFamily']): NodeConfiguration => ({
    apiVersion: 'ai.platform/v1beta1',
    kind: 'NodeConfiguration',
    metadata: { name: 'cfg' },
    spec: { diskSizeGiB: 100, ...(image ? { image } : {}), ...(imageFamily ? { imageFamily } : {}) },
  });

  it('accepts GKE NVIDIA image names and rejects other custom images on GKE', () => {
    for (const ok of [
      'gke-1309-gke1046000-cos-113-18244-85-49-c-cgpv1-nvda',
      'gke-12810-gke2300-cos-109-17800-218-20-c-nvda',
    ]) {
      expect(GKE_NVIDIA_IMAGE.test(ok), ok).toBe(true);
      expect(checkNodeConfiguration(config(ok), 'gcp')).toEqual({ ok: true });
    }
    const bad = checkNodeConfiguration(config('ubuntu-2204-gpu-custom'), 'gcp');
    expect(bad.ok === false && bad.reason).toBe('InvalidNodeConfiguration');
    expect(bad.ok === false && bad.message).toMatch(
      /^finding GPU attached instance image for ubuntu-2204-gpu-custom: /,
    );
    expect(checkNodeConfiguration(config('ami-0abcdef'), 'aws')).toEqual({ ok: true });
    expect(checkNodeConfiguration(config(undefined, 'ubuntu'), 'gcp').ok).toBe(false);
  });

  it("rejects a template whose GPU models fit none of the model's", () => {
    const t = desiredLlmNodeTemplate(['T4'], ['amd64']);
    t.metadata.name = 'small-gpus';
    const r = checkTemplateGpus(t, ['A100', 'H100']);
    expect(r.ok === false && r.reason).toBe('NoMatchingGPU');
    expect(checkTemplateGpus(t, ['T4', 'L4'])).toEqual({ ok: true });
  });

  it('gives llms-by-platform the taint and label model servers use', () => {
    const t = desiredLlmNodeTemplate(['L4'], ['amd64']);
    expect(t.spec.taints).toEqual([
      { key: 'scheduling.platform/node-template', value: 'llms-by-platform', effect: 'NoSchedule' },
    ]);
    expect(t.spec.labels).toEqual({ 'scheduling.platform/node-template': 'llms-by-platform' });
    expect(t.spec.enabled).toBe(true);
  });
});

describe('planUnschedulablePods', () => {
  const template = (name: string, enabled: boolean): NodeTemplate => ({
    apiVersion: 'ai.platform/v1beta1',
    kind: 'NodeTemplate',
    metadata: { name },
    spec: { enabled },
  });
  const policy = (enabled: boolean): AutoscalerPolicy => ({
    apiVersion: 'ai.platform/v1beta1',
    kind: 'AutoscalerPolicy',
    metadata: { name: 'cluster' },
    spec: { optimizationMode: 'Automated', unschedulablePods: { enabled } },
  });
  const templates = [template('default', true), template('llms-by-platform', false), template('batch', false)];

  it('switches the policy on with only the LLM template enabled', () => {
    expect(planUnschedulablePods(policy(false), templates, 'llms-by-platform')).toEqual({
      switchOn: true,
      createPolicy: false,
      templates: [
        { name: 'default', enabled: false },
        { name: 'llms-by-platform', enabled: true },
      ],
    });
  });

  it('touches nothing when the policy is already on', () => {
    expect(planUnschedulablePods(policy(true), templates, 'llms-by-platform')).toEqual({
      switchOn: false,
      createPolicy: false,
      templates: [],
    });
  });

  it('creates the policy when the cluster has none', () => {
    expect(planUnschedulablePods(undefined, [], 'llms-by-platform')).toEqual({
      switchOn: true,
      createPolicy: true,
      templates: [],
    });
  });
});

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

describe('containsDesired', () => {
  const owner = { apiVersion: 'ai.platform/v1beta1', kind: 'ModelDeployment', name: 'qwen', uid: 'new' };
  it.each([
    ['same fields', { a: 1, b: { c: [1, 2] } }, { a: 1, b: { c: [1, 2] } }, true],
    ['extra fields in actual', { a: 1, b: 2, status: {} }, { a: 1 }, true],
    ['a changed value', { a: 1 }, { a: 2 }, false],
    ['a list of another length', { c: [1, 2, 3] }, { c: [1, 2] }, false],
    // A deleted and recreated owner of the same name: the old reference lingers until GC drops it.
    [
      'our owner reference among a previous one',
      { metadata: { ownerReferences: [{ ...owner, uid: 'old' }, owner] } },
      { metadata: { ownerReferences: [owner] } },
      true,
    ],
    [
      'only the previous owner',
      { metadata: { ownerReferences: [{ ...owner, uid: 'old' }] } },
      { metadata: { ownerReferences: [owner] } },
      false,
    ],
  ])('%s', (_, actual, desired, want) => {
    expect(containsDesired(actual, desired)).toBe(want);
  });
});
