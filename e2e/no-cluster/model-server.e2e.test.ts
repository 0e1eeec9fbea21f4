import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import type { V1Container } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadCatalog, resolveModel } from '../../crds/catalog/catalog.js';
import { MODEL_SERVER_UID } from '../../crds/constants.js';
import type { ModelDeployment } from '../../crds/model-deployment.js';
import { desiredModelServer } from '../../operator/model-deployment/model-server.js';
import { OLLAMA_MODEL, type OllamaServer, startOllama } from '../ollama/server.js';

/**
 * kwok runs no containers and no probes, so the model server the operator deploys is run here
 * with the real Ollama binary: the server container's arguments and environment as the
 * operator writes them, and its startup, readiness and liveness probes, executed as the kubelet
 * would (exec with the container's environment; HTTP GET). Two things differ from a pod: the
 * port and models dir are local (OLLAMA_HOST, OLLAMA_MODELS), and MODEL names the model this
 * machine has (the catalog's models cannot be pulled here: the Ollama registry is unreachable).
 */

const catalog = loadCatalog();
const cluster = { organizationId: 'org', clusterId: 'c', cloud: 'aws' as const, region: 'us-east-1' };

function md(server?: ModelDeployment['spec']['server']): ModelDeployment {
  return {
    apiVersion: 'ai.platform/v1beta1',
    kind: 'ModelDeployment',
    metadata: { name: 'qwen', namespace: 'platform-llms', uid: 'u1', generation: 1 },
    spec: { model: 'qwen2.5:0.5b', serviceName: 'qwen', port: 11434, replicas: 1, ...(server ? { server } : {}) },
  };
}

function serverContainer(d: ModelDeployment): V1Container {
  const r = resolveModel(catalog, cluster, d.spec.model);
  if (!r.ok) throw new Error(r.message);
  const { deployment } = desiredModelServer(d, r.model, catalog, {
    image: 'ollama/ollama',
    template: 'llms-by-platform',
    gpuTypes: r.gpuTypes,
  });
  const c = deployment.spec?.template.spec?.containers[0];
  if (!c) throw new Error('no server container');
  return c;
}

const envOf = (c: V1Container) => Object.fromEntries((c.env ?? []).map((e) => [e.name, e.value ?? '']));

/** Runs an exec probe as the kubelet does: the command, the container's environment, a timeout. */
/**
 * Runs a probe's command as the kubelet does, with its timeout. Apart, not with spawnSync: Ollama
 * writes its log into a pipe this process drains, and a blocked event loop stops the draining,
 * so a model load that logs more than the pipe holds would stall until the probe's timeout.
 */
async function execProbe(c: V1Container, probe: 'startupProbe' | 'readinessProbe', env: Record<string, string>) {
  const p = c[probe];
  const [cmd, ...args] = p?.exec?.command ?? [];
  if (!cmd) throw new Error(`${probe} is not an exec probe`);
  const started = performance.now();
  const child = spawn(cmd, args, {
    env: { PATH: process.env.PATH ?? '', ...env },
    stdio: 'ignore',
    timeout: (p?.timeoutSeconds ?? 1) * 1000,
  });
  const [code] = (await once(child, 'exit')) as [number | null];
  return { code, ms: performance.now() - started };
}

/**
 * Runs the startup probe as the kubelet does: again every periodSeconds until it passes, the
 * container failing only after failureThreshold tries (10 minutes here). One try that runs past
 * its timeout is not a failed start: CI once saw the first answer (it loads the model) take
 * longer than the 60 s timeout on a busy machine. The test's own budget bounds the tries.
 */
async function startupProbe(c: V1Container, env: Record<string, string>, budgetMs: number) {
  const p = c.startupProbe;
  const tries = p?.failureThreshold ?? 3;
  const deadline = performance.now() + budgetMs;
  let last = await execProbe(c, 'startupProbe', env);
  for (let i = 1; i < tries && last.code !== 0 && performance.now() < deadline; i++) {
    await new Promise((r) => setTimeout(r, (p?.periodSeconds ?? 10) * 1000));
    last = await execProbe(c, 'startupProbe', env);
  }
  return last;
}

/** How long a test gives the startup probe: its timeout three times, and the pauses between. */
const STARTUP_BUDGET_MS = 3 * (60 + 10) * 1000;

