import { existsSync, readFileSync } from 'node:fs';
import type { RequestOptions } from 'node:https';
import { isIPv6 } from 'node:net';
import { homedir } from 'node:os';
import { delimiter, join } from 'node:path';

/**
 * How KubeClient reaches the API server: its URL, and the CA, client certificate and
 * Authorization header of the current user set on each request. client-node's KubeConfig has
 * this shape; so does the in-cluster access below.
 */
export interface KubeAccess {
  getCurrentCluster(): { server: string } | null;
  applyToHTTPSOptions(opts: KubeRequestOptions): Promise<void>;
}

/** A request's options as KubeClient makes them: its headers a plain object. */
export type KubeRequestOptions = RequestOptions & { headers: Record<string, string> };

/** Where the kubelet mounts a pod's ServiceAccount token and the cluster's CA. */
const SERVICE_ACCOUNT_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';

/**
 * The token is read again after this long, as client-go and client-node do: the kubelet
 * rotates a bound ServiceAccount token in its file well before it expires.
 */
const TOKEN_REREAD_MS = 60_000;

interface InClusterOptions {
  env?: NodeJS.ProcessEnv;
  dir?: string;
  now?: () => number;
}

/**
 * A pod's own access, as the kubelet mounts it (KUBERNETES_SERVICE_HOST and _PORT, the
 * ServiceAccount token and CA), the way client-node's loadFromCluster reads it; undefined
 * outside a pod. The gateway's and the operator's pods need nothing else, and client-node's
 * KubeConfig loads all of its generated API with it: 22 MiB of heap in every replica (36 MiB of
 * the proxy's RSS), for a URL, a CA and a token file.
 */
export function inClusterAccess(opts: InClusterOptions = {}): KubeAccess | undefined {
  const env = opts.env ?? process.env;
  const dir = opts.dir ?? SERVICE_ACCOUNT_DIR;
  const now = opts.now ?? Date.now;
  const host = env.KUBERNETES_SERVICE_HOST;
  const port = env.KUBERNETES_SERVICE_PORT;
  const tokenFile = join(dir, 'token');
  if (!host || !port || !existsSync(tokenFile)) return undefined;
  // The ports client-node takes for plain HTTP (an API server proxy); every other is TLS.
  const scheme = ['80', '8080', '8001'].includes(port) ? 'http' : 'https';
  const server = `${scheme}://${isIPv6(host) ? `[${host}]` : host}:${port}`;
  const caFile = join(dir, 'ca.crt');
  const ca = existsSync(caFile) ? readFileSync(caFile) : undefined;
  let token = '';
  let readAt = Number.NEGATIVE_INFINITY;
  return {
    getCurrentCluster: () => ({ server }),
    applyToHTTPSOptions: async (o) => {
      if (now() - readAt > TOKEN_REREAD_MS) {
        token = readFileSync(tokenFile, 'utf8').trim();
        readAt = now();
      }
      if (ca) o.ca = ca;
      o.headers.authorization = `Bearer ${token}`;
    },
  };
}

interface LoadOptions extends InClusterOptions {
  /** A kubeconfig file named by the caller (--kubeconfig). */
  file?: string;
  home?: string;
}

/**
 * The access a process started with: a kubeconfig file when one is named or found ($KUBECONFIG,
 * ~/.kube/config: client-node's KubeConfig, with every kind of user it supports, exec plugins
 * and OIDC included), else the pod's own. The same order as client-node's loadFromDefault.
 */
export async function loadKubeAccess(opts: LoadOptions = {}): Promise<KubeAccess> {
  const env = opts.env ?? process.env;
  const named = opts.file ?? (env.KUBECONFIG?.split(delimiter).some(Boolean) ? env.KUBECONFIG : undefined);
  if (!named && !existsSync(join(opts.home ?? homedir(), '.kube', 'config'))) {
    const pod = inClusterAccess(opts);
    if (pod) return pod;
  }
  const { KubeConfig } = await import('@kubernetes/client-node');
  const kc = new KubeConfig();
  if (opts.file) kc.loadFromFile(opts.file);
  else kc.loadFromDefault();
  return kc;
}
