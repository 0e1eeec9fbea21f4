import { describe, expect, it } from 'vitest';
import { type LabelledVector, probabilities, scoreOf, train } from './classifier.js';

describe('the classifier', () => {
  it('keeps a dimension of tiny spread usable once its weights are written (a scale of 0 made every score NaN)', async () => {
    const data: LabelledVector[] = [];
    for (let i = 0; i < 60; i++) {
      const tier = (['Light', 'Standard', 'Frontier'] as const)[i % 3] as LabelledVector['tier'];
      // Dimension 0 tells the tiers apart; dimension 1 barely moves (spread 2e-7).
      data.push({ x: Float32Array.from([i % 3, (i % 2) * 4e-7]), tier, source: `s${i % 4}` });
    }
    const w = await train(data, { epochs: 200 });
    expect(w.scale.every((s) => s > 0)).toBe(true);
    const light = scoreOf(probabilities(w, Float32Array.from([0, 2e-7])));
    const frontier = scoreOf(probabilities(w, Float32Array.from([2, 2e-7])));
    expect(Number.isFinite(light) && Number.isFinite(frontier)).toBe(true);
    expect(frontier).toBeGreaterThan(light);
  });
});
