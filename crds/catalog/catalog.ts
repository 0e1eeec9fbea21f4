import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import yaml from 'js-yaml';
import type { EngineName } from '../engines/engine.js';

/**
 * The hosted-model catalog: which models the operator deploys with which engine, which GPU types each
 * runs on, which GPU types each cloud region offers, and what a model costs to serve.
 * The data lives in the YAML files beside this module; everything else is derived here.
 */

export type Cloud = 'aws' | 'gcp' | 'azure';
type Arch = 'amd64' | 'arm64';

interface GpuType {
  memoryGiB: number;
  computeCapability: string;
  arch: Arch;
  usdPerHour: number;
  instance: string;
}

/** Output tokens per second one replica sustains with `concurrency` requests at once, and who published it. */
export interface ThroughputPoint {
  concurrency: number;
  tokensPerSecond: number;
  source: string;
}

export interface CatalogModel {
  /** The model as spec.model names it with its engine (Ollama's name:tag, a Hugging Face id). */
  name: string;
  /** Absent: Ollama. */
  engine?: EngineName;
  family: string;
  kind: 'chat' | 'embedding';
  displayName: string;
  /** In Ollama's words (its /api/show): completion, tools, thinking, vision, embedding. */
  capabilities: string[];
  parameters: string;
  contextLength: number;
  sizeGiB: number;
  gpu: { count: number; minMemoryGiB: number; minComputeCapability: string; recommended: string };
  /** On gpu.recommended, by concurrency (ascending). */
  throughput: ThroughputPoint[];
  /** How its model servers are started unless the ModelDeployment's spec.server overrides it. */
  serving: { numParallel: number; maxQueue: number; contextLength: number };
}

export interface Catalog {
  gpus: Record<string, GpuType>;
  regions: Record<Cloud, Record<string, string[]>>;
  models: CatalogModel[];
}

/** Where the operator runs: the cluster the catalog is filtered for. */
export interface ClusterInfo {
  organizationId: string;
  clusterId: string;
  cloud: Cloud;
  region: string;
}

/** GPU inference on ARM needs compute capability 8.0 or higher. */
const ARM_MIN_COMPUTE_CAPABILITY = 8.0;

const load = <T>(file: string): T =>
  yaml.load(readFileSync(fileURLToPath(new URL(file, import.meta.url)), 'utf8')) as T;

let cached: Catalog | undefined;

export function loadCatalog(): Catalog {
  cached ??= {
    gpus: load<Record<string, GpuType>>('./gpus.yaml'),
    regions: load<Record<Cloud, Record<string, string[]>>>('./regions.yaml'),
    models: load<CatalogModel[]>('./models.yaml'),
  };
  return cached;
}

/** The engine of a catalog row. */
export const engineOf = (model: Pick<CatalogModel, 'engine'>): EngineName => model.engine ?? 'Ollama';

/** The catalog's row for a model with an engine (one name may have a row per engine). */
export function catalogModel(catalog: Catalog, name: string, engine: EngineName = 'Ollama'): CatalogModel | undefined {
  return catalog.models.find((m) => m.name === name && engineOf(m) === engine);
}

/**
 * Requests one replica of a deployment generates at once (Ollama's OLLAMA_NUM_PARALLEL, vLLM's
 * --max-num-seqs): the spec's server.numParallel, or the catalog's serving default for its model;
 * undefined for a model the catalog does not know.
 */
export function parallelSlots(
  catalog: Catalog,
  md: { spec: { model: string; engine?: EngineName; server?: { numParallel?: number } } },
): number | undefined {
  return md.spec.server?.numParallel ?? catalogModel(catalog, md.spec.model, md.spec.engine)?.serving.numParallel;
}

/**
 * The throughput point a deployment runs at: the largest measured concurrency at or below its
 * slots (more slots than measured earn no more than the last measurement), else the smallest.
 */
export function throughputAt(model: CatalogModel, concurrency: number): ThroughputPoint {
  const points = [...model.throughput].sort((a, b) => a.concurrency - b.concurrency);
  const first = points[0];
  if (!first) throw new Error(`catalog model ${model.name} has no throughput`);
  return points.filter((p) => p.concurrency <= concurrency).at(-1) ?? first;
}

const cc = (v: string): number => Number.parseFloat(v);

/** Whether a GPU type (in `count`) can serve the model: memory, compute capability, ARM rule. */
function gpuFits(model: CatalogModel, gpu: GpuType): boolean {
  if (gpu.memoryGiB * model.gpu.count < model.gpu.minMemoryGiB) return false;
  if (cc(gpu.computeCapability) < cc(model.gpu.minComputeCapability)) return false;
  if (gpu.arch === 'arm64' && cc(gpu.computeCapability) < ARM_MIN_COMPUTE_CAPABILITY) return false;
  return true;
}

/** Every GPU type the model can run on, cheapest first. */
export function eligibleGpuTypes(catalog: Catalog, model: CatalogModel): string[] {
  return Object.entries(catalog.gpus)
    .filter(([, gpu]) => gpuFits(model, gpu))
    .sort(([, a], [, b]) => a.usdPerHour - b.usdPerHour)
    .map(([name]) => name);
}

export function regionGpuTypes(catalog: Catalog, cluster: Pick<ClusterInfo, 'cloud' | 'region'>): string[] | undefined {
  return catalog.regions[cluster.cloud]?.[cluster.region];
}