describe('the operator’s model server container, run with the real Ollama binary', () => {
  const container = serverContainer(md({ numParallel: 3, maxQueue: 64, contextLength: 4096 }));
  const env = envOf(container);
  let ollama: OllamaServer;
  let probeEnv: Record<string, string>;

  beforeAll(async () => {
    // The container's arguments, environment and user, but a local port, and local directories
    // where the pod mounts its volumes (models, HOME).
    expect(container.args).toEqual(['serve']);
    const { OLLAMA_HOST: _h, OLLAMA_MODELS: _m, HOME: _home, ...rest } = env;
    ollama = await startOllama({ env: { ...rest, MODEL: OLLAMA_MODEL }, uid: MODEL_SERVER_UID });
    probeEnv = { ...env, MODEL: OLLAMA_MODEL, OLLAMA_HOST: `127.0.0.1:${ollama.port}` };
  }, 600_000);

  afterAll(async () => {
    await ollama?.stop();
  });

  it('starts Ollama with the spec’s parallelism, queue and context length', () => {
    expect(env).toMatchObject({
      OLLAMA_NUM_PARALLEL: '3',
      OLLAMA_MAX_QUEUE: '64',
      OLLAMA_CONTEXT_LENGTH: '4096',
      OLLAMA_KEEP_ALIVE: '-1',
    });
    // Ollama prints the configuration it runs with.
    const config = ollama
      .output()
      .split('\n')
      .find((l) => l.includes('server config'));
    expect(config).toContain('OLLAMA_NUM_PARALLEL:3');
    expect(config).toContain('OLLAMA_MAX_QUEUE:64');
    expect(config).toContain('OLLAMA_CONTEXT_LENGTH:4096');
  });

  it(
    'the startup and readiness probes pass once the model answers (the first one loads it)',
    async () => {
      const startup = await startupProbe(container, probeEnv, STARTUP_BUDGET_MS);
      expect(startup.code, ollama.output().slice(-4000)).toBe(0);
      const ready = await execProbe(container, 'readinessProbe', probeEnv);
      expect(ready.code, ollama.output().slice(-4000)).toBe(0);
      // The model was loaded and generated: Ollama lists it as running.
      return fetch(`${ollama.url}/api/ps`)
        .then((r) => r.json())
        .then((ps) =>
          expect((ps as { models: Array<{ name: string }> }).models.map((m) => m.name)).toContain(OLLAMA_MODEL),
        );
    },
    STARTUP_BUDGET_MS + 60_000,
  );

  it('runs as the pod’s non-root user', () => {
    expect(MODEL_SERVER_UID).not.toBe(0);
    const pid = ollama.pid();
    const uid = readFileSync(`/proc/${pid}/status`, 'utf8').match(/^Uid:\s+(\d+)/m)?.[1];
    expect(Number(uid)).toBe(MODEL_SERVER_UID);
  });

  it('the liveness probe’s HTTP GET answers 200', async () => {
    const get = container.livenessProbe?.httpGet;
    expect(get?.port).toBe('http');
    expect(container.ports?.find((p) => p.name === 'http')?.containerPort).toBe(11434);
    const res = await fetch(`${ollama.url}${get?.path ?? ''}`);
    expect(res.status).toBe(200);
  });

  it(
    'readiness fails when the server does not have the model, and when the server is down',
    async () => {
      expect((await execProbe(container, 'readinessProbe', { ...probeEnv, MODEL: 'qwen2.5:0.5b' })).code).not.toBe(0);
      await ollama.kill();
      expect((await execProbe(container, 'readinessProbe', probeEnv)).code).not.toBe(0);
      await ollama.restart();
      // A restarted container is gated by its startup probe again (the kubelet runs readiness only
      // after it passes): the first answer reloads the model, which on a busy machine can take
      // longer than the readiness probe's timeout (CI once saw it run past 30 s).
      expect((await startupProbe(container, probeEnv, STARTUP_BUDGET_MS)).code, ollama.output().slice(-4000)).toBe(0);
      expect((await execProbe(container, 'readinessProbe', probeEnv)).code).toBe(0);
    },
    STARTUP_BUDGET_MS + 60_000,
  );
});
