import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { V1Container } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { loadCatalog, resolveModel } from '../../crds/catalog/catalog.js';
import { MODEL_SERVER_UID } from '../../crds/constants.js';
import type { ModelDeployment } from '../../crds/model-deployment.js';
import type { ModelCacheSetting } from '../../operator/model-deployment/model-cache.js';
import { desiredModelServer, PULL_CONTAINER } from '../../operator/model-deployment/model-server.js';
import { Operator } from '../../operator/operator.js';
import { freePort, OLLAMA_MODEL, ollamaHome } from '../ollama/server.js';
import { capturedLogger } from '../support/capture.js';
import { applyObjects, eventually, kubeConfig, kubectl, kubectlOk } from '../support/kube.js';

/**
 * The model cache. First the pull init container's script, run as the kubelet would (its
 * command and environment, the pod's uid) with the real Ollama binary, on a directory standing
 * for the volume: it finds a model already there without the registry, serializes pulls on a
 * shared volume, and fails with a termination message ModelPulled can show. Then the claim on
 * the real control plane: it binds to a PersistentVolume, the pod schedules on a kwok GPU node
 * with it, and the pod that replaces a deleted one mounts the same claim.
 */

const catalog = loadCatalog();
const cluster = { organizationId: 'acme', clusterId: 'prod-1', cloud: 'aws' as const, region: 'us-east-1' };
const NS = 'platform-llms';

function pullContainer(cache?: ModelDeployment['spec']['cache']): V1Container {
  const d: ModelDeployment = {
    apiVersion: 'ai.platform/v1beta1',
    kind: 'ModelDeployment',
    metadata: { name: 'qwen', namespace: NS, uid: 'u1', generation: 1 },
    spec: { model: 'qwen2.5:0.5b', serviceName: 'qwen', port: 11434, replicas: 1, ...(cache ? { cache } : {}) },
  };
  const r = resolveModel(catalog, cluster, d.spec.model);
  if (!r.ok) throw new Error(r.message);
  const { deployment } = desiredModelServer(d, r.model, catalog, {
    image: 'ollama/ollama',
    template: 'llms-by-platform',
    gpuTypes: r.gpuTypes,
    modelCache: { accessMode: 'ReadWriteMany' },
  });
  const c = deployment.spec?.template.spec?.initContainers?.find((x) => x.name === PULL_CONTAINER);
  if (!c) throw new Error('no pull container');
  return c;
}

interface Run {
  child: ChildProcess;
  output: () => string;
  done: Promise<{ code: number | null; ms: number }>;
}

