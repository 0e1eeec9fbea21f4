import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * The e2e tier runs in two lanes side by side (two vitest workers), one file at a time in each:
 *
 * - `cluster`: every suite that uses the shared control plane or the real node, and the heavy or
 *   measuring ones of the rest (engines on the CPU, memory levelled off, load, timing, browsers,
 *   fixed ports, the docs' commands);
 * - `light`: suites on doubles and small servers of their own (free ports, temp dirs) that measure
 *   no time or memory.
 *
 * The control plane's suites waited on pods, probes and leases with the CPU half idle (40-55 %
 * in a run's minutes); the light lane fills that. The secret scan runs alone, after both.
 */

export type Lane = 'cluster' | 'light' | 'scan';

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
  return m && LIGHT.has(m[1] as string) ? 'light' : 'cluster';
}

const LOCK_WAIT_MS = 250;

/** A lane's lock: a directory made atomically, holding its owner's pid (a dead owner's is taken over). */
export class LaneLock {
  private readonly dir: string;

  constructor(root: string, lane: Exclude<Lane, 'scan'>) {
    this.dir = join(root, `${lane}.lock`);
  }

  async acquire(): Promise<void> {
    for (;;) {
      try {
        mkdirSync(this.dir);
        writeFileSync(join(this.dir, 'pid'), String(process.pid));
        return;
      } catch {
        if (this.ownerGone()) rmSync(this.dir, { recursive: true, force: true });
        else await new Promise((r) => setTimeout(r, LOCK_WAIT_MS));
      }
    }
  }

  release(): void {
    rmSync(this.dir, { recursive: true, force: true });
  }

  private ownerGone(): boolean {
    let pid: number;
    try {
      pid = Number(readFileSync(join(this.dir, 'pid'), 'utf8'));
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
}
