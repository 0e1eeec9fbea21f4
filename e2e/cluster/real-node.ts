import { type ChildProcess, execFile, execFileSync, spawn } from 'node:child_process';
import {
  appendFileSync,
  cpSync,
  createWriteStream,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  renameSync,
  rmdirSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { cacheRoot } from '../support/cache-root.js';
import { alive, kubeconfigText } from './control-plane.js';
import { cgroupPids, diffHostState, type HostState, readHostState, removeCgroups, writeSysctls } from './host-state.js';

/**
 * A real Kubernetes node on this machine, beside kwok's fake ones: containerd (Debian's) with
 * runc and the reference CNI plugins (bridge, host-local, portmap, loopback), the kubelet and
 * kube-proxy built from k8s.io/kubernetes, kube-router's firewall for NetworkPolicy, and a
 * device plugin advertising GPUs. Pods really run: images, probes, cgroup limits, OOM kills,
 * restarts, Service routing and NetworkPolicy are the real ones.
 *
 * Isolation: the node lives in a network and mount namespace of its own, held by one process.
 * Its bridge, pod network namespaces, iptables and ipset rules, /run and /var/log exist only in
 * there, and vanish with it. The host gains one veth (NODE.hostLink, HOST_IP) whose peer is the
 * node's eth0, and two routes over it (pods and Services), so the API server (bound to HOST_IP)
 * is reachable from pods and the tests reach pods; nothing routes past this machine (no default
 * route in the node, no masquerade to the outside). What is global — the kubelet's sysctls and
 * its cgroups — is restored and removed at stop, and the stop compares the host with its state
 * before the start (host-state.ts).
 */

export const NODE = {
  name: 'pao-real-node',
  /** The host's end of the veth: the API server binds here. */
  hostIp: '10.77.0.1',
  /** The node's InternalIP (its eth0). */
  nodeIp: '10.77.0.2',
  hostLink: 'pao-node0',
  podCidr: '10.85.0.0/24',
  podGateway: '10.85.0.1',
  serviceCidr: '10.96.0.0/16',
  /** Cluster DNS, when the caller serves one: an address on the node, which pods reach. */
  dnsIp: '10.77.0.2',
} as const;

type NodeComponent = 'containerd' | 'kubelet' | 'kube-proxy' | 'kube-router' | 'device-plugin' | 'coredns';

const CACHE = cacheRoot();
/** What a run leaves for the next one should it die without stopping (SIGKILL of the runner). */
const STATE_FILE = join(CACHE, 'real-node.state.json');
const ARTIFACTS = fileURLToPath(new URL('../../.e2e-artifacts/real-node', import.meta.url));

interface SavedState {
  /** The test process that runs the node: while it lives, no other run may take the node. */
  owner: number;
  holderPid: number;
  pids: number[];
  sysctls: Record<string, string>;
  dir: string;
  /** /var/lib/kubelet did not exist on the host before: removed at stop. */
  madeKubeletDir: boolean;
  /** This boot's id and each saved pid's start time: a pid reused since is never killed. */
  bootId: string;
  started: Record<number, string>;
}

const BOOT_ID = '/proc/sys/kernel/random/boot_id';

/** A process's start time (clock ticks since boot, /proc/<pid>/stat field 22). */
function startTime(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
  } catch {
    return undefined;
  }
}

/** Whether a saved pid is still the process this state recorded. */
function same(s: SavedState, pid: number): boolean {
  return (
    s.bootId === readFileSync(BOOT_ID, 'utf8').trim() &&
    s.started[pid] !== undefined &&
    startTime(pid) === s.started[pid]
  );
}

const KUBELET_DIR = '/var/lib/kubelet';

/** The node's cgroup root in every hierarchy; the kubelet makes kubepods under it. */
const CGROUP_ROOT_NAME = 'pao-real-node';