describe('the pull init container, run with the real Ollama binary', () => {
  let dir: string;
  let bin: string;
  const runs: ChildProcess[] = [];

  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'pao-model-cache-'));
    // The pod's user cannot reach the build cache under /root: it gets its own copy on its PATH.
    bin = join(dir, 'bin');
    mkdirSync(bin);
    execFileSync('cp', [join(ollamaHome(), 'bin', 'ollama'), join(bin, 'ollama')]);
  }, 600_000);

  afterAll(() => {
    for (const c of runs) {
      try {
        if (c.pid) process.kill(-c.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    rmSync(dir, { recursive: true, force: true });
  });

  /** A directory standing for the volume, with the test model in it or empty; read-only as an existing claim is mounted. */
  function volume(name: string, withModel: boolean, readOnly = false): string {
    const models = join(dir, name);
    if (withModel) execFileSync('cp', ['-a', join(ollamaHome(), 'models'), models]);
    else mkdirSync(models);
    if (readOnly) execFileSync('chmod', ['-R', 'a-w', models]);
    return models;
  }

  /**
   * The container's command and environment, as uid 10001 in its own process group; what the
   * pod has as volumes (models, HOME, /tmp, the termination-message file) are directories here.
   * The registry is unreachable through HTTPS_PROXY: any pull fails at once.
   */
  async function runPull(c: V1Container, models: string, env: Record<string, string> = {}): Promise<Run> {
    const name = models.split('/').pop() ?? 'run';
    const home = join(dir, `${name}-home`);
    const tmp = join(dir, `${name}-tmp`);
    mkdirSync(home);
    mkdirSync(tmp);
    execFileSync('chown', ['-R', `${MODEL_SERVER_UID}:${MODEL_SERVER_UID}`, dir]);
    const own = Object.fromEntries((c.env ?? []).map((e) => [e.name, e.value ?? '']));
    const [cmd, ...args] = c.command ?? [];
    if (!cmd) throw new Error('no command');
    const started = performance.now();
    const child = spawn(
      'setpriv',
      [`--reuid=${MODEL_SERVER_UID}`, `--regid=${MODEL_SERVER_UID}`, '--clear-groups', cmd, ...args],
      {
        env: {
          PATH: `${bin}:/usr/bin:/bin`,
          ...own,
          // Local stand-ins for what the pod has: the model this machine has, a free port, the volumes.
          MODEL: OLLAMA_MODEL,
          OLLAMA_HOST: `127.0.0.1:${await freePort()}`,
          OLLAMA_MODELS: models,
          HOME: home,
          TMPDIR: tmp,
          TERMINATION_MESSAGE_PATH: join(dir, `${name}-termination-log`),
          HTTPS_PROXY: 'http://127.0.0.1:9',
          ...env,
        },
        detached: true,
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    runs.push(child);
    let out = '';
    const take = (d: Buffer) => {
      out += d.toString();
    };
    child.stdout?.on('data', take);
    child.stderr?.on('data', take);
    const done = new Promise<{ code: number | null; ms: number }>((resolve) =>
      child.once('exit', (code) => resolve({ code, ms: performance.now() - started })),
    );
    return { child, output: () => out, done };
  }

  const terminationMessage = (models: string) => {
    const file = join(dir, `${models.split('/').pop()}-termination-log`);
    return existsSync(file) ? readFileSync(file, 'utf8') : '';
  };
  const listing = (models: string) =>
    execFileSync('find', [models, '-path', `${models}/.pull.lock`, '-prune', '-o', '-print'], { encoding: 'utf8' })
      .split('\n')
      .sort();

  it('finds the model on the volume and completes in seconds without the registry', async () => {
    const models = volume('cached', true);
    const before = listing(models);
    const run = await runPull(pullContainer(), models);
    const { code, ms } = await run.done;
    expect(code, run.output()).toBe(0);
    expect(run.output()).toContain(`${OLLAMA_MODEL} is on the volume already: nothing to pull`);
    // No pull began: Ollama prints "pulling manifest" first, and nothing was written.
    expect(run.output()).not.toContain('pulling');
    expect(listing(models)).toEqual(before);
    expect(ms).toBeLessThan(15_000);
    console.log(`[e2e] pull-model with the model on the volume: ${Math.round(ms)} ms`);
    expect(terminationMessage(models)).toBe('');
  });

  it('with spec.cache.existingClaim and the model missing: fails at once with a termination message, never pulls', async () => {
    const models = volume('prefilled', false);
    const run = await runPull(pullContainer({ existingClaim: 'qwen-prefilled' }), models);
    const { code } = await run.done;
    expect(code).toBe(1);
    expect(terminationMessage(models)).toBe(
      `model ${OLLAMA_MODEL} is not on PersistentVolumeClaim qwen-prefilled (spec.cache.existingClaim), and this deployment never pulls: copy the model onto the claim (README: Model cache), or remove spec.cache`,
    );
    expect(run.output()).not.toContain('pulling');
    // ...and with the model there, the same claim needs nothing else, not even to write.
    const filled = await runPull(
      pullContainer({ existingClaim: 'qwen-prefilled' }),
      volume('prefilled-ok', true, true),
    );
    expect((await filled.done).code, filled.output()).toBe(0);
  });

  it('a failed pull leaves its reason in the termination message', async () => {
    const models = volume('unreachable', false);
    const run = await runPull(pullContainer(), models);
    const { code } = await run.done;
    expect(code).toBe(1);
    expect(run.output()).toContain('pulling manifest');
    expect(terminationMessage(models)).toMatch(
      new RegExp(`^pulling ${OLLAMA_MODEL} failed: Error: pull model manifest: .*127\\.0\\.0\\.1:9`),
    );
  });

  it('waits for a pull in progress on the shared volume, then finds its model and pulls nothing', async () => {
    const models = volume('shared', false);
    execFileSync('chown', [`${MODEL_SERVER_UID}:${MODEL_SERVER_UID}`, models]);
    // Another pod's pull holds the lock.
    const lock = join(models, '.pull.lock');
    const holder = spawn(
      'setpriv',
      [`--reuid=${MODEL_SERVER_UID}`, `--regid=${MODEL_SERVER_UID}`, '--clear-groups', 'flock', lock, 'sleep', '600'],
      { detached: true, stdio: 'ignore' },
    );
    runs.push(holder);
    await eventually('the lock held', 5_000, () => existsSync(lock) || undefined);
    await new Promise((r) => setTimeout(r, 200));
    const run = await runPull(pullContainer(), models);
    let exited = false;
    void run.done.then(() => {
      exited = true;
    });
    await new Promise((r) => setTimeout(r, 4_000));
    expect(exited, run.output()).toBe(false);
    expect(run.output()).not.toContain('pulling');
    // The other pod's pull completes: the model lands on the volume, and the lock is released.
    execFileSync('cp', ['-a', `${join(ollamaHome(), 'models')}/.`, models]);
    execFileSync('chown', ['-R', `${MODEL_SERVER_UID}:${MODEL_SERVER_UID}`, models]);
    if (holder.pid) process.kill(-holder.pid, 'SIGKILL');
    const { code } = await run.done;
    expect(code, run.output()).toBe(0);
    expect(run.output()).toContain(`${OLLAMA_MODEL} was pulled by another pod meanwhile: nothing to pull`);
    expect(run.output()).not.toContain('pulling manifest');
    expect(readdirSync(join(models, 'blobs')).some((f) => f.endsWith('-partial'))).toBe(false);
  });
});

const CLASS = 'e2e-model-cache';

function persistentVolume(name: string, claim?: string) {
  return {
    apiVersion: 'v1',
    kind: 'PersistentVolume',
    metadata: { name },
    spec: {
      capacity: { storage: '20Gi' },
      accessModes: ['ReadWriteMany'],
      storageClassName: CLASS,
      persistentVolumeReclaimPolicy: 'Delete',
      // kwok runs no containers: nothing mounts it, the binding is what is real.
      hostPath: { path: `/tmp/${name}`, type: 'DirectoryOrCreate' },
      ...(claim ? { claimRef: { namespace: NS, name: claim } } : {}),
    },
  };
}

const podsOf = (md: string) =>
  (
    JSON.parse(kubectlOk(['get', 'pods', '-n', NS, '-l', `ai.platform/model-deployment=${md}`, '-o', 'json'])) as {
      items: Array<{
        metadata: { name: string; deletionTimestamp?: string };
        spec: { nodeName?: string; volumes: Array<{ name: string; persistentVolumeClaim?: { claimName: string } }> };
        status: { conditions?: Array<{ type: string; status: string }> };
      }>;
    }
  ).items.filter((p) => !p.metadata.deletionTimestamp);

const mdCondition = (md: string, type: string, field: 'status' | 'reason' | 'message') =>
  kubectlOk(['get', 'md', md, '-n', NS, '-o', `jsonpath={.status.conditions[?(@.type=="${type}")].${field}}`]);

describe.runIf(inject('localControlPlane'))('the model cache on the real control plane', () => {
  let op: Operator;

  beforeAll(async () => {
    applyObjects(persistentVolume('e2e-model-cache-1'));
    const modelCache: ModelCacheSetting = { storageClassName: CLASS, accessMode: 'ReadWriteMany' };
    op = new Operator({
      kubeConfig: kubeConfig(),
      cluster,
      images: { Ollama: 'ollama/ollama:test' },
      port: 0,
      resyncMs: 0,
      leaderElection: {
        namespace: 'platform-agent',
        name: 'model-cache-e2e',
        identity: 'cache-1',
        leaseDurationMs: 3000,
      },
      logger: capturedLogger('operator-model-cache'),
      modelCache,
    });
    await op.start();
    await eventually('leadership', 20_000, () => op.isLeader() || undefined);
  });

  afterAll(async () => {
    await op?.stop();
    kubectl(['delete', 'md', 'cached', 'prefilled', '-n', NS, '--ignore-not-found']);
    kubectl(['delete', 'deploy', '-n', NS, '-l', 'ai.platform/model-deployment in (cached,prefilled)']);
    kubectl([
      'delete',
      'pods',
      '-n',
      NS,
      '-l',
      'ai.platform/model-deployment in (cached,prefilled)',
      '--grace-period=0',
      '--force',
    ]);
    kubectl(['delete', 'pvc', 'cached-models', 'prefilled-models', '-n', NS, '--ignore-not-found', '--wait=false']);
    kubectl(['delete', 'pv', 'e2e-model-cache-1', 'e2e-model-cache-2', '--ignore-not-found', '--wait=false']);
    kubectl(['delete', 'nodetemplate', 'llms-by-platform', '--ignore-not-found']);
    kubectl(['delete', 'autoscalerpolicy', 'cluster', '--ignore-not-found']);
    kubectl(['delete', 'lease', 'model-cache-e2e', '-n', 'platform-agent', '--ignore-not-found']);
  });

  it('binds the claim, schedules the pod with it on a GPU node, and a replacement pod mounts the same claim', async () => {
    applyObjects({
      apiVersion: 'ai.platform/v1beta1',
      kind: 'ModelDeployment',
      metadata: { name: 'cached', namespace: NS },
      spec: { model: 'qwen2.5:0.5b', serviceName: 'cached' },
    });
    await eventually(
      'Running',
      60_000,
      () => kubectlOk(['get', 'md', 'cached', '-n', NS, '-o', 'jsonpath={.status.phase}']) === 'Running' || undefined,
    );
    const claim = JSON.parse(kubectlOk(['get', 'pvc', 'cached-models', '-n', NS, '-o', 'json'])) as {
      metadata: { uid: string; ownerReferences: Array<{ kind: string; name: string }> };
      spec: { volumeName: string; storageClassName: string; resources: { requests: { storage: string } } };
      status: { phase: string };
    };
    expect(claim.status.phase).toBe('Bound');
    expect(claim.spec.volumeName).toBe('e2e-model-cache-1');
    expect(claim.spec.resources.requests.storage).toBe('2Gi');
    expect(claim.metadata.ownerReferences).toMatchObject([{ kind: 'ModelDeployment', name: 'cached' }]);
    await eventually(
      'ModelCache Bound',
      10_000,
      () => mdCondition('cached', 'ModelCache', 'reason') === 'Bound' || undefined,
    );

    const [first] = podsOf('cached');
    expect(first?.spec.nodeName).toMatch(/^(gpu|arm)-/);
    expect(first?.spec.volumes.find((v) => v.name === 'models')?.persistentVolumeClaim?.claimName).toBe(
      'cached-models',
    );

    kubectlOk(['delete', 'pod', first?.metadata.name ?? '', '-n', NS, '--grace-period=0', '--force']);
    const next = await eventually('a replacement pod Ready', 60_000, () => {
      const p = podsOf('cached').find((x) => x.metadata.name !== first?.metadata.name);
      return p?.status.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ? p : undefined;
    });
    expect(next.spec.volumes.find((v) => v.name === 'models')?.persistentVolumeClaim?.claimName).toBe('cached-models');
    // The same claim, not a new one: the model pulled by the first pod is there for the next.
    expect(kubectlOk(['get', 'pvc', 'cached-models', '-n', NS, '-o', 'jsonpath={.metadata.uid}'])).toBe(
      claim.metadata.uid,
    );
    expect(
      kubectlOk(['get', 'pvc', '-n', NS, '-l', 'ai.platform/model-deployment=cached', '-o', 'name']).trim().split('\n'),
    ).toEqual(['persistentvolumeclaim/cached-models']);
  });

  it('an existing claim that is missing: says so, and the deployment proceeds once it is created', async () => {
    applyObjects({
      apiVersion: 'ai.platform/v1beta1',
      kind: 'ModelDeployment',
      metadata: { name: 'prefilled', namespace: NS },
      spec: { model: 'qwen2.5:0.5b', serviceName: 'prefilled', cache: { existingClaim: 'prefilled-models' } },
    });
    await eventually(
      'ClaimNotFound',
      20_000,
      () => mdCondition('prefilled', 'ModelCache', 'reason') === 'ClaimNotFound' || undefined,
    );
    expect(mdCondition('prefilled', 'ModelCache', 'message')).toContain(
      'PersistentVolumeClaim prefilled-models (spec.cache.existingClaim) does not exist in platform-llms',
    );
    // No claim is made for it.
    expect(kubectl(['get', 'pvc', 'prefilled-models', '-n', NS]).code).not.toBe(0);
    // The user brings the claim, bound to the volume they filled.
    applyObjects(persistentVolume('e2e-model-cache-2', 'prefilled-models'), {
      apiVersion: 'v1',
      kind: 'PersistentVolumeClaim',
      metadata: { name: 'prefilled-models', namespace: NS },
      spec: {
        accessModes: ['ReadWriteMany'],
        storageClassName: CLASS,
        volumeName: 'e2e-model-cache-2',
        resources: { requests: { storage: '1Gi' } },
      },
    });
    await eventually(
      'Running',
      60_000,
      () =>
        kubectlOk(['get', 'md', 'prefilled', '-n', NS, '-o', 'jsonpath={.status.phase}']) === 'Running' || undefined,
    );
    expect(mdCondition('prefilled', 'ModelCache', 'reason')).toBe('Bound');
    expect(
      podsOf('prefilled')[0]?.spec.volumes.find((v) => v.name === 'models')?.persistentVolumeClaim?.claimName,
    ).toBe('prefilled-models');
  });
});
