import { type ChildProcess, spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { capture } from './capture.js';

/** The proxy as its own process: the source through tsx, as `npm start` runs it, or dist/ as the image does. */

const ROOT = fileURLToPath(new URL('../../', import.meta.url));

/** A ModelDeployment document routing `model` to an OpenAI-compatible server (a double) at `url`. */
export const routedModel = (model: string, url: string): string => `apiVersion: ai.platform/v1beta1
kind: ModelDeployment
metadata: { name: llama }
spec: { model: "${model}", serviceName: llama, endpoint: "${url}" }
`;

/**
 * A standalone proxy's files in `dir`: config.yaml holding `documents`, keys.txt holding `keys`
 * as written; returns the flags that name them.
 */
export function standaloneFiles(dir: string, documents: string[], keys: string): string[] {
  writeFileSync(join(dir, 'config.yaml'), documents.join('---\n'));
  writeFileSync(join(dir, 'keys.txt'), keys);
  return ['--config', join(dir, 'config.yaml'), '--keys-file', join(dir, 'keys.txt')];
}

export interface ProxyProcess {
  child: ChildProcess;
  /** http://127.0.0.1:<port> from the proxy's "proxy listening" log line. */
  base: string;
  /** Where its metrics are served (their own port), from the same line. */
  metrics: string;
  /** Everything it printed so far. */
  output: () => string;
  stop: (signal: NodeJS.Signals) => Promise<number | null>;
}

/**
 * `compiled`: dist/proxy/main.js (after `npm run build`), what the image runs; benchmarks measure
 * that rather than the TypeScript loader. The e2e tier's setup builds it and asks for it
 * (PAO_PROXY_ENTRY=dist); unit tests, which have no build, run the source through tsx.
 */
export async function startProxyProcess(
  args: string[],
  env: NodeJS.ProcessEnv = process.env,
  opts: { compiled?: boolean } = {},
): Promise<ProxyProcess> {
  // node itself (with tsx as a loader): one process, so SIGKILL (a crash test) leaves no orphan.
  const compiled = opts.compiled ?? process.env.PAO_PROXY_ENTRY === 'dist';
  const entry = compiled ? ['dist/proxy/main.js'] : ['--import', 'tsx', 'proxy/main.ts'];
  const child = spawn(process.execPath, [...entry, ...args, '--port', '0', '--metrics-port', '0'], {
    cwd: ROOT,
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  // A test runner that dies mid-test must not leave the proxy running.
  const reap = () => child.kill('SIGKILL');
  process.once('exit', reap);
  child.once('exit', () => process.off('exit', reap));
  let out = '';
  const captured = capture(`proxy-process-${child.pid ?? 'unknown'}`);
  const take = (d: Buffer) => {
    out += d.toString();
    captured(d.toString());
  };
  child.stdout?.on('data', take);
  child.stderr?.on('data', take);
  const stop = (signal: NodeJS.Signals) =>
    new Promise<number | null>((resolve) => {
      // Already gone (a signal leaves exitCode null): 'exit' will not fire again.
      if (child.exitCode !== null || child.signalCode !== null) return resolve(child.exitCode);
      child.once('exit', (code) => resolve(code));
      child.kill(signal);
    });
  const deadline = Date.now() + 20_000;
  while (Date.now() < deadline) {
    const line = out.split('\n').find((l) => l.includes('"proxy listening"'));
    if (line) {
      const { url, metrics } = JSON.parse(line) as { url: string; metrics: string };
      return { child, base: url, metrics, output: () => out, stop };
    }
    if (child.exitCode !== null) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  child.kill('SIGKILL');
  throw new Error(`proxy did not start:\n${out}`);
}
