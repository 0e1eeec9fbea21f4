import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { TestProject } from 'vitest/node';
import { AGENT_NAMESPACE, API_GROUP, KINDS, LLMS_NAMESPACE, LLMS_POD_SECURITY } from '../crds/constants.js';
import { KIND_NAMES } from '../crds/schema.js';
import { type Component, type ControlPlane, compactEtcd, startControlPlane } from './cluster/control-plane.js';
import { FAKE_NODES, fakeNode } from './cluster/nodes.js';
import { ensureTools } from './cluster/tools.js';

declare module 'vitest' {
  export interface ProvidedContext {
    kubeconfig: string;
    kubectl: string;
    helm: string;
    /** True when the suite started its own control plane (kwok nodes, restartable components). */
    localControlPlane: boolean;
    /**
     * Loopback URL through which suites act on the local control plane, which lives in this
     * setup process: POST /restart/<component>, POST /compact (etcd), and for outages of a
     * chosen length POST /kill/<component> (SIGKILL, resolves once it exited) and
     * POST /start/<component> (resolves once the API server is ready). Empty without one.
     */
    controlUrl: string;
    /** The local control plane's component logs (<component>.log); empty without one. */
    controlPlaneLogs: string;
  }
}

const ROOT = fileURLToPath(new URL('../', import.meta.url));

const COMPONENTS: Component[] = ['etcd', 'kube-apiserver', 'kube-controller-manager', 'kube-scheduler', 'kwok'];

function controlServer(plane: ControlPlane): Promise<Server> {
  const server = createServer((req, res) => {
    const reply = (status: number, body: string) => res.writeHead(status, { 'content-type': 'text/plain' }).end(body);
    const [, action, component] = (req.url ?? '').split('/');
    if (req.method !== 'POST') return reply(405, 'POST only');
    if (action === 'compact') {
      compactEtcd(plane.etcdUrl).then(
        (rev) => reply(200, String(rev)),
        (err: Error) => reply(500, err.message),
      );
    } else if (action === 'restart' && COMPONENTS.includes(component as Component)) {
      plane.restart(component as Component).then(
        () => reply(200, 'restarted'),
        (err: Error) => reply(500, err.message),
      );
    } else if ((action === 'kill' || action === 'start') && COMPONENTS.includes(component as Component)) {
      (action === 'kill' ? plane.crash(component as Component) : plane.start(component as Component)).then(
        () => reply(200, action === 'kill' ? 'killed' : 'started'),
        (err: Error) => reply(500, err.message),
      );
    } else reply(404, 'unknown action');
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}

/**
 * Brings a cluster up once per e2e run: the local control plane, or the cluster of an
 * existing KUBECONFIG. Applies crds/ with the real kubectl, creates the namespaces and the
 * fake GPU nodes, and tears the local control plane down afterwards.
 */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  // Test workers inherit this: the product's output of the whole run goes there (e2e/support/capture.ts).
  const captureDir = join(ROOT, '.e2e-artifacts', 'logs');
  rmSync(captureDir, { recursive: true, force: true });
  mkdirSync(captureDir, { recursive: true });
  process.env.E2E_CAPTURE_DIR = captureDir;
  // The proxies the suites start run from dist/, as the image runs it: one starts in 0.9 s
  // against 1.6 s through tsx, and the tier starts over a hundred (the crash suite alone ~45).
  // `npm start`'s own path is run as written by the docs and newcomer suites.
  const built = Date.now();
  execFileSync('npm', ['run', '--silent', 'build'], { cwd: ROOT, stdio: ['ignore', 'ignore', 'inherit'] });
  console.log(`[e2e] proxy built (npm run build) in ${Date.now() - built} ms`);
  process.env.PAO_PROXY_ENTRY = 'dist';
  const tools = ensureTools();
  let plane: ControlPlane | undefined;
  let kubeconfig = process.env.KUBECONFIG;
  if (!kubeconfig) {
    const started = Date.now();
    plane = await startControlPlane();
    kubeconfig = plane.kubeconfig;
    console.log(`[e2e] control plane up in ${Date.now() - started} ms at ${plane.server}`);
  }
  const k = (args: string[], input?: string) =>
    execFileSync(tools.kubectl, ['--kubeconfig', kubeconfig, ...args], {
      cwd: ROOT,
      encoding: 'utf8',
      input,
      stdio: ['pipe', 'pipe', 'inherit'],
    });
  try {
    k(['apply', '--server-side', '--field-manager=e2e', '-f', 'crds/']);
    k([
      'wait',
      '--for=condition=Established',
      '--timeout=60s',
      ...KIND_NAMES.map((kind) => `crd/${KINDS[kind].plural}.${API_GROUP}`),
    ]);
    for (const ns of [LLMS_NAMESPACE, AGENT_NAMESPACE]) {
      // platform-llms enforces Pod Security "restricted" as the chart labels it: every model server
      // the operator suites deploy must be admitted under it.
      const labels = ns === LLMS_NAMESPACE ? { labels: LLMS_POD_SECURITY } : {};
      k(
        ['apply', '--server-side', '--field-manager=e2e', '-f', '-'],
        JSON.stringify({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns, ...labels } }),
      );
    }
    if (plane || process.env.E2E_FAKE_NODES === '1') {
      k(['apply', '-f', '-'], JSON.stringify({ apiVersion: 'v1', kind: 'List', items: FAKE_NODES.map(fakeNode) }));
      k(['wait', '--for=condition=Ready', '--timeout=60s', 'node', ...FAKE_NODES.map((n) => n.name)]);
    }
  } catch (err) {
    await plane?.stop();
    throw err;
  }
  // The lanes' locks (e2e/lanes/lane-setup.ts), fresh for this run.
  const lanes = mkdtempSync(join(tmpdir(), 'pao-e2e-lanes-'));
  process.env.E2E_LANE_DIR = lanes;
  project.provide('kubeconfig', kubeconfig);
  project.provide('kubectl', tools.kubectl);
  project.provide('helm', tools.helm);
  project.provide('localControlPlane', plane !== undefined);
  project.provide('controlPlaneLogs', plane ? join(plane.dir, 'logs') : '');
  const control = plane ? await controlServer(plane) : undefined;
  project.provide('controlUrl', control ? `http://127.0.0.1:${(control.address() as AddressInfo).port}` : '');
  return async () => {
    control?.close();
    await plane?.stop();
    rmSync(lanes, { recursive: true, force: true });
  };
}
