import { describe, expect, it } from 'vitest';
import { medianRuns, type Run } from './gateways.js';

const run = (target: Run['target'], c: number, rps: number, cpuPct: number): Run => ({
  target,
  dialect: 'chat',
  mode: 'json',
  c,
  load: {
    ok: rps * 4,
    rps,
    meanMs: 1,
    p50Ms: 1,
    p99Ms: 2,
    maxMs: 3,
    non2xx: 0,
    errors: 0,
    timeouts: 0,
    statusCodes: { 200: rps * 4 },
    elapsedS: 4,
    loadCpuPct: 20,
    warmupRps: [],
  },
  cpuPct,
  rssMiB: 100,
  doubleCpuPct: 30,
  backingCpuPct: {},
});

describe("a row's rounds", () => {
  it("keep each target's median run by rate, whole (its CPU is that run's), per row", () => {
    const rows = medianRuns([
      run('bare', 16, 9_000, 90),
      run('ours', 16, 5_000, 95),
      run('bare', 16, 4_500, 80),
      run('ours', 16, 5_200, 97),
      run('bare', 16, 6_000, 85),
      run('ours', 16, 2_000, 60),
      run('ours', 128, 4_000, 99),
    ]);
    expect(rows.map((r) => [r.target, r.c, r.load.rps, r.cpuPct])).toEqual([
      ['bare', 16, 6_000, 85],
      ['ours', 16, 5_000, 95],
      ['ours', 128, 4_000, 99],
    ]);
  });

  it('of two runs keep the slower: a lucky round does not make a row pass', () => {
    expect(medianRuns([run('ours', 1, 1_200, 90), run('ours', 1, 1_000, 90)])[0]?.load.rps).toBe(1_000);
  });
});