/** Debian packages and host facts the node needs; an empty list when it can run here. */
export function realNodeMissing(): string[] {
  const missing: string[] = [];
  if (process.getuid?.() !== 0) missing.push('root (the node creates namespaces, cgroups and mounts)');
  const need: [string, string][] = [
    ['/usr/bin/containerd', 'containerd'],
    ['/usr/bin/ctr', 'containerd'],
    ['/usr/sbin/runc', 'runc'],
    ['/usr/lib/cni/bridge', 'containernetworking-plugins'],
    ['/usr/sbin/iptables', 'iptables'],
    ['/usr/sbin/ipset', 'ipset'],
    ['/usr/sbin/conntrack', 'conntrack'],
    ['/usr/bin/nsenter', 'util-linux'],
  ];
  for (const [path, pkg] of need) if (!existsSync(path)) missing.push(pkg);
  if (!existsSync('/sys/fs/cgroup/memory')) missing.push('cgroup v1 memory controller at /sys/fs/cgroup/memory');
  return [...new Set(missing)];
}

/** `ctr images import` of a docker archive into the node's containerd, unpacked for the kubelet. */
const importArgs = (sock: string, archive: string) => [
  '--address',
  sock,
  '-n',
  'k8s.io',
  'images',
  'import',
  '--no-unpack=false',
  archive,
];

function sh(cmd: string, args: string[], input?: string, timeout = 300_000): string {
  return execFileSync(cmd, args, { encoding: 'utf8', input, stdio: ['pipe', 'pipe', 'pipe'], timeout });
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Runs a command in the node's network and mount namespaces (those of its holder process). */
function inNamespaces(holderPid: number, cmd: string[]): string {
  return sh('nsenter', ['-t', String(holderPid), '-n', '-m', '--', ...cmd]);
}

async function waitFor(what: string, timeoutMs: number, probe: () => boolean | Promise<boolean>): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (
      await Promise.resolve()
        .then(probe)
        .catch(() => false)
    )
      return;
    await sleep(250);
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
}

function kill9(pid: number): void {
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    // gone
  }
}

/** Every process whose mount namespace is `ns` (a /proc/<pid>/ns/mnt link). */
function pidsInMountNs(ns: string): number[] {
  const out: number[] = [];
  for (const e of readdirSync('/proc')) {
    if (!/^\d+$/.test(e)) continue;
    try {
      if (readlinkSync(`/proc/${e}/ns/mnt`) === ns) out.push(Number(e));
    } catch {
      // exited, or a kernel thread
    }
  }
  return out;
}

/**
 * Stops everything of a node and puts the host back: the node's processes, every container
 * (the processes in the kubepods cgroups), the containerd shims, the namespace holder (which
 * takes the bridge, the pod namespaces, the firewall rules and the mounts with it), the
 * kubelet's cgroups, its sysctls, and the files. Returns what could not be undone.
 */
