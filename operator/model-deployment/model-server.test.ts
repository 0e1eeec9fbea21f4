import { describe, expect, it } from 'vitest';
import { type ClusterInfo, loadCatalog, resolveModel } from '../../crds/catalog/catalog.js';
import type { ModelDeployment } from '../../crds/model-deployment.js';
import { desiredModelServer, MODEL_ANNOTATION, MODEL_ANSWERS_SCRIPTS, serverSettings } from './model-server.js';

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
