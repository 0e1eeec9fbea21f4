import { spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { startRedis } from '../redis/server.js';

/**
 * e2e/setup.sh on a machine that lacks what it needs, as a user who is not root: it installs
 * nothing and answers at once, in one line naming each missing Debian package (e2e stops, bench
 * goes on). The machine is this one seen through a PATH that holds only bash, id and dirname, so every
 * command-checked package is missing and every file-checked one is present (setup ran before).
 */

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const NOBODY = '65534';
const bin = mkdtempSync(join(tmpdir(), 'pao-setup-path-'));
// Read and run by nobody: the temp dir is made 0700.
chmodSync(bin, 0o755);
const which = (tool: string) => spawnSync('bash', ['-c', `command -v ${tool}`], { encoding: 'utf8' }).stdout.trim();
for (const tool of ['bash', 'id', 'dirname']) symlinkSync(which(tool), join(bin, tool));
const SETPRIV = which('setpriv');
afterAll(() => rmSync(bin, { recursive: true, force: true }));

/** e2e/setup.sh as nobody; killed (status null) if it does not answer within 30 s. */
function setupAsNobody(mode: string) {
  return spawnSync(
    SETPRIV,
    [`--reuid=${NOBODY}`, `--regid=${NOBODY}`, '--clear-groups', join(bin, 'bash'), 'e2e/setup.sh', mode],
    { cwd: ROOT, encoding: 'utf8', env: { PATH: bin, HOME: tmpdir() }, timeout: 30_000 },
  );
}

describe('e2e/setup.sh, not as root, on a machine missing packages', () => {
  it('e2e: installs nothing, stops at once, one line naming each missing package', () => {
    const run = setupAsNobody('e2e');
    expect(run.status).toBe(1);
    expect(run.stdout).toBe('');
    const lines = run.stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/^e2e setup: missing Debian packages: /);
    const named = /packages: ([^(]+) \(/.exec(lines[0] ?? '')?.[1]?.split(' ');
    expect(named).toEqual([
      'unzip',
      'util-linux',
      'curl',
      'python3-venv',
      'redis-server',
      'podman',
      'runc',
      'debootstrap',
      'uidmap',
      'fuse-overlayfs',
      // The real node's (containernetworking-plugins is checked by a file, present here).
      'containerd',
      'iptables',
      'ipset',
      'conntrack',
    ]);
  });

  it('bench: names what it lacks in one line and goes on (exit 0), for its targets to skip', () => {
    const run = setupAsNobody('bench');
    expect(run.status).toBe(0);
    const lines = run.stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(
      /^bench setup: missing Debian packages: unzip util-linux curl python3-venv redis-server \(/,
    );
  });
});

describe('a Redis for the suites, without redis-server installed', () => {
  it('rejects with the package it needs instead of crashing the process', async () => {
    const path = process.env.PATH;
    process.env.PATH = bin;
    try {
      await expect(startRedis()).rejects.toThrow(
        /redis-server did not start \(spawn redis-server ENOENT\): Debian's redis-server package is needed/,
      );
    } finally {
      process.env.PATH = path;
    }
  });
});
