import { describe, expect, it } from 'vitest';
import type { EngineName } from '../engines/engine.js';
import {
  type CatalogModel,
  type ClusterInfo,
  catalogModel,
  eligibleGpuTypes,
  engineOf,
  hostedModels,
  loadCatalog,
  parallelSlots,
  pricing,
  regionGpuTypes,
  resolveModel,
  throughputAt,
} from './catalog.js';

const catalog = loadCatalog();
const cluster = (cloud: ClusterInfo['cloud'], region: string): ClusterInfo => ({
  organizationId: 'org',
  clusterId: 'c1',
  cloud,
  region,
});
const model = (name: string, engine: EngineName = 'Ollama') => {
  const m = catalogModel(catalog, name, engine);
  if (!m) throw new Error(`${engine} ${name}`);
  return m;
};
/** What a row costs per 1M tokens on its recommended GPU at its serving concurrency. */
const listPrice = (m: CatalogModel) => pricing(catalog, m, m.gpu.recommended).usdPer1MTokens;

describe('catalog data', () => {
  it('has the required models, each with a known recommended GPU that fits it', () => {
    const required: Array<[string, EngineName]> = [
      ['llama3.1:8b', 'Ollama'],
      ['llama3.1:70b', 'Ollama'],
      ['llama3.2:3b', 'Ollama'],
      ['mistral:7b', 'Ollama'],
      ['qwen2.5:7b', 'Ollama'],
      ['qwen2.5:0.5b', 'Ollama'],
      ['gemma2:9b', 'Ollama'],
      ['phi3:mini', 'Ollama'],
      ['deepseek-r1:8b', 'Ollama'],
      ['nomic-embed-text', 'Ollama'],
      ['meta-llama/Llama-3.1-8B-Instruct', 'VLLM'],
      ['meta-llama/Llama-3.2-3B-Instruct', 'VLLM'],
      ['Qwen/Qwen2.5-7B-Instruct', 'VLLM'],
      ['Qwen/Qwen2.5-0.5B-Instruct', 'VLLM'],
      ['mistralai/Mistral-7B-Instruct-v0.3', 'VLLM'],
      ['RedHatAI/Meta-Llama-3.1-70B-Instruct-FP8', 'VLLM'],
      ['HuggingFaceTB/SmolLM2-135M-Instruct', 'VLLM'],
    ];
    for (const [name, engine] of required) {
      const m = model(name, engine);
      expect(eligibleGpuTypes(catalog, m), name).toContain(m.gpu.recommended);
      expect(m.contextLength, name).toBeGreaterThan(0);
    }
  });

  it('names each row as its engine does: vLLM a Hugging Face id (org/Name), Ollama a library name', () => {
    for (const m of catalog.models) {
      if (engineOf(m) === 'VLLM') expect(m.name).toMatch(/^[A-Za-z0-9][\w.-]*\/[A-Za-z0-9][\w.-]*$/);
      else expect(m.name).toMatch(/^[a-z0-9][a-z0-9._-]*(:[a-z0-9][a-z0-9._-]*)?$/);
    }
    // One name, one row per engine.
    const keys = catalog.models.map((m) => `${engineOf(m)} ${m.name}`);
    expect(new Set(keys).size).toBe(keys.length);
  });

  it('sizes every row: the weights fit its GPU memory, which fits its GPUs; FP8 needs compute capability 8.9+', () => {
    for (const m of catalog.models) {
      const gpu = catalog.gpus[m.gpu.recommended];
      expect(m.sizeGiB, m.name).toBeGreaterThan(0);
      expect(m.sizeGiB, m.name).toBeLessThan(m.gpu.minMemoryGiB);
      expect(m.gpu.minMemoryGiB, m.name).toBeLessThanOrEqual((gpu?.memoryGiB ?? 0) * m.gpu.count);
      if (/FP8/i.test(`${m.name} ${m.displayName}`)) {
        expect(Number.parseFloat(m.gpu.minComputeCapability), m.name).toBeGreaterThanOrEqual(8.9);
      }
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

describe('throughput', () => {
  it('gives every row 1-3 points from concurrency 1 up, ascending, each with a named source', () => {
    for (const m of catalog.models) {
      const points = m.throughput;
      expect(points.length, m.name).toBeGreaterThanOrEqual(1);
      expect(points.length, m.name).toBeLessThanOrEqual(3);
      // From 1: every deployment's concurrency has a measured point at or below it.
      expect(points[0]?.concurrency, m.name).toBe(1);
      points.forEach((p, i) => {
        expect(Number.isInteger(p.concurrency) && p.concurrency >= 1, `${m.name} #${i}`).toBe(true);
        if (i > 0) expect(p.concurrency, `${m.name} #${i}`).toBeGreaterThan(points[i - 1]?.concurrency ?? 0);
        expect(p.tokensPerSecond, `${m.name} #${i}`).toBeGreaterThan(0);
        expect(p.source, `${m.name} #${i}`).not.toMatch(/\bTODO\b|\bTBD\b/i);
        expect(p.source.trim().length, `${m.name} #${i}`).toBeGreaterThanOrEqual(40);
      });
      // Where the figures come from is a link a reader can follow.
      expect(
        points.some((p) => /https:\/\/\S+/.test(p.source)),
        m.name,
      ).toBe(true);
    }
  });

  it('rises with concurrency while each request gets no faster', () => {
    for (const m of catalog.models) {
      m.throughput.slice(1).forEach((p, i) => {
        const prev = m.throughput[i];
        if (!prev) return;
        expect(p.tokensPerSecond, m.name).toBeGreaterThanOrEqual(prev.tokensPerSecond);
        expect(p.tokensPerSecond / p.concurrency, m.name).toBeLessThanOrEqual(prev.tokensPerSecond / prev.concurrency);
      });
    }
  });

  it('prices at the point for the deployment’s concurrency: the largest at or below it', () => {
    const base = model('meta-llama/Llama-3.1-8B-Instruct', 'VLLM');
    const m: CatalogModel = {
      ...base,
      // Out of order on purpose: the points are sorted by concurrency.
      throughput: [
        { concurrency: 32, tokensPerSecond: 100, source: 'c32' },
        { concurrency: 1, tokensPerSecond: 10, source: 'c1' },
        { concurrency: 8, tokensPerSecond: 50, source: 'c8' },
      ],
      serving: { ...base.serving, numParallel: 16 },
    };
    const at = (c?: number) => pricing(catalog, m, 'L4', c);
    // L4 at $0.805/h: 0.805 / (tokens/s * 3600) * 1e6.
    expect(at(1)).toMatchObject({ usdPer1MTokens: 22.3611, throughput: { source: 'c1' } });
    expect(at(4)).toMatchObject({ usdPer1MTokens: 22.3611, throughput: { source: 'c1' } });
    expect(at(8)).toMatchObject({ usdPer1MTokens: 4.4722, throughput: { source: 'c8' } });
    expect(at(31).usdPer1MTokens).toBe(4.4722);
    expect(at(32)).toMatchObject({ usdPer1MTokens: 2.2361, throughput: { source: 'c32' } });
    expect(at(256).usdPer1MTokens).toBe(2.2361);
    // Default: the catalog's serving slots (16 here), so the point at 8.
    expect(at()).toMatchObject({ usdPer1MTokens: 4.4722, throughput: { concurrency: 8 } });
    expect(throughputAt(m, 0).source).toBe('c1');
  });

  it('prices a deployment by its own slots: spec.server.numParallel over the catalog default', () => {
    const m = model('meta-llama/Llama-3.1-8B-Instruct', 'VLLM');
    const md = (numParallel?: number) => ({
      spec: { model: m.name, engine: 'VLLM' as const, ...(numParallel ? { server: { numParallel } } : {}) },
    });
    const single = pricing(catalog, m, 'L4', parallelSlots(catalog, md(1)));
    const batched = pricing(catalog, m, 'L4', parallelSlots(catalog, md()));
    expect(single.throughput.concurrency).toBe(1);
    expect(batched.throughput.concurrency).toBe(m.serving.numParallel);
    expect(batched.usdPer1MTokens).toBeLessThan(single.usdPer1MTokens);
  });

  it('makes vLLM the cheap tier: per family, each vLLM row costs less per 1M tokens than its Ollama row', () => {
    const vllm = catalog.models.filter((m) => engineOf(m) === 'VLLM');
    const ollama = catalog.models.filter((m) => engineOf(m) === 'Ollama');
    const shared = [...new Set(vllm.map((m) => m.family))].filter((f) => ollama.some((m) => m.family === f));
    expect(shared.sort()).toEqual(['llama3.1', 'llama3.2', 'mistral', 'qwen2.5']);
    for (const family of shared) {
      const pairs = vllm
        .filter((v) => v.family === family)
        .flatMap((v) => ollama.filter((o) => o.family === family && o.parameters === v.parameters).map((o) => [v, o]));
      expect(pairs.length, family).toBeGreaterThan(0);
      for (const [v, o] of pairs) {
        if (!v || !o) continue;
        expect(listPrice(v), `${v.name} vs ${o.name}`).toBeLessThan(listPrice(o));
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
      /^model gpt-5 is not in the hosted-model catalog for engine Ollama; supported: llama3.1:8b, /,
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
    // L4 at $0.805/h generating 72 tokens/s over its 4 slots: 0.805 / (72 * 3600) * 1e6 = $3.1057 per 1M tokens.
    expect(llama?.pricing).toEqual({
      gpuType: 'L4',
      instance: 'g6.xlarge',
      usdPerHour: 0.805,
      usdPer1MTokens: 3.1057,
      throughput: expect.objectContaining({ concurrency: 4, tokensPerSecond: 72 }),
    });
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
