import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { createWriteStream, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { KubeConfig, type V1Deployment, type V1Pod, type V1Service } from '@kubernetes/client-node';
import { type ClusterInfo, loadCatalog, resolveModel } from '../../crds/catalog/catalog.js';
import { LLM_NODE_TEMPLATE, LLMS_NAMESPACE } from '../../crds/constants.js';
import { Informer, keyOf } from '../../crds/kube/informer.js';
import { KubeClient, type KubeObject, resourcePath } from '../../crds/kube/kube-client.js';
import type { ModelDeployment } from '../../crds/model-deployment.js';
import { validateResource } from '../../crds/validation.js';
import { desiredModelServer } from '../../operator/model-deployment/model-server.js';
import { apiGet, type ControlPlane, startControlPlane } from '../cluster/control-plane.js';
import { fakeNode } from '../cluster/nodes.js';
import { ensureTools } from '../cluster/tools.js';

/**
 * Operator scale on the real control plane, against the control plane's own floor, for each of
 * N = 50, 200 and 1000 (or the counts given) on one control plane with kwok L4 GPU nodes:
 *   floor  the Deployments and Services the operator would create for N ModelDeployments (its own
 *          builders), applied directly; time until every pod is Ready and every Deployment available;
 *   ours   N ModelDeployments applied to a freshly started operator; time until every one is Running
 *          and its Deployment available (the floor's end state plus the operator's own status).
 * Both apply with one `kubectl apply --server-side` of a List and start from an empty namespace: it is
 * deleted (and its pods gone) and created again after each phase. Also: reconciles, API requests per
 * reconcile, the operator's peak RSS, and what an idle operator sends in 10 s besides watches and
 * its Lease. Target (N=200): ours <= 1.2x the floor, 0 idle requests.
 * Run: npx tsx e2e/bench/operator-scale.ts [count...] [--control-plane-qps N]
 * (results: e2e/bench/out/operator-scale.json)
 */

const { values: flags, positionals } = parseArgs({
  options: { 'control-plane-qps': { type: 'string' } },
  allowPositionals: true,
});
const SIZES = positionals.length ? positionals.map(Number) : [50, 200, 1000];
if (SIZES.some((n) => !Number.isInteger(n) || n < 1))
  throw new Error(`counts must be positive integers: ${positionals}`);
/**
 * The client QPS of kube-controller-manager and kube-scheduler (burst twice that), for both phases:
 * unset, their defaults (20/30 and 50/100), which set the floor; raised, the floor drops to what
 * the machine can do and the operator's own throughput shows.
 */
const CONTROL_PLANE_QPS = flags['control-plane-qps'] ? Number(flags['control-plane-qps']) : undefined;
const TARGET_SIZE = 200;
const TARGET_RATIO = 1.2;
const MODEL = 'qwen2.5:0.5b';
// Passed to the operator too, so that the floor runs the very pods the operator makes.
const IMAGE = 'ollama/ollama:0.17.4';
const CLUSTER: ClusterInfo = { organizationId: 'default', clusterId: 'bench', cloud: 'aws', region: 'us-east-1' };
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const OUT = join(ROOT, 'e2e/bench/out');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const seconds = (ms: number | undefined) => (ms === undefined ? undefined : +(ms / 1000).toFixed(1));

/** The sum of a metric's series, leases excluded, and watches unless asked for. */
async function metric(metricsPort: number, name: string, filter = ''): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
  return text
    .split('\n')
    .filter(
      (l) =>
        l.startsWith(name) &&
        l.includes(filter) &&
        !l.includes('resource="leases"') &&
        (filter.includes('WATCH') || !l.includes('method="WATCH"')),
    )
    .reduce((sum, l) => sum + Number(l.split(' ').at(-1)), 0);
}

