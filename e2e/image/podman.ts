import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

/**
 * podman as the image tests use it: the runtime settings of e2e/image/containers.conf (runc,
 * no rlimits: what these machines allow), and a Deployment's pod spec turned into the
 * `podman run` flags that make a container run as the kubelet would run that pod.
 */

const CONF = fileURLToPath(new URL('containers.conf', import.meta.url));

/** The image e2e/image/build.sh builds (PAO_IMAGE overrides both). */
export const IMAGE = process.env.PAO_IMAGE ?? 'localhost/platform-ai-optimizer:e2e';

export interface PodmanRun {
  code: number;
  stdout: string;
  stderr: string;
}

export function podman(args: string[]): PodmanRun {
  const res = spawnSync('podman', args, {
    encoding: 'utf8',
    timeout: 120_000,
    env: { ...process.env, CONTAINERS_CONF: CONF },
  });
  return { code: res.status ?? -1, stdout: res.stdout ?? '', stderr: res.stderr ?? res.error?.message ?? '' };
}

export function podmanOk(args: string[]): string {
  const res = podman(args);
  if (res.code !== 0) throw new Error(`podman ${args.join(' ')} failed (${res.code}): ${res.stderr}`);
  return res.stdout;
}

interface EnvVar {
  name: string;
  value?: string;
  valueFrom?: { fieldRef?: { fieldPath: string }; secretKeyRef?: { name: string; key: string } };
}
interface Container {
  command?: string[];
  args?: string[];
  env?: EnvVar[];
  securityContext?: {
    runAsUser?: number;
    runAsGroup?: number;
    readOnlyRootFilesystem?: boolean;
    allowPrivilegeEscalation?: boolean;
    capabilities?: { drop?: string[]; add?: string[] };
  };
  volumeMounts?: { name: string; mountPath: string; readOnly?: boolean }[];
}
export interface DeploymentLike {
  metadata: { name: string; namespace: string };
  spec: {
    template: {
      spec: {
        containers: Container[];
        securityContext?: { runAsUser?: number; runAsGroup?: number };
        volumes?: { name: string; emptyDir?: object; persistentVolumeClaim?: object }[];
      };
    };
  };
}

export interface PodOptions {
  /** Container name (and the pod name fieldRef metadata.name resolves to). */
  name: string;
  /** Values for secretKeyRef env entries, by `<secret>/<key>`. */
  secrets?: Record<string, string>;
  /** Env the test must change: ports on the host network. Named here so the test says which. */
  envOverrides?: Record<string, string>;
  /** Extra `-v`/`-e` flags: the ServiceAccount mount the kubelet would add. */
  extra?: string[];
}

/**
 * `podman run` flags for the first container of a Deployment, as the kubelet would run it:
 * the pod's and container's user and group, a read-only root, the dropped capabilities, no
 * privilege escalation, the env (fieldRefs and secretKeyRefs resolved) and a tmpfs for every
 * emptyDir or volume claim the container mounts. Host network, so it reaches the loopback
 * control plane and Ollama; anything this cannot express is an error, not a silent omission.
 */
export function podFlags(deploy: DeploymentLike, opts: PodOptions): string[] {
  const pod = deploy.spec.template.spec;
  const c = pod.containers[0];
  if (!c) throw new Error(`${deploy.metadata.name} has no container`);
  const sc = c.securityContext ?? {};
  const user = sc.runAsUser ?? pod.securityContext?.runAsUser;
  const group = sc.runAsGroup ?? pod.securityContext?.runAsGroup;
  const flags = ['--name', opts.name, '--network', 'host'];
  if (user !== undefined) flags.push('--user', `${user}:${group ?? user}`);
  // podman's --read-only would also mount tmpfs on /tmp, /run and /var/tmp; the kubelet does not.
  if (sc.readOnlyRootFilesystem) flags.push('--read-only', '--read-only-tmpfs=false');
  for (const cap of sc.capabilities?.drop ?? []) flags.push('--cap-drop', cap);
  for (const cap of sc.capabilities?.add ?? []) flags.push('--cap-add', cap);
  if (sc.allowPrivilegeEscalation === false) flags.push('--security-opt', 'no-new-privileges');
  for (const e of c.env ?? []) {
    const override = opts.envOverrides?.[e.name];
    let value = override ?? e.value;
    if (override === undefined && e.valueFrom?.fieldRef) {
      const path = e.valueFrom.fieldRef.fieldPath;
      if (path === 'metadata.namespace') value = deploy.metadata.namespace;
      else if (path === 'metadata.name') value = opts.name;
      // Host network: the container's address is the host's, reached on loopback.
      else if (path === 'status.podIP') value = '127.0.0.1';
      else throw new Error(`fieldRef ${path} is not resolved by podFlags`);
    }
    if (override === undefined && e.valueFrom?.secretKeyRef) {
      const ref = `${e.valueFrom.secretKeyRef.name}/${e.valueFrom.secretKeyRef.key}`;
      value = opts.secrets?.[ref];
      if (value === undefined) throw new Error(`no value given for secretKeyRef ${ref}`);
    }
    if (value === undefined) throw new Error(`env ${e.name} has no value podFlags can resolve`);
    flags.push('-e', `${e.name}=${value}`);
  }
  for (const name of Object.keys(opts.envOverrides ?? {})) {
    if (!(c.env ?? []).some((e) => e.name === name))
      throw new Error(`override of ${name}, which the chart does not set`);
  }
  for (const m of c.volumeMounts ?? []) {
    const vol = (pod.volumes ?? []).find((v) => v.name === m.name);
    if (!vol?.emptyDir && !vol?.persistentVolumeClaim)
      throw new Error(`volume ${m.name} is not an emptyDir or a claim`);
    // The pod's fsGroup makes the volume writable by its user; a world-writable sticky tmpfs does here.
    flags.push('--mount', `type=tmpfs,destination=${m.mountPath},tmpfs-mode=1777`);
  }
  return [...flags, ...(opts.extra ?? [])];
}

/** The container's command and args, to put after the image in `podman run`. */
export function podCommand(deploy: DeploymentLike): string[] {
  const c = deploy.spec.template.spec.containers[0];
  return [...(c?.command ?? []), ...(c?.args ?? [])];
}
