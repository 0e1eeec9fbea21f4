import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { capture } from './capture.js';

/** The operator as its own process (`tsx operator/main.ts ...`), as `npm run operator` runs it. */

const ROOT = fileURLToPath(new URL('../../', import.meta.url));

export interface OperatorProcess {
  /** Its API port (health, the management API), from its "operator started" log line. */
  url: string;
  /** Everything it printed so far. */
  output: () => string;
  stop: () => Promise<void>;
}

export async function startOperatorProcess(args: string[], env: NodeJS.ProcessEnv): Promise<OperatorProcess> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'operator/main.ts', ...args], {
    cwd: ROOT,
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  // A test runner that dies mid-test must not leave the operator running.
  const reap = () => child.kill('SIGKILL');
  process.once('exit', reap);
  child.once('exit', () => process.off('exit', reap));
  let out = '';
  const captured = capture(`operator-process-${child.pid ?? 'unknown'}`);
  const take = (d: Buffer) => {
    out += d.toString();
    captured(d.toString());
  };
  child.stdout?.on('data', take);
  child.stderr?.on('data', take);
  const stop = () =>
    new Promise<void>((resolve) => {
      if (child.exitCode !== null || child.signalCode !== null) return resolve();
      child.once('exit', () => resolve());
      child.kill('SIGTERM');
    });
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline) {
    const line = out.split('\n').find((l) => l.includes('"operator started"'));
    if (line) return { url: (JSON.parse(line) as { url: string }).url, output: () => out, stop };
    if (child.exitCode !== null) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  child.kill('SIGKILL');
  throw new Error(`operator did not start:\n${out}`);
}
