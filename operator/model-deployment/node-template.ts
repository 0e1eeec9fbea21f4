import type { Cloud } from '../../crds/catalog/catalog.js';
import { API_GROUP_VERSION, LLM_NODE_TEMPLATE, NODE_TEMPLATE_KEY } from '../../crds/constants.js';
import type { NodeConfiguration } from '../../crds/node-configuration.js';
import type { NodeTemplate } from '../../crds/node-template.js';

/**
 * The node template for hosted models and the checks of a template a deployment uses.
 */

/**
 * The fields the operator owns on llms-by-platform (server-side apply): enabled, GPU
 * constraints, the label and taint model servers select and tolerate. Anything else a
 * person sets on the template (a configurationRef, more labels) is left alone.
 */
export function desiredLlmNodeTemplate(gpuTypes: string[], archs: Array<'amd64' | 'arm64'>): NodeTemplate {
  return {
    apiVersion: API_GROUP_VERSION,
    kind: 'NodeTemplate',
    metadata: { name: LLM_NODE_TEMPLATE },
    spec: {
      enabled: true,
      constraints: {
        architectures: archs,
        spot: false,
        gpu: { manufacturer: 'NVIDIA', models: gpuTypes, minCount: 1, maxCount: 8 },
      },
      labels: { [NODE_TEMPLATE_KEY]: LLM_NODE_TEMPLATE },
      taints: [{ key: NODE_TEMPLATE_KEY, value: LLM_NODE_TEMPLATE, effect: 'NoSchedule' }],
    },
  };
}

/**
 * GKE accepts custom GPU node images only when they are container-optimized images named like
 * its NVIDIA images: gke-<digits>-gke<digits>-cos-<digits>-<digits>-<digits>-...-nvda (the
 * middle may carry more parts, e.g. -c-cgpv1-nvda).
 */
export const GKE_NVIDIA_IMAGE = /^gke-\d+-gke\d+-cos-\d+-\d+-\d+(-[a-z0-9]+)*-nvda$/;

export type TemplateCheck = { ok: true } | { ok: false; reason: string; message: string };

/** Whether nodes of this configuration can run GPU workloads on the cluster's cloud. */
export function checkNodeConfiguration(config: NodeConfiguration, cloud: Cloud): TemplateCheck {
  const name = config.metadata.name ?? '';
  const image = config.spec.image;
  if (cloud === 'gcp' && image && !GKE_NVIDIA_IMAGE.test(image)) {
    return {
      ok: false,
      reason: 'InvalidNodeConfiguration',
      message:
        `finding GPU attached instance image for ${image}: only the cloud's default GPU images and custom images ` +
        `named after its NVIDIA pattern (gke-<digits>-gke<digits>-cos-<digits>-<digits>-<digits>-...-nvda, or ending ` +
        `-c-cgpv1-nvda) are supported; rename the image accordingly or remove spec.image from NodeConfiguration ${name}`,
    };
  }
  if (cloud === 'gcp' && config.spec.imageFamily === 'ubuntu') {
    return {
      ok: false,
      reason: 'InvalidNodeConfiguration',
      message:
        `NodeConfiguration ${name} uses Ubuntu images, which GKE does not support for GPU nodes: set its imageFamily ` +
        `to cos (a container-optimized image) and link it from the node template`,
    };
  }
  return { ok: true };
}

/** Whether a template can give the model a GPU it fits on. */
export function checkTemplateGpus(template: NodeTemplate, gpuTypes: string[]): TemplateCheck {
  const allowed = template.spec.constraints?.gpu?.models;
  if (allowed && allowed.length > 0 && !allowed.some((g) => gpuTypes.includes(g))) {
    return {
      ok: false,
      reason: 'NoMatchingGPU',
      message:
        `node template ${template.metadata.name} allows GPU types ${allowed.join(', ')}, none of which fits the model ` +
        `(needs one of ${gpuTypes.join(', ')}); name another template or omit spec.nodeTemplate`,
    };
  }
  return { ok: true };
}
