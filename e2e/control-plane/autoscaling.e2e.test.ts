import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { ClusterInfo } from '../../crds/catalog/catalog.js';
import { loadCatalog } from '../../crds/catalog/catalog.js';
import { Operator } from '../../operator/operator.js';
import { API_KEYS_SECRET } from '../../proxy/sources/cluster-source.js';
import { MemoryUsage } from '../../proxy/usage/record.js';
import { OLLAMA_MODEL, type OllamaServer, startOllama } from '../ollama/server.js';
import { capturedLogger } from '../support/capture.js';
import { applyKeysSecret } from '../support/cluster-gateway.js';
import { startGateway, type TestGateway } from '../support/gateway.js';
import { eventually, kubeConfig, kubectl, kubectlOk } from '../support/kube.js';

/**
 * Autoscaling on the real control plane, end to end: the operator (its autoscaler reading two
 * proxy replicas' /load over HTTP), two in-process proxy replicas watching the API server (routes,
 * EndpointSlices) and waking models through the scale subresource, kwok GPU nodes running the model
 * server pods, and one real Ollama process standing in for every pod: the proxies' calls to a pod's
 * IP (from its EndpointSlice) are sent to it. The operator's clock can be moved forward so that
 * idle times pass without waiting for them.
 */

const NS = 'platform-llms';
const MODEL = 'qwen2.5:0.5b';
const KEY = 'sk-autoscaling-e2e';
const cluster: ClusterInfo = { organizationId: 'acme', clusterId: 'prod-1', cloud: 'aws', region: 'us-east-1' };
const _catalog = loadCatalog();
let skewMs = 0;
const log = capturedLogger('autoscaling-e2e');

interface ProxyReplica {
  app: TestGateway;
  /** Pod URLs this replica called. */
  called: Set<string>;
}

let ollama: OllamaServer;
let operator: Operator;
const proxies: ProxyReplica[] = [];

/** A proxy replica composed as proxy/main.ts composes it, its pods' addresses sent to the local Ollama. */
async function proxyReplica(): Promise<ProxyReplica> {
  const called = new Set<string>();
  const app = await startGateway(
    {
      source: { kind: 'cluster', kubeConfig: kubeConfig() },
      queue: { perModel: 100, timeoutMs: 90_000 },
      logger: log,
    },
    {
      usage: new MemoryUsage(),
      resolveModelServer: (url) => {
        if (!/^http:\/\/\d+\.\d+\.\d+\.\d+:11434$/.test(url)) return url;
        called.add(url);
        return ollama.url;
      },
    },
    { metrics: true },
  );
  return { app, called };
}

const chat = (p: ProxyReplica, maxTokens = 8) =>
  p.app.request('/openai/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': KEY },
    body: JSON.stringify({
      model: MODEL,
      max_tokens: maxTokens,
      messages: [{ role: 'user', content: 'Count from one to twenty.' }],
    }),
  });

const md = (name: string, path: string) => kubectlOk(['get', 'md', name, '-n', NS, '-o', `jsonpath=${path}`]).trim();
const replicasOf = (name: string) => Number(md(name, '{.spec.replicas}'));
const events = (name: string) =>
  JSON.parse(
    kubectlOk([
      'get',
      'events',
      '-n',
      NS,
      '--field-selector',
      `involvedObject.kind=ModelDeployment,involvedObject.name=${name}`,
      '-o',
      'json',
    ]),
  ).items.map((e: { reason: string; message: string }) => ({ reason: e.reason, message: e.message })) as Array<{
    reason: string;
    message: string;
  }>;

