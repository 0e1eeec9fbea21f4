import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * What the real node may change on this machine, read before it starts and compared after it
 * stops: the global sysctls the kubelet sets, the host's links, routes, mounts, firewall and
 * cgroups. Everything network-side of the node lives in namespaces of its own, so the host's
 * links, routes and firewall must come back exactly; the kubelet's sysctls and cgroups are
 * global and are restored or removed by the teardown.
 */

/** Global (not per network namespace) sysctls the kubelet sets (setupKernelTunables). */
const KUBELET_SYSCTLS = [
  'vm/overcommit_memory',
  'vm/panic_on_oom',
  'kernel/panic',
  'kernel/panic_on_oops',
  'kernel/keys/root_maxkeys',
  'kernel/keys/root_maxbytes',
] as const;

export interface HostState {
  sysctls: Record<string, string>;
  links: string[];
  routes: string[];
  mounts: string[];
  firewall: string[];
  cgroups: string[];
}

const CGROUP_ROOT = '/sys/fs/cgroup';

function run(cmd: string, args: string[]): string {
  try {
    return execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
  } catch {
    return '';
  }
}

function readSysctls(): Record<string, string> {
  return Object.fromEntries(KUBELET_SYSCTLS.map((k) => [k, readFileSync(`/proc/sys/${k}`, 'utf8').trim()]));
}

export function writeSysctls(values: Record<string, string>): void {
  for (const [k, v] of Object.entries(values)) {
    try {
      writeFileSync(`/proc/sys/${k}`, v);
    } catch {
      // Reported by the comparison that follows.
    }
  }
}

/** The directories directly in `dir`; none when it is gone or unreadable (cgroups come and go). */
function subdirs(dir: string): string[] {
  try {
    return readdirSync(dir, { withFileTypes: true })
      .filter((e) => e.isDirectory())
      .map((e) => join(dir, e.name));
  } catch {
    return [];
  }
}

/** Every cgroup directory under the top of each hierarchy, down to `depth` levels. */
function cgroupDirs(depth: number): string[] {
  const out: string[] = [];
  const walk = (dir: string, left: number) => {
    for (const p of subdirs(dir)) {
      out.push(p);
      if (left > 1) walk(p, left - 1);
    }
  };
  // Each hierarchy (cpu, memory, unified, ...) is a directory of /sys/fs/cgroup; its children are cgroups.
  for (const h of subdirs(CGROUP_ROOT)) walk(h, depth);
  return out.sort();
}

export function readHostState(): HostState {
  const strip = (s: string) =>
    s
      .split('\n')
      .filter((l) => l && !l.startsWith('#'))
      // Chain policy counters change with any traffic; the rules are what matter.
      .map((l) => l.replace(/\[\d+:\d+\]/g, ''));
  return {
    sysctls: readSysctls(),
    links: run('ip', ['-o', 'link', 'show'])
      .split('\n')
      .filter(Boolean)
      .map((l) => l.split(':')[1]?.trim() ?? l)
      .sort(),
    routes: run('ip', ['route', 'show', 'table', 'all']).split('\n').filter(Boolean).sort(),
    mounts: readFileSync('/proc/self/mountinfo', 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => l.split(' ')[4] ?? '')
      .sort(),
    firewall: [...strip(run('iptables-save', [])), ...strip(run('nft', ['list', 'ruleset']))],
    cgroups: cgroupDirs(2),
  };
}

/**
 * Differences between two readings, one line each; empty when the host is as it was. Only the
 * entries `ours` claims count: what the node and its runtimes make carries their names and
 * addresses, and the machine's other processes (a neighbour's cgroup ending, another suite's
 * container network) come and go meanwhile without being a leak of ours.
 */
export function diffHostState(before: HostState, after: HostState, ours: (entry: string) => boolean): string[] {
  const out: string[] = [];
  for (const k of Object.keys(before.sysctls)) {
    if (before.sysctls[k] !== after.sysctls[k]) out.push(`sysctl ${k}: ${before.sysctls[k]} -> ${after.sysctls[k]}`);
  }
  const lists = ['links', 'routes', 'mounts', 'firewall', 'cgroups'] as const;
  for (const key of lists) {
    const was = new Set(before[key].filter(ours));
    const now = new Set(after[key].filter(ours));
    for (const x of now) if (!was.has(x)) out.push(`${key}: added ${x}`);
    for (const x of was) if (!now.has(x)) out.push(`${key}: removed ${x}`);
  }
  return out;
}

/**
 * Removes the cgroup tree `name` (the node's root and everything the kubelet and runc made under
 * it) in every hierarchy, deepest first. A cgroup with a process left in it cannot be removed:
 * those are killed first by the caller.
 */
export function removeCgroups(name: string): string[] {
  const left: string[] = [];
  const remove = (dir: string) => {
    for (const p of subdirs(dir)) remove(p);
    try {
      rmdirSync(dir);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') left.push(dir);
    }
  };
  for (const h of subdirs(CGROUP_ROOT)) remove(join(h, name));
  return left;
}

/** Process ids in a cgroup tree, in every hierarchy. */
export function cgroupPids(name: string): number[] {
  const pids = new Set<number>();
  const walk = (dir: string) => {
    try {
      for (const p of readFileSync(join(dir, 'cgroup.procs'), 'utf8').split('\n')) if (p) pids.add(Number(p));
    } catch {
      // not a cgroup, or gone meanwhile
    }
    for (const p of subdirs(dir)) walk(p);
  };
  for (const h of subdirs(CGROUP_ROOT)) walk(join(h, name));
  return [...pids];
}