/** GPU types offered in the cluster's region on which at least one catalog model runs. */
export function deployableGpuTypes(catalog: Catalog, cluster: Pick<ClusterInfo, 'cloud' | 'region'>): string[] {
  const offered = regionGpuTypes(catalog, cluster) ?? [];
  return offered.filter((g) => {
    const gpu = catalog.gpus[g];
    return gpu !== undefined && catalog.models.some((m) => gpuFits(m, gpu));
  });
}

export interface Pricing {
  gpuType: string;
  instance: string;
  usdPerHour: number;
  /** usdPerHour spread over the tokens the model generates in an hour at its throughput point. */
  usdPer1MTokens: number;
  /** The point the price is from: requests at once, tokens per second, and its source. */
  throughput: ThroughputPoint;
}

const round = (n: number, digits: number) => Math.round(n * 10 ** digits) / 10 ** digits;

/** What a replica costs per hour and per 1M tokens at `concurrency` (default: its serving slots). */
export function pricing(
  catalog: Catalog,
  model: CatalogModel,
  gpuType: string,
  concurrency: number = model.serving.numParallel,
): Pricing {
  const gpu = catalog.gpus[gpuType];
  if (!gpu) throw new Error(`unknown GPU type ${gpuType}`);
  const usdPerHour = gpu.usdPerHour * model.gpu.count;
  const point = throughputAt(model, concurrency);
  return {
    gpuType,
    instance: gpu.instance,
    usdPerHour: round(usdPerHour, 4),
    usdPer1MTokens: round((usdPerHour / (point.tokensPerSecond * 3600)) * 1_000_000, 4),
    throughput: point,
  };
}

export type ModelResolution =
  | {
      ok: true;
      model: CatalogModel;
      /** GPU types that fit the model and that the region offers, cheapest first. */
      gpuTypes: string[];
      /** The recommended type when the region offers it, else the cheapest that fits. */
      gpuType: string;
    }
  | { ok: false; reason: 'ModelNotAvailable'; message: string };

/** Whether the model can be deployed on this cluster, and on which GPU types. */
export function resolveModel(
  catalog: Catalog,
  cluster: ClusterInfo,
  name: string,
  engine: EngineName = 'Ollama',
): ModelResolution {
  const model = catalogModel(catalog, name, engine);
  if (!model) {
    const other = catalog.models.find((m) => m.name === name);
    const supported = catalog.models.filter((m) => engineOf(m) === engine).map((m) => m.name);
    return {
      ok: false,
      reason: 'ModelNotAvailable',
      message: other
        ? `model ${name} is in the hosted-model catalog for engine ${engineOf(other)}, not ${engine}; set spec.engine: ${engineOf(other)}, or use one of ${engine}'s: ${supported.join(', ')}`
        : `model ${name} is not in the hosted-model catalog for engine ${engine}; supported: ${supported.join(', ')}`,
    };
  }
  const offered = regionGpuTypes(catalog, cluster);
  if (!offered) {
    return {
      ok: false,
      reason: 'ModelNotAvailable',
      message: `region ${cluster.region} of cloud ${cluster.cloud} is not in the hosted-model catalog, so no GPU type is known to be available there`,
    };
  }
  const fits = eligibleGpuTypes(catalog, model);
  const gpuTypes = fits.filter((g) => offered.includes(g));
  const first = gpuTypes[0];
  if (!first) {
    return {
      ok: false,
      reason: 'ModelNotAvailable',
      message:
        `model ${name} needs one of the GPU types ${fits.join(', ')} (at least ${model.gpu.minMemoryGiB} GiB GPU memory, ` +
        `compute capability ${model.gpu.minComputeCapability}+); region ${cluster.region} offers ${offered.join(', ')}`,
    };
  }
  return {
    ok: true,
    model,
    gpuTypes,
    gpuType: gpuTypes.includes(model.gpu.recommended) ? model.gpu.recommended : first,
  };
}

/** One entry of the hosted-models API. */
export interface HostedModel {
  name: string;
  engine: EngineName;
  family: string;
  kind: CatalogModel['kind'];
  parameters: string;
  contextLength: number;
  sizeGiB: number;
  gpu: {
    count: number;
    minMemoryGiB: number;
    minComputeCapability: string;
    /** GPU types that fit and are offered in the cluster's region, cheapest first. */
    types: string[];
    recommendedType: string;
  };
  pricing: Pricing;
}

/** The models deployable on this cluster, with GPU requirements and pricing. */
export function hostedModels(catalog: Catalog, cluster: ClusterInfo): HostedModel[] {
  const out: HostedModel[] = [];
  for (const m of catalog.models) {
    const r = resolveModel(catalog, cluster, m.name, engineOf(m));
    if (!r.ok) continue;
    out.push({
      name: m.name,
      engine: engineOf(m),
      family: m.family,
      kind: m.kind,
      parameters: m.parameters,
      contextLength: m.contextLength,
      sizeGiB: m.sizeGiB,
      gpu: {
        count: m.gpu.count,
        minMemoryGiB: m.gpu.minMemoryGiB,
        minComputeCapability: m.gpu.minComputeCapability,
        types: r.gpuTypes,
        recommendedType: r.gpuType,
      },
      pricing: pricing(catalog, m, r.gpuType),
    });
  }
  return out;
}
