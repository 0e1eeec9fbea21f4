import { describe, expect, it } from 'vitest';
import type { NodeConfiguration } from '../../crds/node-configuration.js';
import {
  checkNodeConfiguration,
  checkTemplateGpus,
  desiredLlmNodeTemplate,
  GKE_NVIDIA_IMAGE,
} from './node-template.js';

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
