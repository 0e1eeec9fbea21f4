import { type ChildProcess, spawn } from 'node:child_process';
import { hostname } from 'node:os';
import { fileURLToPath } from 'node:url';
import type { V1Deployment, V1Pod, V1ReplicaSet, V1Service } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, inject, it, vi } from 'vitest';
import type { ClusterInfo } from '../../crds/catalog/catalog.js';
import {
  AGENT_NAMESPACE,
  API_GROUP,
  API_VERSION,
  AUTOSCALER_POLICY_NAME,
  LLM_NODE_TEMPLATE,
  LLMS_NAMESPACE,
  MODEL_DEPLOYMENT_LABEL,
} from '../../crds/constants.js';
import { isGone, KubeClient, resourcePath } from '../../crds/kube/kube-client.js';
import type { ModelDeployment } from '../../crds/model-deployment.js';
import { MODEL_ANNOTATION } from '../../operator/model-deployment/model-server.js';
import { Operator } from '../../operator/operator.js';
import { fakeNode } from '../cluster/nodes.js';
import { capture, capturedLogger } from '../support/capture.js';
import { applyObjects, eventually, kubeConfig, kubectl, kubectlOk, sleep } from '../support/kube.js';

/**
 * Control-plane faults on the real control plane (issue #10):
 * - the API server is SIGKILLed while a batch of ModelDeployments is being reconciled, and
 *   etcd compacts its history before it comes back, so the operator's watches get 410 Gone
 *   and relist;
 * - the leader operator process (operator/main.ts) is SIGKILLed mid-reconcile and the standby
 *   process takes the Lease over;
 * - two replicas on one Lease never both reconcile: not while one leads, not during a
 *   graceful handover with a reconcile in flight, not when the leader's Lease requests hang.
 * Every case ends in the same checked state: each ModelDeployment Running with exactly one
 * Deployment, Service, ReplicaSet and pod controlled by it, and nothing left over.
 *
 * Not repeated here: the bare informer's relist after compaction (informer.e2e.test.ts), and
 * the plain handover and resume-after-restart of operator.e2e.test.ts.
 */

const NS = LLMS_NAMESPACE;
const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const MODEL = 'qwen2.5:0.5b';
const SUITE_LABEL = 'e2e-faults';
/** Lease namespace of the operator processes, apart from the chart's and journey's lease. */
const PROCESS_LEASE_NS = 'fault-leases';
/** Lease of the in-process replicas, apart from operator.e2e's "operator-e2e". */
const INPROCESS_LEASE = 'fault-e2e';
/** The collection the operator's ModelDeployment informer watches. */
const MDS_ALL_NAMESPACES = resourcePath({ group: API_GROUP, version: API_VERSION, plural: 'modeldeployments' });
/** Extra kwok GPU nodes of the operator's template, so no batch here waits for GPUs. */
const NODES = Array.from({ length: 4 }, (_, i) =>
  fakeNode({
    name: `fault-l4-${i}`,
    arch: 'amd64',
    gpuModel: 'L4',
    computeCapability: '8.9',
    gpus: 8,
    zone: 'us-east-1a',
    template: LLM_NODE_TEMPLATE,
  }),
);
const cluster: ClusterInfo = { organizationId: 'acme', clusterId: 'faults', cloud: 'aws', region: 'us-east-1' };

// Operator logs go to the e2e capture (read by the secret scan), and to the console with E2E_DEBUG.
const quiet = (tag: string) => capturedLogger(`faults-${tag}`);

const created = new Set<string>();

function mdObject(name: string, model = MODEL): object {
  created.add(name);
  return {
    apiVersion: `${API_GROUP}/${API_VERSION}`,
    kind: 'ModelDeployment',
    metadata: { name, namespace: NS, labels: { [SUITE_LABEL]: 'true' } },
    spec: { model, serviceName: name },
  };
}

const names = (prefix: string, n: number) =>
  Array.from({ length: n }, (_, i) => `${prefix}${String(i).padStart(2, '0')}`);

// --- reading the cluster directly, so polls cost one request, not a kubectl process ------

let api: KubeClient;
const path = (group: string, plural: string) =>
  resourcePath({ group, version: group === API_GROUP ? API_VERSION : 'v1', plural, namespace: NS });

interface Snapshot {
  mds: ModelDeployment[];
  deployments: V1Deployment[];
  services: V1Service[];
  replicaSets: V1ReplicaSet[];
  pods: V1Pod[];
}

