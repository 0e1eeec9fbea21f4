import { execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { KubeConfig, type V1Pod } from '@kubernetes/client-node';
import { loadCatalog, parallelSlots } from '../../crds/catalog/catalog.js';
import { Informer } from '../../crds/kube/informer.js';
import { KubeClient } from '../../crds/kube/kube-client.js';
import { jsonLogger } from '../../crds/observability/log.js';
import { Operator } from '../../operator/operator.js';
import { ApiKeys } from '../../proxy/access/auth.js';
import { ReplicaPools } from '../../proxy/serving/replica-pool.js';
import { type RouteEntry, RouteTable } from '../../proxy/serving/routes.js';
import { API_KEYS_SECRET, ClusterSource } from '../../proxy/sources/cluster-source.js';
import { ProxyMetrics } from '../../proxy/telemetry/metrics.js';
import { OpenAICompatibleUpstream } from '../../proxy/upstreams/openai-compatible.js';
import { MemoryUsage } from '../../proxy/usage/record.js';
import { startControlPlane } from '../cluster/control-plane.js';
import { fakeNode } from '../cluster/nodes.js';
import { ensureTools } from '../cluster/tools.js';
import { OLLAMA_MODEL, startOllama } from '../ollama/server.js';
import { startGateway } from '../support/gateway.js';

/**
 * Time to first token after scale from zero, on the real control plane with kwok GPU nodes and a
 * real Ollama process standing in for the pod's server. A streamed request for a hibernated model
 * goes through the proxy (in process, wired as proxy/main.ts wires it); the proxy wakes the model
 * through the scale subresource and holds the request; the operator scales the Deployment; the
 * scheduler places the pod on a kwok node. When the pod is scheduled, the Ollama server starts
 * (the container starting) on a models dir that already holds the model (the model cache: no
 * pull), the cache check the init container does is timed, then the readiness probe (one token,
 * which loads the model); only then does the replica count as ready for the proxy (kwok marks pods
 * Ready at once: the kubelet would wait for the probe). Each component is timed.
 * Run: npx tsx e2e/bench/cold-start.ts [runs]
 */

const RUNS = Number(process.argv.find((a) => /^\d+$/.test(a)) ?? 3);
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const NS = 'platform-llms';
const MODEL = 'qwen2.5:0.5b';
const KEY = 'sk-cold-start-bench';
/** Our share of a cold start (wake, scale, schedule, route): the rest is Ollama's and the GPU node's. */
const CONTROL_PLANE_TARGET_MS = 3_000;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Run {
  wakePatchMs: number;
  podCreatedMs: number;
  scheduledMs: number;
  serverStartMs: number;
  cacheCheckMs: number;
  modelLoadMs: number;
  podReadyKwokMs: number;
  routedMs: number;
  queuedMs: number;
  firstTokenMs: number;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? 0;

async function main() {
  const plane = await startControlPlane();
  const tools = ensureTools();
  const k = (args: string[], input?: string) =>
    execFileSync(tools.kubectl, ['--kubeconfig', plane.kubeconfig, ...args], { cwd: ROOT, encoding: 'utf8', input });
  const kc = new KubeConfig();
  kc.loadFromFile(plane.kubeconfig);
  const ollama = await startOllama({ parallel: 1 });
  const cleanups: Array<() => Promise<void> | void> = [() => plane.stop(), () => ollama.stop()];
  try {
    // The pod serves the catalog's name: the machine's model under it, in the "cache" (its models dir).
    await fetch(`${ollama.url}/api/copy`, {
      method: 'POST',
      body: JSON.stringify({ source: OLLAMA_MODEL, destination: MODEL }),
    });
    await ollama.kill();

    k(['apply', '--server-side', '-f', 'crds/']);
    k(['wait', '--for=condition=Established', '--timeout=60s', 'crd/modeldeployments.ai.platform']);
    for (const ns of [NS, 'platform-agent']) k(['create', 'namespace', ns]);
    k(
      ['apply', '-f', '-'],
      JSON.stringify({
        apiVersion: 'v1',
        kind: 'List',
        items: [
          fakeNode({
            name: 'l4-0',
            arch: 'amd64',
            gpuModel: 'L4',
            computeCapability: '8.9',
            gpus: 8,
            zone: 'us-east-1a',
            template: 'llms-by-platform',
          }),
          {
            apiVersion: 'v1',
            kind: 'Secret',
            metadata: { name: API_KEYS_SECRET, namespace: 'platform-agent' },
            stringData: { keys: `${KEY}\n` },
          },
        ],
      }),
    );
    k(['wait', '--for=condition=Ready', '--timeout=120s', 'node', '--all']);

    // The proxy, with a readiness gate standing in for the kubelet's probe.
    let loaded = false;
    const routes = new RouteTable();
    const gated = (entry: RouteEntry | undefined): RouteEntry | undefined =>
      entry?.kind === 'in-cluster' && entry.replicas && !loaded ? { ...entry, replicas: [] } : entry;
    const keys = new ApiKeys();
    const catalog = loadCatalog();
    const source = new ClusterSource({
      kubeConfig: kc,
      routes,
      keys,
      slotsOf: (md) => parallelSlots(catalog, md),
    });
    const marks: Record<string, number> = {};
    const mark = (name: string) => {
      marks[name] ??= performance.now();
    };
    const pools = new ReplicaPools({
      maxQueued: 10,
      queueMs: 120_000,
      lookup: (m) => gated(routes.lookup(m)),
      wake: async (s) => {
        await source.wake(s.namespace, s.name);
        mark('wakePatch');
      },
      onQueued: () => mark('dispatched'),
      onWakeError: (_m, err) => console.error(`wake failed, retrying: ${String(err)}`),
    });
    routes.onChange(() => {
      const r = routes.lookup(MODEL);
      if (r?.kind === 'in-cluster' && (r.replicas?.length ?? 0) > 0) mark('routed');
      pools.refresh();
    });
    const upstream = new OpenAICompatibleUpstream({
      pools,
      resolve: (url) => (/^http:\/\/[\d.]+:11434$/.test(url) ? ollama.url : url),
    });
    await source.start();
    // The gateway as main.ts composes it, fed by this bench's source and its instrumented pools.
    const app = await startGateway(
      {},
      { keys, routes, inCluster: upstream, usage: new MemoryUsage(), metrics: new ProxyMetrics() },
    );
    cleanups.push(
      () => app.stop(),
      () => source.stop(),
      () => upstream.close(),
    );

    const operator = new Operator({
      kubeConfig: kc,
      cluster: { organizationId: 'bench', clusterId: 'bench', cloud: 'aws', region: 'us-east-1' },
      images: { Ollama: 'ollama/ollama:0.17.4' },
      port: 0,
      leaderElection: false,
      logger: jsonLogger('operator', (l) => {
        if (process.env.BENCH_DEBUG) console.error(l);
      }),
      // Nobody reports load here: the autoscaler leaves replicas to the proxy's wake and this bench.
      proxyLoadUrls: [],
    });
    await operator.start();
    cleanups.push(() => operator.stop());

    // Pods, as the operator sees them: created, scheduled, Ready (kwok).
    const pods = new Informer<V1Pod>(new KubeClient(kc), {
      path: `/api/v1/namespaces/${NS}/pods`,
      onError: () => {},
    });
    let onScheduled: (() => void) | undefined;
    pods.on((_e, pod) => {
      if (pod.metadata?.deletionTimestamp) return;
      mark('podCreated');
      if (pod.status?.conditions?.some((c) => c.type === 'PodScheduled' && c.status === 'True')) {
        if (!marks.scheduled) {
          mark('scheduled');
          onScheduled?.();
        }
      }
      if (pod.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True')) mark('podReadyKwok');
    });
    await pods.start();
    cleanups.push(() => pods.stop());

    k(
      ['apply', '-f', '-'],
      JSON.stringify({
        apiVersion: 'ai.platform/v1beta1',
        kind: 'ModelDeployment',
        metadata: { name: 'cold', namespace: NS },
        spec: {
          model: MODEL,
          serviceName: 'cold',
          replicas: 0,
          autoscaling: { minReplicas: 0, maxReplicas: 1, hibernateAfterSeconds: 3600 },
        },
      }),
    );
    for (let i = 0; i < 600; i++) {
      if (routes.lookup(MODEL)?.kind === 'in-cluster') break;
      await sleep(100);
    }

    const runs: Run[] = [];
    for (let run = 0; run < RUNS; run++) {
      for (const key of Object.keys(marks)) delete marks[key];
      loaded = false;
      const server: Record<string, number> = {};
      // The container starts once the pod is on a node: the server, the cache check, the probe.
      const serverReady = new Promise<void>((resolve, reject) => {
        onScheduled = () => {
          onScheduled = undefined;
          void (async () => {
            const t = performance.now();
            await ollama.restart();
            server.up = performance.now();
            server.startMs = server.up - t;
            const show = await fetch(`${ollama.url}/api/show`, {
              method: 'POST',
              body: JSON.stringify({ model: MODEL }),
            });
            if (!show.ok) throw new Error(`the cached model is missing: ${show.status}`);
            server.cacheMs = performance.now() - server.up;
            const t2 = performance.now();
            const probe = await fetch(`${ollama.url}/api/generate`, {
              method: 'POST',
              body: JSON.stringify({ model: MODEL, prompt: 'hi', stream: false, options: { num_predict: 1 } }),
            });
            if (!probe.ok) throw new Error(`readiness probe failed: ${probe.status}`);
            await probe.text();
            server.loadMs = performance.now() - t2;
            mark('loaded');
            loaded = true;
            pools.refresh();
          })().then(resolve, (err: unknown) => {
            console.error(`the stand-in model server failed: ${String(err)}`);
            reject(err);
          });
        };
      });

      const t0 = performance.now();
      const res = await app.request('/openai/v1/chat/completions', {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-api-key': KEY },
        body: JSON.stringify({
          model: MODEL,
          stream: true,
          max_tokens: 16,
          messages: [{ role: 'user', content: 'Say hello.' }],
        }),
      });
      if (res.status !== 200 || !res.body) {
        const state =
          k(['get', 'md', 'cold', '-n', NS, '-o', 'yaml', '--show-managed-fields']) + k(['get', 'events', '-n', NS]);
        throw new Error(`request failed: ${res.status} ${await res.text()}; seen: ${JSON.stringify(marks)}\n${state}`);
      }
      const reader = res.body.getReader();
      const decoder = new TextDecoder();
      let firstToken = 0;
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        if (!firstToken && /"content":"[^"]/.test(decoder.decode(value))) firstToken = performance.now();
      }
      await serverReady;
      const at = (name: string) => (marks[name] ?? Number.NaN) - t0;
      runs.push({
        wakePatchMs: at('wakePatch'),
        podCreatedMs: at('podCreated'),
        scheduledMs: at('scheduled'),
        serverStartMs: server.startMs ?? Number.NaN,
        cacheCheckMs: server.cacheMs ?? Number.NaN,
        modelLoadMs: server.loadMs ?? Number.NaN,
        podReadyKwokMs: at('podReadyKwok'),
        routedMs: at('routed'),
        queuedMs: at('dispatched'),
        firstTokenMs: firstToken - t0,
      });
      console.error(`run ${run + 1}/${RUNS}: first token after ${Math.round(firstToken - t0)} ms`);

      // Back to sleep: zero replicas, no pod, no server.
      k(['scale', 'md', 'cold', '-n', NS, '--replicas=0']);
      await ollama.kill();
      for (let i = 0; i < 600; i++) {
        const left = pods.list().filter((p) => !p.metadata?.deletionTimestamp).length;
        const r = routes.lookup(MODEL);
        if (left === 0 && r?.kind === 'in-cluster' && (r.replicas?.length ?? 0) === 0) break;
        await sleep(100);
      }
      k(['delete', 'pods', '--all', '-n', NS, '--grace-period=0', '--force']);
      await sleep(500);
    }

    const m = (f: keyof Run) => Math.round(median(runs.map((r) => r[f])));
    const controlPlaneMs = m('podReadyKwokMs');
    const rows = [
      { step: 'wake: request -> replicas 0->1 (proxy patch)', ms: m('wakePatchMs') },
      { step: 'scale: -> model server pod created', ms: m('podCreatedMs') },
      { step: 'schedule: -> pod on a GPU node', ms: m('scheduledMs') },
      { step: '  server process start (container)', ms: m('serverStartMs') },
      { step: '  model cache check, no pull', ms: m('cacheCheckMs') },
      { step: '  model load + 1 token (readiness probe)', ms: m('modelLoadMs') },
      { step: 'pod Ready in the API (kwok, no probe wait)', ms: controlPlaneMs },
      { step: 'EndpointSlice -> proxy route has the replica', ms: m('routedMs') },
      { step: 'held request dispatched (probe passed)', ms: m('queuedMs') },
      { step: 'first token at the client', ms: m('firstTokenMs') },
    ];
    console.log(`time to first token after scale from zero: median of ${RUNS} runs, ms since the request`);
    console.table(rows);
    const verdict = controlPlaneMs <= CONTROL_PLANE_TARGET_MS ? 'PASS' : 'FAIL';
    console.log(
      `${verdict} control-plane share (request -> pod scheduled and Ready in the API) ${controlPlaneMs} ms <= ${CONTROL_PLANE_TARGET_MS} ms`,
    );
    mkdirSync(join(ROOT, 'e2e/bench/out'), { recursive: true });
    writeFileSync(
      join(ROOT, 'e2e/bench/out/cold-start.json'),
      `${JSON.stringify({ date: new Date().toISOString(), runs, median: rows, verdict }, null, 2)}\n`,
    );
    if (verdict === 'FAIL') process.exitCode = 1;
  } finally {
    for (const c of cleanups.reverse()) await Promise.resolve(c()).catch(() => {});
  }
}

await main();