const rssMiB = (child: ChildProcess) => {
  try {
    return Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${child.pid}/status`, 'utf8'))?.[1] ?? 0) / 1024;
  } catch {
    return 0;
  }
};

function modelDeployments(n: number): Array<Record<string, unknown>> {
  return Array.from({ length: n }, (_, i) => ({
    apiVersion: 'ai.platform/v1beta1',
    kind: 'ModelDeployment',
    metadata: { name: `m${i}`, namespace: LLMS_NAMESPACE },
    spec: { model: MODEL, serviceName: `m${i}` },
  }));
}

/**
 * What the operator would create for these ModelDeployments: each one defaulted as the API server
 * defaults it, through the operator's own builder. Without owner references: there is no owner, and
 * the garbage collector would delete what names a missing one.
 */
function floorObjects(mds: Array<Record<string, unknown>>): Array<V1Deployment | V1Service> {
  const catalog = loadCatalog();
  const resolved = resolveModel(catalog, CLUSTER, MODEL);
  if (!resolved.ok) throw new Error(resolved.message);
  return mds.flatMap((doc, i) => {
    const checked = validateResource(doc);
    if (!checked.ok || checked.resource.kind !== 'ModelDeployment') throw new Error(`invalid ModelDeployment ${i}`);
    const md: ModelDeployment = { ...checked.resource, metadata: { ...checked.resource.metadata, uid: `floor-${i}` } };
    const { deployment, service } = desiredModelServer(md, resolved.model, catalog, {
      image: IMAGE,
      template: LLM_NODE_TEMPLATE,
      gpuTypes: resolved.gpuTypes,
    });
    for (const o of [deployment, service]) delete o.metadata?.ownerReferences;
    return [deployment, service];
  });
}

/** In the order they happen. */
const MILESTONES = [
  'applied',
  'deploymentsCreated',
  'podsCreated',
  'podsScheduled',
  'podsReady',
  'running',
  'deploymentsAvailable',
  'settled',
] as const;
type Milestone = (typeof MILESTONES)[number];

/**
 * Watches platform-llms (one watch per resource, so polling costs the control plane nothing) and
 * notes when the count of deployments, pods, ready pods, available Deployments and Running (then
 * settled: status showing the ready replica) ModelDeployments first reaches n.
 */
class Progress {
  readonly at = new Map<Milestone, number>();
  private readonly sets = new Map<Milestone, Set<string>>();
  private readonly informers: Array<Pick<Informer<KubeObject>, 'start' | 'stop'>> = [];
  private started = Date.now();
  private waiter: (() => void) | undefined;

  constructor(
    client: KubeClient,
    private readonly n: number,
    withModelDeployments: boolean,
  ) {
    const ns = LLMS_NAMESPACE;
    const pods = new Informer<V1Pod>(client, {
      path: resourcePath({ group: '', version: 'v1', plural: 'pods', namespace: ns }),
    });
    pods.on((e, p) => {
      const k = keyOf(p);
      this.mark('podsCreated', k, e !== 'delete');
      this.mark('podsScheduled', k, e !== 'delete' && !!p.spec?.nodeName);
      const ready = p.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True');
      this.mark('podsReady', k, e !== 'delete' && !!ready);
    });
    const deployments = new Informer<V1Deployment>(client, {
      path: resourcePath({ group: 'apps', version: 'v1', plural: 'deployments', namespace: ns }),
    });
    deployments.on((e, d) => {
      const k = keyOf(d);
      this.mark('deploymentsCreated', k, e !== 'delete');
      const want = d.spec?.replicas ?? 1;
      this.mark('deploymentsAvailable', k, e !== 'delete' && (d.status?.availableReplicas ?? 0) >= want);
    });
    this.informers.push(pods, deployments);
    if (withModelDeployments) {
      const mds = new Informer<ModelDeployment>(client, {
        path: resourcePath({ group: 'ai.platform', version: 'v1beta1', plural: 'modeldeployments', namespace: ns }),
      });
      mds.on((e, md) => {
        const k = keyOf(md);
        const running = e !== 'delete' && md.status?.phase === 'Running';
        this.mark('running', k, running);
        this.mark('settled', k, running && md.status?.readyReplicas === md.spec.replicas);
      });
      this.informers.push(mds);
    }
  }

  /** Starts watching; the clock starts at begin(). */
  start(): Promise<void> {
    return Promise.all(this.informers.map((i) => i.start())).then(() => undefined);
  }

  begin(): void {
    this.started = Date.now();
  }

  async stop(): Promise<void> {
    await Promise.all(this.informers.map((i) => i.stop()));
  }

  note(m: Milestone): void {
    if (!this.at.has(m)) this.at.set(m, Date.now() - this.started);
    this.waiter?.();
  }

  private mark(m: Milestone, key: string, on: boolean): void {
    let set = this.sets.get(m);
    if (!set) {
      set = new Set();
      this.sets.set(m, set);
    }
    if (on) set.add(key);
    else set.delete(key);
    if (set.size >= this.n) this.note(m);
  }

  count(m: Milestone): number {
    return this.sets.get(m)?.size ?? 0;
  }

  /** Resolves with the time since start when every milestone given has been reached, or throws. */
  async until(milestones: Milestone[], timeoutMs: number): Promise<number> {
    const deadline = this.started + timeoutMs;
    while (!milestones.every((m) => this.at.has(m))) {
      const left = deadline - Date.now();
      if (left <= 0) {
        const got = milestones.map((m) => `${m} ${this.count(m)}/${this.n}`).join(', ');
        throw new Error(`timed out after ${timeoutMs / 1000} s: ${got}`);
      }
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, Math.min(left, 1000));
        this.waiter = () => {
          clearTimeout(t);
          resolve();
        };
      });
    }
    return Math.max(...milestones.map((m) => this.at.get(m) ?? 0));
  }

  timeline(): Partial<Record<Milestone, number>> {
    return Object.fromEntries(MILESTONES.filter((m) => this.at.has(m)).map((m) => [m, seconds(this.at.get(m))]));
  }
}

/** What a phase cost the machine and the control plane: where the floor's time goes. */
interface PhaseLoad {
  /** CPU seconds each process used during the phase (the operator's in the ours phase). */
  cpuSeconds: Record<string, number>;
  /** CPU seconds of all of them over the phase's wall time: out of 2 here, the machine's cores. */
  busyCores: number;
  /** Writes the API server served (its apiserver_request_total), by verb and resource. */
  writes: Record<string, number>;
  /** Requests kube-controller-manager sent, per second of the phase, and the time they spent in its client-side rate limiters (summed over requests). */
  controllerManagerRequestsPerSecond: number;
  controllerManagerThrottledSeconds: number;
}

interface LoadSample {
  at: number;
  cpu: Record<string, number>;
  writes: Record<string, number>;
  kcmRequests: number;
  kcmThrottledSeconds: number;
}

const WRITE_VERBS = new Set(['POST', 'PUT', 'PATCH', 'APPLY', 'DELETE']);

/** CPU seconds (user + system) of a process so far; USER_HZ is 100 on Linux. */
function cpuSeconds(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command name, which may itself hold spaces: state is the first, utime the 12th.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) / 100;
  } catch {
    return 0;
  }
}

const labelsOf = (line: string): Record<string, string> =>
  Object.fromEntries([...line.matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1] ?? '', m[2] ?? '']));

async function sampleLoad(plane: ControlPlane, operator?: ChildProcess): Promise<LoadSample> {
  const cpu: Record<string, number> = {};
  for (const [c, pid] of Object.entries(plane.pids())) cpu[c] = cpuSeconds(pid);
  if (operator?.pid) cpu.operator = cpuSeconds(operator.pid);
  // This process too: its watches and kubectl's parsing are part of both phases.
  const self = process.cpuUsage();
  cpu.bench = (self.user + self.system) / 1e6;
  const writes: Record<string, number> = {};
  const api = await apiGet(plane.server, plane.token, '/metrics');
  for (const line of api.body.split('\n')) {
    if (!line.startsWith('apiserver_request_total{')) continue;
    const l = labelsOf(line);
    if (!WRITE_VERBS.has(l.verb ?? '')) continue;
    const key = `${l.verb} ${l.resource}${l.subresource ? `/${l.subresource}` : ''}`;
    writes[key] = (writes[key] ?? 0) + Number(line.split(' ').at(-1));
  }
  const kcm = await apiGet(
    `https://127.0.0.1:${plane.securePorts['kube-controller-manager']}`,
    plane.token,
    '/metrics',
  );
  let kcmRequests = 0;
  let kcmThrottledSeconds = 0;
  for (const line of kcm.body.split('\n')) {
    const value = Number(line.split(' ').at(-1));
    if (line.startsWith('rest_client_requests_total{')) kcmRequests += value;
    if (line.startsWith('rest_client_rate_limiter_duration_seconds_sum{')) kcmThrottledSeconds += value;
  }
  return { at: Date.now(), cpu, writes, kcmRequests, kcmThrottledSeconds };
}

