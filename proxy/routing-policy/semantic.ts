import type { RoutingTier } from '../../crds/routing-policy.js';

/**
 * The optional semantic scorer of a RoutingPolicy: labelled example prompts, embedded by the
 * policy's embedding model, vote on a new prompt's difficulty by their similarity to it (cosine
 * k nearest neighbours). Pure: the embedding calls are the gateway's (the policy's wiring); this
 * file holds the vectors and the arithmetic.
 */

interface Thresholds {
  standard: number;
  frontier: number;
}

/** Defaults of the policy's scorer.semantic (crds/routing-policy.ts). */
export const DEFAULT_NEIGHBOURS = 5;
export const DEFAULT_SEMANTIC_WEIGHT = 0.5;

/**
 * Each tier as the middle of its score interval under the thresholds: a vote of Standard
 * neighbours lands in the Standard interval whatever the objective's thresholds are.
 */
export function tierMidpoint(tier: RoutingTier, t: Thresholds): number {
  if (tier === 'Light') return t.standard / 2;
  if (tier === 'Standard') return (t.standard + t.frontier) / 2;
  return (t.frontier + 1) / 2;
}

/** `v` scaled to length 1 (a copy); all zeros stays zeros (it is similar to nothing). */
export function normalized(v: Float32Array): Float32Array {
  let sum = 0;
  for (let i = 0; i < v.length; i++) sum += (v[i] ?? 0) * (v[i] ?? 0);
  const out = new Float32Array(v.length);
  if (sum === 0) return out;
  const inv = 1 / Math.sqrt(sum);
  for (let i = 0; i < v.length; i++) out[i] = (v[i] ?? 0) * inv;
  return out;
}

function dot(a: Float32Array, b: Float32Array): number {
  const n = Math.min(a.length, b.length);
  let s = 0;
  for (let i = 0; i < n; i++) s += (a[i] as number) * (b[i] as number);
  return s;
}

interface Neighbour {
  tier: RoutingTier;
  similarity: number;
}

/** The labelled examples, their vectors normalized once, so that a query costs one dot product per example. */
export class ExampleIndex {
  private readonly examples: ReadonlyArray<{ tier: RoutingTier; vector: Float32Array }>;

  constructor(examples: ReadonlyArray<{ tier: RoutingTier; vector: Float32Array }>) {
    this.examples = examples.map((e) => ({ tier: e.tier, vector: normalized(e.vector) }));
  }

  get size(): number {
    return this.examples.length;
  }

  /** The `k` examples most similar to `unit` (a normalized vector), most similar first. */
  private nearest(unit: Float32Array, k: number): Neighbour[] {
    const top: Neighbour[] = [];
    for (const e of this.examples) {
      const similarity = dot(unit, e.vector);
      if (top.length === k && similarity <= (top[k - 1] as Neighbour).similarity) continue;
      // Insertion into a sorted list of at most k: k is small (5 by default), a heap would cost more.
      const entry = { tier: e.tier, similarity };
      if (top.length < k) top.push(entry);
      let i = top.length - 1;
      while (i > 0 && (top[i - 1] as Neighbour).similarity < similarity) {
        top[i] = top[i - 1] as Neighbour;
        i--;
      }
      top[i] = entry;
    }
    return top;
  }

  /**
   * The difficulty the `neighbours` nearest examples vote for, 0..1: the mean of their tiers'
   * midpoints, each weighted by its cosine similarity (a dissimilar example has no say). With no
   * example, or none similar at all, the middle of the Standard interval: no evidence either way.
   */
  score(vector: Float32Array, neighbours: number, thresholds: Thresholds): number {
    const k = Math.max(1, Math.floor(neighbours));
    const near = this.nearest(normalized(vector), k);
    let weight = 0;
    let sum = 0;
    for (const n of near) {
      if (n.similarity <= 0) continue;
      weight += n.similarity;
      sum += n.similarity * tierMidpoint(n.tier, thresholds);
    }
    return weight === 0 ? tierMidpoint('Standard', thresholds) : sum / weight;
  }
}

/** The built-in features' score and the neighbours' vote, `weight` (0..1) the vote's share. */
export function blend(featureScore: number, semanticScore: number, weight: number): number {
  const w = Math.min(1, Math.max(0, Number.isFinite(weight) ? weight : DEFAULT_SEMANTIC_WEIGHT));
  return (1 - w) * featureScore + w * semanticScore;
}
