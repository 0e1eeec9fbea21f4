import { describe, expect, it } from 'vitest';
import { type ClusterInfo, loadCatalog, resolveModel } from '../../crds/catalog/catalog.js';
import { MODEL_ANSWERS_SCRIPTS } from '../../crds/engines/ollama.js';
import type { ModelDeployment } from '../../crds/model-deployment.js';
import { desiredModelServer, MODEL_ANNOTATION, serverSettings } from './model-server.js';

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

describe('desiredModelServer with engine VLLM', () => {
  function vllmServer(numParallel?: number) {
    const model = 'meta-llama/Llama-3.1-8B-Instruct';
    const r = resolveModel(catalog, cluster, model, 'VLLM');
    if (!r.ok) throw new Error(r.message);
    const d = md(model);
    d.spec.engine = 'VLLM';
    if (numParallel) d.spec.server = { numParallel };
    return desiredModelServer(d, r.model, catalog, {
      image: 'vllm/vllm-openai:test',
      template: 'llms-by-platform',
      gpuTypes: r.gpuTypes,
    });
  }

  it('runs the vLLM OpenAI server on the model by its Hugging Face id, offline, with prefix caching', () => {
    const { deployment, service } = vllmServer(48);
    const pod = deployment.spec?.template.spec;
    const server = pod?.containers[0];
    expect(server?.name).toBe('vllm');
    expect(deployment.spec?.template.metadata?.labels?.['app.kubernetes.io/name']).toBe('vllm');
    expect(server?.image).toBe('vllm/vllm-openai:test');
    expect(server?.command).toEqual(['python3', '-m', 'vllm.entrypoints.openai.api_server']);
    const args = server?.args ?? [];
    const arg = (flag: string) => args[args.indexOf(flag) + 1];
    expect(arg('--model')).toBe('meta-llama/Llama-3.1-8B-Instruct');
    expect(arg('--served-model-name')).toBe('meta-llama/Llama-3.1-8B-Instruct');
    expect(arg('--max-num-seqs')).toBe('48');
    expect(arg('--max-model-len')).toBe('8192');
    expect(args).toContain('--enable-prefix-caching');
    expect(server?.ports).toEqual([{ name: 'http', containerPort: 8000, protocol: 'TCP' }]);
    expect(service.spec?.ports?.[0]).toMatchObject({ port: 8080, targetPort: 'http' });
    const env = Object.fromEntries((server?.env ?? []).map((e) => [e.name, e.value]));
    expect(env).toMatchObject({ HF_HOME: '/models', HF_HUB_OFFLINE: '1', VLLM_NO_USAGE_STATS: '1', DO_NOT_TRACK: '1' });
    // Ready means the model generates a token; liveness is the server's /health.
    expect(server?.readinessProbe?.exec?.command?.join(' ')).toContain('/v1/completions');
    expect(server?.livenessProbe?.httpGet?.path).toBe('/health');
    expect(server?.terminationMessagePolicy).toBe('FallbackToLogsOnError');
    expect(server?.resources?.limits?.['nvidia.com/gpu']).toBe('1');
    expect(server?.securityContext).toMatchObject({ readOnlyRootFilesystem: true, runAsNonRoot: true });
    expect(server?.volumeMounts).toContainEqual({ name: 'shm', mountPath: '/dev/shm' });
    expect(pod?.volumes).toContainEqual({ name: 'shm', emptyDir: { medium: 'Memory', sizeLimit: '2Gi' } });
    expect(pod?.automountServiceAccountToken).toBe(false);
  });

  it('fetches the weights in an init container, with the optional Hugging Face token only there', () => {
    const pod = vllmServer().deployment.spec?.template.spec;
    const fetch = pod?.initContainers?.[0];
    expect(fetch?.name).toBe('pull-model');
    expect(fetch?.command?.[2]).toContain('snapshot_download');
    expect(fetch?.env).toContainEqual({
      name: 'HF_TOKEN',
      valueFrom: { secretKeyRef: { name: 'huggingface-token', key: 'token', optional: true } },
    });
    expect(pod?.containers[0]?.env?.some((e) => e.name === 'HF_TOKEN')).toBe(false);
    expect(fetch?.resources?.requests?.cpu).toBe('500m');
  });

  it('refuses a model the catalog has only for the other engine, saying which', () => {
    const r = resolveModel(catalog, cluster, 'llama3.1:8b', 'VLLM');
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.message).toMatch(/for engine Ollama, not VLLM; set spec.engine: Ollama/);
  });
});
