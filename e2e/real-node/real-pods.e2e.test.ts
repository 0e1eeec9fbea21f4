import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chownSync, copyFileSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { TOKEN_AUDIENCE } from '../../crds/constants.js';
import { type ControlPlane, startControlPlane } from '../cluster/control-plane.js';
import {
  createNodeNetwork,
  destroyNodeNetwork,
  NODE,
  type NodeNetwork,
  type RealNode,
  realNodeMissing,
  startRealNode,
} from '../cluster/real-node.js';
import { eventually, sleep } from '../support/kube.js';

/**
 * The whole journey on real pods: a real node (kubelet, containerd, runc, CNI, kube-proxy,
 * kube-router, a device plugin; e2e/cluster/real-node.ts) joins a control plane of its own, both
 * charts are installed with the image built from the Dockerfile, and everything the chart and
 * the operator create really runs: probes, Pod Security, NetworkPolicy, Service routing, cluster
 * DNS, restarts, graceful deletion and kernel OOM kills. The model servers run Ollama on CPU in
 * pods that asked for a GPU, and once a real vLLM (its CPU build, e2e/image/vllm-image.sh); their
 * models come from volumes this test fills, since no model registry is reachable. kwok still plays the many GPU shapes of the other suites.
 *
 * E2E_REAL_NODE=0 skips it where a machine cannot host a node (not root, no cgroup v1 memory
 * controller); then it says so in one line.
 */

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const SKIP = process.env.E2E_REAL_NODE === '0';
if (SKIP) console.log('[e2e] real-pods: skipped (E2E_REAL_NODE=0): the journey on a real node did not run');

const RELEASE = 'platform-ai-optimizer';
const AGENT = 'platform-agent';
const LLMS = 'platform-llms';
const CALLERS = 'callers';
const PROXY_DNS = `${RELEASE}-proxy.${AGENT}.svc.cluster.local`;
const CHAT_MODEL = 'qwen2.5:0.5b';
const EMBED_MODEL = 'nomic-embed-text';
const OLLAMA_IMAGE = 'localhost/pao-ollama';
/** The vLLM deployment's model (crds/catalog/models.yaml, engine VLLM) and its image (e2e/image/vllm-image.sh). */
const VLLM_MODEL = 'HuggingFaceTB/SmolLM2-135M-Instruct';
const VLLM_IMAGE = 'localhost/pao-vllm';

let plane: ControlPlane;
let net: NodeNetwork | undefined;
let node: RealNode;
let stopped = false;
/** The node's images (e2e/image/node-images.sh): references, and the archive of each. */
const images = { project: '', ollama: '', pause: '', vllm: '' };
const archives: Record<string, string> = {};
let adminKey = '';
const timings: Record<string, string> = {};
/** The vLLM image's import, run beside the first tests: settled with its error, if any. */
let vllmImported: Promise<Error | undefined> = Promise.resolve(undefined);

function tools(): { kubectl: string; helm: string } {
  return { kubectl: inject('kubectl'), helm: inject('helm') };
}

function k(args: string[], input?: string): { code: number; stdout: string; stderr: string } {
  const res = spawnSync(tools().kubectl, ['--kubeconfig', plane.kubeconfig, ...args], {
    encoding: 'utf8',
    input,
    timeout: 120_000,
    maxBuffer: 64 * 1024 * 1024,
  });
  return { code: res.status ?? -1, stdout: res.stdout ?? '', stderr: res.stderr ?? '' };
}

function kOk(args: string[], input?: string): string {
  const res = k(args, input);
  if (res.code !== 0) throw new Error(`kubectl ${args.join(' ')} failed (${res.code}): ${res.stderr}`);
  return res.stdout;
}

const apply = (...objects: object[]) =>
  kOk(['apply', '-f', '-'], JSON.stringify({ apiVersion: 'v1', kind: 'List', items: objects }));

function helm(...args: string[]): string {
  const res = spawnSync(tools().helm, [...args, '--kubeconfig', plane.kubeconfig], {
    encoding: 'utf8',
    timeout: 300_000,
    cwd: ROOT,
  });
  if (res.status !== 0) throw new Error(`helm ${args.join(' ')}: ${res.stderr}`);
  return res.stdout;
}

interface PodLite {
  metadata: { name: string; creationTimestamp: string; deletionTimestamp?: string };
  spec: { nodeName?: string };
  status: {
    podIP?: string;
    phase?: string;
    conditions?: { type: string; status: string; lastTransitionTime?: string }[];
    containerStatuses?: {
      name: string;
      ready: boolean;
      restartCount: number;
      containerID?: string;
      state?: { running?: { startedAt: string }; waiting?: { reason?: string } };
      lastState?: { terminated?: { reason?: string; exitCode?: number } };
    }[];
    initContainerStatuses?: {
      name: string;
      restartCount: number;
      state?: { terminated?: { startedAt: string; finishedAt: string }; waiting?: { reason?: string } };
    }[];
  };
}

function pods(ns: string, selector: string): PodLite[] {
  return (JSON.parse(kOk(['get', 'pods', '-n', ns, '-l', selector, '-o', 'json'])) as { items: PodLite[] }).items;
}

const livePods = (ns: string, selector: string) => pods(ns, selector).filter((p) => !p.metadata.deletionTimestamp);
const isReady = (p: PodLite) => p.status.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;
/** helm upgrade of the release, its values kept but one setting. */
const upgradeSetting = (setting: string) =>
  helm('upgrade', RELEASE, 'charts/platform-ai-optimizer', '-n', AGENT, '--reuse-values', '--set', setting);
const mdPhase = (name: string) => kOk(['get', 'md', name, '-n', LLMS, '-o', 'jsonpath={.status.phase}']);
const mdReady = (name: string) =>
  JSON.parse(
    kOk(['get', 'md', name, '-n', LLMS, '-o', 'jsonpath={.status.conditions[?(@.type=="Ready")]}']) || '{}',
  ) as { reason?: string; message?: string };