async function snapshot(prefix: string): Promise<Snapshot> {
  const mine = <T extends { metadata?: { name?: string; labels?: Record<string, string> } }>(items: T[]) =>
    items.filter(
      (o) =>
        (o.metadata?.name ?? '').startsWith(prefix) ||
        (o.metadata?.labels?.[MODEL_DEPLOYMENT_LABEL] ?? '').startsWith(prefix),
    );
  const [mds, deployments, services, replicaSets, pods] = await Promise.all([
    api.list<ModelDeployment>(path(API_GROUP, 'modeldeployments')),
    api.list<V1Deployment>(path('apps', 'deployments')),
    api.list<V1Service>(path('', 'services')),
    api.list<V1ReplicaSet>(path('apps', 'replicasets')),
    api.list<V1Pod>(path('', 'pods')),
  ]);
  return {
    mds: mine(mds.items),
    deployments: mine(deployments.items),
    services: mine(services.items),
    replicaSets: mine(replicaSets.items),
    pods: mine(pods.items).filter((p) => !p.metadata?.deletionTimestamp),
  };
}

const runningCount = (s: Snapshot, wanted: string[]) =>
  s.mds.filter((m) => wanted.includes(m.metadata.name ?? '') && m.status?.phase === 'Running').length;

/**
 * Every deployment Running, and one pod each: after an API server restart over a compacted etcd,
 * kube-controller-manager's ReplicaSet controller may create a pod too many and delete it a moment
 * later (its own expectations, not the operator's writes: the ReplicaSet and the Deployment's
 * generation say those happened once); what is judged is the state it settles in.
 */
async function waitAllRunning(prefix: string, wanted: string[], timeoutMs: number): Promise<Snapshot> {
  return eventually(`${wanted.length} ${prefix}* Running, one pod each`, timeoutMs, async () => {
    const s = await snapshot(prefix);
    const onePod = wanted.every(
      (name) => s.pods.filter((p) => p.metadata?.labels?.[MODEL_DEPLOYMENT_LABEL] === name).length === 1,
    );
    return runningCount(s, wanted) === wanted.length && onePod ? s : undefined;
  });
}

const controllerOf = (o: { metadata?: { ownerReferences?: Array<{ controller?: boolean; uid: string }> } }) =>
  o.metadata?.ownerReferences?.find((r) => r.controller)?.uid;

/**
 * Exactly one Deployment, Service, ReplicaSet and running pod per ModelDeployment, each
 * controlled by it, and no object of the prefix without its ModelDeployment. `rolled` names
 * deployments whose spec was changed on purpose (a second ReplicaSet is theirs by right).
 */
function expectConverged(s: Snapshot, wanted: string[], rolled: string[] = []): void {
  const mdNames = s.mds.map((m) => m.metadata.name ?? '').sort();
  expect(mdNames).toEqual([...wanted].sort());
  const uid = new Map(s.mds.map((m) => [m.metadata.name ?? '', m.metadata.uid ?? '']));
  const per = <T extends { metadata?: { name?: string; labels?: Record<string, string> } }>(items: T[]) => {
    const by = new Map<string, T[]>();
    for (const o of items) {
      const owner = o.metadata?.labels?.[MODEL_DEPLOYMENT_LABEL] ?? `unlabelled:${o.metadata?.name}`;
      by.set(owner, [...(by.get(owner) ?? []), o]);
    }
    return by;
  };
  const deployments = per(s.deployments);
  const services = per(s.services);
  // No orphans: every owner label names one of the ModelDeployments.
  expect([...deployments.keys()].sort()).toEqual(mdNames);
  expect([...services.keys()].sort()).toEqual(mdNames);
  for (const m of s.mds) {
    const name = m.metadata.name ?? '';
    expect(m.status?.phase, name).toBe('Running');
    expect(m.status?.observedGeneration, name).toBe(m.metadata.generation);
    const d = deployments.get(name) ?? [];
    const svc = services.get(name) ?? [];
    expect(
      d.map((o) => o.metadata?.name),
      name,
    ).toEqual([name]);
    expect(
      svc.map((o) => o.metadata?.name),
      name,
    ).toEqual([name]);
    expect(controllerOf(d[0] ?? {}), name).toBe(uid.get(name));
    expect(controllerOf(svc[0] ?? {}), name).toBe(uid.get(name));
    const deployment = d[0] as V1Deployment;
    const rs = s.replicaSets.filter((r) => controllerOf(r) === deployment.metadata?.uid);
    const pods = s.pods.filter((p) => p.metadata?.labels?.[MODEL_DEPLOYMENT_LABEL] === name);
    if (!rolled.includes(name)) {
      // Written once: the faults caused no second write of the spec, hence no rollout.
      expect(deployment.metadata?.generation, name).toBe(1);
      expect(rs.length, `${name} ReplicaSets`).toBe(1);
    }
    expect(
      pods.map((p) => p.status?.phase),
      `${name} pods`,
    ).toEqual(['Running']);
  }
}

