import { once } from 'node:events';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { KubeConfig } from '@kubernetes/client-node';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { makeWebhookTls } from '../../operator/audit/webhook-tls.js';
import { inClusterAccess, loadKubeAccess } from './kube-access.js';
import { KubeClient } from './kube-client.js';

let dir: string;
let sa: string;

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'kube-access-'));
  sa = join(dir, 'serviceaccount');
  mkdirSync(sa);
  writeFileSync(join(sa, 'token'), 'first-token\n');
});

afterEach(() => rmSync(dir, { recursive: true, force: true }));

const podEnv = (host: string, port: string) => ({ KUBERNETES_SERVICE_HOST: host, KUBERNETES_SERVICE_PORT: port });

describe('inClusterAccess', () => {
  it("is a pod's API server as the kubelet names it: https, an IPv6 host in brackets, the plain-HTTP ports client-node knows", () => {
    expect(inClusterAccess({ env: podEnv('10.96.0.1', '443'), dir: sa })?.getCurrentCluster()).toEqual({
      server: 'https://10.96.0.1:443',
    });
    expect(inClusterAccess({ env: podEnv('fd00::1', '443'), dir: sa })?.getCurrentCluster()?.server).toBe(
      'https://[fd00::1]:443',
    );
    expect(inClusterAccess({ env: podEnv('127.0.0.1', '8080'), dir: sa })?.getCurrentCluster()?.server).toBe(
      'http://127.0.0.1:8080',
    );
  });

  it('is undefined outside a pod: no service env, or no mounted token', () => {
    expect(inClusterAccess({ env: {}, dir: sa })).toBeUndefined();
    expect(inClusterAccess({ env: { KUBERNETES_SERVICE_HOST: '10.96.0.1' }, dir: sa })).toBeUndefined();
    expect(inClusterAccess({ env: podEnv('10.96.0.1', '443'), dir: join(dir, 'none') })).toBeUndefined();
  });

  it('reads the rotated token again after a minute, not on every request', async () => {
    let now = 1_000_000;
    const access = inClusterAccess({ env: podEnv('10.96.0.1', '443'), dir: sa, now: () => now });
    const bearer = async () => {
      const o = { headers: {} as Record<string, string> };
      await access?.applyToHTTPSOptions(o);
      return o.headers.authorization;
    };
    expect(await bearer()).toBe('Bearer first-token');
    writeFileSync(join(sa, 'token'), 'rotated-token\n');
    now += 59_000;
    expect(await bearer()).toBe('Bearer first-token');
    now += 2_000;
    expect(await bearer()).toBe('Bearer rotated-token');
  });
});

describe('KubeClient with the in-cluster access', () => {
  let server: Server;
  let seen: string[];

  afterEach(() => server?.close());

  it('verifies the API server against the mounted CA and sends the mounted token', async () => {
    const tls = makeWebhookTls(['127.0.0.1']);
    writeFileSync(join(sa, 'ca.crt'), tls.ca);
    seen = [];
    server = createServer({ key: tls.key, cert: tls.cert }, (req, res) => {
      seen.push(String(req.headers.authorization));
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ kind: 'Namespace', metadata: { name: 'platform-agent' } }));
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const { port } = server.address() as AddressInfo;
    const access = inClusterAccess({ env: podEnv('127.0.0.1', String(port)), dir: sa });
    if (!access) throw new Error('no in-cluster access');
    const client = new KubeClient(access);
    await expect(client.request('GET', '/api/v1/namespaces/platform-agent')).resolves.toMatchObject({
      metadata: { name: 'platform-agent' },
    });
    expect(seen).toEqual(['Bearer first-token']);

    // Another CA than the server's: refused, the token never sent.
    writeFileSync(join(sa, 'ca.crt'), makeWebhookTls(['127.0.0.1']).ca);
    const other = inClusterAccess({ env: podEnv('127.0.0.1', String(port)), dir: sa });
    if (!other) throw new Error('no in-cluster access');
    await expect(new KubeClient(other).request('GET', '/api/v1/namespaces/platform-agent')).rejects.toThrow(
      /self[- ]signed|certificate/i,
    );
    expect(seen).toHaveLength(1);
  });
});

describe('loadKubeAccess', () => {
  const kubeconfig = (server: string) =>
    [
      'apiVersion: v1',
      'kind: Config',
      `clusters: [{name: c, cluster: {server: "${server}"}}]`,
      'users: [{name: u, user: {token: t}}]',
      'contexts: [{name: x, context: {cluster: c, user: u}}]',
      'current-context: x',
    ].join('\n');

  it("takes a kubeconfig named, in $KUBECONFIG or in ~/.kube before the pod's own, as client-node does", async () => {
    const env = podEnv('10.96.0.1', '443');
    const home = join(dir, 'home');
    mkdirSync(home);
    const named = join(dir, 'named.yaml');
    writeFileSync(named, kubeconfig('https://named.example:6443'));

    const pod = await loadKubeAccess({ env, dir: sa, home });
    expect(pod).not.toBeInstanceOf(KubeConfig);
    expect(pod.getCurrentCluster()?.server).toBe('https://10.96.0.1:443');

    const file = await loadKubeAccess({ file: named, env, dir: sa, home });
    expect(file).toBeInstanceOf(KubeConfig);
    expect(file.getCurrentCluster()?.server).toBe('https://named.example:6443');

    // $KUBECONFIG and ~/.kube/config are read by client-node itself (process.env, the real home):
    // here only whether the pod's access steps aside for them.
    expect(await loadKubeAccess({ env: { ...env, KUBECONFIG: named }, dir: sa, home })).toBeInstanceOf(KubeConfig);
    mkdirSync(join(home, '.kube'));
    writeFileSync(join(home, '.kube', 'config'), kubeconfig('https://home.example:6443'));
    expect(await loadKubeAccess({ env, dir: sa, home })).toBeInstanceOf(KubeConfig);
  });
});
