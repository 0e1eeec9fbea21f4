import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startControlPlane } from '../cluster/control-plane.js';
import { fakeNode } from '../cluster/nodes.js';
import { ensureTools } from '../cluster/tools.js';

/**
 * Operator scale on the real control plane: N ModelDeployments (default 200) applied at once
 * onto kwok GPU nodes; time until all are Running, reconciles per second, API requests per
 * reconcile, the operator process's RSS, and the API requests an idle operator makes.
 * Run: npx tsx e2e/bench/operator-scale.ts [count]
 */

const N = Number(process.argv.find((a) => /^\d+$/.test(a)) ?? 200);
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function metric(port: number, name: string, filter = ''): Promise<number> {
  // The operator serves metrics on the port after its API port (--metrics-port below).
  const text = await (await fetch(`http://127.0.0.1:${port + 1}/metrics`)).text();
  return text
    .split('\n')
    .filter((l) => l.startsWith(name) && l.includes(filter) && !l.includes('resource="leases"'))
    .reduce((sum, l) => sum + Number(l.split(' ').at(-1)), 0);
}

const rssMiB = (child: ChildProcess) =>
  Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${child.pid}/status`, 'utf8'))?.[1] ?? 0) / 1024;

async function main() {
  const plane = await startControlPlane();
  const tools = ensureTools();
  const k = (args: string[], input?: string) =>
    execFileSync(tools.kubectl, ['--kubeconfig', plane.kubeconfig, ...args], {
      cwd: ROOT,
      encoding: 'utf8',
      input,
      maxBuffer: 64 << 20,
    });
  let operator: ChildProcess | undefined;
  try {
    k(['apply', '--server-side', '-f', 'crds/']);
    k(['wait', '--for=condition=Established', '--timeout=60s', 'crd/modeldeployments.ai.platform']);
    for (const ns of ['platform-llms', 'platform-agent']) k(['create', 'namespace', ns]);
    // Enough GPUs for every model server: L4 nodes of the operator's template, 8 GPUs each.
    const nodes = Array.from({ length: Math.ceil(N / 8) + 1 }, (_, i) =>
      fakeNode({
        name: `l4-${i}`,
        arch: 'amd64',
        gpuModel: 'L4',
        computeCapability: '8.9',
        gpus: 8,
        zone: 'us-east-1a',
        template: 'llms-by-platform',
      }),
    );
    k(['apply', '-f', '-'], JSON.stringify({ apiVersion: 'v1', kind: 'List', items: nodes }));
    k(['wait', '--for=condition=Ready', '--timeout=120s', 'node', '--all']);

    const port = 18_000 + Math.floor(Math.random() * 1000);
    // node itself with tsx as a loader, so the measured RSS is the operator's, not a wrapper's.
    operator = spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        'operator/main.ts',
        '--kubeconfig',
        plane.kubeconfig,
        '--cluster-id',
        'bench',
        '--region',
        'us-east-1',
        '--port',
        String(port),
        '--metrics-port',
        String(port + 1),
        '--leader-elect',
        'false',
      ],
      { cwd: ROOT, stdio: ['ignore', 'ignore', 'inherit'] },
    );
    for (let i = 0; i < 200; i++) {
      if ((await fetch(`http://127.0.0.1:${port}/readyz`).catch(() => undefined))?.ok) break;
      await sleep(100);
    }
    const requestsBefore = await metric(port, 'pao_operator_kube_api_requests_total');

    const mds = Array.from({ length: N }, (_, i) => ({
      apiVersion: 'ai.platform/v1beta1',
      kind: 'ModelDeployment',
      metadata: { name: `m${i}`, namespace: 'platform-llms' },
      spec: { model: 'qwen2.5:0.5b', serviceName: `m${i}` },
    }));
    const started = Date.now();
    k(['apply', '-f', '-'], JSON.stringify({ apiVersion: 'v1', kind: 'List', items: mds }));
    let running = 0;
    let peakRss = 0;
    while (running < N && Date.now() - started < 600_000) {
      await sleep(500);
      peakRss = Math.max(peakRss, rssMiB(operator));
      running = k(['get', 'md', '-n', 'platform-llms', '-o', 'jsonpath={.items[*].status.phase}'])
        .split(' ')
        .filter((p) => p === 'Running').length;
    }
    const allRunningS = (Date.now() - started) / 1000;
    const reconciles = await metric(port, 'controller_runtime_reconcile_total', 'controller="modeldeployment"');
    const requests = (await metric(port, 'pao_operator_kube_api_requests_total')) - requestsBefore;

    // Idle: nothing changes for 10 s; count what the operator still sends.
    await sleep(2000);
    const idleBefore = await metric(port, 'pao_operator_kube_api_requests_total');
    await sleep(10_000);
    const idleRequests = (await metric(port, 'pao_operator_kube_api_requests_total')) - idleBefore;

    const result = {
      date: new Date().toISOString(),
      modelDeployments: N,
      running,
      allRunningSeconds: +allRunningS.toFixed(1),
      reconciles,
      reconcilesPerSecond: +(reconciles / allRunningS).toFixed(1),
      apiRequests: requests,
      apiRequestsPerReconcile: +(requests / Math.max(1, reconciles)).toFixed(2),
      peakRssMiB: +peakRss.toFixed(0),
      idleApiRequestsIn10s: idleRequests,
    };
    console.table([result]);
    mkdirSync(join(ROOT, 'e2e/bench/out'), { recursive: true });
    writeFileSync(join(ROOT, 'e2e/bench/out/operator-scale.json'), `${JSON.stringify(result, null, 2)}\n`);
  } finally {
    operator?.kill('SIGTERM');
    await plane.stop();
  }
}

await main();
