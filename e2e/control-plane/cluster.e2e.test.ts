import { afterAll, describe, expect, inject, it } from 'vitest';
import { GPU_MODEL_LABEL, GPU_RESOURCE, NODE_TEMPLATE_KEY } from '../../crds/constants.js';
import { FAKE_NODES } from '../cluster/nodes.js';
import { eventually, kubectl, kubectlOk } from '../support/kube.js';

/**
 * The control plane itself: real scheduler placing GPU pods on kwok nodes by resources,
 * labels and taints, and kwok moving them to Running/Ready.
 */

const NS = 'default';

function gpuPod(name: string, opts: { tolerate: boolean; gpuModel?: string }) {
  return JSON.stringify({
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: NS },
    spec: {
      containers: [{ name: 'c', image: 'busybox', resources: { limits: { [GPU_RESOURCE]: '1' } } }],
      ...(opts.gpuModel ? { nodeSelector: { [GPU_MODEL_LABEL]: opts.gpuModel } } : {}),
      ...(opts.tolerate ? { tolerations: [{ key: NODE_TEMPLATE_KEY, operator: 'Exists' }] } : {}),
    },
  });
}

const podField = (name: string, path: string) =>
  kubectlOk(['get', 'pod', name, '-n', NS, '-o', `jsonpath=${path}`]).trim();

afterAll(() => {
  kubectl(['delete', 'pod', '--all', '-n', NS, '--grace-period=0', '--force', '--wait=false']);
});

describe.runIf(inject('localControlPlane'))('control plane with kwok GPU nodes', () => {
  it('reports the pinned Kubernetes version', () => {
    const version = JSON.parse(kubectlOk(['version', '-o', 'json'])) as { serverVersion: { gitVersion: string } };
    expect(version.serverVersion.gitVersion).toMatch(/^v1\.\d+\.\d+$/);
  });

  it('has every fake node Ready with its GPUs, labels and taints', () => {
    const nodes = JSON.parse(kubectlOk(['get', 'nodes', '-o', 'json'])) as {
      items: Array<{
        metadata: { name: string; labels: Record<string, string> };
        spec: { taints?: Array<{ key: string; effect: string }> };
        status: { allocatable: Record<string, string>; conditions: Array<{ type: string; status: string }> };
      }>;
    };
    for (const spec of FAKE_NODES) {
      const node = nodes.items.find((n) => n.metadata.name === spec.name);
      expect(node, spec.name).toBeDefined();
      expect(node?.status.conditions.find((c) => c.type === 'Ready')?.status).toBe('True');
      expect(node?.metadata.labels['kubernetes.io/arch']).toBe(spec.arch);
      expect(node?.status.allocatable[GPU_RESOURCE]).toBe(spec.gpus ? String(spec.gpus) : undefined);
      expect(Boolean(node?.spec.taints?.some((t) => t.key === NODE_TEMPLATE_KEY && t.effect === 'NoSchedule'))).toBe(
        Boolean(spec.template),
      );
    }
  });

  it('schedules a tolerating GPU pod onto the selected GPU model and kwok makes it Ready', async () => {
    kubectlOk(['create', '-f', '-'], gpuPod('on-l4', { tolerate: true, gpuModel: 'L4' }));
    await eventually('pod on-l4 Ready', 60_000, () =>
      podField('on-l4', '{.status.conditions[?(@.type=="Ready")].status}') === 'True' ? true : undefined,
    );
    expect(podField('on-l4', '{.spec.nodeName}')).toBe('gpu-l4-1');
    expect(podField('on-l4', '{.status.phase}')).toBe('Running');
  });

  it('keeps a GPU pod without the toleration off the template nodes', async () => {
    kubectlOk(['create', '-f', '-'], gpuPod('untolerated', { tolerate: false }));
    await eventually(
      'pod untolerated scheduled',
      60_000,
      () => podField('untolerated', '{.spec.nodeName}') || undefined,
    );
    expect(podField('untolerated', '{.spec.nodeName}')).toBe('gpu-t4-1');
  });

  it('leaves a pod Pending and Unschedulable when no node has the GPU', async () => {
    kubectlOk(['create', '-f', '-'], gpuPod('no-such-gpu', { tolerate: true, gpuModel: 'B200' }));
    const reason = await eventually(
      'pod no-such-gpu unschedulable',
      60_000,
      () => podField('no-such-gpu', '{.status.conditions[?(@.type=="PodScheduled")].reason}') || undefined,
    );
    expect(reason).toBe('Unschedulable');
    expect(podField('no-such-gpu', '{.status.phase}')).toBe('Pending');
  });

  it('runs the controller manager: a Deployment gets its ReplicaSet and pod', async () => {
    kubectlOk(['create', 'deployment', 'probe', '-n', NS, '--image=busybox', '--replicas=1']);
    // No GPU, no toleration: the only untainted, GPU-less choices are cpu-1 and gpu-t4-1.
    const ready = await eventually('deployment probe available', 60_000, () => {
      const n = kubectlOk(['get', 'deploy', 'probe', '-n', NS, '-o', 'jsonpath={.status.readyReplicas}']).trim();
      return n === '1' ? n : undefined;
    });
    expect(ready).toBe('1');
    kubectlOk(['delete', 'deploy', 'probe', '-n', NS]);
  });
});
