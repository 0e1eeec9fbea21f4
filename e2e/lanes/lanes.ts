import { randomUUID } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { cacheRoot } from '../support/cache-root.js';

/**
 * The e2e tier runs on two vitest workers, and each file is in one lane:
 *
 * - `cluster`: the suites of the shared control plane (e2e/control-plane/) and of the real node
 *   (e2e/real-node/), one at a time: they create and break the same cluster, and mostly wait on
 *   its pods, probes and leases;
 * - `local`: the heavy or measuring suites on this machine's processes alone (engines on the CPU,
 *   memory levelled off, kill rounds, load, browsers, coding agents, the docs' commands), one at
 *   a time, so that no two of them share the cores;
 * - `light`: suites on doubles and small servers of their own (free ports, temp dirs) that
 *   measure nothing: they run beside anything, with no lock;
 * - `scan`: the secret scan, alone after every other file, since it reads their output.
 *
 * A file waits for its lane's lock (e2e/lanes/lane-setup.ts). The workers take files in the order
 * `laneOrder` gives, which keeps the two lanes with locks on different workers side by side, so a
 * worker seldom waits: the tier lasts about the longer lane, not the two lanes' sum.
 */

export type Lane = 'cluster' | 'local' | 'light' | 'scan';
export type LockedLane = 'cluster' | 'local';

/** The light lane, by file name under e2e/no-cluster/. */
const LIGHT = new Set([
  'aws-double-shapes',
  'budgets-postgres',
  'chart-lint',
  'conformance',
  'hosted-openapi',
  'hosted-providers',
  'hosted-specs',
  'mcp-clients',
  'mcp-conformance',
  'mcp-gateway',
  'mcp-governance',
  'mcp-guardrails',
  'model-server',
  'setup',
  'spec-fuzz',
  'stored-responses',
  'tracing',
  'usage-journey',
  'usage-postgres',
  'usage-store-postgres',
]);

export function laneOf(file: string): Lane {
  if (file.endsWith('secret-scan.e2e.test.ts')) return 'scan';
  const m = /e2e\/no-cluster\/([^/]+)\.e2e\.test\.ts$/.exec(file);
  if (!m) return 'cluster';
  return LIGHT.has(m[1] as string) ? 'light' : 'local';
}

/** A suite's name for its recorded time: its path from e2e/, e.g. `real-node/real-pods`. */
export function suiteKey(file: string): string {
  return /e2e\/(.+)\.e2e\.test\.ts$/.exec(file)?.[1] ?? file;
}

/**
 * Seconds each long suite ran on a 2-core machine (one run, 2026-11-30), for the order of a run
 * that has no times of its own yet (a fresh machine); every other suite counts DEFAULT_SECONDS.
 * Only the order depends on these, never what runs.
 */
const TYPICAL_SECONDS: Record<string, number> = {
  'real-node/real-pods': 304,
  'control-plane/faults': 73,
  'control-plane/docs': 49,
  'no-cluster/usage-crash': 169,
  'no-cluster/coding-agents': 94,
  'no-cluster/soak': 82,
  'no-cluster/vllm': 41,
  'no-cluster/ollama': 36,
  'no-cluster/routing': 30,
  'no-cluster/usage-postgres': 61,
  'no-cluster/spec-fuzz': 60,
  'no-cluster/mcp-gateway': 31,
};
const DEFAULT_SECONDS = 15;

/** What each suite ran in this machine's last run (lane-setup.ts writes them), else the typical figure. */
export class SuiteTimes {
  private readonly dir: string;

  constructor(dir = join(cacheRoot(), 'e2e-lanes')) {
    this.dir = dir;
  }

  seconds(file: string): number {
    const key = suiteKey(file);
    try {
      const recorded = Number(readFileSync(this.fileFor(file), 'utf8'));
      if (Number.isFinite(recorded) && recorded >= 0) return recorded;
    } catch {
      // not run here yet
    }
    return TYPICAL_SECONDS[key] ?? DEFAULT_SECONDS;
  }

  record(file: string, seconds: number): void {
    mkdirSync(this.dir, { recursive: true });
    writeFileSync(this.fileFor(file), seconds.toFixed(1));
  }

