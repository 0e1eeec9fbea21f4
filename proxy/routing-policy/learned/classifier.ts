import { ROUTING_TIERS, type RoutingTier } from '../../../crds/routing-policy.js';

/**
 * The learned scorer's classifier: multinomial logistic regression from a request's vector (its
 * prompt's embedding and a few measured features, text-features.ts) to the probability of each
 * tier being the lowest that serves it, and from those to one difficulty score, 0..1: P(Standard)
 * / 2 + P(Frontier), the expected tier on a 0, 1/2, 1 scale, which the objectives' thresholds cut
 * (scorer.ts). Training is full-batch gradient descent (Adam) with L2, each example weighted
 * so that every source weighs the same and every tier the same, whatever their sizes; a team's
 * own examples are a source of their own. Deterministic: same data, same weights.
 */

export interface LabelledVector {
  x: Float32Array;
  tier: RoutingTier;
  /** Where the example came from: sources are weighted equally. */
  source: string;
  /** A multiple of the source's share (a team's own examples count for more); default 1. */
  weight?: number;
}

export interface ClassifierWeights {
  /** Input length. */
  inputs: number;
  /** ROUTING_TIERS.length rows of `inputs` weights, row-major. */
  w: number[];
  b: number[];
  /** Per input: subtract `mean`, divide by `scale` (fitted on the training data). */
  mean: number[];
  scale: number[];
}

const K = ROUTING_TIERS.length;

export interface TrainOptions {
  epochs?: number;
  l2?: number;
  rate?: number;
}

/** P(tier) for each of ROUTING_TIERS, in order. */
export function probabilities(m: ClassifierWeights, x: Float32Array): Float64Array {
  const logits = new Float64Array(K);
  const n = m.inputs;
  for (let k = 0; k < K; k++) {
    let z = m.b[k] as number;
    const row = k * n;
    for (let j = 0; j < n; j++)
      z += (m.w[row + j] as number) * (((x[j] ?? 0) - (m.mean[j] as number)) / (m.scale[j] as number));
    logits[k] = z;
  }
  return softmax(logits);
}

/** The difficulty score of class probabilities: the expected tier on a 0, 1/2, 1 scale. */
export const scoreOf = (p: Float64Array): number => 0.5 * (p[1] as number) + (p[2] as number);

function softmax(z: Float64Array): Float64Array {
  let max = Number.NEGATIVE_INFINITY;
  for (const v of z) max = Math.max(max, v);
  let sum = 0;
  const out = new Float64Array(z.length);
  for (let i = 0; i < z.length; i++) {
    out[i] = Math.exp((z[i] as number) - max);
    sum += out[i] as number;
  }
  for (let i = 0; i < z.length; i++) out[i] = (out[i] as number) / sum;
  return out;
}

/** Each example's weight: sources equal, then tiers equal, mean 1. */
function exampleWeights(data: readonly LabelledVector[]): Float64Array {
  const perSource = new Map<string, number>();
  for (const d of data) perSource.set(d.source, (perSource.get(d.source) ?? 0) + 1);
  const raw = data.map((d) => (d.weight ?? 1) / (perSource.get(d.source) as number));
  const perTier = new Map<RoutingTier, number>();
  for (const [i, d] of data.entries()) perTier.set(d.tier, (perTier.get(d.tier) ?? 0) + (raw[i] as number));
  const w = new Float64Array(data.length);
  data.forEach((d, i) => {
    w[i] = (raw[i] as number) / (perTier.get(d.tier) as number);
  });
  const mean = w.reduce((s, v) => s + v, 0) / Math.max(1, w.length);
  return w.map((v) => v / mean);
}

function standardization(data: readonly LabelledVector[], n: number): { mean: number[]; scale: number[] } {
  const mean = new Array<number>(n).fill(0);
  const sq = new Array<number>(n).fill(0);
  for (const d of data)
    for (let j = 0; j < n; j++) {
      const v = d.x[j] ?? 0;
      mean[j] = (mean[j] as number) + v;
      sq[j] = (sq[j] as number) + v * v;
    }
  const count = Math.max(1, data.length);
  const scale = mean.map((s, j) => {
    const m = s / count;
    return Math.sqrt(Math.max((sq[j] as number) / count - m * m, 0)) || 1;
  });
  return { mean: mean.map((s) => s / count), scale };
}

/**
 * Fits the classifier on `data` (at least one example), giving the event loop back after each
 * epoch (a few milliseconds each): the gateway trains a policy's classifier while requests flow.
 */
export async function train(data: readonly LabelledVector[], options: TrainOptions = {}): Promise<ClassifierWeights> {
  const steps = trainSteps(data, options);
  for (;;) {
    const next = steps.next();
    if (next.done) return next.value;
    await new Promise((resolve) => setImmediate(resolve));
  }
}

function* trainSteps(data: readonly LabelledVector[], options: TrainOptions): Generator<void, ClassifierWeights> {
  const { epochs = 300, l2 = 1e-2, rate = 0.05 } = options;
  const n = data[0]?.x.length ?? 0;
  const { mean, scale } = standardization(data, n);
  const xs = data.map((d) =>
    Float64Array.from({ length: n }, (_, j) => ((d.x[j] ?? 0) - (mean[j] as number)) / (scale[j] as number)),
  );
  const ys = data.map((d) => ROUTING_TIERS.indexOf(d.tier));
  const sw = exampleWeights(data);
  const params = new Float64Array(K * n + K);
  const adam = { m: new Float64Array(params.length), v: new Float64Array(params.length) };
  const grad = new Float64Array(params.length);
  const logits = new Float64Array(K);
  for (let epoch = 1; epoch <= epochs; epoch++) {
    grad.fill(0);
    for (let i = 0; i < xs.length; i++) {
      const x = xs[i] as Float64Array;
      for (let k = 0; k < K; k++) {
        let z = params[K * n + k] as number;
        for (let j = 0; j < n; j++) z += (params[k * n + j] as number) * (x[j] as number);
        logits[k] = z;
      }
      const p = softmax(logits);
      for (let k = 0; k < K; k++) {
        const g = ((p[k] as number) - (k === ys[i] ? 1 : 0)) * (sw[i] as number);
        for (let j = 0; j < n; j++) grad[k * n + j] = (grad[k * n + j] as number) + g * (x[j] as number);
        grad[K * n + k] = (grad[K * n + k] as number) + g;
      }
    }
    const count = Math.max(1, xs.length);
    for (let i = 0; i < params.length; i++) {
      const g = (grad[i] as number) / count + (i < K * n ? l2 * (params[i] as number) : 0);
      adam.m[i] = 0.9 * (adam.m[i] as number) + 0.1 * g;
      adam.v[i] = 0.999 * (adam.v[i] as number) + 0.001 * g * g;
      const mh = (adam.m[i] as number) / (1 - 0.9 ** epoch);
      const vh = (adam.v[i] as number) / (1 - 0.999 ** epoch);
      params[i] = (params[i] as number) - (rate * mh) / (Math.sqrt(vh) + 1e-8);
    }
    yield;
  }
  // Seven significant digits, not a fixed number of decimals: a dimension whose spread is under
  // 5e-7 (some of all-MiniLM's, as Ollama serves it) would be kept as a scale of 0, dividing by zero.
  const round = (v: number) => Number(v.toPrecision(7));
  return {
    inputs: n,
    w: Array.from(params.subarray(0, K * n), round),
    b: Array.from(params.subarray(K * n), round),
    mean: mean.map(round),
    scale: scale.map(round),
  };
}