function phaseLoad(before: LoadSample, after: LoadSample): PhaseLoad {
  const wall = (after.at - before.at) / 1000;
  const cpuSeconds = Object.fromEntries(
    Object.entries(after.cpu).map(([c, v]) => [c, +(v - (before.cpu[c] ?? 0)).toFixed(1)]),
  );
  const writes = Object.fromEntries(
    Object.entries(after.writes)
      .map(([k, v]): [string, number] => [k, v - (before.writes[k] ?? 0)])
      .filter(([, v]) => v > 0)
      .sort((a, b) => b[1] - a[1]),
  );
  return {
    cpuSeconds,
    busyCores: +(Object.values(cpuSeconds).reduce((a, b) => a + b, 0) / wall).toFixed(2),
    writes,
    controllerManagerRequestsPerSecond: +((after.kcmRequests - before.kcmRequests) / wall).toFixed(1),
    controllerManagerThrottledSeconds: +(after.kcmThrottledSeconds - before.kcmThrottledSeconds).toFixed(1),
  };
}

interface SizeResult {
  modelDeployments: number;
  floorSeconds: number;
  oursSeconds: number;
  ratio: number;
  /** Seconds from the apply to each milestone, per phase. */
  floorTimeline: Partial<Record<Milestone, number>>;
  oursTimeline: Partial<Record<Milestone, number>>;
  reconciles: number;
  reconcilesPerSecond: number;
  meanReconcileMs: number;
  reconcileErrors: number;
  apiRequests: number;
  apiRequestsPerReconcile: number;
  apiRequestsByKind: Record<string, number>;
  peakRssMiB: number;
  idleApiRequestsIn10s: number;
  teardownSeconds: number[];
  floorLoad: PhaseLoad;
  oursLoad: PhaseLoad;
}

