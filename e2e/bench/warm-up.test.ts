import { describe, expect, it } from 'vitest';
import { MAX_WARMUP_S, WARMUP_SLICE_S, warmedUp } from './warm-up.js';

describe('the warm-up before a measured row', () => {
  it('goes on while the rate still rises by more than 5 % a slice', () => {
    expect(warmedUp([2300], 0.5)).toBe(false);
    expect(warmedUp([2300, 3900], 0.5)).toBe(false);
    expect(warmedUp([2300, 3900, 4500], 0.5)).toBe(false);
  });

  it('stops once a slice is within 5 % above the one before, or below it', () => {
    expect(warmedUp([2300, 3900, 4500, 4600], 0.5)).toBe(true);
    expect(warmedUp([5000, 4800], 0.5)).toBe(true);
  });

  it('lasts at least the seconds asked, levelled or not', () => {
    const slices = 3;
    const level = Array.from({ length: slices }, () => 5000);
    expect(warmedUp(level.slice(0, -1), slices * WARMUP_SLICE_S)).toBe(false);
    expect(warmedUp(level, slices * WARMUP_SLICE_S)).toBe(true);
  });

  it('stops at the most it may last, even with the rate still moving', () => {
    const most = Math.ceil(MAX_WARMUP_S / WARMUP_SLICE_S);
    const rising = Array.from({ length: most }, (_, i) => 1000 * 1.1 ** i);
    expect(warmedUp(rising.slice(0, -1), 0.5)).toBe(false);
    expect(warmedUp(rising, 0.5)).toBe(true);
  });

  it('lasts the seconds asked even beyond that most', () => {
    const slices = Math.ceil(MAX_WARMUP_S / WARMUP_SLICE_S) + 2;
    const level = Array.from({ length: slices }, () => 5000);
    expect(warmedUp(level.slice(0, -1), slices * WARMUP_SLICE_S)).toBe(false);
    expect(warmedUp(level, slices * WARMUP_SLICE_S)).toBe(true);
  });
});
