import { readFileSync } from 'node:fs';

/**
 * A process's resident memory, sampled while a suite loads it, and the moment it levelled off.
 *
 * Memory is judged only once it has levelled off. A fresh Node process's RSS climbs for a minute
 * or more with no leak at all (JIT code, V8's heap sized up towards its cap, SQLite's page cache),
 * and more slowly on a machine busy with other work: growth measured from the start measures
 * warm-up (CI failed that way twice: 269 -> 331 MiB inside a 60 s window with another job
 * running, level at 350 MiB after 300 s). Levelled: LEVEL_BLOCKS blocks of 10 s in a row, none
 * of which peaked above everything before it by more than GC's noise. A leak never levels off.
 */

/** A 10 s block whose RSS peak is within this of the peak before it has not grown: GC noise. */
const NOISE_MIB = 6;
const LEVEL_BLOCKS = 3;
const BLOCK_MS = 10_000;

export const rssMiB = (pid: number): number =>
  Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0) / 1024;

export class RssSamples {
  readonly all: Array<{ at: number; rss: number }> = [];
  private readonly started = performance.now();
  private readonly timer: NodeJS.Timeout;

  constructor(pid: number, everyMs = 1000) {
    this.timer = setInterval(() => this.all.push({ at: this.now(), rss: rssMiB(pid) }), everyMs);
  }

  /** ms since sampling began. */
  now(): number {
    return performance.now() - this.started;
  }

  stop(): void {
    clearInterval(this.timer);
  }

  /** The highest sample in [fromMs, toMs). */
  peak(fromMs = 0, toMs = Number.POSITIVE_INFINITY): number {
    return Math.max(0, ...this.all.filter((s) => s.at >= fromMs && s.at < toMs).map((s) => s.rss));
  }

  /** When RSS had levelled off (ms since sampling began), or undefined while it still rises. */
  levelledAt(): number | undefined {
    let flat = 0;
    for (let b = 1; (b + 1) * BLOCK_MS <= this.now(); b++) {
      const before = this.peak(0, b * BLOCK_MS);
      flat = this.peak(b * BLOCK_MS, (b + 1) * BLOCK_MS) <= before + NOISE_MIB ? flat + 1 : 0;
      if (flat >= LEVEL_BLOCKS) return (b + 1) * BLOCK_MS;
    }
    return undefined;
  }

  /** Waits, while the caller's load runs, until RSS levelled off or `maxMs` passed; the moment, or undefined. */
  async level(maxMs: number): Promise<number | undefined> {
    for (;;) {
      const at = this.levelledAt();
      if (at !== undefined || this.now() >= maxMs) return at;
      await new Promise((r) => setTimeout(r, 2_000));
    }
  }
}
