import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import {
  appendFileSync,
  createWriteStream,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readlinkSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * A real Kubernetes control plane as local processes: etcd, kube-apiserver,
 * kube-controller-manager, kube-scheduler and kwok (which plays the kubelets of fake nodes).
 * Binaries come from build.sh (built from the Go module proxy, cached per version).
 */

export interface ControlPlane {
  /** Admin kubeconfig (system:masters). */
  kubeconfig: string;
  server: string;
  /** etcd's client URL (its v3 JSON gateway serves /v3/kv/...). */
  etcdUrl: string;
  /** Bearer token of the admin user. */
  token: string;
  /** Directory holding data, logs and keys; removed by stop(). */
  dir: string;
  binDir: string;
  /** Loopback HTTPS ports of the controller manager and the scheduler (/metrics with the admin token). */
  securePorts: { 'kube-controller-manager': number; 'kube-scheduler': number };
  /** Process id of each running component (e.g. to read its CPU time). */
  pids(): Partial<Record<Component, number>>;
  /** Stop one component (for fault tests) and start it again with the same flags. */
  restart(component: Component): Promise<void>;
  kill(component: Component): void;
  /** SIGKILL one component (a crash, no graceful shutdown) and resolve once it has exited. */
  crash(component: Component): Promise<void>;
  /** Start a component that was killed or crashed, with the same flags; waits for API server readiness. */
  start(component: Component): Promise<void>;
  stop(): Promise<void>;
}

/**
 * Compacts etcd's history up to its current revision, so that watches resuming from an older
 * resourceVersion get 410 Gone. Returns the compacted revision.
 */
export async function compactEtcd(etcdUrl: string): Promise<number> {
  // A write first, outside the API server's keys (/registry), so the compacted revision is past
  // every resourceVersion any watcher has seen: each of them gets 410 Gone, as after a real
  // compaction that followed writes. Without it a watcher whose last event was the newest write
  // could resume from exactly the compacted revision, and whether it did depended on timing.
  const put = await fetch(`${etcdUrl}/v3/kv/put`, {
    method: 'POST',
    body: JSON.stringify({
      key: Buffer.from('/e2e/compaction-marker').toString('base64'),
      value: Buffer.from(String(Date.now())).toString('base64'),
    }),
  });
  if (!put.ok) throw new Error(`etcd put before compaction failed: ${put.status} ${await put.text()}`);
  const revision = Number(((await put.json()) as { header: { revision: string } }).header.revision);
  const res = await fetch(`${etcdUrl}/v3/kv/compaction`, {
    method: 'POST',
    body: JSON.stringify({ revision, physical: true }),
  });
  if (!res.ok) throw new Error(`etcd compaction failed: ${res.status} ${await res.text()}`);
  return revision;
}

export type Component = 'etcd' | 'kube-apiserver' | 'kube-controller-manager' | 'kube-scheduler' | 'kwok';

const HERE = fileURLToPath(new URL('./', import.meta.url));

/** Runs build.sh (a no-op when the cache is warm) and returns the directory of the binaries. */
function buildControlPlane(): string {
  const out = execFileSync('bash', [join(HERE, 'build.sh')], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
    maxBuffer: 16 * 1024 * 1024,
  });
  const binDir = out.trim().split('\n').at(-1);
  if (!binDir) throw new Error('build.sh printed no bin dir');
  return binDir;
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      srv.close(() => (typeof addr === 'object' && addr ? resolve(addr.port) : reject(new Error('no port'))));
    });
  });
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function waitFor(what: string, timeoutMs: number, probe: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let delay = 100;
  while (Date.now() < deadline) {
    if (await probe().catch(() => false)) return;
    await sleep(delay);
    delay = Math.min(delay * 2, 1000);
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
}

/** GET against the API server with the admin token; TLS is the server's self-signed certificate. */
export async function apiGet(server: string, token: string, path: string): Promise<{ status: number; body: string }> {
  const { request } = await import('node:https');
  return new Promise((resolve, reject) => {
    const req = request(
      `${server}${path}`,
      { headers: { authorization: `Bearer ${token}` }, rejectUnauthorized: false, timeout: 5000 },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => {
          body += c;
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      },
    );
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
    req.end();
  });
}

/**
 * Components started by an earlier run that died without tearing down (SIGKILL of the test
 * runner, a crash): killed before a new control plane starts, recognised by their binary. Each
 * line of the file is `<pid> <owner pid>`: a plane whose owner still runs is another live
 * plane of this run (the real node's suite starts one beside the global one) and is kept.
 */
function sweepStaleProcesses(binDir: string, pidFile: string): void {
  let lines: string[] = [];
  try {
    lines = readFileSync(pidFile, 'utf8').split('\n').filter(Boolean);
  } catch {
    return;
  }
  const kept: string[] = [];
  for (const line of lines) {
    const [pid, owner] = line.split(' ').map(Number) as [number, number | undefined];
    if (owner !== undefined && owner !== process.pid && alive(owner)) {
      kept.push(line);
      continue;
    }
    try {
      if (readlinkSync(`/proc/${pid}/exe`).startsWith(binDir)) process.kill(pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
  writeFileSync(pidFile, kept.map((l) => `${l}\n`).join(''));
}

/** A kubeconfig for one user of a plane by its static token (the plane's certificate is self-signed). */
export function kubeconfigText(server: string, token: string, user: string): string {
  return [
    'apiVersion: v1',
    'kind: Config',
    'clusters:',
    '- name: local',
    '  cluster:',
    `    server: ${server}`,
    '    insecure-skip-tls-verify: true',
    'users:',
    `- name: ${user}`,
    '  user:',
    `    token: ${token}`,
    'contexts:',
    '- name: local',
    `  context: {cluster: local, user: ${user}}`,
    'current-context: local',
    '',
  ].join('\n');
}

export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Drops this plane's lines from the pid file, leaving other live planes' lines. */
function forgetPids(pidFile: string, pids: Set<number>): void {
  try {
    const left = readFileSync(pidFile, 'utf8')
      .split('\n')
      .filter((l) => l && !pids.has(Number(l.split(' ')[0])));
    writeFileSync(pidFile, left.map((l) => `${l}\n`).join(''));
  } catch {
    // no file
  }
}

interface Spec {
  bin: string;
  args: string[];
}

export async function startControlPlane(
  options: {
    binDir?: string;
    logToConsole?: boolean;
    /** Flags added to a component's own (a later flag wins), e.g. a benchmark's client QPS. */
    extraArgs?: Partial<Record<Component, string[]>>;
    /**
     * The address the API server binds and advertises (default 127.0.0.1): a real node's pods
     * reach it there (e2e/cluster/real-node.ts), through the `kubernetes` Service.
     */
    address?: string;
    /** More static tokens, `token,user,uid,"group"` lines (a real kubelet's system:node user). */
    tokens?: string[];
  } = {},
): Promise<ControlPlane> {
  const binDir = options.binDir ?? buildControlPlane();
  const pidFile = join(binDir, '..', 'running.pids');
  sweepStaleProcesses(binDir, pidFile);
  const dir = mkdtempSync(join(tmpdir(), 'pao-k8s-'));
  const logs = join(dir, 'logs');
  mkdirSync(logs);
  const [etcdPort, etcdPeerPort, apiPort, cmPort, schedPort, kwokPort] = (await Promise.all(
    Array.from({ length: 6 }, freePort),
  )) as [number, number, number, number, number, number];
  const token = randomBytes(24).toString('hex');
  const address = options.address ?? '127.0.0.1';
  const server = `https://${address}:${apiPort}`;

  // Static token auth keeps the harness free of a PKI: every component and the tests use
  // the admin token; ServiceAccounts get real signed tokens from the keys below.
  writeFileSync(
    join(dir, 'tokens.csv'),
    [`${token},admin,admin-uid,"system:masters"`, ...(options.tokens ?? [])].map((l) => `${l}\n`).join(''),
    { mode: 0o600 },
  );
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  writeFileSync(join(dir, 'sa.key'), privateKey.export({ type: 'pkcs8', format: 'pem' }), { mode: 0o600 });
  writeFileSync(join(dir, 'sa.pub'), publicKey.export({ type: 'spki', format: 'pem' }));

  const kubeconfig = join(dir, 'kubeconfig');
  writeFileSync(kubeconfig, kubeconfigText(server, token, 'admin'), { mode: 0o600 });

  // Controller manager and scheduler: API access as admin, their own secure port on loopback.
  const clientOf = (port: number) => [
    `--kubeconfig=${kubeconfig}`,
    `--authentication-kubeconfig=${kubeconfig}`,
    `--authorization-kubeconfig=${kubeconfig}`,
    '--bind-address=127.0.0.1',
    `--secure-port=${port}`,
  ];
  const specs: Record<Component, Spec> = {
    etcd: {
      bin: 'etcd',
      args: [
        `--data-dir=${join(dir, 'etcd')}`,
        `--listen-client-urls=http://127.0.0.1:${etcdPort}`,
        `--advertise-client-urls=http://127.0.0.1:${etcdPort}`,
        `--listen-peer-urls=http://127.0.0.1:${etcdPeerPort}`,
        `--initial-advertise-peer-urls=http://127.0.0.1:${etcdPeerPort}`,
        `--initial-cluster=default=http://127.0.0.1:${etcdPeerPort}`,
        // Test data is disposable; skipping fsync keeps etcd from dominating test time.
        '--unsafe-no-fsync',
        '--log-level=warn',
      ],
    },
    'kube-apiserver': {
      bin: 'kube-apiserver',
      args: [
        `--etcd-servers=http://127.0.0.1:${etcdPort}`,
        `--bind-address=${address}`,
        `--advertise-address=${address}`,
        `--secure-port=${apiPort}`,
        // A real kubelet's logs and exec are reached at its node's InternalIP.
        '--kubelet-preferred-address-types=InternalIP,Hostname',
        `--cert-dir=${join(dir, 'pki')}`,
        `--token-auth-file=${join(dir, 'tokens.csv')}`,
        '--authorization-mode=Node,RBAC',
        '--enable-admission-plugins=NamespaceLifecycle,LimitRanger,ServiceAccount,DefaultStorageClass,ResourceQuota,DefaultTolerationSeconds,MutatingAdmissionWebhook,ValidatingAdmissionWebhook,ValidatingAdmissionPolicy,NodeRestriction,PodSecurity,OwnerReferencesPermissionEnforcement',
        '--service-account-issuer=https://kubernetes.default.svc.cluster.local',
        `--service-account-key-file=${join(dir, 'sa.pub')}`,
        `--service-account-signing-key-file=${join(dir, 'sa.key')}`,
        '--service-cluster-ip-range=10.96.0.0/16',
        '--allow-privileged=true',
        '--profiling=false',
        '--v=1',
      ],
    },
    'kube-controller-manager': {
      bin: 'kube-controller-manager',
      args: [
        ...clientOf(cmPort),
        `--service-account-private-key-file=${join(dir, 'sa.key')}`,
        // Published to every namespace as kube-root-ca.crt: pods verify the API server with it.
        // The self-signed serving certificate names the Service IP and kubernetes.default.svc.
        `--root-ca-file=${join(dir, 'pki', 'apiserver.crt')}`,
        '--use-service-account-credentials=false',
        '--leader-elect=false',
        '--controllers=*,-cloud-node-lifecycle,-service-lb-controller,-node-route-controller',
        '--cluster-signing-duration=24h',
        // kwok 0.7 started without --node-lease-duration-seconds holds no node Lease and posts node
        // status only every 10 minutes (its heartbeat-with-lease stage, 600-610 s apart). A node
        // silent for the grace period is marked NotReady, and so are its pods, which kwok does not
        // undo: with 5m, pods on a plane older than 5 minutes went NotReady for good (the operator
        // benchmark's 1000-pod phases never finished).
        // Real kubelets are not under test here.
        '--node-monitor-grace-period=1h',
        '--v=1',
      ],
    },
    'kube-scheduler': {
      bin: 'kube-scheduler',
      args: [...clientOf(schedPort), '--leader-elect=false', '--v=1'],
    },
    kwok: {
      bin: 'kwok',
      args: [
        `--kubeconfig=${kubeconfig}`,
        // Only nodes annotated as fake are kwok's; nothing else in the cluster is touched.
        '--manage-all-nodes=false',
        '--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake',
        '--disregard-status-with-annotation-selector=kwok.x-k8s.io/status=custom',
        '--cidr=10.244.0.0/16',
        '--node-ip=10.0.0.1',
        `--server-address=127.0.0.1:${kwokPort}`,
      ],
    },
  };

  const procs = new Map<Component, ChildProcess>();
  /** Every process this plane started (the pid file's lines that are its own). */
  const started = new Set<number>();
  const start = (c: Component) => {
    const spec = specs[c];
    const log = createWriteStream(join(logs, `${c}.log`), { flags: 'a' });
    const args = [...spec.args, ...(options.extraArgs?.[c] ?? [])];
    const child = spawn(join(binDir, spec.bin), args, { stdio: ['ignore', 'pipe', 'pipe'], cwd: dir });
    child.stdout?.pipe(log);
    child.stderr?.pipe(log);
    if (options.logToConsole) child.stderr?.pipe(process.stderr);
    procs.set(c, child);
    if (child.pid) {
      appendFileSync(pidFile, `${child.pid} ${process.pid}\n`);
      started.add(child.pid);
    }
  };
  const kill = (c: Component) => {
    const child = procs.get(c);
    if (child && child.exitCode === null) child.kill('SIGKILL');
    procs.delete(c);
  };
  const exited = (c: Component) =>
    new Promise<void>((resolve) => {
      const child = procs.get(c);
      if (!child || child.exitCode !== null || child.signalCode !== null) return resolve();
      child.once('exit', () => resolve());
    });

  // SIGTERM, then SIGKILL after 5 s: the API server otherwise waits for open watches to time out.
  const terminate = async (c: Component) => {
    const child = procs.get(c);
    if (!child) return;
    const done = exited(c);
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
    await done;
    clearTimeout(timer);
  };

  let stopped = false;
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    process.off('exit', stopSync);
    const order: Component[] = ['kwok', 'kube-scheduler', 'kube-controller-manager', 'kube-apiserver', 'etcd'];
    for (const c of order) await terminate(c);
    procs.clear();
    forgetPids(pidFile, started);
    if (process.env.KEEP_CONTROL_PLANE_DIR) return;
    // A teardown that throws fails the whole e2e run after every test passed; a component's last
    // file write racing the removal (ENOTEMPTY) is retried rather than thrown.
    rmSync(dir, { recursive: true, force: true, maxRetries: 5 });
  };
  // If the test process dies without running teardown, leave no process behind.
  const stopSync = () => {
    for (const child of procs.values()) child.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  };
  process.on('exit', stopSync);

  const healthy = async (path: string) => (await apiGet(server, token, path)).status === 200;
  const tail = (c: Component) => {
    try {
      return readFileSync(join(logs, `${c}.log`), 'utf8')
        .split('\n')
        .slice(-30)
        .join('\n');
    } catch {
      return '';
    }
  };

  try {
    start('etcd');
    await waitFor('etcd', 30_000, async () => {
      const res = await fetch(`http://127.0.0.1:${etcdPort}/health`);
      return res.ok;
    });
    start('kube-apiserver');
    await waitFor('kube-apiserver /readyz', 120_000, () => healthy('/readyz')).catch((err: Error) => {
      throw new Error(`${err.message}\n${tail('kube-apiserver')}`);
    });
    start('kube-controller-manager');
    start('kube-scheduler');
    start('kwok');
    await waitFor('default ServiceAccount', 60_000, () =>
      healthy('/api/v1/namespaces/default/serviceaccounts/default'),
    );
  } catch (err) {
    await stop();
    throw err;
  }

  return {
    kubeconfig,
    server,
    etcdUrl: `http://127.0.0.1:${etcdPort}`,
    token,
    dir,
    binDir,
    securePorts: { 'kube-controller-manager': cmPort, 'kube-scheduler': schedPort },
    pids: () =>
      Object.fromEntries(
        [...procs].flatMap(([c, child]) =>
          child.pid !== undefined && child.exitCode === null ? [[c, child.pid]] : [],
        ),
      ),
    kill,
    async crash(c) {
      const done = exited(c);
      procs.get(c)?.kill('SIGKILL');
      await done;
      procs.delete(c);
    },
    async start(c) {
      const child = procs.get(c);
      if (!child || child.exitCode !== null || child.signalCode !== null) start(c);
      if (c === 'kube-apiserver') await waitFor('kube-apiserver /readyz', 120_000, () => healthy('/readyz'));
    },
    async restart(c) {
      await terminate(c);
      start(c);
      if (c === 'kube-apiserver') await waitFor('kube-apiserver /readyz', 120_000, () => healthy('/readyz'));
    },
    stop,
  };
}
