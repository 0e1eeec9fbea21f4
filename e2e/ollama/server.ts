import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { cachedBuild, freePort, readVersionsEnv } from '../support/cached-build.js';

/**
 * Real Ollama servers for the tests: the binary and model that e2e/ollama/build.sh builds into
 * ~/.cache (from package registries only), each server on a free loopback port with its own
 * models dir and HOME, in its own process group so that a kill also takes its model runner.
 */

const HERE = fileURLToPath(new URL('./', import.meta.url));

/** KEY=value lines of e2e/ollama/versions.env. */
export const OLLAMA_VERSIONS = readVersionsEnv(HERE);
/** The model the build creates: SmolLM2-135M-Instruct with a ChatML tool template. */
export const OLLAMA_MODEL = OLLAMA_VERSIONS.OLLAMA_MODEL ?? 'smollm2:135m';

/** Builds (or finds in the cache) the binary and model; returns the cache dir. Cold: ~4-5 min. */
export const ollamaHome: () => string = cachedBuild(HERE);

export { freePort };

export interface OllamaOptions {
  /** OLLAMA_NUM_PARALLEL (default 1: Ollama's own default for a CPU-only machine). */
  parallel?: number;
  /** OLLAMA_MAX_QUEUE. */
  maxQueue?: number;
  /** OLLAMA_CONTEXT_LENGTH. */
  contextLength?: number;
  /** Without the test model: an empty models dir. */
  empty?: boolean;
  /** Run the server as this uid/gid (setpriv), owning its HOME and models dir, as a non-root pod does. */
  uid?: number;
  env?: Record<string, string>;
}

export interface OllamaServer {
  /** http://127.0.0.1:PORT; the OpenAI API is under /v1. */
  url: string;
  port: number;
  /** Its OLLAMA_MODELS dir (a hard-linked copy of the cache's). */
  modelsDir: string;
  output(): string;
  /** The server process's pid (after setpriv, the server itself). */
  pid(): number;
  /** SIGKILL to the whole process group (server and model runner), as a crashed pod. */
  kill(): Promise<void>;
  /** Starts the server again on the same port and models dir, after kill() or stop(). */
  restart(): Promise<void>;
  /** SIGTERM, then SIGKILL after 5 s; removes its temp dir. */
  stop(): Promise<void>;
}

async function waitUp(url: string, child: ChildProcess, out: () => string): Promise<void> {
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    if (child.exitCode !== null || child.signalCode !== null) break;
    try {
      const res = await fetch(`${url}/api/version`);
      if (res.ok) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`ollama serve did not come up on ${url}:\n${out().slice(-4000)}`);
}

export async function startOllama(opts: OllamaOptions = {}): Promise<OllamaServer> {
  const home = ollamaHome();
  const dir = mkdtempSync(join(tmpdir(), 'pao-ollama-'));
  const modelsDir = join(dir, 'models');
  // Hard links: a 98 MB model costs nothing per server, and blobs are content-addressed (never rewritten).
  if (opts.empty) execFileSync('mkdir', ['-p', modelsDir]);
  else execFileSync('cp', ['-al', join(home, 'models'), modelsDir]);
  if (opts.uid !== undefined) {
    execFileSync('cp', [join(home, 'bin', 'ollama'), join(dir, 'ollama')]);
    execFileSync('chown', ['-R', `${opts.uid}:${opts.uid}`, dir]);
  }
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const env: NodeJS.ProcessEnv = {
    PATH: process.env.PATH ?? '/usr/bin:/bin',
    HOME: dir,
    OLLAMA_HOST: `127.0.0.1:${port}`,
    OLLAMA_MODELS: modelsDir,
    OLLAMA_NUM_PARALLEL: String(opts.parallel ?? 1),
    OLLAMA_KEEP_ALIVE: '-1',
    OLLAMA_NOPRUNE: '1',
    ...(opts.maxQueue !== undefined ? { OLLAMA_MAX_QUEUE: String(opts.maxQueue) } : {}),
    ...(opts.contextLength !== undefined ? { OLLAMA_CONTEXT_LENGTH: String(opts.contextLength) } : {}),
    ...opts.env,
  };
  let out = '';
  let child: ChildProcess;
  const reap = () => {
    try {
      if (child.pid) process.kill(-child.pid, 'SIGKILL');
    } catch {
      // already gone
    }
  };
  const spawnServer = async () => {
    // Another uid cannot reach the cache under /root (0700), and Ollama re-executes its own binary
    // for each model runner: that user gets its own copy.
    const bin = opts.uid === undefined ? join(home, 'bin', 'ollama') : join(dir, 'ollama');
    const [cmd, args] =
      opts.uid === undefined
        ? [bin, ['serve']]
        : ['setpriv', [`--reuid=${opts.uid}`, `--regid=${opts.uid}`, '--clear-groups', bin, 'serve']];
    child = spawn(cmd, args, { env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
    const take = (d: Buffer) => {
      out = (out + d.toString()).slice(-200_000);
    };
    child.stdout?.on('data', take);
    child.stderr?.on('data', take);
    process.once('exit', reap);
    child.once('exit', () => process.off('exit', reap));
    await waitUp(url, child, () => out);
  };
  const gone = () => child.exitCode !== null || child.signalCode !== null;
  const signalGroup = (signal: NodeJS.Signals) =>
    new Promise<void>((resolve) => {
      if (gone()) {
        reap(); // the runner may outlive the server
        return resolve();
      }
      child.once('exit', () => resolve());
      try {
        if (child.pid) process.kill(-child.pid, signal);
      } catch {
        resolve();
      }
    });
  await spawnServer();
  return {
    url,
    port,
    modelsDir,
    output: () => out,
    pid: () => child.pid ?? 0,
    kill: async () => {
      await signalGroup('SIGKILL');
      reap();
    },
    restart: spawnServer,
    stop: async () => {
      const timer = setTimeout(reap, 5_000);
      await signalGroup('SIGTERM');
      clearTimeout(timer);
      reap();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