async function main() {
  const qps = CONTROL_PLANE_QPS
    ? [`--kube-api-qps=${CONTROL_PLANE_QPS}`, `--kube-api-burst=${2 * CONTROL_PLANE_QPS}`]
    : [];
  const plane = await startControlPlane({ extraArgs: { 'kube-controller-manager': qps, 'kube-scheduler': qps } });
  const tools = ensureTools();
  // Never execFileSync: a blocked event loop stops draining the control plane's log pipes, and kwok,
  // which logs every pod it patches, then stalls on a full pipe.
  const k = (args: string[], input?: string) =>
    new Promise<string>((resolve, reject) => {
      const child = execFile(
        tools.kubectl,
        ['--kubeconfig', plane.kubeconfig, ...args],
        { cwd: ROOT, encoding: 'utf8', maxBuffer: 256 << 20 },
        (err, stdout, stderr) =>
          err ? reject(new Error(`kubectl ${args.join(' ')}: ${stderr || err.message}`)) : resolve(stdout),
      );
      child.stdin?.end(input ?? '');
    });
  const kc = new KubeConfig();
  kc.loadFromFile(plane.kubeconfig);
  const client = new KubeClient(kc, { userAgent: 'operator-scale-bench' });
  mkdirSync(OUT, { recursive: true });
  const results: SizeResult[] = [];
  let failure: string | undefined;
  let operator: ChildProcess | undefined;
  try {
    await k(['apply', '--server-side', '-f', 'crds/']);
    await k(['wait', '--for=condition=Established', '--timeout=60s', 'crd/modeldeployments.ai.platform']);
    for (const ns of [LLMS_NAMESPACE, 'platform-agent']) await k(['create', 'namespace', ns]);
    // Enough GPUs for every model server of the largest size: L4 nodes of the operator's template.
    const largest = Math.max(...SIZES);
    const nodes = Array.from({ length: Math.ceil(largest / 8) + 1 }, (_, i) =>
      fakeNode({
        name: `l4-${i}`,
        arch: 'amd64',
        gpuModel: 'L4',
        computeCapability: '8.9',
        gpus: 8,
        zone: 'us-east-1a',
        template: LLM_NODE_TEMPLATE,
      }),
    );
    await k(['apply', '-f', '-'], JSON.stringify({ apiVersion: 'v1', kind: 'List', items: nodes }));
    await k(['wait', '--for=condition=Ready', '--timeout=180s', 'node', '--all']);

    for (const n of SIZES) {
      const timeoutMs = 120_000 + n * 1000;
      const mds = modelDeployments(n);
      const mdList = JSON.stringify({ apiVersion: 'v1', kind: 'List', items: mds });
      const teardownSeconds: number[] = [];

      // Floor: the control plane alone, given the operator's output directly.
      const floorList = JSON.stringify({ apiVersion: 'v1', kind: 'List', items: floorObjects(mds) });
      const floor = new Progress(client, n, false);
      await floor.start();
      const floorBefore = await sampleLoad(plane);
      floor.begin();
      await k(['apply', '--server-side', '-f', '-'], floorList);
      floor.note('applied');
      const floorMs = await floor.until(['podsReady', 'deploymentsAvailable'], timeoutMs);
      const floorLoad = phaseLoad(floorBefore, await sampleLoad(plane));
      await floor.stop();
      teardownSeconds.push(await emptyNamespace(k));

      // Ours: a fresh operator per size, so its counters and RSS are this size's.
      const port = 18_000 + Math.floor(Math.random() * 1000);
      const log = createWriteStream(join(OUT, `operator-scale-${n}.log`));
      operator = startOperator(plane, port, log);
      let ready = false;
      for (let i = 0; i < 300 && !ready; i++) {
        ready = !!(await fetch(`http://127.0.0.1:${port}/readyz`).catch(() => undefined))?.ok;
        if (!ready) await sleep(100);
      }
      if (!ready) throw new Error(`operator not ready in 30 s; see e2e/bench/out/operator-scale-${n}.log`);
      const metricsPort = port + 1;
      const requestsBefore = await metric(metricsPort, 'pao_operator_kube_api_requests_total');
      const ours = new Progress(client, n, true);
      await ours.start();
      let peakRss = 0;
      const op = operator;
      const sampler = setInterval(() => {
        peakRss = Math.max(peakRss, rssMiB(op));
      }, 250);
      const oursBefore = await sampleLoad(plane, op);
      ours.begin();
      await k(['apply', '--server-side', '-f', '-'], mdList);
      ours.note('applied');
      const oursMs = await ours.until(['running', 'deploymentsAvailable'], timeoutMs);
      const oursLoad = phaseLoad(oursBefore, await sampleLoad(plane, op));
      // Counted up to the moment every model is served, as the time is.
      const reconciles = await metric(
        metricsPort,
        'controller_runtime_reconcile_total',
        'controller="modeldeployment"',
      );
      const reconcileErrors = await metric(
        metricsPort,
        'controller_runtime_reconcile_total',
        'controller="modeldeployment",result="error"',
      );
      const reconcileSeconds = await metric(
        metricsPort,
        'controller_runtime_reconcile_time_seconds_sum',
        'controller="modeldeployment"',
      );
      const requests = (await metric(metricsPort, 'pao_operator_kube_api_requests_total')) - requestsBefore;
      const apiRequestsByKind = await requestsByKind(metricsPort);

      // Idle: once the cluster is at rest (every status shows its ready replica), nothing changes
      // for 10 s; count what the operator still sends besides its watches and its Lease.
      await ours.until(['settled'], timeoutMs);
      await sleep(2000);
      const idleBefore = await metric(metricsPort, 'pao_operator_kube_api_requests_total');
      await sleep(10_000);
      const idleRequests = (await metric(metricsPort, 'pao_operator_kube_api_requests_total')) - idleBefore;
      clearInterval(sampler);
      await ours.stop();
      await stopOperator(operator);
      operator = undefined;
      log.end();
      teardownSeconds.push(await emptyNamespace(k));

      const result: SizeResult = {
        modelDeployments: n,
        floorSeconds: seconds(floorMs) ?? 0,
        oursSeconds: seconds(oursMs) ?? 0,
        ratio: +(oursMs / floorMs).toFixed(2),
        floorTimeline: floor.timeline(),
        oursTimeline: ours.timeline(),
        reconciles,
        reconcilesPerSecond: +(reconciles / (oursMs / 1000)).toFixed(1),
        meanReconcileMs: +((reconcileSeconds * 1000) / Math.max(1, reconciles)).toFixed(1),
        reconcileErrors,
        apiRequests: requests,
        apiRequestsPerReconcile: +(requests / Math.max(1, reconciles)).toFixed(2),
        apiRequestsByKind,
        peakRssMiB: +peakRss.toFixed(0),
        idleApiRequestsIn10s: idleRequests,
        teardownSeconds,
        floorLoad,
        oursLoad,
      };
      results.push(result);
      console.log(`N=${n}: floor ${result.floorSeconds} s, ours ${result.oursSeconds} s (${result.ratio}x)`);
    }
  } catch (err) {
    // The sizes measured so far are still reported; the run fails.
    failure = err instanceof Error ? err.message : String(err);
  } finally {
    if (operator) await stopOperator(operator);
    await plane.stop();
  }

  console.table(
    results.map((r) => ({
      modelDeployments: r.modelDeployments,
      floorSeconds: r.floorSeconds,
      oursSeconds: r.oursSeconds,
      ratio: r.ratio,
      reconciles: r.reconciles,
      reconcilesPerSecond: r.reconcilesPerSecond,
      meanReconcileMs: r.meanReconcileMs,
      apiRequestsPerReconcile: r.apiRequestsPerReconcile,
      peakRssMiB: r.peakRssMiB,
      idleApiRequestsIn10s: r.idleApiRequestsIn10s,
    })),
  );
  // Where the time goes: seconds from the apply until all N of each had happened.
  console.table(
    results.flatMap((r) => [
      { modelDeployments: r.modelDeployments, phase: 'floor', ...r.floorTimeline },
      { modelDeployments: r.modelDeployments, phase: 'ours', ...r.oursTimeline },
    ]),
  );

  // What each phase cost: CPU of each process, and how hard kube-controller-manager was throttled.
  console.table(
    results.flatMap((r) =>
      (['floor', 'ours'] as const).map((phase) => {
        const load = phase === 'floor' ? r.floorLoad : r.oursLoad;
        return {
          modelDeployments: r.modelDeployments,
          phase,
          busyCores: load.busyCores,
          ...load.cpuSeconds,
          kcmRequestsPerSecond: load.controllerManagerRequestsPerSecond,
          kcmThrottledSeconds: load.controllerManagerThrottledSeconds,
        };
      }),
    ),
  );

  const verdicts: string[] = [];
  for (const r of results) {
    const pass = r.ratio <= TARGET_RATIO;
    verdicts.push(
      `${pass ? 'PASS' : 'FAIL'} operator N=${r.modelDeployments}: ours <= ${TARGET_RATIO}x the control plane's floor: ` +
        `${r.oursSeconds} s vs ${r.floorSeconds} s (${r.ratio}x)${r.modelDeployments === TARGET_SIZE ? '' : ' [target is set for N=200]'}`,
    );
  }
  const idle = results.map((r) => r.idleApiRequestsIn10s);
  verdicts.push(
    `${idle.every((x) => x === 0) ? 'PASS' : 'FAIL'} operator idle: 0 API requests beyond watches and the Lease in 10 s: ` +
      results.map((r) => `N=${r.modelDeployments} ${r.idleApiRequestsIn10s}`).join(', '),
  );
  if (failure) verdicts.push(`FAIL operator run: ${failure}`);
  for (const v of verdicts) console.log(v);
  writeFileSync(
    // A run on a raised QPS is an experiment beside the standard result, not in its place.
    join(OUT, CONTROL_PLANE_QPS ? `operator-scale-qps${CONTROL_PLANE_QPS}.json` : 'operator-scale.json'),
    `${JSON.stringify(
      {
        date: new Date().toISOString(),
        controlPlaneQps: CONTROL_PLANE_QPS ?? 'defaults',
        target: { size: TARGET_SIZE, ratio: TARGET_RATIO },
        results,
        verdicts,
      },
      null,
      2,
    )}\n`,
  );
  if (failure) process.exitCode = 1;
}