/** The container's init process on the host (containerd's task pid). */
function containerPid(containerId: string): number {
  const id = containerId.replace(/^containerd:\/\//, '');
  const line = node
    .ctr(['tasks', 'ls'])
    .split('\n')
    .find((l) => l.startsWith(id));
  const pid = Number(line?.trim().split(/\s+/)[1]);
  if (!pid) throw new Error(`no task for container ${id}`);
  return pid;
}

/** One Ollama model, as `ollama pull` leaves it, in a volume directory the model server's uid owns. */
function fillModelVolume(dir: string, sourceModels: string, sourceName: string, servedName: string): void {
  const [srcRepo, srcTag] = sourceName.split(':') as [string, string];
  const [dstRepo, dstTag = 'latest'] = servedName.split(':') as [string, string?];
  const manifestText = readFileSync(
    join(sourceModels, 'manifests', 'registry.ollama.ai', 'library', srcRepo, srcTag),
    'utf8',
  );
  const manifest = JSON.parse(manifestText) as { config: { digest: string }; layers: { digest: string }[] };
  mkdirSync(join(dir, 'blobs'), { recursive: true });
  for (const digest of [manifest.config.digest, ...manifest.layers.map((l) => l.digest)]) {
    const file = digest.replace(':', '-');
    copyFileSync(join(sourceModels, 'blobs', file), join(dir, 'blobs', file));
  }
  const manifestDir = join(dir, 'manifests', 'registry.ollama.ai', 'library', dstRepo);
  mkdirSync(manifestDir, { recursive: true });
  writeFileSync(join(manifestDir, dstTag), manifestText);
  // The model servers run as uid 10001 (Pod Security restricted); a hostPath volume keeps owners.
  const own = (p: string) => {
    chownSync(p, 10001, 10001);
    for (const e of readdirSync(p, { withFileTypes: true })) {
      const q = join(p, e.name);
      if (e.isDirectory()) own(q);
      else chownSync(q, 10001, 10001);
    }
  };
  own(dir);
}

/** A static volume for one claim (the node has no provisioner): a directory on the node. */
function hostVolume(name: string, storageClass: string, claim: { namespace: string; name: string }, path: string) {
  mkdirSync(path, { recursive: true });
  chownSync(path, 10001, 10001);
  return {
    apiVersion: 'v1',
    kind: 'PersistentVolume',
    metadata: { name },
    spec: {
      capacity: { storage: '20Gi' },
      accessModes: ['ReadWriteMany', 'ReadWriteOnce'],
      storageClassName: storageClass,
      persistentVolumeReclaimPolicy: 'Retain',
      claimRef: claim,
      hostPath: { path, type: 'Directory' },
    },
  };
}

/**
 * A caller pod in its own namespace, running a Node script in the project's image (it has Node);
 * returns the lines it printed once it completed.
 */
/** A caller pod's projected ServiceAccount token for the gateway: its ServiceAccount, mounted at /var/run/secrets/gateway/token. */
interface GatewayToken {
  serviceAccount: string;
  audience: string;
}

async function runCaller(
  name: string,
  script: string,
  env: Record<string, string> = {},
  token?: GatewayToken,
): Promise<string[]> {
  apply({
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: CALLERS, labels: { app: 'caller' } },
    spec: {
      restartPolicy: 'Never',
      automountServiceAccountToken: false,
      ...(token
        ? {
            serviceAccountName: token.serviceAccount,
            volumes: [
              {
                name: 'gateway-token',
                projected: {
                  sources: [
                    { serviceAccountToken: { audience: token.audience, expirationSeconds: 3600, path: 'token' } },
                  ],
                },
              },
            ],
          }
        : {}),
      containers: [
        {
          name: 'caller',
          image: images.project,
          imagePullPolicy: 'Never',
          command: ['node', '--input-type=module', '-e', script],
          env: Object.entries({ KEY: token ? '' : adminKey, PROXY: `http://${PROXY_DNS}:443`, ...env }).map(
            ([n, value]) => ({ name: n, value }),
          ),
          ...(token
            ? { volumeMounts: [{ name: 'gateway-token', mountPath: '/var/run/secrets/gateway', readOnly: true }] }
            : {}),
        },
      ],
    },
  });
  const phase = await eventually(`caller ${name} to finish`, 300_000, () => {
    const p = kOk(['get', 'pod', name, '-n', CALLERS, '-o', 'jsonpath={.status.phase}']);
    return p === 'Succeeded' || p === 'Failed' ? p : undefined;
  }).catch((err: Error) => {
    const logs = k(['logs', name, '-n', CALLERS]);
    const status = k(['get', 'pod', name, '-n', CALLERS, '-o', 'jsonpath={.status}']);
    throw new Error(`${err.message}\nlogs: ${logs.stdout}${logs.stderr}\nstatus: ${status.stdout}`);
  });
  const out = kOk(['logs', name, '-n', CALLERS]);
  kOk(['delete', 'pod', name, '-n', CALLERS, '--wait=false']);
  if (phase !== 'Succeeded') throw new Error(`caller ${name} failed:\n${out}`);
  return out.split('\n').filter(Boolean);
}

/** The parts of a pod's spec the vLLM test checks. */
interface PodSpecLite {
  spec: {
    automountServiceAccountToken?: boolean;
    initContainers?: { name: string; volumeMounts?: { mountPath: string }[] }[];
    containers: {
      name: string;
      image: string;
      command?: string[];
      args?: string[];
      env?: { name: string; value?: string }[];
      volumeMounts?: { mountPath: string }[];
      resources?: { requests?: Record<string, string>; limits?: Record<string, string> };
    }[];
  };
}

/** What a vLLM deployment that did not come up left to read: its status, its pods, the engine's last words. */
function vllmDiagnostics(name: string): string {
  const selector = `ai.platform/model-deployment=${name}`;
  return [
    `status: ${k(['get', 'md', name, '-n', LLMS, '-o', 'jsonpath={.status}']).stdout}`,
    `pods: ${k(['get', 'pods', '-n', LLMS, '-l', selector, '-o', 'wide']).stdout}`,
    `pull-model: ${k(['logs', '-n', LLMS, '-l', selector, '-c', 'pull-model', '--tail', '20']).stdout}`,
    `vllm: ${k(['logs', '-n', LLMS, '-l', selector, '-c', 'vllm', '--tail', '60']).stdout}`,
    `events: ${k(['get', 'events', '-n', LLMS, '--field-selector', 'involvedObject.kind=Pod', '--sort-by=.lastTimestamp']).stdout.split('\n').slice(-15).join('\n')}`,
  ].join('\n');
}

/** The proxy's usage totals for one tag, asked from the host through the proxy Service's IP. */
async function usageFor(tag: string): Promise<{ requests: number; inputTokens: number; outputTokens: number }> {
  const ip = kOk(['get', 'svc', `${RELEASE}-proxy`, '-n', AGENT, '-o', 'jsonpath={.spec.clusterIP}']);
  const res = await fetch(`http://${ip}:443/v1/usage?tag=${encodeURIComponent(tag)}`, {
    headers: { 'x-api-key': adminKey },
  });
  if (!res.ok) throw new Error(`usage ${res.status}: ${await res.text()}`);
  return ((await res.json()) as { totals: { requests: number; inputTokens: number; outputTokens: number } }).totals;
}

