/**
 * How long a load generator warms a target up before measuring it: until its rate levels off. A fixed 0.5 s was
 * not enough on a slower machine: V8 was still compiling a gateway's request path (much more code than the bare
 * pass-through's), and the first row after a start measured that (chat json at 16 callers, the same build and
 * machine: 43.5 % of bare's rate after 0.5 s of warm-up, 99.7 % after 3 s; e2e/bench/RESULTS.md 26).
 */

/** A warm-up slice: short enough to see the rate move, long enough for thousands of requests. */
export const WARMUP_SLICE_S = 2;
/** Warm-up stops here, levelled or not (unless more was asked): a rate that keeps moving is reported with the row, not waited for. */
export const MAX_WARMUP_S = 16;
/** The rate has levelled off once a slice's is at most this fraction above the slice's before. */
const LEVELLED = 0.05;

/** The longest a warm-up of at least `minS` seconds lasts: what a caller waiting on it allows. */
export const longestWarmUpS = (minS: number): number => Math.max(minS, MAX_WARMUP_S);

/**
 * Whether the warm-up is over, given each slice's rate so far: `minS` seconds spent, then the last slice no more
 * than 5 % above the one before (or longestWarmUpS spent).
 */
export function warmedUp(rates: readonly number[], minS: number): boolean {
  const spent = rates.length * WARMUP_SLICE_S;
  if (spent >= longestWarmUpS(minS)) return true;
  const last = rates[rates.length - 1];
  const before = rates[rates.length - 2];
  if (spent < minS || last === undefined || before === undefined) return false;
  return last <= before * (1 + LEVELLED);
}
