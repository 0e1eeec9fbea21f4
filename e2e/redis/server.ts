import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../ollama/server.js';

/**
 * A throwaway Redis from Debian's `redis-server` package on a free loopback port, no
 * persistence, its own process; stop() and start() again on the same port (an outage).
 */

export interface RedisServer {
  url: string;
  port: number;
  stop(): Promise<void>;
  start(): Promise<void>;
  destroy(): Promise<void>;
  /** The server's pid while it runs (benchmarks sample its CPU). */
  pid(): number | undefined;
}

export async function startRedis(): Promise<RedisServer> {
  const dir = mkdtempSync(join(tmpdir(), 'pao-redis-'));
  const port = await freePort();
  let child: ChildProcess | undefined;
  const start = async () => {
    child = spawn(
      'redis-server',
      [
        '--port',
        String(port),
        '--bind',
        '127.0.0.1',
        '--save',
        '',
        '--appendonly',
        'no',
        '--dir',
        dir,
        // Tests stall it on purpose (DEBUG SLEEP).
        '--enable-debug-command',
        'local',
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    // Without the package, spawn emits 'error' (ENOENT); unhandled, that would kill the caller.
    let failed: Error | undefined;
    child.once('error', (err) => {
      failed = err;
    });
    const reap = () => child?.kill('SIGKILL');
    process.once('exit', reap);
    child.once('exit', () => process.off('exit', reap));
    let out = '';
    child.stdout?.on('data', (d: Buffer) => {
      out += d.toString();
    });
    const deadline = Date.now() + 10_000;
    while (!out.includes('Ready to accept connections')) {
      if (failed)
        throw new Error(`redis-server did not start (${failed.message}): Debian's redis-server package is needed`);
      if (child.exitCode !== null) throw new Error(`redis-server exited: ${out}`);
      if (Date.now() > deadline) throw new Error(`redis-server did not start: ${out}`);
      await new Promise((r) => setTimeout(r, 20));
    }
  };
  const stop = () =>
    new Promise<void>((resolve) => {
      const c = child;
      if (!c || c.exitCode !== null || c.signalCode !== null) return resolve();
      c.once('exit', () => resolve());
      c.kill('SIGKILL');
    });
  await start();
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    stop,
    start,
    pid: () => child?.pid,
    destroy: async () => {
      await stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