// --- the Lease -------------------------------------------------------------------------

interface LeaseSpec {
  holderIdentity?: string;
  leaseTransitions?: number;
}
const leaseOf = async (namespace: string, name: string) =>
  (
    await api.get<{ spec: LeaseSpec }>(
      resourcePath({ group: 'coordination.k8s.io', version: 'v1', plural: 'leases', namespace, name }),
    )
  )?.spec;

// --- in-process operators ------------------------------------------------------------------

async function reconcileCount(op: Operator): Promise<number> {
  const metric = op.registry.getSingleMetric('controller_runtime_reconcile_total');
  if (!metric) return 0;
  return (await metric.get()).values
    .filter((v) => v.labels.controller === 'modeldeployment')
    .reduce((n, v) => n + v.value, 0);
}

async function reconcileErrors(op: Operator): Promise<number> {
  const metric = op.registry.getSingleMetric('controller_runtime_reconcile_total');
  if (!metric) return 0;
  return (await metric.get()).values
    .filter((v) => v.labels.controller === 'modeldeployment' && v.labels.result === 'error')
    .reduce((n, v) => n + v.value, 0);
}

interface WatchEnd {
  t: number;
  path: string;
  gone: boolean;
  error: string;
}

/** Records every watch the operator's informers end with an error, and every list. */
function spyOnWatches(op: Operator) {
  const ends: WatchEnd[] = [];
  const lists: Array<{ t: number; path: string }> = [];
  const watch = op.client.watch.bind(op.client);
  const list = op.client.list.bind(op.client);
  vi.spyOn(op.client, 'watch').mockImplementation(async (p, query, onEvent, signal) => {
    try {
      await watch(p, query, onEvent, signal);
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      ends.push({ t: Date.now(), path: p, gone: isGone(err) || message.startsWith('410 Gone'), error: message });
      throw err;
    }
  });
  vi.spyOn(op.client, 'list').mockImplementation((p, query) => {
    lists.push({ t: Date.now(), path: p });
    return list(p, query);
  });
  return { ends, lists };
}

// --- operator processes --------------------------------------------------------------------

interface OperatorProcess {
  child: ChildProcess;
  identity: string;
  url: string;
  /** Where its metrics are served (their own port). */
  metrics: string;
  output: () => string;
  stop: (signal: NodeJS.Signals) => Promise<number | null>;
}