/** Non-watch, non-lease requests by method and resource, e.g. "PATCH deployments". */
async function requestsByKind(metricsPort: number): Promise<Record<string, number>> {
  const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
  const out: Record<string, number> = {};
  for (const line of text.split('\n')) {
    const m = /^pao_operator_kube_api_requests_total\{method="(\w+)",resource="(\w+)"\} (\d+)/.exec(line);
    if (!m || m[1] === 'WATCH' || m[2] === 'leases') continue;
    out[`${m[1]} ${m[2]}`] = Number(m[3]);
  }
  return out;
}

/**
 * Deletes platform-llms and everything in it, waits until it is gone (its pods too: the
 * namespace is only removed after them), and creates it again. Returns the seconds it took.
 */
async function emptyNamespace(k: (args: string[]) => Promise<string>): Promise<number> {
  const started = Date.now();
  await k(['delete', 'namespace', LLMS_NAMESPACE, '--wait=true', '--timeout=900s']);
  await k(['create', 'namespace', LLMS_NAMESPACE]);
  return seconds(Date.now() - started) ?? 0;
}

function startOperator(plane: ControlPlane, port: number, log: NodeJS.WritableStream): ChildProcess {
  // node itself with tsx as a loader, so the measured RSS is the operator's, not a wrapper's.
  const child = spawn(
    process.execPath,
    [
      '--import',
      'tsx',
      'operator/main.ts',
      '--kubeconfig',
      plane.kubeconfig,
      '--cluster-id',
      CLUSTER.clusterId,
      '--region',
      CLUSTER.region,
      '--ollama-image',
      IMAGE,
      '--port',
      String(port),
      '--metrics-port',
      String(port + 1),
      '--leader-elect',
      'false',
    ],
    { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  // Its JSON log (stdout) and anything it prints on stderr, to read what a slow run spent its time on.
  child.stdout?.pipe(log, { end: false });
  child.stderr?.pipe(log, { end: false });
  return child;
}

async function stopOperator(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  // 'close', not 'exit': its last log lines are through the pipes by then.
  const exited = new Promise<void>((resolve) => child.once('close', () => resolve()));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
  await exited;
  clearTimeout(timer);
}

await main();