async function teardown(s: SavedState, children: ChildProcess[]): Promise<string[]> {
  const problems: string[] = [];
  // The node's own processes first, politely: the kubelet stops its work, the plugin unregisters.
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGTERM');
  await waitFor('node components to exit', 10_000, () => children.every((c) => !alive(c.pid ?? 0))).catch(() => {
    for (const c of children) c.kill('SIGKILL');
  });
  for (const pid of s.pids) if (pid !== s.holderPid && same(s, pid)) kill9(pid);
  // Every container: whatever is left in the pods' cgroups.
  for (let i = 0; i < 100; i++) {
    const pids = cgroupPids(CGROUP_ROOT_NAME);
    if (pids.length === 0) break;
    for (const pid of pids) kill9(pid);
    await sleep(100);
  }
  // The shims and anything else in the node's mount namespace, then its holder.
  let ns = '';
  const holderAlive = same(s, s.holderPid);
  try {
    if (holderAlive) ns = readlinkSync(`/proc/${s.holderPid}/ns/mnt`);
  } catch {
    // the holder is gone already
  }
  if (ns && ns !== readlinkSync('/proc/self/ns/mnt')) {
    for (const pid of pidsInMountNs(ns)) kill9(pid);
    await waitFor('the node namespace to empty', 10_000, () => pidsInMountNs(ns).length === 0).catch((e: Error) =>
      problems.push(e.message),
    );
  }
  if (holderAlive) {
    kill9(s.holderPid);
    await waitFor('the namespace holder to exit', 10_000, () => !alive(s.holderPid)).catch((e: Error) =>
      problems.push(e.message),
    );
  }
  // The veth goes with the namespace, but a moment later.
  await waitFor('the veth to go', 10_000, () => {
    try {
      sh('ip', ['link', 'show', NODE.hostLink]);
      return false;
    } catch {
      return true;
    }
  }).catch(() => {
    try {
      sh('ip', ['link', 'del', NODE.hostLink]);
    } catch (err) {
      problems.push(`veth ${NODE.hostLink}: ${(err as Error).message}`);
    }
  });
  for (const dir of removeCgroups(CGROUP_ROOT_NAME)) problems.push(`cgroup left: ${dir}`);
  writeSysctls(s.sysctls);
  try {
    if (existsSync(join(s.dir, 'logs'))) {
      rmSync(ARTIFACTS, { recursive: true, force: true });
      mkdirSync(ARTIFACTS, { recursive: true });
      cpSync(join(s.dir, 'logs'), ARTIFACTS, { recursive: true });
      // The containers' own output (the kubelet's podLogsDir), for a failed run's reader.
      if (existsSync(join(s.dir, 'pod-logs'))) {
        cpSync(join(s.dir, 'pod-logs'), join(ARTIFACTS, 'pods'), { recursive: true, dereference: true });
      }
    }
  } catch (err) {
    // A full disk must not keep the rest of the host from being restored.
    problems.push(`logs not kept: ${(err as Error).message}`);
  }
  try {
    removeBeside(s.dir);
  } catch (err) {
    problems.push(`files: ${(err as Error).message}`);
  }
  if (s.madeKubeletDir) {
    try {
      rmdirSync(KUBELET_DIR);
    } catch (err) {
      problems.push(`${KUBELET_DIR}: ${(err as Error).message}`);
    }
  }
  rmSync(STATE_FILE, { force: true });
  return problems;
}

/** What a node's directory is renamed to while a detached `rm` removes it. */
const REMOVING = '.removing';

/**
 * The node's directory moved aside at once and removed by a detached `rm`: it holds the unpacked
 * images (the vLLM one alone is tens of thousands of files, 20-45 s to remove), and the lane's
 * next suite need not wait for that. It is this run's files under /var/tmp, not host state; a
 * run that ends first leaves it for the next run's sweep (sweepStale).
 */
function removeBeside(dir: string): void {
  if (!existsSync(dir)) return;
  const aside = `${dir}${REMOVING}`;
  renameSync(dir, aside);
  removeDetached(aside);
}

/** `rm -rf` that outlives this process, if need be. */
function removeDetached(path: string): void {
  spawn('rm', ['-rf', path], { detached: true, stdio: 'ignore' }).unref();
}

/**
 * Whether a host entry (a link, route, mount, firewall rule or cgroup) is the node's: it names the
 * node's link, cgroup root or directories, or one of its networks. The host check compares only
 * these, so it catches what the node leaves and never what a neighbour does meanwhile.
 */
const NODE_MARKS = [
  NODE.hostLink,
  CGROUP_ROOT_NAME,
  'pao-node-',
  KUBELET_DIR,
  '10.77.0.',
  NODE.podCidr.replace(/\.0\/24$/, '.'),
  NODE.serviceCidr.replace(/\.0\.0\/16$/, '.'),
];
export const nodeMade = (entry: string): boolean => NODE_MARKS.some((mark) => entry.includes(mark));