async function startOperatorProcess(): Promise<OperatorProcess> {
  // node with tsx as a loader: one process, so SIGKILL is the operator's own crash.
  const child = spawn(
    process.execPath,
    [
      '--import',
      'tsx',
      'operator/main.ts',
      '--kubeconfig',
      inject('kubeconfig'),
      '--cluster-id',
      'faults',
      '--region',
      'us-east-1',
      '--port',
      '0',
      '--metrics-port',
      '0',
      '--lease-namespace',
      PROCESS_LEASE_NS,
      '--ollama-image',
      'ollama/ollama:test',
    ],
    { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  const reap = () => child.kill('SIGKILL');
  process.once('exit', reap);
  child.once('exit', () => process.off('exit', reap));
  let out = '';
  const captured = capture(`faults-operator-process-${child.pid ?? 'unknown'}`);
  const collect = (d: Buffer) => {
    out += d.toString();
    captured(d.toString());
    if (process.env.E2E_DEBUG) process.stdout.write(`[op ${child.pid}] ${d.toString()}`);
  };
  child.stdout?.on('data', collect);
  child.stderr?.on('data', collect);
  const stop = (signal: NodeJS.Signals) =>
    new Promise<number | null>((resolve) => {
      if (child.exitCode !== null || child.signalCode !== null) return resolve(child.exitCode);
      child.once('exit', (code) => resolve(code));
      child.kill(signal);
    });
  try {
    const started = await eventually('operator process started', 60_000, () => {
      if (child.exitCode !== null) throw new Error(`operator exited ${child.exitCode}:\n${out}`);
      const line = out.split('\n').find((l) => l.includes('"operator started"'));
      return line ? (JSON.parse(line) as { url: string; metrics: string; identity: string }) : undefined;
    });
    // main.ts names a replica after its host and pid.
    expect(started.identity).toBe(`${hostname()}-${child.pid}`);
    return { child, identity: started.identity, url: started.url, metrics: started.metrics, output: () => out, stop };
  } catch (err) {
    child.kill('SIGKILL');
    throw err;
  }
}

async function scrape(url: string): Promise<{ reconciles: number; leader: boolean }> {
  const text = await (await fetch(`${url}/metrics`)).text();
  let reconciles = 0;
  let leader = false;
  for (const line of text.split('\n')) {
    if (line.startsWith('controller_runtime_reconcile_total{controller="modeldeployment"'))
      reconciles += Number(line.split(' ').at(-1));
    if (line.startsWith('leader_election_master_status{')) leader = line.endsWith(' 1');
  }
  return { reconciles, leader };
}

// --- two in-process replicas ------------------------------------------------------------

function replica(identity: string, leaseDurationMs: number): Operator {
  return new Operator({
    kubeConfig: kubeConfig(),
    cluster,
    images: { Ollama: 'ollama/ollama:test' },
    port: 0,
    resyncMs: 0,
    leaderElection: { namespace: AGENT_NAMESPACE, name: INPROCESS_LEASE, identity, leaseDurationMs },
    logger: quiet(identity),
  });
}

interface Sample {
  t: number;
  a: number;
  b: number;
  aLeads: boolean;
  bLeads: boolean;
}

/** Samples two replicas every 50 ms: who leads, and how many reconciles each has done. */
function watchPair(a: Operator, b: Operator) {
  const samples: Sample[] = [];
  let on = true;
  const loop = (async () => {
    while (on) {
      samples.push({
        t: Date.now(),
        a: await reconcileCount(a),
        b: await reconcileCount(b),
        aLeads: a.isLeader(),
        bLeads: b.isLeader(),
      });
      await sleep(50);
    }
  })();
  return {
    samples,
    stop: async () => {
      on = false;
      await loop;
      return samples;
    },
  };
}

/** Time of the last sample at which the replica's reconcile count had risen. */
const lastIncrease = (samples: Sample[], who: 'a' | 'b') =>
  samples.reduce((t, s, i) => (i > 0 && s[who] > (samples[i - 1]?.[who] ?? 0) ? s.t : t), 0);

const mdPath = (name: string) =>
  resourcePath({ group: API_GROUP, version: API_VERSION, plural: 'modeldeployments', namespace: NS, name });

/** Keeps the leader busy: an annotation change on one deployment every 200 ms, one reconcile each. */
function churner(batch: string[]) {
  let on = true;
  const loop = (async () => {
    for (let i = 0; on; i++) {
      await api
        .mergePatch(mdPath(batch[i % batch.length] as string), { metadata: { annotations: { 'e2e/tick': String(i) } } })
        .catch(() => undefined);
      await sleep(200);
    }
  })();
  return {
    stop: async () => {
      on = false;
      await loop;
    },
  };
}

/** Whether `name` runs its changed model (generation 2) on exactly one pod, and is Running. */
function rolledOut(s: Snapshot, name: string): boolean {
  const md = s.mds.find((m) => m.metadata.name === name);
  const pods = s.pods.filter((p) => p.metadata?.labels?.[MODEL_DEPLOYMENT_LABEL] === name);
  return (
    md?.status?.phase === 'Running' &&
    md.status.observedGeneration === 2 &&
    pods.length === 1 &&
    pods[0]?.metadata?.annotations?.[MODEL_ANNOTATION] === 'qwen2.5:7b'
  );
}

const control = (action: string) =>
  fetch(`${inject('controlUrl')}/${action}`, { method: 'POST' }).then(async (res) => {
    if (res.status !== 200) throw new Error(`${action}: ${res.status} ${await res.text()}`);
    return res.text();
  });

const secs = (ms: number) => `${(ms / 1000).toFixed(1)} s`;

describe.runIf(inject('localControlPlane'))('control-plane faults', () => {
  const inProcess: Operator[] = [];
  const processes: OperatorProcess[] = [];
  let hadTemplate = true;
  let hadPolicy = true;

  beforeAll(() => {
    api = new KubeClient(kubeConfig());
    hadTemplate = kubectl(['get', 'nodetemplate', LLM_NODE_TEMPLATE]).code === 0;
    hadPolicy = kubectl(['get', 'autoscalerpolicy', AUTOSCALER_POLICY_NAME]).code === 0;
    kubectl(['create', 'namespace', PROCESS_LEASE_NS]);
    applyObjects(...NODES);
    kubectlOk(['wait', '--for=condition=Ready', '--timeout=60s', 'node', ...NODES.map((n) => n.metadata?.name ?? '')]);
  });

  afterAll(async () => {
    // The API server must be back whatever failed, for the suites after this one.
    await control('start/kube-apiserver').catch(() => undefined);
    await Promise.all(inProcess.map((op) => op.stop()));
    await Promise.all(processes.map((p) => p.stop('SIGKILL')));
    // Everything this suite made, top down, without waiting for garbage collection; then wait
    // until no model server of ours holds a GPU the next suites may need.
    const objects = [...created];
    const ours = `${MODEL_DEPLOYMENT_LABEL} in (${objects.join(',')})`;
    kubectl(['delete', 'md', '-n', NS, '-l', SUITE_LABEL, '--wait=false']);
    if (objects.length) {
      kubectl(['delete', 'deploy,svc', '-n', NS, '--ignore-not-found', '--wait=false', ...objects]);
      kubectl(['delete', 'rs', '-n', NS, '-l', ours, '--wait=false']);
      kubectl(['delete', 'pods', '-n', NS, '-l', ours, '--grace-period=0', '--force']);
      await eventually('model servers gone', 60_000, async () => {
        const left = await api.list<V1Pod>(path('', 'pods'), { labelSelector: ours });
        return left.items.length === 0 ? true : undefined;
      }).catch((err: Error) => console.warn(`[faults] cleanup: ${err.message}`));
    }
    kubectl(['delete', 'node', ...NODES.map((n) => n.metadata?.name ?? ''), '--wait=false']);
    kubectl(['delete', 'lease', INPROCESS_LEASE, '-n', AGENT_NAMESPACE, '--ignore-not-found']);
    kubectl(['delete', 'namespace', PROCESS_LEASE_NS, '--wait=false']);
    if (!hadTemplate) kubectl(['delete', 'nodetemplate', LLM_NODE_TEMPLATE, '--ignore-not-found']);
    if (!hadPolicy) kubectl(['delete', 'autoscalerpolicy', AUTOSCALER_POLICY_NAME, '--ignore-not-found']);
  });

  describe('API server and etcd faults under one operator', () => {
    let op: Operator;
    let watches: ReturnType<typeof spyOnWatches>;
    let killed = 0;
    const batch = names('fault-api-', 15);

    beforeAll(async () => {
      // No leader election: an outage longer than the renew deadline would make the operator
      // step down and restart its informers, and the watch recovery under test would not run.
      op = new Operator({
        kubeConfig: kubeConfig(),
        cluster,
        images: { Ollama: 'ollama/ollama:test' },
        port: 0,
        resyncMs: 0,
        leaderElection: false,
        logger: quiet('api'),
      });
      inProcess.push(op);
      watches = spyOnWatches(op);
      await op.start();
    });

    afterAll(async () => {
      await op.stop();
      kubectl(['delete', 'md', '-n', NS, '-l', SUITE_LABEL, '--wait=false']);
    });

    it('recovers from an API server crash in the middle of a batch, etcd compacted meanwhile: each deployment converges once', async () => {
      applyObjects(...batch.map((n) => mdObject(n)));
      // Crash the API server as soon as reconciles have begun, well before the batch is done.
      await eventually('first reconciles', 30_000, async () => ((await reconcileCount(op)) >= 2 ? true : undefined));
      const atKill = await snapshot('fault-api-');
      killed = Date.now();
      await control('kill/kube-apiserver');
      const runningAtKill = runningCount(atKill, batch);
      console.log(
        `[faults] API server killed with ${runningAtKill}/${batch.length} Running, ${atKill.deployments.length} Deployments, ${await reconcileCount(op)} reconciles done`,
      );
      expect(runningAtKill).toBeLessThan(batch.length);
      const errorsBefore = await reconcileErrors(op);
      let restarted = 0;
      try {
        // While it is down, etcd compacts its history (as the API server itself does every
        // 5 minutes): every resourceVersion the operator's watches would resume from is gone.
        const revision = await control('compact');
        console.log(`[faults] etcd compacted at revision ${revision} while the API server was down`);
        await sleep(3000);
        // The operator is alive and serves health while its API server is gone.
        expect((await fetch(`${op.url()}/healthz`)).status).toBe(200);
      } finally {
        const starting = Date.now();
        await control('start/kube-apiserver');
        restarted = Date.now();
        console.log(
          `[faults] API server down ${secs(restarted - killed)} (start to ready ${secs(restarted - starting)})`,
        );
      }

      const converged = await waitAllRunning('fault-api-', batch, 120_000);
      const recovery = Date.now() - restarted;
      const failedDuring = (await reconcileErrors(op)) - errorsBefore;
      const broken = watches.ends.filter((e) => e.t >= killed);
      console.log(
        `[faults] all ${batch.length} Running ${secs(recovery)} after the API server was ready; ${failedDuring} reconciles failed meanwhile and were retried; ${broken.length} watch attempts failed (${broken.filter((e) => e.gone).length} with 410 Gone)`,
      );
      // No duplicate, no orphan, and no second write of any Deployment spec (generation 1).
      expectConverged(converged, batch);
      // The outage was real under the operator: its watches failed while the server was gone.
      expect(broken.some((e) => !e.gone)).toBe(true);
    }, 180_000);

    it('relisted the collections whose watches got 410 Gone, and converges new objects and spec changes without a restart', async () => {
      // Every informer whose watch came back 410 Gone listed its collection again, the
      // ModelDeployment informer among them (its resourceVersion was compacted away).
      const gone = watches.ends.filter((e) => e.gone && e.t >= killed);
      const paths = [...new Set(gone.map((e) => e.path))];
      const relisted = paths.filter((p) =>
        watches.lists.some((l) => l.path === p && l.t >= (gone.find((g) => g.path === p)?.t ?? 0)),
      );
      console.log(`[faults] 410 Gone then relist on ${relisted.length} collections: ${relisted.join(', ')}`);
      expect(relisted).toEqual(paths);
      expect(relisted).toContain(MDS_ALL_NAMESPACES);

      // Watches resumed after the relist: a new object and a spec change converge.
      const late = 'fault-api-late';
      const changed = batch[0] as string;
      const started = Date.now();
      applyObjects(mdObject(late), mdObject(changed, 'qwen2.5:7b'));
      // The operator's part: it writes the new and the changed Deployment from its caches.
      await eventually('operator acted', 30_000, async () => {
        const s = await snapshot('fault-api-');
        const model = (n: string) =>
          s.deployments.find((d) => d.metadata?.name === n)?.spec?.template.metadata?.annotations?.[MODEL_ANNOTATION];
        return model(late) === MODEL && model(changed) === 'qwen2.5:7b' ? true : undefined;
      });
      const acted = Date.now() - started;
      const after = await eventually('late Running and rollout done', 120_000, async () => {
        const s = await snapshot('fault-api-');
        return rolledOut(s, changed) && runningCount(s, [late]) === 1 ? s : undefined;
      });
      console.log(
        `[faults] after the outage: new and changed Deployments written ${secs(acted)} after apply, both Running after ${secs(Date.now() - started)}`,
      );
      expectConverged(after, [...batch, late], [changed]);
    }, 180_000);
  });

  it('a replica takes over from a SIGKILLed leader process and converges what it left mid-way', async () => {
    const batch = names('fault-crash-', 12);
    const [p1, p2] = await Promise.all([startOperatorProcess(), startOperatorProcess()]);
    processes.push(p1, p2);
    const pair = [p1, p2];
    const leader = await eventually('a leader', 60_000, async () => {
      const holder = (await leaseOf(PROCESS_LEASE_NS, 'platform-ai-optimizer-operator'))?.holderIdentity;
      const p = pair.find((x) => x.identity === holder);
      return p && (await scrape(p.metrics)).leader ? p : undefined;
    });
    const standby = pair.find((p) => p !== leader) as OperatorProcess;
    const transitions = (await leaseOf(PROCESS_LEASE_NS, 'platform-ai-optimizer-operator'))?.leaseTransitions ?? 0;
    expect(await scrape(standby.metrics)).toEqual({ reconciles: 0, leader: false });
    expect((await fetch(`${standby.url}/readyz`)).status).toBe(200);

    applyObjects(...batch.map((n) => mdObject(n)));
    await eventually('leader reconciling', 30_000, async () =>
      (await scrape(leader.metrics)).reconciles >= 2 ? true : undefined,
    );
    await leader.stop('SIGKILL');
    const killed = Date.now();
    const atKill = await snapshot('fault-crash-');
    const runningAtKill = runningCount(atKill, batch);
    console.log(
      `[faults] leader process SIGKILLed with ${runningAtKill}/${batch.length} Running, ${atKill.deployments.length} Deployments`,
    );
    expect(runningAtKill).toBeLessThan(batch.length);
    expect(leader.child.signalCode).toBe('SIGKILL');

    // The crashed leader's lease runs out (15 s, main.ts's default), then the standby takes it.
    let reconcilesWhileStandby = 0;
    await eventually('standby leads', 60_000, async () => {
      const m = await scrape(standby.metrics);
      // Until it leads, the standby reconciles nothing.
      if (!m.leader) reconcilesWhileStandby = Math.max(reconcilesWhileStandby, m.reconciles);
      return m.leader || undefined;
    });
    const takeover = Date.now() - killed;
    expect(reconcilesWhileStandby).toBe(0);
    const lease = await leaseOf(PROCESS_LEASE_NS, 'platform-ai-optimizer-operator');
    expect(lease?.holderIdentity).toBe(standby.identity);
    expect(lease?.leaseTransitions).toBe(transitions + 1);
    // Not before the 15 s lease ran out, and soon after (2 s retry period plus a loaded machine).
    expect(takeover).toBeGreaterThan(10_000);
    expect(takeover).toBeLessThan(40_000);

    const converged = await waitAllRunning('fault-crash-', batch, 90_000);
    console.log(
      `[faults] standby took over ${secs(takeover)} after the SIGKILL; all ${batch.length} Running ${secs(Date.now() - killed)} after it`,
    );
    expectConverged(converged, batch);
    expect((await scrape(standby.metrics)).reconciles).toBeGreaterThan(0);
    expect(await standby.stop('SIGTERM')).toBe(0);
    // A graceful stop hands the lease back.
    expect((await leaseOf(PROCESS_LEASE_NS, 'platform-ai-optimizer-operator'))?.holderIdentity).toBe('');
    kubectl(['delete', 'md', '-n', NS, ...batch, '--wait=false']);
  });

  describe('two in-process replicas on one Lease', () => {
    const batch = names('fault-ha-', 6);
    const changed = batch[0] as string;

    it('never both reconcile: only the holder counts reconciles, and a graceful stop drains before handing over', async () => {
      const a = replica('fault-a', 3000);
      inProcess.push(a);
      await a.start();
      await eventually('fault-a leads', 30_000, () => a.isLeader() || undefined);
      const b = replica('fault-b', 3000);
      inProcess.push(b);
      await b.start();
      const watch = watchPair(a, b);
      const churn = churner(batch);
      try {
        // Through the API, not kubectl: a synchronous kubectl would stall the event loop both
        // replicas share, and with it their lease renewals.
        for (const n of batch) await api.apply(mdPath(n), mdObject(n), 'e2e-faults');
        await waitAllRunning('fault-ha-', batch, 60_000);
        // Several lease renewals under load: the standby stays out.
        await sleep(5000);
        expect(watch.samples.at(-1)?.a).toBeGreaterThan(batch.length);
        expect(watch.samples.every((s) => s.b === 0 && !s.bLeads)).toBe(true);

        // Stop the leader while one of its reconciles waits on a slow API server: its write of a
        // changed Deployment takes 3 s. A graceful stop must finish that reconcile before it
        // hands the lease over, or the two replicas write the same objects at once.
        const request = a.client.request.bind(a.client);
        let slowWrites = 0;
        vi.spyOn(a.client, 'request').mockImplementation(async (method, p, init) => {
          if (method === 'PATCH' && p.includes('/deployments/')) {
            slowWrites++;
            await sleep(3000);
          }
          return request(method, p, init);
        });
        await api.mergePatch(mdPath(changed), { spec: { model: 'qwen2.5:7b' } });
        await eventually('a slow write in flight', 20_000, () => (slowWrites > 0 ? true : undefined));

        const stopping = Date.now();
        await a.stop();
        const stopped = Date.now();
        const aFinal = await reconcileCount(a);
        const bLeads = await eventually('fault-b leads', 30_000, () => (b.isLeader() ? Date.now() : undefined));
        // The lease was handed back: no need to wait the 3 s lease out, one retry period of the
        // standby (and a loaded machine) at most.
        expect(bLeads - stopped).toBeLessThan(3000);
        await eventually('fault-b reconciles', 20_000, async () => ((await reconcileCount(b)) > 0 ? true : undefined));
        await sleep(2000);
        const samples = await watch.stop();
        await churn.stop();

        const last = samples.at(-1);
        const firstB = samples.find((s) => s.bLeads)?.t ?? Number.POSITIVE_INFINITY;
        const lastA = lastIncrease(samples, 'a');
        console.log(
          `[faults] graceful handover: a.stop() took ${secs(stopped - stopping)} (a reconcile in flight), fault-b led ${secs(bLeads - stopped)} after it; reconciles a=${aFinal} b=${last?.b}; a's last reconcile ${lastA - stopping} ms after stop began`,
        );
        // Never two leaders at once, and no reconcile of the old leader once the new one led.
        expect(samples.filter((s) => s.aLeads && s.bLeads)).toEqual([]);
        expect(last?.a).toBe(aFinal);
        expect(lastA).toBeLessThan(firstB);
        expect(last?.b).toBeGreaterThan(0);
        expect(samples.filter((s) => s.t < firstB && s.b > 0)).toEqual([]);
        expect((await leaseOf(AGENT_NAMESPACE, INPROCESS_LEASE))?.holderIdentity).toBe('fault-b');
        // The new leader rolled the changed deployment out.
        const after = await eventually('rollout by fault-b', 90_000, async () => {
          const s = await snapshot('fault-ha-');
          return rolledOut(s, changed) ? s : undefined;
        });
        expectConverged(after, batch, [changed]);
      } finally {
        await watch.stop();
        await churn.stop();
        await b.stop();
      }
    });

    it('a leader whose lease renewals hang steps down before the standby may take the lease', async () => {
      // 6 s lease: renewals stop for the leader, the standby takes over once the lease ran out.
      const c = replica('fault-c', 6000);
      inProcess.push(c);
      await c.start();
      await eventually('fault-c leads', 30_000, () => c.isLeader() || undefined);
      const d = replica('fault-d', 6000);
      inProcess.push(d);
      await d.start();
      const watch = watchPair(c, d);
      const churn = churner(batch);
      let unblock = () => {};
      const blocked = new Promise<void>((resolve) => {
        unblock = resolve;
      });
      try {
        await sleep(2000);
        expect(watch.samples.every((s) => s.aLeads && !s.bLeads && s.b === 0)).toBe(true);
        // From now on every Lease request of fault-c hangs (an API server that stopped answering
        // it); its other requests still go through, so it could go on writing.
        const request = c.client.request.bind(c.client);
        vi.spyOn(c.client, 'request').mockImplementation(async (method, p, init) => {
          if (p.includes('/leases/')) {
            await blocked;
            throw new Error('lease request hung (injected)');
          }
          return request(method, p, init);
        });
        const hung = Date.now();
        const dLeads = await eventually('fault-d leads', 30_000, () => (d.isLeader() ? Date.now() : undefined));
        await sleep(1500);
        const samples = await watch.stop();
        await churn.stop();

        const cStepped = samples.find((s) => s.t > hung && !s.aLeads)?.t ?? Number.POSITIVE_INFINITY;
        const firstD = samples.find((s) => s.bLeads)?.t ?? Number.POSITIVE_INFINITY;
        console.log(
          `[faults] lease renewals hung: fault-c stepped down after ${secs(cStepped - hung)}, fault-d led after ${secs(dLeads - hung)}`,
        );
        expect(cStepped).toBeLessThan(firstD);
        expect(samples.filter((s) => s.aLeads && s.bLeads)).toEqual([]);
        expect(lastIncrease(samples, 'a')).toBeLessThan(firstD);
        expect(samples.filter((s) => s.t < firstD && s.b > 0)).toEqual([]);
        // The standby waited for the lease to run out: 6 s after the last renewal.
        expect(dLeads - hung).toBeGreaterThan(3000);
        expect((await leaseOf(AGENT_NAMESPACE, INPROCESS_LEASE))?.holderIdentity).toBe('fault-d');
        expectConverged(await snapshot('fault-ha-'), batch, [changed]);
      } finally {
        unblock();
        await watch.stop();
        await churn.stop();
        await c.stop();
        await d.stop();
      }
    });
  });
});
