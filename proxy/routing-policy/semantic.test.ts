import { describe, expect, it } from 'vitest';
import type { RoutingTier } from '../../crds/routing-policy.js';
import { DEFAULT_THRESHOLDS, tierOf } from './scorer.js';
import { blend, ExampleIndex, normalized, tierMidpoint } from './semantic.js';

const v = (...xs: number[]) => new Float32Array(xs);
const t = DEFAULT_THRESHOLDS.Balanced;

describe('tierMidpoint', () => {
  it('lands each tier in its own interval, under every objective', () => {
    for (const thresholds of Object.values(DEFAULT_THRESHOLDS))
      for (const tier of ['Light', 'Standard', 'Frontier'] as RoutingTier[])
        expect(tierOf(tierMidpoint(tier, thresholds), thresholds)).toBe(tier);
  });
});

describe('ExampleIndex', () => {
  const index = new ExampleIndex([
    { tier: 'Light', vector: v(1, 0, 0) },
    { tier: 'Light', vector: v(0.9, 0.1, 0) },
    { tier: 'Standard', vector: v(0, 1, 0) },
    { tier: 'Frontier', vector: v(0, 0, 1) },
    { tier: 'Frontier', vector: v(0, 0.1, 0.9) },
  ]);

  it('votes for the tier of the nearest examples', () => {
    expect(tierOf(index.score(v(1, 0.05, 0), 2, t), t)).toBe('Light');
    expect(tierOf(index.score(v(0, 0.05, 1), 2, t), t)).toBe('Frontier');
    expect(tierOf(index.score(v(0.02, 1, 0.02), 1, t), t)).toBe('Standard');
  });

  it('compares directions, not lengths', () => {
    expect(index.score(v(10, 0.5, 0), 2, t)).toBeCloseTo(index.score(v(1, 0.05, 0), 2, t), 6);
  });

  it('weights neighbours by similarity: a near Frontier outvotes a far Light', () => {
    const s = index.score(v(0.1, 0, 1), 2, t);
    expect(s).toBeGreaterThan(tierMidpoint('Standard', t));
  });

  it('gives the middle of Standard when nothing is similar, or nothing is there', () => {
    expect(index.score(v(-1, 0, 0), 1, t)).toBe(tierMidpoint('Standard', t));
    expect(new ExampleIndex([]).score(v(1, 0), 5, t)).toBe(tierMidpoint('Standard', t));
    expect(index.score(v(0, 0, 0), 3, t)).toBe(tierMidpoint('Standard', t));
  });

  it('takes the k most similar of many', () => {
    const many = Array.from({ length: 200 }, (_, i) => ({
      tier: (i < 190 ? 'Light' : 'Frontier') as RoutingTier,
      vector: i < 190 ? v(1, i / 1000, 0) : v(0, 0, 1),
    }));
    const big = new ExampleIndex(many);
    expect(big.size).toBe(200);
    expect(tierOf(big.score(v(0, 0, 1), 5, t), t)).toBe('Frontier');
    expect(tierOf(big.score(v(1, 0, 0), 5, t), t)).toBe('Light');
  });
});

describe('blend', () => {
  it('weights the vote against the features', () => {
    expect(blend(0.2, 0.8, 0)).toBe(0.2);
    expect(blend(0.2, 0.8, 1)).toBe(0.8);
    expect(blend(0.2, 0.8, 0.5)).toBeCloseTo(0.5);
    expect(blend(0.2, 0.8, 7)).toBe(0.8);
    expect(blend(0.2, 0.8, Number.NaN)).toBeCloseTo(0.5);
  });
});

describe('normalized', () => {
  it('has length 1, or stays zero', () => {
    const n = normalized(v(3, 4));
    expect(Math.hypot(n[0] ?? 0, n[1] ?? 0)).toBeCloseTo(1);
    expect([...normalized(v(0, 0))]).toEqual([0, 0]);
  });
});
