import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ApiKey, ApiKeySpec } from '../../crds/api-key.js';
import type { ExternalProvider } from '../../crds/external-provider.js';
import type { ModelDeployment } from '../../crds/model-deployment.js';
import { type OllamaDouble, startOllamaDouble } from '../../e2e/doubles/ollama.js';
import { startGateway, type TestGateway } from '../../e2e/support/gateway.js';
import { ApiKeys, policyOf, sha256 } from '../access/auth.js';
import { buildRoutes, RouteTable } from '../serving/routes.js';
import { ProxyMetrics } from '../telemetry/metrics.js';
import { OpenAICompatibleUpstream } from '../upstreams/openai-compatible.js';
import type { UsageRecord } from '../usage/record.js';

/**
 * The model lists as callers see them: GET /openai/v1/models (with the limits agents size their
 * prompts by) and the CLI model list GET /v1/models/metadata, with aliases, includeInCLI, a key's
 * allow-list, Bedrock's lifecycle and a model the catalog does not know (the server is asked).
 */

const ALL = 'sk-all-models-key-000000000000000000000000';
const SONNET_ONLY = 'sk-sonnet-only-key-0000000000000000000000';
const SONNET = 'us.anthropic.claude-sonnet-4-5-20250929-v1:0';
const HAIKU = 'anthropic.claude-3-haiku-20240307-v1:0';

const apiKey = (name: string, key: string, spec: Partial<ApiKeySpec>): ApiKey => ({
  apiVersion: 'ai.platform/v1beta1',
  kind: 'ApiKey',
  metadata: { name, namespace: 'platform-agent' },
  spec: { team: 'ml', role: 'User', rotation: 0, ...spec },
  status: { digest: `sha256:${sha256(key).toString('hex')}` },
});

const md = (name: string, model: string, endpoint: string, spec: Partial<ModelDeployment['spec']> = {}) =>
  ({
    apiVersion: 'ai.platform/v1beta1',
    kind: 'ModelDeployment',
    metadata: { name, namespace: 'platform-llms', creationTimestamp: '2026-11-01T00:00:00Z' },
    spec: { model, serviceName: name, port: 11434, replicas: 1, endpoint, ...spec },
  }) satisfies ModelDeployment;

const provider: ExternalProvider = {
  apiVersion: 'ai.platform/v1beta1',
  kind: 'ExternalProvider',
  metadata: { name: 'bedrock', namespace: 'platform-agent', creationTimestamp: '2026-10-01T00:00:00Z' },
  spec: {
    provider: 'bedrock',
    displayName: 'Bedrock',
    region: 'us-east-1',
    auth: { method: 'IAMRole', roleArn: 'arn:aws:iam::123456789012:role/r' },
    includeInCLI: true,
    streaming: true,
    models: [SONNET, HAIKU],
    aliases: [{ name: 'claude-sonnet-4-5', model: SONNET }],
  },
  status: {
    phase: 'Ready',
    availableModels: [SONNET, HAIKU],
    models: [
      { id: SONNET, type: 'Text', streaming: true, images: true, lifecycle: 'Active', priced: true },
      { id: HAIKU, type: 'Text', streaming: true, images: true, lifecycle: 'Legacy', priced: true },
    ],
  },
};

let double: OllamaDouble;
let app: TestGateway;
const records: UsageRecord[] = [];
const asked: string[] = [];

beforeAll(async () => {
  double = await startOllamaDouble({ models: ['llama3.1:8b', 'smollm2:135m'] });
  const keys = ApiKeys.fromKeys([]);
  keys.setManaged(
    [apiKey('all', ALL, {}), apiKey('sonnet', SONNET_ONLY, { models: [SONNET] })].flatMap((ak) => policyOf(ak) ?? []),
  );
  const routes = new RouteTable();
  routes.set(
    buildRoutes(
      [
        md('llama', 'llama3.1:8b', double.url, { aliases: ['house-model'], includeInCLI: false }),
        md('smol', 'smollm2:135m', double.url),
      ],
      { standalone: true, loadedAt: 1_790_000_000 },
      [provider],
    ),
  );
  app = await startGateway(
    {},
    {
      keys,
      routes,
      inCluster: new OpenAICompatibleUpstream(),
      usage: { record: (r: UsageRecord) => void records.push(r) },
      metrics: new ProxyMetrics(),
      // Bedrock is not called here: its count_tokens answers with the gateway's estimate.
      providers: {
        bedrock: {
          dialects: () => ['anthropic-messages'],
          send: () => Promise.reject(new Error('Bedrock is not called by these tests')),
          countTokens: async () => undefined,
        },
      },
      ask: async (baseUrl, model) => {
        asked.push(`${baseUrl} ${model}`);
        return { capabilities: ['completion', 'tools'], contextLength: 8192 };
      },
    },
  );
});

afterAll(async () => {
  await app.stop();
  await double.close();
});

const get = async (key: string | undefined, path: string) => {
  const res = await app.request(path, { headers: key ? { 'x-api-key': key } : {} });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
};
type Listed = { data: Array<Record<string, unknown>> };
type Cli = { models: Array<Record<string, unknown>> };