describe.runIf(inject('localControlPlane'))('autoscaling on the real control plane', () => {
  beforeAll(async () => {
    ollama = await startOllama({ parallel: 2 });
    // The pods serve the catalog's name: the machine's model under that name.
    const copied = await fetch(`${ollama.url}/api/copy`, {
      method: 'POST',
      body: JSON.stringify({ source: OLLAMA_MODEL, destination: MODEL }),
    });
    expect(copied.status).toBe(200);
    applyKeysSecret(KEY);
    proxies.push(await proxyReplica(), await proxyReplica());
    operator = new Operator({
      kubeConfig: kubeConfig(),
      cluster,
      images: { Ollama: 'ollama/ollama:test' },
      port: 0,
      resyncMs: 0,
      now: () => new Date(Date.now() + skewMs),
      leaderElection: false,
      logger: log,
      // Rounds only when a test asks (autoscaleNow): a wake seen here is the proxy's, not a round's.
      autoscaleIntervalMs: 3_600_000,
      proxyLoadUrls: proxies.map((p) => p.app.metricsUrl() ?? ''),
    });
    await operator.start();
  }, 300_000);

  afterAll(async () => {
    await operator?.stop();
    for (const p of proxies) await p.app.stop();
    await ollama?.stop();
    kubectl(['delete', 'md', '--all', '-n', NS]);
    kubectl(['delete', 'deploy,svc', '--all', '-n', NS]);
    kubectl(['delete', 'pods', '--all', '-n', NS, '--grace-period=0', '--force']);
    kubectl(['delete', 'nodetemplate', 'llms-by-platform', '--ignore-not-found']);
    kubectl(['delete', 'autoscalerpolicy', 'cluster', '--ignore-not-found']);
    kubectl(['delete', 'secret', API_KEYS_SECRET, '-n', 'platform-agent', '--ignore-not-found']);
  });

  it('a hibernated model: a request wakes it, is held, and is answered once a replica is ready', async () => {
    kubectlOk(
      ['apply', '-f', '-'],
      JSON.stringify({
        apiVersion: 'ai.platform/v1beta1',
        kind: 'ModelDeployment',
        metadata: { name: 'waker', namespace: NS },
        spec: {
          model: MODEL,
          serviceName: 'waker',
          replicas: 0,
          server: { numParallel: 1 },
          autoscaling: {
            minReplicas: 0,
            maxReplicas: 2,
            targetInFlight: 4,
            scaleDownDelaySeconds: 20,
            hibernateAfterSeconds: 60,
          },
        },
      }),
    );
    await eventually('waker Running with 0 replicas', 60_000, () =>
      md('waker', '{.status.phase}/{.status.conditions[?(@.type=="Ready")].reason}') === 'Running/ScaledToZero'
        ? true
        : undefined,
    );
    const [a] = proxies as [ProxyReplica, ProxyReplica];
    await eventually('route', 10_000, async () => ((await a.app.request('/readyz')).status === 200 ? true : undefined));
    // kubectl get md shows it: Running, 0 ready, 0 desired.
    const row = kubectlOk(['get', 'md', 'waker', '-n', NS, '--no-headers']).trim().split(/\s+/);
    expect(row.slice(1, 6)).toEqual([MODEL, 'Ollama', 'Running', '0', '0']);

    // The autoscaler has seen it asleep (a round, as every few seconds in a cluster).
    await operator.autoscaleNow();
    const started = Date.now();
    const res = await chat(a);
    const ms = Date.now() - started;
    expect(res.status).toBe(200);
    const body = (await res.json()) as { choices: Array<{ message: { content: string } }> };
    expect(body.choices[0]?.message.content.length).toBeGreaterThan(0);
    expect(replicasOf('waker')).toBe(1);
    expect(a.called.size).toBe(1);
    log.info('woken and answered', { ms });
    // The proxy woke it (no autoscaler round ran): it wrote spec.replicas through the scale subresource.
    const managed = JSON.parse(kubectlOk(['get', 'md', 'waker', '-n', NS, '-o', 'json', '--show-managed-fields'])) as {
      metadata: { managedFields: Array<{ manager: string; subresource?: string }> };
    };
    expect(managed.metadata.managedFields.filter((f) => f.subresource === 'scale').map((f) => f.manager)).toEqual([
      expect.stringMatching(/^platform-ai-optimizer-proxy/),
    ]);
    // The operator's next round tells the story: woken by a request.
    await operator.autoscaleNow();
    expect(events('waker')).toContainEqual({ reason: 'Woken', message: 'a request woke the model: 0 -> 1 replica(s)' });
    expect(md('waker', '{.status.readyReplicas}/{.spec.replicas}')).toBe('1/1');
  });

  it('scales out under concurrent load summed over both proxies, and spreads it over the replicas', async () => {
    const [a, b] = proxies as [ProxyReplica, ProxyReplica];
    // Three long answers through each proxy: each sends the replica one at a time (its one slot)
    // and holds the rest. One proxy's 3 is less than the target of 4 per replica; summed, 6 is more.
    const calls = Array.from({ length: 6 }, (_, i) => chat(i % 2 === 0 ? a : b, 120));
    await eventually('scaled out', 60_000, async () => {
      await operator.autoscaleNow();
      return replicasOf('waker') === 2 ? true : undefined;
    });
    const results = await Promise.all(calls);
    expect(results.map((r) => r.status)).toEqual(Array(6).fill(200));
    const up = events('waker').find((e) => e.reason === 'ScaledUp');
    const [, inFlight, queued] =
      /^1 -> 2 replica\(s\) for (\d+) in flight and (\d+) queued \(target 4 per replica\)$/.exec(up?.message ?? '') ?? [
        '',
        '0',
        '0',
      ];
    expect(Number(inFlight) + Number(queued)).toBeGreaterThan(4);
    expect(md('waker', '{.status.conditions[?(@.type=="Autoscaling")].reason}')).toBe('ScaledUp');
    // Once both replicas are ready, requests go to the one with fewer in flight: both are called.
    await eventually('two ready replicas', 30_000, () =>
      md('waker', '{.status.readyReplicas}') === '2' ? true : undefined,
    );
    await eventually('the proxy routes to both', 10_000, () => {
      const r = a.app.routes.lookup(MODEL);
      return r?.kind === 'in-cluster' && r.replicas?.length === 2 ? true : undefined;
    });
    a.called.clear();
    const spread = await Promise.all(Array.from({ length: 2 }, () => chat(a, 60)));
    expect(spread.map((r) => r.status)).toEqual([200, 200]);
    expect(a.called.size).toBe(2);
  });

  it('scales in after the scale-down delay and hibernates after the idle time, with Events', async () => {
    // 21 s later by the operator's clock: lower load for longer than the scale-down delay.
    skewMs += 21_000;
    await operator.autoscaleNow();
    await operator.autoscaleNow();
    await eventually('scaled in', 20_000, () => (replicasOf('waker') === 1 ? true : undefined));
    // 61 s without a request: hibernated.
    skewMs += 61_000;
    await operator.autoscaleNow();
    await eventually('hibernated', 20_000, () => (replicasOf('waker') === 0 ? true : undefined));
    await eventually('Running with 0 ready', 30_000, () =>
      md('waker', '{.status.phase}/{.status.readyReplicas}') === 'Running/0' ? true : undefined,
    );
    const reasons = events('waker').map((e) => e.reason);
    expect(reasons).toEqual(expect.arrayContaining(['Woken', 'ScaledUp', 'ScaledDown', 'Hibernated']));
    const hibernated = events('waker').find((e) => e.reason === 'Hibernated');
    expect(hibernated?.message).toMatch(/^1 -> 0 replicas: no request for \d+ s \(hibernateAfterSeconds 60\)$/);
    // And the pods are gone: no GPU held while it sleeps.
    await eventually('no pods', 30_000, () =>
      kubectlOk(['get', 'pods', '-n', NS, '-l', 'ai.platform/model-deployment=waker', '-o', 'name']).trim() === ''
        ? true
        : undefined,
    );
  });

  it('without autoscaling, kubectl scale owns replicas through the scale subresource', async () => {
    kubectlOk(
      ['apply', '-f', '-'],
      JSON.stringify({
        apiVersion: 'ai.platform/v1beta1',
        kind: 'ModelDeployment',
        metadata: { name: 'manual', namespace: NS },
        spec: { model: MODEL, serviceName: 'manual' },
      }),
    );
    await eventually('manual Running', 60_000, () =>
      md('manual', '{.status.phase}') === 'Running' ? true : undefined,
    );
    kubectlOk(['scale', 'md', 'manual', '-n', NS, '--replicas=2']);
    await eventually('deployment follows', 30_000, () =>
      kubectlOk(['get', 'deploy', 'manual', '-n', NS, '-o', 'jsonpath={.spec.replicas}']).trim() === '2'
        ? true
        : undefined,
    );
    await eventually('two ready', 30_000, () =>
      md('manual', '{.status.readyReplicas}/{.status.replicas}') === '2/2' ? true : undefined,
    );
    // The HPA's view: the scale subresource with the pods' selector.
    const scale = JSON.parse(
      kubectlOk(['get', '--raw', `/apis/ai.platform/v1beta1/namespaces/${NS}/modeldeployments/manual/scale`]),
    ) as { spec: { replicas: number }; status: { replicas: number; selector: string } };
    expect(scale).toMatchObject({
      spec: { replicas: 2 },
      status: { replicas: 2, selector: 'ai.platform/model-deployment=manual' },
    });
    // The autoscaler leaves it alone, however idle.
    skewMs += 3_600_000;
    await operator.autoscaleNow();
    expect(replicasOf('manual')).toBe(2);
    kubectlOk(['scale', 'md', 'manual', '-n', NS, '--replicas=0']);
    await eventually('manual at zero', 30_000, () =>
      md('manual', '{.status.conditions[?(@.type=="Ready")].reason}') === 'ScaledToZero' ? true : undefined,
    );
    const [a] = proxies as [ProxyReplica, ProxyReplica];
    await eventually('route sees zero', 10_000, async () => {
      const res = await a.app.request('/openai/v1/chat/completions', {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-api-key': KEY },
        body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }] }),
      });
      // The first deployment by name serves the model: manual < waker.
      const err = (await res.json()) as { error?: { code?: string } };
      return res.status === 503 && err.error?.code === 'model_scaled_to_zero' ? true : undefined;
    });
  });
});
