import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { NODE_MAJOR } from '../../crds/constants.js';

/**
 * The README's commands on a machine whose own Node is older than the project's (Node 20 on a
 * fresh machine of this kind): `npm start` serves and `npm test` runs, unchanged, because the npm
 * scripts start through e2e/node/node24.sh, which brings Node 24 from the npm registry. The
 * machine's older Node (and its npm) is found on PATH or in /usr/bin; the tier itself runs on Node
 * 24, put first by .ci/run, so the older one is looked for behind it.
 */

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const majorOf = (node: string) =>
  Number(spawnSync(node, ['-p', 'process.versions.node.split(".")[0]'], { encoding: 'utf8' }).stdout.trim());
const OLD_NODE = [...(process.env.PATH ?? '').split(delimiter), '/usr/local/bin', '/usr/bin']
  .map((dir) => join(dir, 'node'))
  .find((node) => existsSync(node) && majorOf(node) < NODE_MAJOR);
const OLD_BIN = OLD_NODE ? dirname(OLD_NODE) : '';
if (!OLD_NODE) console.log(`[e2e] no Node older than ${NODE_MAJOR} on this machine: the newcomer suite is skipped`);

const work = mkdtempSync(join(tmpdir(), 'pao-newcomer-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

/** The environment of a shell on that machine: its older Node first, npm the one beside it (or on PATH). */
const oldEnv = (extra: Record<string, string> = {}) => ({
  ...process.env,
  PATH: `${OLD_BIN}${delimiter}/usr/bin${delimiter}/bin`,
  npm_config_update_notifier: 'false',
  NO_COLOR: '1',
  ...extra,
});
const npm = () => (existsSync(join(OLD_BIN, 'npm')) ? join(OLD_BIN, 'npm') : 'npm');

function exited(child: ChildProcess): Promise<number | null> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve(child.exitCode);
    else child.once('exit', (code) => resolve(code));
  });
}

describe.skipIf(!OLD_NODE)(`the README's commands with the machine's Node older than ${NODE_MAJOR}`, () => {
  it('npm start serves: models listed to the demo key, and Ctrl-C stops it', async () => {
    // Ports 0 and a usage file of its own: the demo's fixed ports may be taken by another suite.
    const child = spawn(npm(), ['start'], {
      cwd: ROOT,
      env: oldEnv({
        PORT: '0',
        METRICS_PORT: '0',
        USAGE_DB: join(work, 'usage.db'),
        USAGE_SPOOL_DIR: join(work, 'spool'),
      }),
      stdio: ['ignore', 'pipe', 'pipe'],
      // Its own process group, as a terminal's foreground job: Ctrl-C signals every process of it.
      detached: true,
    });
    const group = -(child.pid as number);
    const alive = () => {
      try {
        process.kill(group, 0);
        return true;
      } catch {
        return false;
      }
    };
    let out = '';
    child.stdout?.on('data', (d: Buffer) => {
      out += d.toString();
    });
    child.stderr?.on('data', (d: Buffer) => {
      out += d.toString();
    });
    try {
      const url = await new Promise<string>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no "proxy listening" within 120 s:\n${out}`)), 120_000);
        const look = () => {
          const line = out.split('\n').find((l) => l.includes('"proxy listening"'));
          if (line) {
            clearTimeout(timer);
            resolve((JSON.parse(line) as { url: string }).url);
          }
        };
        child.stdout?.on('data', look);
        child.once('exit', () => reject(new Error(`npm start exited:\n${out}`)));
      });
      expect(out).toContain(
        `Node ${spawnSync(OLD_NODE as string, ['--version'], { encoding: 'utf8' }).stdout.trim()} is older`,
      );
      const res = await fetch(`${url}/openai/v1/models`, { headers: { authorization: 'Bearer sk-local-demo' } });
      expect(res.status).toBe(200);
      const ids = ((await res.json()) as { data: Array<{ id: string }> }).data.map((m) => m.id);
      expect(ids).toEqual(expect.arrayContaining(['auto', 'llama3.2:3b', 'qwen2.5:0.5b']));
      // Ctrl-C: the gateway drains and stops, and nothing of the command is left running.
      process.kill(group, 'SIGINT');
      await exited(child);
      await expect.poll(alive, { timeout: 30_000 }).toBe(false);
      expect(out, out).toContain('"msg":"stopped"');
    } finally {
      if (alive()) process.kill(group, 'SIGKILL');
    }
  });

  it('npm test runs the unit tests on Node 24 (a test there asserts the Node it runs on)', () => {
    const run = spawnSync(npm(), ['test', '--', 'crds/product-version.test.ts'], {
      cwd: ROOT,
      env: oldEnv(),
      encoding: 'utf8',
      timeout: 180_000,
    });
    expect(run.status, `${run.stdout}\n${run.stderr}`).toBe(0);
    expect(run.stdout).toMatch(/Tests\s+\S*\s*3 passed/);
  });
});