describe('GET /openai/v1/models', () => {
  it('lists every model and alias the key may use, with its context window and max output', async () => {
    const { body } = await get(ALL, '/openai/v1/models');
    const data = (body as unknown as Listed).data;
    expect(data.map((m) => m.id)).toEqual([
      HAIKU,
      'claude-sonnet-4-5',
      'house-model',
      'llama3.1:8b',
      'smollm2:135m',
      SONNET,
    ]);
    expect(data.find((m) => m.id === 'claude-sonnet-4-5')).toEqual({
      id: 'claude-sonnet-4-5',
      object: 'model',
      created: Date.parse('2026-10-01T00:00:00Z') / 1000,
      owned_by: 'platform-agent/bedrock',
      context_window: 200_000,
      max_output_tokens: 64_000,
    });
    // In-cluster: the context the server runs with (the catalog's serving default), not the model's most.
    expect(data.find((m) => m.id === 'llama3.1:8b')).toMatchObject({ context_window: 8192, max_output_tokens: 8192 });
    // A model the catalog does not know: what its server reports.
    expect(data.find((m) => m.id === 'smollm2:135m')).toMatchObject({ context_window: 8192 });
    expect(asked).toContain(`${double.url} smollm2:135m`);
  });

  it("keeps to a key's allow-list: the allowed model and its aliases, nothing else", async () => {
    const { body } = await get(SONNET_ONLY, '/openai/v1/models');
    expect((body as unknown as Listed).data.map((m) => m.id)).toEqual(['claude-sonnet-4-5', SONNET]);
    expect((await get(SONNET_ONLY, '/openai/v1/models/claude-sonnet-4-5')).body).toMatchObject({
      context_window: 200_000,
    });
    expect((await get(SONNET_ONLY, '/openai/v1/models/llama3.1:8b')).status).toBe(404);
  });
});

describe('GET /v1/models/metadata', () => {
  it('answers the CLI with every field it reads, for the models in the CLI list', async () => {
    const { status, body } = await get(ALL, '/v1/models/metadata?include_in_cli=true');
    expect(status).toBe(200);
    const models = (body as unknown as Cli).models;
    // includeInCLI false on the llama deployment: neither it nor its alias.
    expect(models.map((m) => m.slug)).toEqual([HAIKU, 'claude-sonnet-4-5', 'smollm2:135m', SONNET]);
    expect(models.find((m) => m.slug === 'claude-sonnet-4-5')).toEqual({
      slug: 'claude-sonnet-4-5',
      display_name: 'Claude Sonnet 4.5',
      provider: 'aws.bedrock',
      owned_by: 'platform-agent/bedrock',
      alias_of: SONNET,
      reasoning: true,
      input_modalities: ['text', 'image'],
      limits: { context_window: 200_000, max_output_tokens: 64_000 },
      status: 'active',
      replacement: null,
      tool_call: true,
      supports_images: true,
      // A us. profile costs the in-region price (10% above global for Claude 4.5).
      pricing: { input_per_1m: 3.3, output_per_1m: 16.5 },
      deprecated_at: null,
      sunset_at: null,
    });
    expect(models.find((m) => m.slug === HAIKU)).toMatchObject({
      status: 'deprecated',
      replacement: 'anthropic.claude-haiku-4-5-20251001-v1:0',
      pricing: { input_per_1m: 0.25, output_per_1m: 1.25 },
    });
    expect(models.find((m) => m.slug === 'smollm2:135m')).toMatchObject({
      provider: 'ollama',
      tool_call: true,
      reasoning: false,
      input_modalities: ['text'],
      limits: { context_window: 8192, max_output_tokens: 8192 },
      pricing: null,
    });
  });

  it('without include_in_cli lists every model the key may use; a bad value or no key is refused', async () => {
    const all = (await get(ALL, '/v1/models/metadata')).body as unknown as Cli;
    expect(all.models.map((m) => m.slug)).toContain('house-model');
    expect((await get(SONNET_ONLY, '/v1/models/metadata')).body).toEqual({
      object: 'list',
      models: [expect.objectContaining({ slug: 'claude-sonnet-4-5' }), expect.objectContaining({ slug: SONNET })],
    });
    const bad = await get(ALL, '/v1/models/metadata?include_in_cli=yes');
    expect(bad.status).toBe(400);
    expect(bad.body).toMatchObject({ error: { param: 'include_in_cli', code: 'invalid_value' } });
    expect((await get(undefined, '/v1/models/metadata')).status).toBe(401);
  });
});

describe('aliases on the request path', () => {
  it('an alias is served by its model, sent upstream by its real name and recorded under it', async () => {
    double.reset();
    const res = await app.request('/openai/v1/chat/completions', {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': ALL },
      body: JSON.stringify({ model: 'house-model', messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(res.status).toBe(200);
    expect(double.requests[0]?.body).toMatchObject({ model: 'llama3.1:8b' });
    expect(records.at(-1)).toMatchObject({ model: 'llama3.1:8b', provider: 'platform-llms/llama' });
  });

  it("a key allowed only the model may use its alias; another model's alias stays refused", async () => {
    const count = (key: string, model: string) =>
      app.request('/anthropic/v1/messages/count_tokens', {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-api-key': key },
        body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }] }),
      });
    expect((await count(SONNET_ONLY, 'claude-sonnet-4-5')).status).toBe(200);
    const res = await count(SONNET_ONLY, 'house-model');
    expect(res.status).toBe(403);
    expect(await res.json()).toMatchObject({ type: 'error', error: { type: 'permission_error' } });
    // A hostile body is judged by its shape before it is parsed, as every endpoint's is.
    const deep = await app.request('/anthropic/v1/messages/count_tokens', {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': ALL },
      body: `${'['.repeat(10_000)}${']'.repeat(10_000)}`,
    });
    expect(deep.status).toBe(400);
    expect(await deep.json()).toMatchObject({
      type: 'error',
      error: { type: 'invalid_request_error', message: expect.stringContaining('levels deep') },
    });
    const missing = await count(ALL, 'nope');
    expect(missing.status).toBe(404);
    expect(await missing.json()).toMatchObject({ type: 'error', error: { type: 'not_found_error' } });
  });
});