describe.skipIf(SKIP)('real pods on a real node', () => {
  beforeAll(async () => {
    const missing = realNodeMissing();
    if (missing.length > 0) {
      throw new Error(
        `the real node cannot run here: missing ${missing.join(', ')}. npm run test:e2e as root installs the packages; E2E_REAL_NODE=0 skips this suite`,
      );
    }
    const started = Date.now();
    const lines = execFileSync('bash', [join(ROOT, 'e2e/image/node-images.sh')], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'inherit'],
      maxBuffer: 64 * 1024 * 1024,
    })
      .trim()
      .split('\n')
      .slice(-4);
    for (const l of lines) {
      const [ref, archive] = l.split(' ') as [string, string];
      archives[ref] = archive;
      if (ref.startsWith('localhost/platform-ai-optimizer')) images.project = ref;
      if (ref.startsWith(OLLAMA_IMAGE)) images.ollama = ref;
      if (ref.startsWith('localhost/pao-pause')) images.pause = ref;
      if (ref.startsWith(VLLM_IMAGE)) images.vllm = ref;
    }
    timings.images = `${Date.now() - started} ms`;

    const network = await createNodeNetwork();
    net = network;
    const nodeToken = randomBytes(24).toString('hex');
    plane = await startControlPlane({
      address: NODE.hostIp,
      tokens: [`${nodeToken},system:node:${NODE.name},node-uid,"system:nodes"`],
    });
    const nodeStart = Date.now();
    node = await startRealNode(network, {
      binDir: plane.binDir,
      server: plane.server,
      adminToken: plane.token,
      nodeToken,
      // An L4 node of the platform's LLM node template, as the catalog and the operator read it.
      labels: {
        'topology.kubernetes.io/region': 'us-east-1',
        'topology.kubernetes.io/zone': 'us-east-1a',
        'scheduling.platform/gpu-model': 'L4',
        'scheduling.platform/gpu-compute-capability': '8.9',
        'scheduling.platform/node-template': 'llms-by-platform',
      },
      gpus: 4,
      gpuResource: 'nvidia.com/gpu',
      pauseArchive: archives[images.pause] ?? '',
      pauseImage: images.pause,
      coredns: join(plane.binDir, 'pao-coredns'),
    });
    timings['node Ready'] = `${Date.now() - nodeStart} ms`;
    const importStart = Date.now();
    for (const ref of [images.project, images.ollama]) node.importImage(archives[ref] ?? '');
    timings['image import'] = `${Date.now() - importStart} ms`;
    // 7 GB, which containerd stores and unpacks: 111-128 s on its own here. Imported beside the
    // tests before vLLM's (which waits for it): they wait on pods more than they compute.
    const vllmImportStart = Date.now();
    vllmImported = node.importImageBeside(archives[images.vllm] ?? '', 1_200_000).then(
      () => {
        timings['vLLM image import (7 GB, beside the tests)'] = `${Date.now() - vllmImportStart} ms`;
        return undefined;
      },
      (err: Error) => err,
    );
  }, 1_800_000);

  afterAll(async () => {
    // What the cluster looked like at the end, for a failed run's reader (CI keeps .e2e-artifacts).
    if (plane && node && !stopped) {
      const dump = [
        'get nodes,pods,svc,endpointslices,pvc,pv,md,networkpolicy -A -o wide',
        'get events -A --sort-by=.lastTimestamp',
      ]
        .map((c) => `$ kubectl ${c}\n${k(c.split(' ')).stdout}`)
        .join('\n');
      // The node's logs folder is copied to .e2e-artifacts/real-node/ when it stops.
      writeFileSync(join(node.dir, 'logs', 'cluster.txt'), dump);
    }
    if (!stopped) await node?.stop();
    // A set-up that failed between the network and the node: its namespace, veth and routes go too.
    if (!node && net) await destroyNodeNetwork(net);
    await plane?.stop();
    console.log(`[e2e] real-pods timings: ${JSON.stringify(timings)}`);
  });

  it('installs both charts with the image built from the Dockerfile; the operator and proxy pods run on the real node', async () => {
    const started = Date.now();
    helm('install', `${RELEASE}-crds`, 'charts/platform-ai-optimizer-crds', '--wait');
    const [repository, tag] = images.project.split(/:(?=[^:]+$)/);
    apply(
      hostVolume(
        'real-usage',
        'real-node-usage',
        { namespace: AGENT, name: `${RELEASE}-usage` },
        join(node.dir, 'vol', 'usage'),
      ),
    );
    helm(
      'install',
      RELEASE,
      'charts/platform-ai-optimizer',
      '-n',
      AGENT,
      '--create-namespace',
      '--set',
      `image.repository=${repository}`,
      '--set',
      `image.tag=${tag}`,
      '--set',
      'cluster.organizationId=acme',
      '--set',
      'cluster.clusterId=real-1',
      '--set',
      'cluster.region=us-east-1',
      '--set',
      'usage.persistence.storageClass=real-node-usage',
      '--set',
      'modelCache.storageClassName=real-node-models',
      // The API server runs outside the node's network, where no Service address routes: no audit
      // webhook for it to call (e2e/control-plane/audit.e2e.test.ts runs the audit trail).
      '--set',
      'operator.audit.enabled=false',
      // The chart's default model server image, ollama/ollama:0.17.4, as an air-gapped cluster has it: unreachable.
    );
    await eventually('operator and proxy pods Ready', 300_000, () => {
      const all = livePods(AGENT, `app.kubernetes.io/instance=${RELEASE}`);
      return all.length === 4 && all.every(isReady) ? all : undefined;
    });
    for (const p of livePods(AGENT, `app.kubernetes.io/instance=${RELEASE}`)) expect(p.spec.nodeName).toBe(NODE.name);
    timings['charts installed, 4 pods Ready'] = `${Date.now() - started} ms`;
    adminKey = await eventually('the Admin key issued', 60_000, () => {
      const res = k(['get', 'secret', 'apikey-platform-admin', '-n', AGENT, '-o', 'jsonpath={.data.key}']);
      return res.code === 0 && res.stdout ? Buffer.from(res.stdout, 'base64').toString('utf8') : undefined;
    });
    kOk(['create', 'namespace', CALLERS]);
  }, 600_000);

  it('reports a model server image the node cannot pull as Failed (ImagePullFailed); helm upgrade to the local image: Deploying -> Running from the real readiness probe', async () => {
    const models = execFileSync('bash', [join(ROOT, 'e2e/ollama/build.sh')], { encoding: 'utf8' })
      .trim()
      .split('\n')
      .at(-1);
    if (!models) throw new Error('no Ollama build');
    const modelDir = join(models, 'models');
    fillModelVolume(join(node.dir, 'vol', 'qwen'), modelDir, 'smollm2:135m', CHAT_MODEL);
    fillModelVolume(join(node.dir, 'vol', 'embed'), modelDir, 'all-minilm:l6-v2', EMBED_MODEL);
    apply(
      hostVolume(
        'real-qwen',
        'real-node-models',
        { namespace: LLMS, name: 'qwen-models' },
        join(node.dir, 'vol', 'qwen'),
      ),
      hostVolume(
        'real-embed',
        'real-node-models',
        { namespace: LLMS, name: 'embed-models' },
        join(node.dir, 'vol', 'embed'),
      ),
    );
    apply({
      apiVersion: 'ai.platform/v1beta1',
      kind: 'ModelDeployment',
      metadata: { name: 'qwen', namespace: LLMS },
      // Two replicas (two of the node's four GPUs), each asking little CPU: the node has two cores.
      spec: { model: CHAT_MODEL, serviceName: 'qwen', replicas: 2, server: { cpu: '250m' } },
    });
    await eventually('Failed: ImagePullFailed', 180_000, () => (mdPhase('qwen') === 'Failed' ? true : undefined));
    expect(mdReady('qwen')).toMatchObject({ reason: 'ImagePullFailed' });
    expect(mdReady('qwen').message).toContain('ollama/ollama:0.17.4');

    const upgraded = Date.now();
    upgradeSetting(`operator.ollamaImage=${images.ollama}`);
    const phases: [string, number][] = [];
    await eventually('Running', 600_000, () => {
      const p = mdPhase('qwen');
      if (phases.at(-1)?.[0] !== p) phases.push([p, Date.now() - upgraded]);
      return p === 'Running' ? true : undefined;
    });
    // Deploying was seen on the way (the status polls every half second).
    expect(phases.map(([p]) => p)).toContain('Deploying');
    // The rollout ends once the pods of the unpullable image are gone: two replicas, both Ready.
    const server = await eventually('the rollout to finish', 300_000, () => {
      const all = livePods(LLMS, 'ai.platform/model-deployment=qwen');
      return all.length === 2 && all.every(isReady) ? all : undefined;
    });
    timings['qwen: helm upgrade -> rollout done'] = `${Date.now() - upgraded} ms`;
    for (const p of server) {
      expect(p.spec.nodeName).toBe(NODE.name);
      const c = p.status.containerStatuses?.find((s) => s.name === 'ollama');
      const pull = p.status.initContainerStatuses?.find((s) => s.name === 'pull-model')?.state?.terminated;
      const ready = p.status.conditions?.find((x) => x.type === 'Ready')?.lastTransitionTime;
      const started = c?.state?.running?.startedAt;
      timings[`qwen ${p.metadata.name.slice(-5)}: pull-model ran`] = pull
        ? `${Date.parse(pull.finishedAt) - Date.parse(pull.startedAt)} ms`
        : '?';
      timings[`qwen ${p.metadata.name.slice(-5)}: server start -> Ready (startup + readiness probes)`] =
        started && ready ? `${Date.parse(ready) - Date.parse(started)} ms` : '?';
    }
    timings['qwen: helm upgrade -> Running'] =
      `${phases.at(-1)?.[1]} ms (${phases.map(([p, t]) => `${p}@${t}`).join(' ')})`;
    // The device plugin allocated each replica a GPU of its own: its Allocate answer is this env.
    const gpus = server.map((p) =>
      kOk(['exec', '-n', LLMS, p.metadata.name, '-c', 'ollama', '--', 'printenv', 'NVIDIA_VISIBLE_DEVICES']).trim(),
    );
    for (const g of gpus) expect(g).toMatch(/^gpu-[0-3]$/);
    expect(new Set(gpus).size).toBe(2);
  }, 900_000);

  it('runs the pods under Pod Security restricted: uid 10001, no capabilities, no privilege escalation, read-only root', () => {
    for (const [ns, selector, container] of [
      [LLMS, 'ai.platform/model-deployment=qwen', 'ollama'],
      [AGENT, 'app.kubernetes.io/component=proxy', 'proxy'],
    ] as const) {
      const p = livePods(ns, selector)[0];
      const c = p?.status.containerStatuses?.find((s) => s.name === container);
      if (!p || !c?.containerID) throw new Error(`no ${container} container`);
      const status = readFileSync(`/proc/${containerPid(c.containerID)}/status`, 'utf8');
      const field = (name: string) => new RegExp(`^${name}:\\s*(.*)$`, 'm').exec(status)?.[1]?.trim();
      expect(field('Uid')?.split(/\s+/)).toEqual(['10001', '10001', '10001', '10001']);
      expect(field('CapEff')).toBe('0000000000000000');
      expect(field('CapPrm')).toBe('0000000000000000');
      expect(field('NoNewPrivs')).toBe('1');
      expect(field('Seccomp')).toBe('2');
      const write = k(['exec', '-n', ns, p.metadata.name, '-c', container, '--', 'sh', '-c', 'touch /probe']);
      expect(write.code).not.toBe(0);
      expect(write.stderr).toContain('Read-only file system');
    }
  }, 120_000);

  it(`serves a caller pod at ${PROXY_DNS}:443 (cluster DNS): chat, streaming, and embeddings that wake a model from zero; usage by tag`, async () => {
    apply({
      apiVersion: 'ai.platform/v1beta1',
      kind: 'ModelDeployment',
      metadata: { name: 'embed', namespace: LLMS },
      spec: {
        model: EMBED_MODEL,
        serviceName: 'embed',
        replicas: 0,
        server: { cpu: '250m' },
        autoscaling: { minReplicas: 0, maxReplicas: 1 },
      },
    });
    await eventually('embed hibernated', 60_000, () =>
      mdPhase('embed') === 'Running' && mdReady('embed').reason === 'ScaledToZero' ? true : undefined,
    );
    const script = `
      const h = { 'content-type': 'application/json', 'x-api-key': process.env.KEY, 'x-tags': 'team:real,env:pods' };
      const post = (path, body) => fetch(process.env.PROXY + path, { method: 'POST', headers: h, body: JSON.stringify(body) });
      const chat = await post('/openai/v1/chat/completions', { model: '${CHAT_MODEL}', max_tokens: 12, messages: [{ role: 'user', content: 'Say hello.' }] });
      const c = await chat.json();
      console.log(JSON.stringify({ kind: 'chat', status: chat.status, object: c.object, text: c.choices?.[0]?.message?.content, usage: c.usage }));
      const stream = await post('/openai/v1/chat/completions', { model: '${CHAT_MODEL}', max_tokens: 12, stream: true, stream_options: { include_usage: true }, messages: [{ role: 'user', content: 'Count to five.' }] });
      const text = await stream.text();
      const events = text.split('\\n').filter((l) => l.startsWith('data: '));
      console.log(JSON.stringify({ kind: 'stream', status: stream.status, type: stream.headers.get('content-type'), events: events.length, done: events.at(-1) }));
      const t0 = Date.now();
      const emb = await post('/openai/v1/embeddings', { model: '${EMBED_MODEL}', input: ['real pods', 'real nodes'] });
      const e = await emb.json();
      console.log(JSON.stringify({ kind: 'embeddings', status: emb.status, n: e.data?.length, dims: e.data?.[0]?.embedding?.length, wakeMs: Date.now() - t0, error: e.error }));
    `;
    const out = (await runCaller('journey', script)).map((l) => JSON.parse(l) as Record<string, unknown>);
    const by = Object.fromEntries(out.map((o) => [o.kind, o]));
    expect(by.chat).toMatchObject({ status: 200, object: 'chat.completion' });
    expect(String(by.chat?.text).length).toBeGreaterThan(0);
    expect(by.stream).toMatchObject({ status: 200, done: 'data: [DONE]' });
    expect(String(by.stream?.type)).toContain('text/event-stream');
    expect(Number(by.stream?.events)).toBeGreaterThan(3);
    expect(by.embeddings).toMatchObject({ status: 200, n: 2, dims: 384 });
    timings['embeddings wake from zero (first request, real container start + model load)'] =
      `${by.embeddings?.wakeMs} ms`;
    console.log(`[e2e] real-pods: wake from zero answered in ${by.embeddings?.wakeMs} ms`);
    expect(livePods(LLMS, 'ai.platform/model-deployment=embed').some(isReady)).toBe(true);
    const usage = await eventually('usage recorded', 30_000, async () => {
      const u = await usageFor('team:real');
      return u.requests === 3 ? u : undefined;
    });
    const chatUsage = by.chat?.usage as { prompt_tokens: number; completion_tokens: number };
    expect(usage.inputTokens).toBeGreaterThanOrEqual(chatUsage.prompt_tokens);
    expect(usage.outputTokens).toBeGreaterThanOrEqual(chatUsage.completion_tokens);
  }, 600_000);

  it("serves a caller pod with no key, only its projected ServiceAccount token: an IdentityProvider gives it an ApiKey's grants", async () => {
    kOk(['create', 'serviceaccount', 'token-caller', '-n', CALLERS]);
    apply(
      {
        apiVersion: 'ai.platform/v1beta1',
        kind: 'ApiKey',
        metadata: { name: 'caller-workloads', namespace: AGENT },
        spec: { team: 'workloads', models: [CHAT_MODEL] },
      },
      {
        apiVersion: 'ai.platform/v1beta1',
        kind: 'IdentityProvider',
        metadata: { name: 'cluster-workloads', namespace: AGENT },
        spec: {
          kubernetes: {},
          audiences: [TOKEN_AUDIENCE],
          profiles: [{ apiKey: 'caller-workloads', serviceAccount: { namespace: CALLERS, names: ['token-caller'] } }],
        },
      },
    );
    // The operator reads the API server's keys as the proxy will: Ready once it could.
    await eventually('the IdentityProvider is Ready', 60_000, () =>
      k([
        'get',
        'idp',
        'cluster-workloads',
        '-n',
        AGENT,
        '-o',
        'jsonpath={.status.conditions[?(@.type=="Ready")].status}',
      ]).stdout === 'True'
        ? true
        : undefined,
    );
    const script = `
      import { readFileSync } from 'node:fs';
      const token = readFileSync('/var/run/secrets/gateway/token', 'utf8').trim();
      const body = JSON.stringify({ model: '${CHAT_MODEL}', max_tokens: 8, messages: [{ role: 'user', content: 'Say hi.' }] });
      const call = (headers) => fetch(process.env.PROXY + '/openai/v1/chat/completions', { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body });
      const withToken = await call({ authorization: 'Bearer ' + token });
      console.log(JSON.stringify({ kind: 'token', status: withToken.status, object: (await withToken.json()).object }));
      const without = await call({});
      console.log(JSON.stringify({ kind: 'none', status: without.status }));
    `;
    // A pod per try (a deleted pod's name is not free at once), until the proxies have the IdentityProvider.
    let attempt = 0;
    const out = await eventually('the token is taken', 120_000, async () => {
      attempt += 1;
      const lines = (
        await runCaller(
          `token-caller-${attempt}`,
          script,
          {},
          { serviceAccount: 'token-caller', audience: TOKEN_AUDIENCE },
        )
      ).map((l) => JSON.parse(l) as Record<string, unknown>);
      return lines.find((o) => o.kind === 'token')?.status === 200 ? lines : undefined;
    });
    const by = Object.fromEntries(out.map((o) => [o.kind, o]));
    expect(by.token).toMatchObject({ status: 200, object: 'chat.completion' });
    expect(by.none).toMatchObject({ status: 401 });
    const usage = await eventually('the workload is billed to its profile', 30_000, async () => {
      const u = await usageFor('team:workloads');
      return u.requests >= 1 ? u : undefined;
    });
    expect(usage.outputTokens).toBeGreaterThan(0);
  }, 300_000);

  it('enforces the NetworkPolicy: another pod cannot reach a model server, the proxy can', async () => {
    const target = livePods(LLMS, 'ai.platform/model-deployment=qwen')[0]?.status.podIP;
    const svc = kOk(['get', 'svc', 'qwen', '-n', LLMS, '-o', 'jsonpath={.spec.clusterIP}:{.spec.ports[0].port}']);
    const script = `
      for (const url of ['http://${target}:11434/api/tags', 'http://${svc}/api/tags']) {
        const r = await fetch(url, { signal: AbortSignal.timeout(3000) }).then((x) => 'status ' + x.status, (e) => 'error ' + (e.cause?.code ?? e.name));
        console.log(r);
      }
    `;
    const denied = await runCaller('direct', script);
    // kube-router rejects or drops: refused or timed out, never an answer.
    expect(denied).toHaveLength(2);
    for (const line of denied) expect(line).toMatch(/^error (ECONNREFUSED|TimeoutError|EHOSTUNREACH)$/);
    // Without the chart's policy the same pod gets in: the refusal above is the policy's doing.
    const policy = kOk(['get', 'networkpolicy', '-n', LLMS, '-o', 'json']);
    kOk(['delete', 'networkpolicy', '--all', '-n', LLMS]);
    try {
      const open = await eventually('the policy lifted', 30_000, async () => {
        const lines = await runCaller('open', script);
        return lines.every((l) => l === 'status 200') ? lines : undefined;
      });
      expect(open).toEqual(['status 200', 'status 200']);
    } finally {
      const items = (JSON.parse(policy) as { items: Array<{ metadata: Record<string, unknown> }> }).items.map((i) => ({
        ...i,
        metadata: {
          name: i.metadata.name,
          namespace: i.metadata.namespace,
          labels: i.metadata.labels,
          annotations: i.metadata.annotations,
        },
      }));
      apply(...items);
    }
    // And the proxy still reaches it (the policy admits the proxy pods).
    const ip = kOk(['get', 'svc', `${RELEASE}-proxy`, '-n', AGENT, '-o', 'jsonpath={.spec.clusterIP}']);
    const res = await fetch(`http://${ip}:443/openai/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': adminKey },
      body: JSON.stringify({ model: CHAT_MODEL, max_tokens: 4, messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(res.status).toBe(200);
  }, 300_000);

  it('restarts a killed model-server container while the proxy routes around it', async () => {
    const ip = kOk(['get', 'svc', `${RELEASE}-proxy`, '-n', AGENT, '-o', 'jsonpath={.spec.clusterIP}']);
    const [victim] = livePods(LLMS, 'ai.platform/model-deployment=qwen');
    const c = victim?.status.containerStatuses?.find((s) => s.name === 'ollama');
    if (!victim || !c?.containerID) throw new Error('no model server');
    const statuses: number[] = [];
    const failures: string[] = [];
    let killedAt = 0;
    let running = true;
    const callers = Array.from({ length: 3 }, async () => {
      while (running) {
        const res = await fetch(`http://${ip}:443/openai/v1/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'x-api-key': adminKey, 'x-tags': 'test:kill' },
          body: JSON.stringify({ model: CHAT_MODEL, max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] }),
        }).catch(() => undefined);
        statuses.push(res?.status ?? 0);
        const body = await res?.text().catch(() => '');
        if (res?.status !== 200) failures.push(`${Date.now() - killedAt} ms: ${res?.status} ${body?.slice(0, 200)}`);
      }
    });
    await sleep(2000);
    const before = statuses.length;
    killedAt = Date.now();
    node.ctr(['tasks', 'kill', '-s', 'SIGKILL', c.containerID.replace('containerd://', '')]);
    await eventually('the container restarted and Ready', 180_000, () => {
      const p = livePods(LLMS, 'ai.platform/model-deployment=qwen').find(
        (x) => x.metadata.name === victim.metadata.name,
      );
      const s = p?.status.containerStatuses?.find((x) => x.name === 'ollama');
      return s && s.restartCount >= 1 && s.ready ? true : undefined;
    });
    timings['killed model server: back Ready'] = `${Date.now() - killedAt} ms`;
    await sleep(1000);
    running = false;
    await Promise.all(callers);
    const failed = statuses.filter((s) => s !== 200);
    timings['killed model server: requests during the restart'] =
      `${statuses.length - before} (${failed.length} not 200)`;
    expect(statuses.length - before).toBeGreaterThan(5);
    // At most the requests in flight on the killed server when it died (three callers).
    expect(failed.length, failures.join('\n')).toBeLessThanOrEqual(3);
  }, 400_000);

  it('lets a stream finish when its proxy pod is deleted (graceful), and records it', async () => {
    const [proxy] = livePods(AGENT, 'app.kubernetes.io/component=proxy');
    if (!proxy?.status.podIP) throw new Error('no proxy pod');
    const res = await fetch(`http://${proxy.status.podIP}:8080/openai/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': adminKey, 'x-tags': 'test:graceful' },
      body: JSON.stringify({
        model: CHAT_MODEL,
        stream: true,
        max_tokens: 200,
        // Keep generating: the stream must outlive the deletion.
        messages: [{ role: 'user', content: 'Write a long story about a lighthouse keeper, with many details.' }],
      }),
    });
    expect(res.status).toBe(200);
    const reader = res.body?.getReader();
    if (!reader) throw new Error('no body');
    const first = await reader.read();
    expect(first.done).toBe(false);
    const deleting = Date.now();
    const del = spawnSync(
      tools().kubectl,
      ['--kubeconfig', plane.kubeconfig, 'delete', 'pod', proxy.metadata.name, '-n', AGENT, '--wait=false'],
      { encoding: 'utf8' },
    );
    expect(del.status).toBe(0);
    let text = new TextDecoder().decode(first.value);
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      text += new TextDecoder().decode(value);
    }
    timings['graceful: stream ran on after the delete'] = `${Date.now() - deleting} ms`;
    expect(text.trim().endsWith('data: [DONE]')).toBe(true);
    const usage = await eventually('the stream recorded', 60_000, async () => {
      const u = await usageFor('test:graceful');
      return u.requests === 1 ? u : undefined;
    });
    expect(usage.outputTokens).toBeGreaterThan(0);
  }, 300_000);

  it('restarts a proxy container the kernel OOM-killed, with every acknowledged usage record kept', async () => {
    await eventually('two proxy pods Ready', 120_000, () => {
      const all = livePods(AGENT, 'app.kubernetes.io/component=proxy');
      return all.length === 2 && all.every(isReady) ? true : undefined;
    });
    const [proxy] = livePods(AGENT, 'app.kubernetes.io/component=proxy');
    const c = proxy?.status.containerStatuses?.find((s) => s.name === 'proxy');
    if (!proxy?.status.podIP || !c?.containerID) throw new Error('no proxy container');
    const acknowledged = 25;
    for (let i = 0; i < acknowledged; i++) {
      const res = await fetch(`http://${proxy.status.podIP}:8080/openai/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-api-key': adminKey, 'x-tags': 'test:oom' },
        body: JSON.stringify({ model: CHAT_MODEL, max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] }),
      });
      expect(res.status).toBe(200);
      await res.arrayBuffer();
    }
    // A leak, on demand: SIGUSR1 opens the proxy's Node inspector on 127.0.0.1:9229 of its pod,
    // and a process in the same container has the proxy allocate over it, 16 MiB every 10 ms,
    // until the kernel's OOM killer ends it at the container's memory limit (the proxy is the
    // one big process there, so the one killed).
    process.kill(containerPid(c.containerID), 'SIGUSR1');
    const leak = `globalThis.leak = []; setInterval(() => globalThis.leak.push(Buffer.alloc(16 << 20, 1)), 10); 'leaking'`;
    const driver = `
      let list;
      for (let i = 0; i < 50 && !list; i++) {
        list = await fetch('http://127.0.0.1:9229/json/list').then((r) => r.json(), () => undefined);
        if (!list) await new Promise((r) => setTimeout(r, 100));
      }
      const ws = new WebSocket(list[0].webSocketDebuggerUrl);
      ws.onopen = () => ws.send(JSON.stringify({ id: 1, method: 'Runtime.evaluate', params: { expression: ${JSON.stringify(leak)} } }));
      ws.onmessage = (m) => { console.log(String(m.data)); process.exit(0); };
    `;
    const hog = spawn(
      tools().kubectl,
      [
        '--kubeconfig',
        plane.kubeconfig,
        'exec',
        '-n',
        AGENT,
        proxy.metadata.name,
        '-c',
        'proxy',
        '--',
        'node',
        '--input-type=module',
        '-e',
        driver,
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let hogOutput = '';
    hog.stdout.on('data', (d: Buffer) => {
      hogOutput += d.toString();
    });
    hog.stderr.on('data', (d: Buffer) => {
      hogOutput += d.toString();
    });
    const proxyStatus = () =>
      livePods(AGENT, 'app.kubernetes.io/component=proxy')
        .find((x) => x.metadata.name === proxy.metadata.name)
        ?.status.containerStatuses?.find((x) => x.name === 'proxy');
    const restarted = await eventually('the proxy container OOMKilled and back', 180_000, () => {
      const st = proxyStatus();
      return st && st.restartCount >= 1 && st.ready ? st : undefined;
    }).catch((err: Error) => {
      throw new Error(`${err.message}; exec: ${hogOutput.slice(-500)}; status: ${JSON.stringify(proxyStatus())}`);
    });
    hog.kill();
    expect(restarted.lastState?.terminated?.reason).toBe('OOMKilled');
    const usage = await eventually('the acknowledged records', 60_000, async () => {
      const u = await usageFor('test:oom');
      return u.requests >= acknowledged ? u : undefined;
    });
    expect(usage.requests).toBe(acknowledged);
  }, 400_000);

  it('reports a real crash loop as Failed: a model missing from its existing claim', async () => {
    apply(
      hostVolume(
        'real-empty',
        'real-node-empty',
        { namespace: LLMS, name: 'empty-models' },
        join(node.dir, 'vol', 'empty'),
      ),
      {
        apiVersion: 'v1',
        kind: 'PersistentVolumeClaim',
        metadata: { name: 'empty-models', namespace: LLMS },
        spec: {
          storageClassName: 'real-node-empty',
          accessModes: ['ReadWriteOnce'],
          resources: { requests: { storage: '1Gi' } },
        },
      },
      {
        apiVersion: 'ai.platform/v1beta1',
        kind: 'ModelDeployment',
        metadata: { name: 'missing', namespace: LLMS },
        spec: {
          model: 'llama3.2:3b',
          serviceName: 'missing',
          server: { cpu: '100m' },
          cache: { existingClaim: 'empty-models' },
        },
      },
    );
    const failedAfter = Date.now();
    await eventually('Failed', 300_000, () => (mdPhase('missing') === 'Failed' ? true : undefined));
    timings['crash loop: Failed after'] = `${Date.now() - failedAfter} ms`;
    const ready = mdReady('missing');
    expect(ready.reason).toBe('PullFailed');
    expect(ready.message).toContain('empty-models');
    const init = livePods(LLMS, 'ai.platform/model-deployment=missing')[0]?.status.initContainerStatuses?.[0];
    expect(init?.restartCount).toBeGreaterThanOrEqual(1);
    kOk(['delete', 'md', 'missing', '-n', LLMS]);
  }, 400_000);

  it(`runs ${VLLM_MODEL} with engine VLLM (a real CPU vLLM): Deploying -> Running from its one-token readiness probe; chat and Anthropic Messages through the proxy`, async () => {
    const name = 'smol';
    const selector = `ai.platform/model-deployment=${name}`;
    const importing = Date.now();
    const failed = await vllmImported;
    if (failed) throw failed;
    timings['vllm: waited for its image import'] = `${Date.now() - importing} ms`;
    // The node's two cores for vLLM (it asks one): the Ollama model servers of the tests before gone.
    kOk(['delete', 'md', '--all', '-n', LLMS]);
    await eventually('the Ollama pods gone', 120_000, () =>
      pods(LLMS, 'ai.platform/model-deployment').length === 0 ? true : undefined,
    );
    // The snapshot vLLM reads offline (HF_HOME=/models, HF_HUB_OFFLINE=1), in the operator's own
    // claim: pull-model finds it whole and fetches nothing (no hub is reachable from here).
    const built = execFileSync('bash', [join(ROOT, 'e2e/vllm/build.sh')], { encoding: 'utf8' })
      .trim()
      .split('\n')
      .at(-1);
    if (!built) throw new Error('no vLLM build');
    const volume = join(node.dir, 'vol', name);
    const filled = Date.now();
    mkdirSync(volume, { recursive: true });
    execFileSync('cp', ['-a', `${join(built, 'hf-home')}/.`, volume]);
    // vLLM runs as uid 10001 (Pod Security restricted); a hostPath volume keeps owners.
    execFileSync('chown', ['-R', '10001:10001', volume]);
    timings['vllm: model volume filled (540 MB)'] = `${Date.now() - filled} ms`;
    apply(hostVolume('real-smol', 'real-node-models', { namespace: LLMS, name: `${name}-models` }, volume));

    const upgraded = Date.now();
    upgradeSetting(`operator.engineImages.VLLM=${images.vllm}`);
    // The operator reads ENGINE_IMAGES at start: an old replica still leading would deploy
    // vLLM's public image, which the node cannot pull.
    kOk(['rollout', 'status', `deployment/${RELEASE}-operator`, '-n', AGENT, '--timeout=300s']);
    expect(kOk(['get', 'deployment', `${RELEASE}-operator`, '-n', AGENT, '-o', 'json'])).toContain(
      `VLLM=${images.vllm}`,
    );
    timings['vllm: helm upgrade (engineImages.VLLM) -> operator rolled out'] = `${Date.now() - upgraded} ms`;
    apply({
      apiVersion: 'ai.platform/v1beta1',
      kind: 'ModelDeployment',
      metadata: { name, namespace: LLMS },
      spec: {
        engine: 'VLLM',
        model: VLLM_MODEL,
        serviceName: name,
        port: 8000,
        // One core of the node's two; vLLM's --max-model-len and --max-num-seqs.
        server: { cpu: '1', contextLength: 2048, numParallel: 4 },
      },
    });
    const applied = Date.now();
    const phases: [string, number][] = [];
    const outcome = await eventually('Running (or Failed)', 600_000, async () => {
      const p = mdPhase(name);
      if (phases.at(-1)?.[0] !== p) phases.push([p, Date.now() - applied]);
      if (p === 'Running' || p === 'Failed') return p;
      // kubectl every 2 s is plenty for minutes of start-up on two busy cores.
      await sleep(2000);
      return undefined;
    }).catch((err: Error) => {
      throw new Error(`${err.message}\n${vllmDiagnostics(name)}`);
    });
    if (outcome === 'Failed') throw new Error(`Failed: ${JSON.stringify(mdReady(name))}\n${vllmDiagnostics(name)}`);
    timings['vllm: apply -> Running'] = `${phases.at(-1)?.[1]} ms (${phases.map(([p, t]) => `${p}@${t}`).join(' ')})`;
    expect(phases.map(([p]) => p)).toContain('Deploying');
    expect(mdReady(name)).toMatchObject({ reason: 'ModelAnswering' });

    const [pod] = livePods(LLMS, selector).filter(isReady);
    if (!pod) throw new Error('no Ready vLLM pod');
    expect(pod.spec.nodeName).toBe(NODE.name);
    const pull = pod.status.initContainerStatuses?.find((c) => c.name === 'pull-model')?.state?.terminated;
    const started = pod.status.containerStatuses?.find((c) => c.name === 'vllm')?.state?.running?.startedAt;
    const ready = pod.status.conditions?.find((c) => c.type === 'Ready')?.lastTransitionTime;
    timings['vllm: pull-model ran (found the snapshot)'] = pull
      ? `${Date.parse(pull.finishedAt) - Date.parse(pull.startedAt)} ms`
      : '?';
    timings['vllm: server start -> Ready (startup + readiness probes)'] =
      started && ready ? `${Date.parse(ready) - Date.parse(started)} ms` : '?';
    console.log(`[e2e] real-pods: vLLM Running ${phases.at(-1)?.[1]} ms after apply`);

    // The pod the operator planned: vLLM's container, offline, no API token, a GPU asked.
    const spec = (JSON.parse(kOk(['get', 'pod', pod.metadata.name, '-n', LLMS, '-o', 'json'])) as PodSpecLite).spec;
    const server = spec.containers.find((c) => c.name === 'vllm');
    if (!server) throw new Error(`no vllm container: ${spec.containers.map((c) => c.name).join(', ')}`);
    expect(server.image).toBe(images.vllm);
    expect(server.command).toEqual(['python3', '-m', 'vllm.entrypoints.openai.api_server']);
    expect(server.args).toEqual(
      expect.arrayContaining(['--model', VLLM_MODEL, '--max-model-len', '2048', '--max-num-seqs', '4']),
    );
    const env = Object.fromEntries((server.env ?? []).map((e) => [e.name, e.value]));
    expect(env).toMatchObject({ HF_HUB_OFFLINE: '1', HF_HOME: '/models', MODEL: VLLM_MODEL });
    expect(spec.automountServiceAccountToken).toBe(false);
    const mounts = [...spec.containers, ...(spec.initContainers ?? [])].flatMap((c) => c.volumeMounts ?? []);
    expect(mounts.filter((m) => m.mountPath.startsWith('/var/run/secrets/kubernetes.io'))).toEqual([]);
    expect(server.resources?.requests?.['nvidia.com/gpu']).toBe('1');
    expect(server.resources?.limits?.['nvidia.com/gpu']).toBe('1');
    expect(server.resources?.requests?.cpu).toBe('1');
    expect(spec.initContainers?.map((c) => c.name)).toEqual(['pull-model']);

    const script = `
      const h = { 'content-type': 'application/json', 'x-api-key': process.env.KEY, 'x-tags': 'test:vllm' };
      const post = (path, body, extra = {}) => fetch(process.env.PROXY + path, { method: 'POST', headers: { ...h, ...extra }, body: JSON.stringify(body) });
      const messages = [{ role: 'user', content: 'Say hello.' }];
      let t0 = Date.now();
      const chat = await post('/openai/v1/chat/completions', { model: '${VLLM_MODEL}', max_tokens: 16, messages });
      const c = await chat.json();
      console.log(JSON.stringify({ kind: 'chat', ms: Date.now() - t0, status: chat.status, model: c.model, object: c.object, text: c.choices?.[0]?.message?.content, usage: c.usage, error: c.error }));
      t0 = Date.now();
      const msg = await post('/anthropic/v1/messages', { model: '${VLLM_MODEL}', max_tokens: 16, messages }, { 'anthropic-version': '2023-06-01' });
      const m = await msg.json();
      console.log(JSON.stringify({ kind: 'messages', ms: Date.now() - t0, status: msg.status, model: m.model, type: m.type, text: m.content?.find((b) => b.type === 'text')?.text, usage: m.usage, error: m.error }));
    `;
    const out = (await runCaller('vllm', script)).map((l) => JSON.parse(l) as Record<string, unknown>);
    const by = Object.fromEntries(out.map((o) => [o.kind, o]));
    expect(by.chat).toMatchObject({ status: 200, model: VLLM_MODEL, object: 'chat.completion' });
    expect(String(by.chat?.text ?? '').trim().length).toBeGreaterThan(0);
    const chatUsage = by.chat?.usage as { prompt_tokens: number; completion_tokens: number };
    expect(chatUsage.prompt_tokens).toBeGreaterThan(0);
    expect(chatUsage.completion_tokens).toBeGreaterThan(0);
    expect(by.messages).toMatchObject({ status: 200, model: VLLM_MODEL, type: 'message' });
    expect(String(by.messages?.text ?? '').trim().length).toBeGreaterThan(0);
    const messagesUsage = by.messages?.usage as { input_tokens: number; output_tokens: number };
    expect(messagesUsage.input_tokens).toBeGreaterThan(0);
    expect(messagesUsage.output_tokens).toBeGreaterThan(0);
    timings['vllm: chat through the proxy'] = `${by.chat?.ms} ms`;
    timings['vllm: Anthropic Messages through the proxy'] = `${by.messages?.ms} ms`;
    const usage = await eventually('vLLM usage recorded', 30_000, async () => {
      const u = await usageFor('test:vllm');
      return u.requests === 2 ? u : undefined;
    });
    expect(usage.inputTokens).toBe(chatUsage.prompt_tokens + messagesUsage.input_tokens);
    expect(usage.outputTokens).toBe(chatUsage.completion_tokens + messagesUsage.output_tokens);

    kOk(['delete', 'md', name, '-n', LLMS]);
    await eventually('the vLLM pods gone', 120_000, () => (pods(LLMS, selector).length === 0 ? true : undefined));
  }, 1_200_000);

  it('stops the node and leaves the host as it was', async () => {
    const stopStart = Date.now();
    stopped = true;
    const left = await node.stop();
    timings['node stop and host restore'] = `${Date.now() - stopStart} ms`;
    expect(left).toEqual([]);
  }, 120_000);
});
