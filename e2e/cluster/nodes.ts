import type { V1Node } from '@kubernetes/client-node';
import {
  GPU_COMPUTE_CAPABILITY_LABEL,
  GPU_MODEL_LABEL,
  GPU_RESOURCE,
  LLM_NODE_TEMPLATE,
  NODE_TEMPLATE_KEY,
} from '../../crds/constants.js';

/**
 * Fake nodes played by kwok: the GPU node types a model deployment may land on, in one
 * region. kwok manages only nodes annotated kwok.x-k8s.io/node=fake, marks them Ready and
 * runs the pods scheduled to them through Running/Ready.
 */

export interface FakeNodeSpec {
  name: string;
  arch: 'amd64' | 'arm64';
  gpuModel?: string;
  computeCapability?: string;
  gpus?: number;
  zone: string;
  /** The node template the platform autoscaler made this node from (label and taint). */
  template?: string;
}

const REGION = 'us-east-1';

export const FAKE_NODES: FakeNodeSpec[] = [
  {
    name: 'gpu-a100-1',
    arch: 'amd64',
    gpuModel: 'A100',
    computeCapability: '8.0',
    gpus: 8,
    zone: 'us-east-1a',
    template: LLM_NODE_TEMPLATE,
  },
  {
    name: 'gpu-h100-1',
    arch: 'amd64',
    gpuModel: 'H100',
    computeCapability: '9.0',
    gpus: 8,
    zone: 'us-east-1b',
    template: LLM_NODE_TEMPLATE,
  },
  {
    name: 'gpu-l4-1',
    arch: 'amd64',
    gpuModel: 'L4',
    computeCapability: '8.9',
    // g6.12xlarge: four L4s.
    gpus: 4,
    zone: 'us-east-1a',
    template: LLM_NODE_TEMPLATE,
  },
  { name: 'gpu-t4-1', arch: 'amd64', gpuModel: 'T4', computeCapability: '7.5', gpus: 1, zone: 'us-east-1b' },
  // Graviton g5g: an arm64 node whose T4G (A10-class price tier) has compute capability 7.5,
  // below the 8.0 that GPU inference on ARM needs.
  {
    name: 'arm-t4g-1',
    arch: 'arm64',
    gpuModel: 'T4G',
    computeCapability: '7.5',
    gpus: 2,
    zone: 'us-east-1a',
    template: LLM_NODE_TEMPLATE,
  },
  // Grace Hopper: arm64 with compute capability 9.0.
  {
    name: 'arm-gh200-1',
    arch: 'arm64',
    gpuModel: 'GH200',
    computeCapability: '9.0',
    gpus: 1,
    zone: 'us-east-1b',
    template: LLM_NODE_TEMPLATE,
  },
  { name: 'cpu-1', arch: 'amd64', zone: 'us-east-1a' },
];

export function fakeNode(spec: FakeNodeSpec): V1Node {
  const labels: Record<string, string> = {
    'kubernetes.io/arch': spec.arch,
    'kubernetes.io/os': 'linux',
    'kubernetes.io/hostname': spec.name,
    'topology.kubernetes.io/region': REGION,
    'topology.kubernetes.io/zone': spec.zone,
    type: 'kwok',
  };
  if (spec.gpuModel) labels[GPU_MODEL_LABEL] = spec.gpuModel;
  if (spec.computeCapability) labels[GPU_COMPUTE_CAPABILITY_LABEL] = spec.computeCapability;
  if (spec.template) labels[NODE_TEMPLATE_KEY] = spec.template;
  const capacity: Record<string, string> = { cpu: '32', memory: '256Gi', pods: '110', 'ephemeral-storage': '500Gi' };
  if (spec.gpus) capacity[GPU_RESOURCE] = String(spec.gpus);
  return {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: {
      name: spec.name,
      labels,
      annotations: { 'kwok.x-k8s.io/node': 'fake', 'node.alpha.kubernetes.io/ttl': '0' },
    },
    spec: spec.template ? { taints: [{ key: NODE_TEMPLATE_KEY, value: spec.template, effect: 'NoSchedule' }] } : {},
    status: {
      allocatable: capacity,
      capacity,
      nodeInfo: {
        architecture: spec.arch,
        operatingSystem: 'linux',
        kubeletVersion: 'fake',
        kubeProxyVersion: 'fake',
        bootID: '',
        containerRuntimeVersion: '',
        kernelVersion: '',
        machineID: '',
        osImage: '',
        systemUUID: '',
      },
      phase: 'Running',
    },
  };
}
