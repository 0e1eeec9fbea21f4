import { chmodSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { type DeploymentLike, IMAGE, podCommand, podFlags, podman, podmanOk } from '../image/podman.js';
import { freePort, OLLAMA_MODEL, type OllamaServer, startOllama } from '../ollama/server.js';
import { readVersionsEnv } from '../support/cached-build.js';
import { capture } from '../support/capture.js';
import { adoptLlmsNamespace, eventually, helmOk, kubeConfig, kubectl, kubectlOk } from '../support/kube.js';

/**
 * The image e2e/image/build.sh builds from the project's Dockerfile, run as the chart runs it:
 * the chart is installed on the real control plane, and each component's container gets the
 * pod spec of the chart's Deployment (uid 10001, read-only root, every capability dropped, no
 * privilege escalation, its env and emptyDirs) and the in-cluster credentials the kubelet
 * would mount (the chart's ServiceAccount token, the API server's CA, KUBERNETES_SERVICE_*).
 * The operator starts, reports healthy and issues the chart's Admin key; the proxy, in the
 * cluster, authenticates with that key; standalone, it answers a chat request from real Ollama.
 */

const RELEASE = 'platform-ai-optimizer';
const NS = 'platform-agent';
const CHART = 'charts/platform-ai-optimizer';
const SA_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';

const deployment = (name: string): DeploymentLike =>
  JSON.parse(kubectlOk(['get', 'deploy', name, '-n', NS, '-o', 'json'])) as DeploymentLike;

/**
 * What the kubelet mounts for a ServiceAccount (token, CA, namespace) and the env it sets, for
 * the API server on this machine's loopback: client-node's in-cluster path, TLS verified.
 */
function inClusterFlags(serviceAccount: string): string[] {
  const dir = mkdtempSync(join(tmpdir(), `pao-sa-${serviceAccount}-`));
  // The container runs as uid 10001: the mounted files must be readable by it, as the kubelet's are.
  chmodSync(dir, 0o755);
  const token = kubectlOk(['create', 'token', serviceAccount, '-n', NS, '--duration=1h']).trim();
  writeFileSync(join(dir, 'token'), token, { mode: 0o644 });
  // The API server's self-signed serving certificate file ends with the CA that signed it.
  writeFileSync(join(dir, 'ca.crt'), readFileSync(join(dirname(inject('kubeconfig')), 'pki', 'apiserver.crt')));
  writeFileSync(join(dir, 'namespace'), NS);
  const server = new URL(kubeConfig().getCurrentCluster()?.server ?? '');
  return [
    '-v',
    `${dir}:${SA_DIR}:ro`,
    '-e',
    `KUBERNETES_SERVICE_HOST=${server.hostname}`,
    '-e',
    `KUBERNETES_SERVICE_PORT=${server.port}`,
  ];
}

interface Running {
  name: string;
  logs: () => string;
  running: () => boolean;
}

const started: string[] = [];

/** Starts a container detached and mirrors its output into the e2e capture (the secret scan reads it). */
function run(name: string, flags: string[], command: string[]): Running {
  podman(['rm', '-f', name]);
  podmanOk(['run', '-d', ...flags, IMAGE, ...command]);
  started.push(name);
  // What answers on its port must be this container, not something that happened to be there.
  const running = () => podman(['inspect', '--format', '{{.State.Running}}', name]).stdout.trim() === 'true';
  const logs = () => {
    const res = podman(['logs', name]);
    return res.stdout + res.stderr;
  };
  return { name, logs, running };
}

/** The container's exit code after `podman stop` (SIGTERM, then SIGKILL after the grace period). */
function stop(c: Running, graceSeconds: number): number {
  podmanOk(['stop', '-t', String(graceSeconds), c.name]);
  capture(`image-${c.name}`)(c.logs());
  return Number(podmanOk(['inspect', '--format', '{{.State.ExitCode}}', c.name]).trim());
}

async function ok(url: string, init?: RequestInit): Promise<true | undefined> {
  const res = await fetch(url, init);
  return res.status === 200 ? true : undefined;
}

let ollama: OllamaServer;

describe.runIf(inject('localControlPlane'))('the image, run as the chart runs it', () => {
  beforeAll(async () => {
    const exists = podman(['image', 'exists', IMAGE]);
    if (exists.code !== 0) throw new Error(`${IMAGE} is not built: bash e2e/image/build.sh (${exists.stderr.trim()})`);
    adoptLlmsNamespace(RELEASE);
    helmOk(
      'upgrade',
      '--install',
      RELEASE,
      CHART,
      '-n',
      NS,
      '--set',
      `image.repository=${IMAGE.split(':')[0]}`,
      '--set',
      'cluster.organizationId=acme',
      '--set',
      'cluster.clusterId=image',
      // The API server here reaches no Service: no audit webhook for it to call.
      '--set',
      'operator.audit.enabled=false',
      '--wait=false',
    );
    ollama = await startOllama();
  });

  afterAll(async () => {
    for (const name of started) {
      const c = podman(['logs', name]);
      capture(`image-${name}`)(c.stdout + c.stderr);
      podman(['rm', '-f', name]);
    }
    await ollama?.stop();
    helmOk('uninstall', RELEASE, '-n', NS, '--wait');
    // The operator's leader Lease outlives the release; the next suite's operator must not wait it out.
    kubectl(['delete', 'lease', '--all', '-n', NS]);
  });

  it('is a non-root image of a size worth knowing', () => {
    const [user, size] = podmanOk(['image', 'inspect', '--format', '{{.Config.User}} {{.Size}}', IMAGE])
      .trim()
      .split(' ');
    expect(user).toBe('10001:10001');
    console.log(`[image] ${IMAGE}: ${(Number(size) / 1e6).toFixed(0)} MB`);
    expect(Number(size)).toBeGreaterThan(0);
  });

  it('runs the supported runtime: Node.js 24 (the pinned one) on Debian trixie', () => {
    const { NODE_VERSION } = readVersionsEnv(fileURLToPath(new URL('../image/', import.meta.url)));
    const out = podmanOk([
      'run',
      '--rm',
      '--network',
      'none',
      IMAGE,
      'sh',
      '-c',
      'node --version; . /etc/os-release; echo $VERSION_CODENAME',
    ]);
    expect(out.trim().split('\n')).toEqual([`v${NODE_VERSION}`, 'trixie']);
    expect(NODE_VERSION?.split('.')[0]).toBe('24');
  });

  it('operator: starts against the real control plane, reports healthy, issues the Admin key, stops cleanly', async () => {
    const [port, metrics] = [await freePort(), await freePort()];
    const operator = run(
      'pao-operator',
      podFlags(deployment(`${RELEASE}-operator`), {
        name: 'pao-operator',
        envOverrides: { PORT: String(port), METRICS_PORT: String(metrics) },
        extra: inClusterFlags(`${RELEASE}-operator`),
      }),
      podCommand(deployment(`${RELEASE}-operator`)),
    );
    try {
      await eventually('operator /healthz', 60_000, () => ok(`http://127.0.0.1:${port}/healthz`));
      await eventually('operator /readyz', 60_000, () => ok(`http://127.0.0.1:${port}/readyz`));
      expect(operator.running()).toBe(true);
      const key = await eventually('the Admin key issued by the operator in the container', 60_000, () => {
        const res = kubectl(['get', 'secret', 'apikey-platform-admin', '-n', NS, '-o', 'jsonpath={.data.key}']);
        return res.code === 0 && res.stdout ? Buffer.from(res.stdout, 'base64').toString('utf8') : undefined;
      });
      expect(key.length).toBeGreaterThan(20);
      // It runs as the chart says: uid 10001, nothing writable outside its volumes.
      expect(podmanOk(['exec', operator.name, 'id', '-u']).trim()).toBe('10001');
      const write = podman(['exec', operator.name, 'touch', '/app/written']);
      expect(write.code).not.toBe(0);
      expect(write.stderr).toMatch(/Read-only file system/);
      expect(podman(['exec', operator.name, 'touch', '/tmp/written']).code).toBe(0);
      const metricsText = await (await fetch(`http://127.0.0.1:${metrics}/metrics`)).text();
      // controller-runtime's names per controller, and the process and runtime metrics.
      expect(metricsText).toMatch(/controller_runtime_reconcile_total\{controller="apikey",result="success"\} [1-9]/);
      expect(metricsText).toMatch(/process_resident_memory_bytes [1-9]/);
      expect(metricsText).toMatch(/nodejs_eventloop_lag_p99_seconds/);
    } finally {
      // Node is PID 1 here: only its own SIGTERM handler makes it exit, and it must exit 0.
      expect(stop(operator, 20)).toBe(0);
    }
    expect(operator.logs()).not.toMatch(/"level":"error"/);
  });

  it('proxy in the cluster: loads routes and keys through the chart RBAC, authenticates the Admin key', async () => {
    const key = Buffer.from(
      kubectlOk(['get', 'secret', 'apikey-platform-admin', '-n', NS, '-o', 'jsonpath={.data.key}']),
      'base64',
    ).toString('utf8');
    const [port, metrics] = [await freePort(), await freePort()];
    const deploy = deployment(`${RELEASE}-proxy`);
    const proxy = run(
      'pao-proxy-cluster',
      podFlags(deploy, {
        name: 'pao-proxy-cluster',
        envOverrides: { PORT: String(port), METRICS_PORT: String(metrics) },
        extra: inClusterFlags(`${RELEASE}-proxy`),
      }),
      podCommand(deploy),
    );
    try {
      await eventually('proxy /readyz', 60_000, () => ok(`http://127.0.0.1:${port}/readyz`));
      expect(proxy.running()).toBe(true);
      const models = await fetch(`http://127.0.0.1:${port}/openai/v1/models`, {
        headers: { authorization: `Bearer ${key}` },
      });
      expect(models.status).toBe(200);
      const anonymous = await fetch(`http://127.0.0.1:${port}/openai/v1/models`);
      expect(anonymous.status).toBe(401);
      // Usage goes to SQLite on the chart's volume (a tmpfs here), not the read-only root.
      expect(podmanOk(['exec', proxy.name, 'ls', '/var/lib/platform-ai-optimizer'])).toMatch(/usage\.db/);
    } finally {
      expect(stop(proxy, 40)).toBe(0);
    }
  });

  it('proxy standalone: answers a chat request from real Ollama through the official SDK', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'pao-image-proxy-'));
    chmodSync(dir, 0o755);
    writeFileSync(
      join(dir, 'gateway.yaml'),
      [
        'apiVersion: ai.platform/v1beta1',
        'kind: ModelDeployment',
        'metadata: {name: local}',
        `spec: {model: "${OLLAMA_MODEL}", serviceName: local, endpoint: "${ollama.url}"}`,
        '',
      ].join('\n'),
    );
    const apiKey = 'sk-image-test-key-0123456789abcdef';
    writeFileSync(join(dir, 'keys.txt'), `${apiKey}\n`);
    const [port, metrics] = [await freePort(), await freePort()];
    const deploy = deployment(`${RELEASE}-proxy`);
    const proxy = run(
      'pao-proxy-standalone',
      podFlags(deploy, {
        name: 'pao-proxy-standalone',
        envOverrides: { PORT: String(port), METRICS_PORT: String(metrics) },
        extra: ['-v', `${dir}:/config:ro`],
      }),
      [...podCommand(deploy), '--config', '/config/gateway.yaml', '--keys-file', '/config/keys.txt'],
    );
    try {
      await eventually('proxy /readyz', 60_000, () => ok(`http://127.0.0.1:${port}/readyz`));
      expect(proxy.running()).toBe(true);
      const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/openai/v1`, apiKey });
      const chat = await client.chat.completions.create({
        model: OLLAMA_MODEL,
        messages: [{ role: 'user', content: 'Say hello.' }],
        max_tokens: 8,
      });
      expect(chat.choices[0]?.message.content?.length).toBeGreaterThan(0);
      expect(chat.usage?.completion_tokens).toBeGreaterThan(0);
      const stream = await client.chat.completions.create({
        model: OLLAMA_MODEL,
        messages: [{ role: 'user', content: 'Count to three.' }],
        max_tokens: 8,
        stream: true,
      });
      let text = '';
      for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
      expect(text.length).toBeGreaterThan(0);
    } finally {
      expect(stop(proxy, 40)).toBe(0);
    }
  });
});