/** A node a dead run left behind: taken down before a new one starts. */
async function sweepStale(): Promise<void> {
  // Directories an earlier run moved aside and did not see removed.
  for (const name of readdirSync('/var/tmp')) {
    if (name.startsWith('pao-node-') && name.endsWith(REMOVING)) removeDetached(join('/var/tmp', name));
  }
  let s: SavedState;
  try {
    s = JSON.parse(readFileSync(STATE_FILE, 'utf8')) as SavedState;
  } catch {
    return;
  }
  // One node per machine: its addresses, link and cgroups are fixed names.
  if (s.owner !== process.pid && alive(s.owner)) {
    throw new Error(`another test run (pid ${s.owner}) runs the real node; run one e2e at a time`);
  }
  const problems = await teardown(s, []);
  if (problems.length) throw new Error(`a previous run's node could not be removed:\n${problems.join('\n')}`);
}

export interface NodeNetwork {
  holderPid: number;
  dir: string;
  before: HostState;
}

function routeTaken(prefix: string): boolean {
  return sh('ip', ['route', 'show', 'table', 'all'])
    .split('\n')
    .some((l) => l.startsWith(`${prefix} `));
}

/**
 * The node's namespaces and its link to the host, made before the control plane starts, since
 * the API server binds NODE.hostIp. The holder mounts a private /run and /var/log, so the
 * runtime's sockets, the pods' network namespaces and the container log links stay in there.
 */
