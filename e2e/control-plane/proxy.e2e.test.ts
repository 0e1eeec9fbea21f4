import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { API_KEYS_SECRET, PRICES_CONFIGMAP, PRICES_KEY } from '../../proxy/sources/cluster-source.js';
import { ProxyMetrics } from '../../proxy/telemetry/metrics.js';
import { OpenAICompatibleUpstream } from '../../proxy/upstreams/openai-compatible.js';
import { MemoryUsage } from '../../proxy/usage/record.js';
import { type OllamaDouble, startOllamaDouble } from '../doubles/ollama.js';
import { capturedLogger } from '../support/capture.js';
import { startGateway, type TestGateway } from '../support/gateway.js';
import { PROMPT_CANARY } from '../support/known-secrets.js';
import { applyObjects, eventually, kubeConfig, kubectl, kubectlOk } from '../support/kube.js';

/**
 * The proxy in cluster mode against the real API server: the routing table follows
 * ModelDeployment status, API keys follow their Secret, and a tagged chat request reaches
 * the model server standing behind the deployment's Service (the Ollama double, to which
 * the harness resolves the Service's DNS name).
 */

const NS = 'platform-llms';
let double: OllamaDouble;
let upstream: OpenAICompatibleUpstream;
const usage = new MemoryUsage();
let app: TestGateway;

const secret = (key: string) =>
  JSON.stringify({
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: { name: API_KEYS_SECRET, namespace: 'platform-agent' },
    stringData: { keys: `${key}\n` },
  });

const chat = (key: string, tags = '') =>
  app.request('/openai/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': key, ...(tags ? { 'x-tags': tags } : {}) },
    body: JSON.stringify({ model: 'qwen2.5:0.5b', messages: [{ role: 'user', content: `ping ${PROMPT_CANARY}` }] }),
  });

const setStatus = (status: object) =>
  kubectlOk([
    'patch',
    'md',
    'routed',
    '-n',
    NS,
    '--subresource=status',
    '--type=merge',
    '-p',
    JSON.stringify({ status }),
  ]);

const proxyLog = capturedLogger('proxy-e2e');

beforeAll(async () => {
  double = await startOllamaDouble({ models: ['qwen2.5:0.5b'] });
  kubectlOk(['apply', '-f', '-'], secret('sk-e2e-one'));
  upstream = new OpenAICompatibleUpstream({
    // In a real cluster the Service name resolves through cluster DNS; here, to the double.
    resolve: (url) => (url === 'http://routed.platform-llms.svc.cluster.local:11434' ? double.url : url),
  });
  app = await startGateway(
    { source: { kind: 'cluster', kubeConfig: kubeConfig() }, logger: proxyLog },
    { inCluster: upstream, usage, metrics: new ProxyMetrics() },
  );
});

afterAll(async () => {
  await app?.stop();
  await upstream?.close();
  await double?.close();
  kubectl(['delete', 'md', 'routed', '-n', NS, '--ignore-not-found']);
  kubectl(['delete', 'secret', API_KEYS_SECRET, '-n', 'platform-agent', '--ignore-not-found']);
});

describe('proxy in cluster mode', () => {
  it('is ready once routes and keys are loaded, and takes the key from the Secret', async () => {
    expect((await app.request('/readyz')).status).toBe(200);
    expect(app.keys.size).toBe(1);
    const res = await chat('sk-e2e-one');
    expect(res.status).toBe(404);
  });

  it('answers 503 with Retry-After while the model deploys, routes it once Running', async () => {
    kubectlOk(
      ['apply', '-f', '-'],
      JSON.stringify({
        apiVersion: 'ai.platform/v1beta1',
        kind: 'ModelDeployment',
        metadata: { name: 'routed', namespace: NS },
        spec: { model: 'qwen2.5:0.5b', serviceName: 'routed' },
      }),
    );
    await eventually('deploying route', 10_000, () => (app.routes.lookup('qwen2.5:0.5b') ? true : undefined));
    const deploying = await chat('sk-e2e-one');
    expect(deploying.status).toBe(503);
    expect(deploying.headers.get('retry-after')).toBe('30');

    setStatus({ phase: 'Running', endpoint: 'http://routed.platform-llms.svc.cluster.local:11434' });
    await eventually('running route', 10_000, () =>
      app.routes.lookup('qwen2.5:0.5b')?.kind === 'in-cluster' ? true : undefined,
    );
    const res = await chat('sk-e2e-one', 'team:ml,project:e2e');
    expect(res.status).toBe(200);
    const body = (await res.json()) as { object: string; usage: { completion_tokens: number } };
    expect(body.object).toBe('chat.completion');
    expect(double.requests).toHaveLength(1);
    expect(usage.records.at(-1)).toMatchObject({
      provider: 'platform-llms/routed',
      completionTokens: 8,
      status: 200,
      tags: [
        { key: 'team', value: 'ml' },
        { key: 'project', value: 'e2e' },
      ],
    });
    const listed = (await (
      await app.request('/openai/v1/models', { headers: { 'x-api-key': 'sk-e2e-one' } })
    ).json()) as {
      data: Array<{ id: string }>;
    };
    expect(listed.data.map((m) => m.id)).toEqual(['qwen2.5:0.5b']);
  });

  it('stops routing when the deployment fails or is deleted', async () => {
    setStatus({ phase: 'Failed' });
    await eventually('failed route', 10_000, () =>
      app.routes.lookup('qwen2.5:0.5b')?.kind === 'unavailable' ? true : undefined,
    );
    const failed = await chat('sk-e2e-one');
    expect(failed.status).toBe(503);
    expect(((await failed.json()) as { error: { code: string } }).error.code).toBe('model_failed');
    kubectlOk(['delete', 'md', 'routed', '-n', NS]);
    await eventually('route removed', 10_000, () => (app.routes.lookup('qwen2.5:0.5b') ? undefined : true));
    expect((await chat('sk-e2e-one')).status).toBe(404);
  });

  it('takes Bedrock price overrides from the ConfigMap', async () => {
    const model = 'amazon.nova-lite-v1:0';
    const nova = {
      model,
      baseModel: model,
      identity: { provider: 'bedrock', region: 'us-east-1', auth: { method: 'IAMRole' } },
      target: {
        type: 'bedrock',
        upstreamModel: model,
        family: 'openai',
        modelType: 'text',
        baseUrl: '',
        region: 'us-east-1',
      },
    } as const;
    const price = () => app.prices.providerPrice(nova);
    const shipped = price();
    expect(shipped?.input).toBeGreaterThan(0);
    applyObjects({
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { name: PRICES_CONFIGMAP, namespace: 'platform-agent' },
      data: { [PRICES_KEY]: 'models:\n  amazon.nova-lite-v1:0: {input: 1, output: 2}\n' },
    });
    await eventually('prices', 10_000, () => (price()?.input === 1 && price()?.output === 2 ? true : undefined));
    kubectlOk(['delete', 'configmap', PRICES_CONFIGMAP, '-n', 'platform-agent']);
    await eventually('prices removed', 10_000, () => (price()?.input === shipped?.input ? true : undefined));
  });

  it('follows a rotated key in the Secret', async () => {
    kubectlOk(['apply', '-f', '-'], secret('sk-e2e-two'));
    await eventually('new key', 10_000, () => (app.keys.verify('sk-e2e-two') ? true : undefined));
    expect((await chat('sk-e2e-one')).status).toBe(401);
    expect((await chat('sk-e2e-two')).status).toBe(404);
  });
});
