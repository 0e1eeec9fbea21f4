/**
 * How many times slower work gets when its input grows: the fastest of several timings at a small
 * and at a large size, each timing repeated until it lasts a few milliseconds. The fastest run is
 * the one a loaded machine disturbed least, and the ratio cancels the machine's speed, so a unit
 * test can catch work that grows faster than its input without asserting a time figure (those
 * live in `npm run bench`). Linear work gives about `large / small`; quadratic, its square.
 */
export function growth(work: (size: number) => () => void, small: number, large: number, runs = 7): number {
  const fastest = (size: number) => {
    const run = work(size);
    run();
    let reps = 1;
    // Enough repetitions that one timing is a few milliseconds, far above the clock's resolution.
    for (let t = 0; reps < 1 << 16; reps *= 2) {
      const started = performance.now();
      for (let i = 0; i < reps; i++) run();
      t = performance.now() - started;
      if (t >= 3) break;
    }
    let best = Number.POSITIVE_INFINITY;
    for (let r = 0; r < runs; r++) {
      const started = performance.now();
      for (let i = 0; i < reps; i++) run();
      best = Math.min(best, (performance.now() - started) / reps);
    }
    return best;
  };
  return fastest(large) / fastest(small);
}