  /** One small file per suite: two workers record at once without sharing a file. */
  private fileFor(file: string): string {
    return join(this.dir, `${suiteKey(file).replaceAll('/', '__')}.s`);
  }
}

const WORKERS = 2;

/**
 * The order the workers take the files in, found by playing the run out with each file's
 * expected seconds: whenever a worker is free it gets the longest file of the locked lane the
 * other worker is not in (the lane with more left first), else the longest light file, and only
 * when nothing else is left a file that will wait. The secret scan goes last.
 */
export function laneOrder<T>(items: readonly T[], fileOf: (item: T) => string, seconds: (file: string) => number): T[] {
  const longestFirst = (lane: Lane) =>
    items
      .filter((t) => laneOf(fileOf(t)) === lane)
      .map((t) => ({ item: t, s: seconds(fileOf(t)) }))
      .sort((a, b) => b.s - a.s);
  const left: Record<Exclude<Lane, 'scan'>, { item: T; s: number }[]> = {
    cluster: longestFirst('cluster'),
    local: longestFirst('local'),
    light: longestFirst('light'),
  };
  const secondsLeft = (lane: LockedLane) => left[lane].reduce((sum, f) => sum + f.s, 0);
  const freeAt = new Array<number>(WORKERS).fill(0);
  const running = new Array<Lane | undefined>(WORKERS).fill(undefined);
  const lockedUntil: Record<LockedLane, number> = { cluster: 0, local: 0 };
  const order: T[] = [];
  while (left.cluster.length + left.local.length + left.light.length > 0) {
    const w = freeAt.indexOf(Math.min(...freeAt));
    const now = freeAt[w] as number;
    const busy = new Set(running.filter((_, i) => i !== w && (freeAt[i] as number) > now));
    const open = (['cluster', 'local'] as const)
      .filter((lane) => left[lane].length > 0 && !busy.has(lane))
      .sort((a, b) => secondsLeft(b) - secondsLeft(a));
    const lane: Exclude<Lane, 'scan'> =
      open[0] ?? (left.light.length > 0 ? 'light' : left.cluster.length > 0 ? 'cluster' : 'local');
    const next = left[lane].shift() as { item: T; s: number };
    const start = lane === 'light' ? now : Math.max(now, lockedUntil[lane]);
    freeAt[w] = start + next.s;
    running[w] = lane;
    if (lane !== 'light') lockedUntil[lane] = freeAt[w] as number;
    order.push(next.item);
  }
  return [...order, ...items.filter((t) => laneOf(fileOf(t)) === 'scan')];
}

const LOCK_WAIT_MS = 250;

/** A lock: a directory made atomically, holding its owner's pid (a dead owner's is taken over). */
export class LaneLock {
  private readonly dir: string;

  /** A locked lane's one lock, or with `light` a marker of its own, which only the scan waits for. */
  constructor(root: string, lane: LockedLane | 'light') {
    this.dir = join(root, lane === 'light' ? `light.${randomUUID()}.lock` : `${lane}.lock`);
  }

  async acquire(): Promise<void> {
    for (;;) {
      try {
        mkdirSync(this.dir);
        writeFileSync(join(this.dir, 'pid'), String(process.pid));
        return;
      } catch {
        if (ownerGone(this.dir)) rmSync(this.dir, { recursive: true, force: true });
        else await sleep(LOCK_WAIT_MS);
      }
    }
  }

  release(): void {
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/**
 * Resolves once no light file is running. The scan is the last file given out, so none starts
 * after it; its grace before the locks covers one given out just before it taking its marker.
 */
export async function lightFilesDone(root: string): Promise<void> {
  for (;;) {
    const live = readdirSync(root).filter((d) => d.startsWith('light.') && !ownerGone(join(root, d)));
    if (live.length === 0) return;
    await sleep(LOCK_WAIT_MS);
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

function ownerGone(dir: string): boolean {
  let pid: number;
  try {
    pid = Number(readFileSync(join(dir, 'pid'), 'utf8'));
  } catch {
    return false; // being made right now
  }
  try {
    process.kill(pid, 0);
    return false;
  } catch {
    return true;
  }
}