export async function createNodeNetwork(): Promise<NodeNetwork> {
  await sweepStale();
  for (const prefix of ['10.77.0.0/30', NODE.podCidr, NODE.serviceCidr]) {
    if (routeTaken(prefix)) throw new Error(`the host already routes ${prefix}; the real node needs it`);
  }
  const before = readHostState();
  mkdirSync(CACHE, { recursive: true });
  const dir = mkdtempSync(join('/var/tmp', 'pao-node-'));
  mkdirSync(join(dir, 'logs'));
  mkdirSync(join(dir, 'kubelet'));
  // The mount point on the host: made here if missing (and removed at stop), empty on the host.
  const madeKubeletDir = !existsSync(KUBELET_DIR);
  if (madeKubeletDir) mkdirSync(KUBELET_DIR);
  const holder = spawn(
    'unshare',
    [
      '--net',
      '--mount',
      '--propagation',
      'private',
      '--',
      '/bin/sh',
      '-ec',
      [
        'mount -t tmpfs -o mode=0755 pao-node-run /run',
        'mkdir -p /run/netns /run/containerd',
        'mount -t tmpfs -o mode=0755 pao-node-log /var/log',
        // The kubelet's device manager and its plugins use /var/lib/kubelet/device-plugins whatever
        // the root dir: the node's own directory is mounted there, in the namespace only.
        `mount --bind ${join(dir, 'kubelet')} /var/lib/kubelet`,
        'ip link set lo up',
        'echo ready',
        'exec sleep infinity',
      ].join('\n'),
    ],
    { stdio: ['ignore', 'pipe', 'inherit'], detached: false },
  );
  const holderPid = holder.pid;
  if (!holderPid) throw new Error('could not start the namespace holder (unshare)');
  const state: SavedState = {
    owner: process.pid,
    holderPid,
    pids: [],
    sysctls: before.sysctls,
    dir,
    madeKubeletDir,
    bootId: readFileSync(BOOT_ID, 'utf8').trim(),
    started: { [holderPid]: startTime(holderPid) ?? '' },
  };
  writeFileSync(STATE_FILE, JSON.stringify(state));
  try {
    await new Promise<void>((resolve, reject) => {
      holder.stdout?.once('data', () => resolve());
      holder.once('exit', (code) => reject(new Error(`the namespace holder exited (${code})`)));
    });
    const inNode = (cmd: string[]) => inNamespaces(holderPid, cmd);
    sh('ip', ['link', 'add', NODE.hostLink, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', String(holderPid)]);
    sh('ip', ['addr', 'add', `${NODE.hostIp}/30`, 'dev', NODE.hostLink]);
    sh('ip', ['link', 'set', NODE.hostLink, 'up']);
    inNode(['ip', 'addr', 'add', `${NODE.nodeIp}/30`, 'dev', 'eth0']);
    inNode(['ip', 'link', 'set', 'eth0', 'up']);
    // Forwarding between the pods' bridge and eth0, and bridged traffic through iptables (Services
    // and NetworkPolicy between pods on the bridge): both settings of the node's namespace only.
    inNode(['sysctl', '-q', '-w', 'net.ipv4.ip_forward=1', 'net.bridge.bridge-nf-call-iptables=1']);
    sh('ip', ['route', 'add', NODE.podCidr, 'via', NODE.nodeIp, 'dev', NODE.hostLink]);
    sh('ip', ['route', 'add', NODE.serviceCidr, 'via', NODE.nodeIp, 'dev', NODE.hostLink]);
  } catch (err) {
    await teardown(state, [holder]);
    throw err;
  }
  return { holderPid, dir, before };
}

/** Takes down a node network whose node never started (a failed set-up); returns what is left. */
export async function destroyNodeNetwork(net: NodeNetwork): Promise<string[]> {
  let s: SavedState;
  try {
    s = JSON.parse(readFileSync(STATE_FILE, 'utf8')) as SavedState;
  } catch {
    return [];
  }
  const problems = await teardown(s, []);
  return [...problems, ...diffHostState(net.before, readHostState(), nodeMade)];
}

export interface RealNodeOptions {
  binDir: string;
  /** The API server as the node reaches it: https://NODE.hostIp:<port>. */
  server: string;
  adminToken: string;
  /** A static token of user system:node:<NODE.name>, group system:nodes. */
  nodeToken: string;
  labels: Record<string, string>;
  gpus: number;
  gpuResource: string;
  /** The sandbox image (already built, as a docker archive) the runtime starts pods with. */
  pauseArchive: string;
  pauseImage: string;
  /** Serve cluster DNS from a CoreDNS binary at this path (absent: pods get no cluster DNS). */
  coredns?: string;
}

export interface RealNode {
  name: string;
  dir: string;
  /** `ctr` against the node's containerd, in the k8s.io namespace. */
  ctr(args: string[]): string;
  /** `timeoutMs`: default 5 min; a 7 GB image (vLLM's) needs more on busy cores. */
  importImage(dockerArchive: string, timeoutMs?: number): void;
  /** The same, the test going on meanwhile: resolves once imported (rejects with ctr's output). */
  importImageBeside(dockerArchive: string, timeoutMs: number): Promise<void>;
  /** Run a command in the node's network namespace (e.g. to reach a pod from the node). */
  exec(cmd: string[]): string;
  pid(c: NodeComponent): number | undefined;
  /** Stop the node and restore the host; returns every difference left from before the start. */
  stop(): Promise<string[]>;
}

export async function startRealNode(net: NodeNetwork, opts: RealNodeOptions): Promise<RealNode> {
  const { dir, holderPid } = net;
  const logs = join(dir, 'logs');
  const sock = join(dir, 'containerd', 'containerd.sock');
  // In the node's mount namespace this is the node's own directory (createNodeNetwork).
  const kubeletRoot = KUBELET_DIR;
  for (const d of ['containerd', 'cni', 'pod-logs', 'cni-ipam']) mkdirSync(join(dir, d), { recursive: true });
  const state: SavedState = JSON.parse(readFileSync(STATE_FILE, 'utf8')) as SavedState;
  const children = new Map<NodeComponent, ChildProcess>();

  writeFileSync(
    join(dir, 'containerd', 'config.toml'),
    [
      'version = 2',
      `root = "${dir}/containerd/root"`,
      `state = "${dir}/containerd/state"`,
      'disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]',
      '[grpc]',
      `  address = "${sock}"`,
      '[plugins."io.containerd.internal.v1.opt"]',
      `  path = "${dir}/containerd/opt"`,
      '[plugins."io.containerd.grpc.v1.cri"]',
      `  sandbox_image = "${opts.pauseImage}"`,
      // Root here lacks CAP_SYS_RESOURCE: runc may not lower a container's oom_score_adj below its own.
      '  restrict_oom_score_adj = true',
      '  [plugins."io.containerd.grpc.v1.cri".containerd]',
      '    snapshotter = "overlayfs"',
      '    default_runtime_name = "runc"',
      '    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]',
      '      runtime_type = "io.containerd.runc.v2"',
      '      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]',
      '        SystemdCgroup = false',
      '  [plugins."io.containerd.grpc.v1.cri".cni]',
      '    bin_dir = "/usr/lib/cni"',
      `    conf_dir = "${dir}/cni"`,
      '',
    ].join('\n'),
  );
  writeFileSync(
    join(dir, 'cni', '10-pao.conflist'),
    JSON.stringify({
      cniVersion: '1.0.0',
      name: 'pao-e2e',
      plugins: [
        {
          type: 'bridge',
          bridge: 'cni0',
          isGateway: true,
          ipMasq: false,
          hairpinMode: true,
          ipam: {
            type: 'host-local',
            ranges: [[{ subnet: NODE.podCidr, gateway: NODE.podGateway }]],
            routes: [{ dst: '0.0.0.0/0' }],
            dataDir: join(dir, 'cni-ipam'),
          },
        },
        { type: 'portmap', capabilities: { portMappings: true } },
      ],
    }),
  );
  writeFileSync(join(dir, 'resolv.conf'), 'nameserver 127.0.0.1\noptions ndots:1\n');
  const nodeKubeconfig = join(dir, 'kubelet.kubeconfig');
  writeFileSync(nodeKubeconfig, kubeconfigText(opts.server, opts.nodeToken, `system:node:${NODE.name}`), {
    mode: 0o600,
  });
  const adminKubeconfig = join(dir, 'admin.kubeconfig');
  writeFileSync(adminKubeconfig, kubeconfigText(opts.server, opts.adminToken, 'admin'), { mode: 0o600 });
  writeFileSync(
    join(dir, 'kubelet.yaml'),
    JSON.stringify({
      apiVersion: 'kubelet.config.k8s.io/v1beta1',
      kind: 'KubeletConfiguration',
      address: NODE.nodeIp,
      port: 10250,
      readOnlyPort: 0,
      healthzBindAddress: '127.0.0.1',
      healthzPort: 10248,
      // The API server's log and exec calls; the port is reachable only from this machine.
      authentication: { anonymous: { enabled: true }, webhook: { enabled: false } },
      authorization: { mode: 'AlwaysAllow' },
      // This VM mounts cgroup v1 controllers with cgroup2 beside them (hybrid).
      cgroupDriver: 'cgroupfs',
      failCgroupV1: false,
      cgroupsPerQOS: true,
      // Its pods under a root of its own, not the host's /kubepods: a host that runs a kubelet
      // already (k3s, a cgroupfs node) keeps its pods, and the teardown touches only these.
      cgroupRoot: `/${CGROUP_ROOT_NAME}`,
      enforceNodeAllocatable: ['pods'],
      containerRuntimeEndpoint: `unix://${sock}`,
      podLogsDir: join(dir, 'pod-logs'),
      resolvConf: join(dir, 'resolv.conf'),
      clusterDomain: 'cluster.local',
      ...(opts.coredns ? { clusterDNS: [NODE.dnsIp] } : {}),
      failSwapOn: false,
      protectKernelDefaults: false,
      serializeImagePulls: false,
      // A disk that fills with other things must not evict the pods under test.
      evictionHard: {
        'memory.available': '100Mi',
        'nodefs.available': '1%',
        'imagefs.available': '1%',
        'nodefs.inodesFree': '1%',
      },
      imageGCHighThresholdPercent: 100,
      imageGCLowThresholdPercent: 99,
      nodeStatusUpdateFrequency: '5s',
      syncFrequency: '10s',
      rotateCertificates: false,
      serverTLSBootstrap: false,
      shutdownGracePeriod: '0s',
    }),
  );

  const inNode = (cmd: string[]) => inNamespaces(holderPid, cmd);
  const start = (c: NodeComponent, bin: string, args: string[]) => {
    const log = createWriteStream(join(logs, `${c}.log`), { flags: 'a' });
    const child = spawn('nsenter', ['-t', String(holderPid), '-n', '-m', '--', bin, ...args], {
      stdio: ['ignore', 'pipe', 'pipe'],
      cwd: dir,
    });
    child.stdout?.pipe(log);
    child.stderr?.pipe(log);
    children.set(c, child);
    if (child.pid) {
      state.pids.push(child.pid);
      state.started[child.pid] = startTime(child.pid) ?? '';
      writeFileSync(STATE_FILE, JSON.stringify(state));
    }
    return child;
  };
  const tail = (c: NodeComponent) => {
    try {
      return readFileSync(join(logs, `${c}.log`), 'utf8')
        .split('\n')
        .slice(-40)
        .join('\n');
    } catch {
      return '';
    }
  };
  const ctr = (args: string[]) => sh('ctr', ['--address', sock, '-n', 'k8s.io', ...args]);
  const api = async (method: string, path: string, body?: unknown): Promise<{ status: number; json: unknown }> => {
    const { request } = await import('node:https');
    return new Promise((resolve, reject) => {
      const req = request(
        `${opts.server}${path}`,
        {
          method,
          headers: {
            authorization: `Bearer ${opts.adminToken}`,
            'content-type': method === 'PATCH' ? 'application/merge-patch+json' : 'application/json',
          },
          rejectUnauthorized: false,
          timeout: 10_000,
        },
        (res) => {
          let text = '';
          res.setEncoding('utf8');
          res.on('data', (c: string) => {
            text += c;
          });
          res.on('end', () => {
            let json: unknown = text;
            try {
              json = JSON.parse(text);
            } catch {
              // not JSON
            }
            resolve({ status: res.statusCode ?? 0, json });
          });
        },
      );
      req.on('timeout', () => req.destroy(new Error('timeout')));
      req.on('error', reject);
      req.end(body === undefined ? undefined : JSON.stringify(body));
    });
  };

  const node: RealNode = {
    name: NODE.name,
    dir,
    ctr,
    importImage: (archive, timeoutMs) => {
      sh('ctr', importArgs(sock, archive), undefined, timeoutMs);
    },
    importImageBeside: (archive, timeoutMs) =>
      new Promise((resolve, reject) => {
        execFile('ctr', importArgs(sock, archive), { timeout: timeoutMs, maxBuffer: 16 * 1024 * 1024 }, (err, _o, e) =>
          err ? reject(new Error(`ctr images import ${archive}: ${err.message}\n${e}`)) : resolve(),
        );
      }),
    exec: inNode,
    pid: (c) => children.get(c)?.pid,
    async stop() {
      const problems = await teardown(state, [...children.values()]);
      return [...problems, ...diffHostState(net.before, readHostState(), nodeMade)];
    },
  };

  try {
    start('containerd', '/usr/bin/containerd', ['--config', join(dir, 'containerd', 'config.toml')]);
    await waitFor('containerd', 30_000, () => {
      ctr(['version']);
      return true;
    }).catch((err: Error) => {
      throw new Error(`${err.message}\n${tail('containerd')}`);
    });
    node.importImage(opts.pauseArchive);

    // The kubelet wants its cgroup root to exist in every hierarchy (teardown removes them).
    for (const h of readdirSync('/sys/fs/cgroup'))
      mkdirSync(join('/sys/fs/cgroup', h, CGROUP_ROOT_NAME), { recursive: true });
    const labels = Object.entries(opts.labels)
      .map(([k, v]) => `${k}=${v}`)
      .join(',');
    start('kubelet', join(opts.binDir, 'kubelet'), [
      `--config=${join(dir, 'kubelet.yaml')}`,
      `--kubeconfig=${nodeKubeconfig}`,
      `--hostname-override=${NODE.name}`,
      `--node-ip=${NODE.nodeIp}`,
      `--root-dir=${kubeletRoot}`,
      `--cert-dir=${join(kubeletRoot, 'pki')}`,
      `--node-labels=${labels}`,
      '--v=1',
    ]);
    await waitFor(
      'the node to register',
      60_000,
      async () => (await api('GET', `/api/v1/nodes/${NODE.name}`)).status === 200,
    ).catch((err: Error) => {
      throw new Error(`${err.message}\n${tail('kubelet')}`);
    });
    // No IPAM controller runs: the node's pod range is the bridge's (kube-router reads it here).
    await api('PATCH', `/api/v1/nodes/${NODE.name}`, { spec: { podCIDR: NODE.podCidr, podCIDRs: [NODE.podCidr] } });

    start('kube-proxy', join(opts.binDir, 'kube-proxy'), [
      `--kubeconfig=${adminKubeconfig}`,
      `--hostname-override=${NODE.name}`,
      '--proxy-mode=iptables',
      `--cluster-cidr=${NODE.podCidr}`,
      // conntrack's table size and timeouts are the host's: leave them as they are.
      '--conntrack-max-per-core=0',
      '--conntrack-tcp-timeout-established=0s',
      '--conntrack-tcp-timeout-close-wait=0s',
      '--metrics-bind-address=127.0.0.1:10249',
      '--healthz-bind-address=127.0.0.1:10256',
      '--v=1',
    ]);
    start('kube-router', join(opts.binDir, 'kube-router'), [
      `--kubeconfig=${adminKubeconfig}`,
      `--hostname-override=${NODE.name}`,
      '--run-firewall=true',
      '--run-router=false',
      '--run-service-proxy=false',
      '--enable-cni=false',
      '--metrics-port=0',
      '--health-port=20244',
      '--v=1',
    ]);
    start('device-plugin', join(opts.binDir, 'pao-device-plugin'), [
      `--dir=${join(kubeletRoot, 'device-plugins')}`,
      `--resource=${opts.gpuResource}`,
      `--count=${opts.gpus}`,
    ]);
    if (opts.coredns) {
      writeFileSync(
        join(dir, 'Corefile'),
        [
          `.:53 {`,
          `  bind ${NODE.dnsIp}`,
          '  errors',
          `  kubernetes cluster.local in-addr.arpa {`,
          `    kubeconfig ${adminKubeconfig} local`,
          '    pods insecure',
          '  }',
          '}',
          '',
        ].join('\n'),
      );
      start('coredns', opts.coredns, ['-conf', join(dir, 'Corefile')]);
    }
    await waitFor('the node to be Ready with its GPUs', 120_000, async () => {
      const res = await api('GET', `/api/v1/nodes/${NODE.name}`);
      const n = res.json as {
        status?: { conditions?: { type: string; status: string }[]; allocatable?: Record<string, string> };
      };
      const ready = n.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True');
      return Boolean(ready) && n.status?.allocatable?.[opts.gpuResource] === String(opts.gpus);
    }).catch((err: Error) => {
      throw new Error(`${err.message}\n${tail('kubelet')}\n${tail('device-plugin')}`);
    });
  } catch (err) {
    appendFileSync(join(logs, 'start-failure.log'), `${(err as Error).stack}\n`);
    await teardown(state, [...children.values()]);
    throw err;
  }
  return node;
}
