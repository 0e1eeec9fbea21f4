import { InMemorySpanExporter } from '@opentelemetry/sdk-trace-base';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { ExternalProvider } from '../crds/external-provider.js';
import type { ModelDeployment } from '../crds/model-deployment.js';
import { startGateway, type TestGateway } from '../e2e/support/gateway.js';
import { ApiKeys, policyOf, sha256 } from './access/auth.js';
import { buildRoutes, type ExternalRoute, RouteTable } from './serving/routes.js';
import { OtelRequestTracer } from './telemetry/otel-tracer.js';
import type { Upstream } from './upstreams/upstream.js';
import { MemoryUsage } from './usage/record.js';

/**
 * Anthropic's count_tokens goes through the one pipeline like every endpoint: the key's rate
 * limit applies, it is traced, and it leaves a usage record (nothing generated, nothing billed).
 * Exact where the model's provider counts, an estimate elsewhere, said so in a header.
 */

const KEY = 'sk-count-tokens-0000000000000000000';
const LIMITED = 'sk-count-limited-000000000000000000';
const CLAUDE = 'claude-sonnet-4-5';
const body = (model: string) =>
  JSON.stringify({ model, system: 'be brief', messages: [{ role: 'user', content: 'how many tokens is this?' }] });

const md: ModelDeployment = {
  apiVersion: 'ai.platform/v1beta1',
  kind: 'ModelDeployment',
  metadata: { name: 'llama', namespace: 'platform-llms' },
  // Never called: an estimate needs no model server.
  spec: { model: 'llama3.1:8b', serviceName: 'llama', port: 11434, replicas: 1, endpoint: 'http://127.0.0.1:1' },
};
const anthropic: ExternalProvider = {
  apiVersion: 'ai.platform/v1beta1',
  kind: 'ExternalProvider',
  metadata: { name: 'anthropic', namespace: 'platform-agent' },
  spec: {
    provider: 'anthropic',
    displayName: 'Anthropic',
    auth: { method: 'APIKey', secretRef: { name: 'k' } },
    includeInCLI: true,
    streaming: true,
    models: [CLAUDE],
  },
};

/** Anthropic as far as counting goes: it counts 42, and records what it was asked to count. */
const counted: Array<{ route: string; body: Record<string, unknown> }> = [];
const counter: Upstream<ExternalRoute> = {
  dialects: () => ['anthropic-messages'],
  send: () => Promise.reject(new Error('count_tokens generates nothing')),
  countTokens: async (route, b) => {
    counted.push({ route: route.model, body: b });
    return 42;
  },
};

let gateway: TestGateway;
const usage = new MemoryUsage();
const exporter = new InMemorySpanExporter();
const tracer = new OtelRequestTracer(exporter, { name: 'test', version: '0' });

beforeAll(async () => {
  const routes = new RouteTable();
  routes.set(buildRoutes([md], { standalone: true }, [anthropic]));
  const keys = ApiKeys.fromKeys([KEY]);
  keys.setManaged(
    [
      {
        apiVersion: 'ai.platform/v1beta1',
        kind: 'ApiKey',
        metadata: { name: 'limited', namespace: 'platform-agent' },
        spec: { team: 'ml', role: 'User', rotation: 0, rateLimit: { requestsPerSecond: 0.001, burst: 1 } },
        status: { digest: `sha256:${sha256(LIMITED).toString('hex')}` },
      } as const,
    ].flatMap((ak) => policyOf(ak) ?? []),
  );
  gateway = await startGateway({}, { routes, keys, usage, tracer, providers: { anthropic: counter } });
});

afterAll(async () => {
  await gateway.stop();
});

beforeEach(() => {
  usage.records.length = 0;
  counted.length = 0;
  exporter.reset();
});

const count = (model: string, key = KEY) =>
  gateway.request('/anthropic/v1/messages/count_tokens', {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': key, 'x-tags': 'team:ml' },
    body: body(model),
  });

describe('POST /anthropic/v1/messages/count_tokens', () => {
  it("asks the model's provider for an exact count, with the model's own id and no max_tokens", async () => {
    const res = await count(CLAUDE);
    expect(res.status).toBe(200);
    expect(res.headers.get('x-gateway-token-count')).toBe('exact');
    expect(await res.json()).toEqual({ input_tokens: 42 });
    expect(counted).toHaveLength(1);
    expect(counted[0]?.route).toBe(CLAUDE);
    expect(counted[0]?.body).toMatchObject({ model: CLAUDE, system: 'be brief' });
  });

  it('estimates where the model server cannot count, and says so', async () => {
    const res = await count('llama3.1:8b');
    expect(res.status).toBe(200);
    expect(res.headers.get('x-gateway-token-count')).toBe('estimate');
    const { input_tokens } = (await res.json()) as { input_tokens: number };
    expect(input_tokens).toBeGreaterThan(5);
    expect(counted).toHaveLength(0);
  });

  it('is recorded like any call: its endpoint, model, tags and status, nothing billed', async () => {
    await count(CLAUDE);
    expect(usage.records).toHaveLength(1);
    expect(usage.records[0]).toMatchObject({
      endpoint: 'count_tokens',
      model: CLAUDE,
      provider: 'platform-agent/anthropic',
      tags: [{ key: 'team', value: 'ml' }],
      status: 200,
      promptTokens: 0,
      completionTokens: 0,
      costUsd: 0,
    });
  });

  it("is held to the key's rate limit, refused in Anthropic's envelope", async () => {
    expect((await count(CLAUDE, LIMITED)).status).toBe(200);
    const refused = await count(CLAUDE, LIMITED);
    expect(refused.status).toBe(429);
    expect(refused.headers.get('retry-after')).toBeTruthy();
    expect(await refused.json()).toMatchObject({ type: 'error', error: { type: 'rate_limit_error' } });
    expect(usage.records.map((r) => r.status)).toEqual([200, 429]);
  });

  it('is traced: a count_tokens span for the request, a client span for the provider that counted', async () => {
    await count(CLAUDE);
    await tracer.flush();
    const spans = exporter.getFinishedSpans();
    const server = spans.find((s) => s.kind === 1);
    const client = spans.find((s) => s.kind === 2);
    expect(server?.name).toBe(`count_tokens ${CLAUDE}`);
    expect(server?.attributes).toMatchObject({
      'gen_ai.operation.name': 'count_tokens',
      'gen_ai.provider.name': 'anthropic',
      'gateway.route.provider': 'platform-agent/anthropic',
    });
    expect(client?.parentSpanContext?.spanId).toBe(server?.spanContext().spanId);
  });

  it('refuses a model the gateway does not route with 404, in the same envelope', async () => {
    const res = await count('no-such-model');
    expect(res.status).toBe(404);
    expect(await res.json()).toMatchObject({ type: 'error', error: { type: 'not_found_error' } });
    expect(usage.records[0]).toMatchObject({ endpoint: 'count_tokens', status: 404, errorType: 'model_not_found' });
  });
});
