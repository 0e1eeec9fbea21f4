import { describe, expect, it } from 'vitest';
import {
  type ClusterInfo,
  eligibleGpuTypes,
  hostedModels,
  loadCatalog,
  parallelSlots,
  pricing,
  regionGpuTypes,
  resolveModel,
} from './catalog.js';

const catalog = loadCatalog();
const cluster = (cloud: ClusterInfo['cloud'], region: string): ClusterInfo => ({
  organizationId: 'org',
  clusterId: 'c1',
  cloud,
  region,
});
const model = (name: string) => {
  const m = catalog.models.find((x) => x.name === name);
  if (!m) throw new Error(name);
  return m;
};

describe('catalog data', () => {
  it('has the required models, each with a known recommended GPU that fits it', () => {
    for (const name of [
      'llama3.1:8b',
      'llama3.1:70b',
      'llama3.2:3b',
      'mistral:7b',
      'qwen2.5:7b',
      'qwen2.5:0.5b',
      'gemma2:9b',
      'phi3:mini',
      'deepseek-r1:8b',
      'nomic-embed-text',
    ]) {
      const m = model(name);
      expect(eligibleGpuTypes(catalog, m), name).toContain(m.gpu.recommended);
      expect(m.contextLength).toBeGreaterThan(0);
      expect(m.tokensPerSecond).toBeGreaterThan(0);
    }
  });

  it('starts every model server with serving settings its context window allows', () => {
    for (const m of catalog.models) {
      expect(m.serving.numParallel, m.name).toBeGreaterThanOrEqual(1);
      expect(m.serving.maxQueue, m.name).toBeGreaterThanOrEqual(1);
      expect(m.serving.contextLength, m.name).toBeGreaterThanOrEqual(256);
      expect(m.serving.contextLength, m.name).toBeLessThanOrEqual(m.contextLength);
    }
  });

  it('names only known GPU types in the region table', () => {
    for (const regions of Object.values(catalog.regions)) {
      for (const [region, gpus] of Object.entries(regions)) {
        for (const g of gpus) expect(catalog.gpus[g], `${region}: ${g}`).toBeDefined();
      }
    }
  });
});

describe('GPU rules', () => {
  it('70b models need an A100 or larger', () => {
    expect(eligibleGpuTypes(catalog, model('llama3.1:70b')).sort()).toEqual(['A100', 'B200', 'GH200', 'H100', 'H200']);
  });

  it('ARM GPUs below compute capability 8.0 never qualify, ARM GPUs at 8.0+ do', () => {
    for (const m of catalog.models) {
      expect(eligibleGpuTypes(catalog, m), m.name).not.toContain('T4G');
    }
    expect(eligibleGpuTypes(catalog, model('qwen2.5:0.5b'))).toContain('GH200');
    // The same compute capability on amd64 is fine.
    expect(eligibleGpuTypes(catalog, model('qwen2.5:0.5b'))).toContain('T4');
  });
});

describe('resolveModel', () => {
  it('picks the recommended GPU when the region offers it', () => {
    const r = resolveModel(catalog, cluster('aws', 'us-east-1'), 'llama3.1:8b');
    expect(r.ok && r.gpuType).toBe('L4');
  });

  it('falls back to the cheapest fitting GPU the region offers', () => {
    const r = resolveModel(catalog, cluster('azure', 'northeurope'), 'llama3.1:8b');
    expect(r.ok && r.gpuTypes).toEqual(['T4', 'A10']);
    expect(r.ok && r.gpuType).toBe('T4');
  });

  it('refuses a 70b model in a region without A100-class GPUs, naming what is missing', () => {
    const r = resolveModel(catalog, cluster('aws', 'ap-south-1'), 'llama3.1:70b');
    expect(r).toEqual({
      ok: false,
      reason: 'ModelNotAvailable',
      message:
        'model llama3.1:70b needs one of the GPU types A100, GH200, H100, H200, B200 (at least 80 GiB GPU memory, ' +
        'compute capability 8.0+); region ap-south-1 offers T4, T4G, A10G, L4',
    });
  });

  it('refuses unknown models and unknown regions', () => {
    const unknown = resolveModel(catalog, cluster('aws', 'us-east-1'), 'gpt-5');
    expect(unknown.ok === false && unknown.message).toMatch(
      /^model gpt-5 is not in the hosted-model catalog; supported: llama3.1:8b, /,
    );
    const region = resolveModel(catalog, cluster('aws', 'mars-north-1'), 'llama3.1:8b');
    expect(region.ok === false && region.message).toContain(
      'region mars-north-1 of cloud aws is not in the hosted-model catalog',
    );
  });
});

describe('hostedModels', () => {
  it('lists only what the region can run, with pricing derived from the GPU price and throughput', () => {
    const inSaoPaulo = hostedModels(catalog, cluster('aws', 'sa-east-1')).map((m) => m.name);
    expect(inSaoPaulo).not.toContain('llama3.1:70b');
    expect(inSaoPaulo).toContain('llama3.1:8b');
    expect(regionGpuTypes(catalog, cluster('aws', 'sa-east-1'))).toEqual(['T4', 'A10G']);

    const all = hostedModels(catalog, cluster('aws', 'us-east-1'));
    expect(all).toHaveLength(catalog.models.length);
    const llama = all.find((m) => m.name === 'llama3.1:8b');
    // L4 at $0.805/h generating 45 tokens/s: 0.805 / (45 * 3600) * 1e6 = $4.9691 per 1M tokens.
    expect(llama?.pricing).toEqual({ gpuType: 'L4', instance: 'g6.xlarge', usdPerHour: 0.805, usdPer1MTokens: 4.9691 });
    expect(llama?.gpu.types[0]).toBe('T4');
  });

  it('prices multi-GPU needs by the GPU count', () => {
    const m = { ...model('llama3.1:8b'), gpu: { ...model('llama3.1:8b').gpu, count: 2 } };
    expect(pricing(catalog, m, 'L4').usdPerHour).toBe(1.61);
  });
});

describe('parallelSlots', () => {
  it('takes spec.server.numParallel, else the catalog’s serving default, else nothing', () => {
    expect(parallelSlots(catalog, { spec: { model: 'qwen2.5:0.5b', server: { numParallel: 2 } } })).toBe(2);
    expect(parallelSlots(catalog, { spec: { model: 'qwen2.5:0.5b' } })).toBe(4);
    expect(parallelSlots(catalog, { spec: { model: 'not-in:catalog' } })).toBeUndefined();
  });
});
