import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LogFields } from '../../crds/observability/log.js';
import { Operator } from '../../operator/operator.js';
import { ProxyMetrics } from '../../proxy/telemetry/metrics.js';
import { MemoryUsage } from '../../proxy/usage/record.js';
import { type HostedDouble, startHostedDouble } from '../doubles/hosted.js';
import { capturedLogger } from '../support/capture.js';
import { startClusterGateway } from '../support/cluster-gateway.js';
import type { TestGateway } from '../support/gateway.js';
import { PROMPT_CANARY } from '../support/known-secrets.js';
import { eventually, kubeConfig, kubectl, kubectlOk } from '../support/kube.js';

/**
 * Hosted providers in a cluster: ExternalProviders of each kind applied to the real API server,
 * the operator reading their Secrets or exchanging the workload identity's token, listing each
 * provider's models through its double and writing status (availableModels, the last 4
 * characters of a key, per-model family and price, conditions from each provider's error
 * table); the proxy's cluster source routing the Ready ones and answering through them. No key
 * or token may appear in any object, event or log line.
 */

const NS = 'platform-agent';
const OPENAI_KEY = 'sk-openai-double-0001';
const ANTHROPIC_KEY = 'sk-ant-double-0002';
const AZURE_KEY = 'azure-key-double-0003';
const FEDERATED = 'federated-sa-token-d15c';
const TENANT = '11111111-2222-3333-4444-555555555555';
const CLIENT = '66666666-7777-8888-9999-000000000000';

let double: HostedDouble;
let operator: Operator;
let app: TestGateway;
const logs: string[] = [];

const apply = (doc: object) => kubectlOk(['apply', '-f', '-'], JSON.stringify(doc));
const secret = (name: string, apiKey: string) =>
  apply({ apiVersion: 'v1', kind: 'Secret', metadata: { name, namespace: NS }, stringData: { apiKey } });
const provider = (name: string, spec: Record<string, unknown>) =>
  apply({
    apiVersion: 'ai.platform/v1beta1',
    kind: 'ExternalProvider',
    metadata: { name, namespace: NS },
    spec: { displayName: name, includeInCLI: true, ...spec },
  });
const field = (name: string, path: string) =>
  kubectlOk(['get', 'externalproviders', name, '-n', NS, '-o', `jsonpath=${path}`]);
const condition = (name: string, type: string, part: 'reason' | 'message' | 'status' = 'reason') =>
  field(name, `{.status.conditions[?(@.type=="${type}")].${part}}`);
const phase = (name: string, want: string) =>
  eventually(`${name} ${want}`, 30_000, () => (field(name, '{.status.phase}') === want ? want : undefined));

const client = () =>
  new OpenAI({
    apiKey: 'sk-hosted-discovery-e2e',
    baseURL: `${app.url}/openai/v1`,
    maxRetries: 0,
  });

beforeAll(async () => {
  double = await startHostedDouble({
    federatedToken: FEDERATED,
    azureClients: [CLIENT],
    models: { vertex: ['gemini-2.5-flash', 'claude-sonnet-4-5'] },
    azureDeployments: { 'gpt4o-prod': 'gpt-4o', 'gpt4o-wi': 'gpt-4o' },
  });
  const dir = mkdtempSync(join(tmpdir(), 'hosted-discovery-'));
  writeFileSync(join(dir, 'token'), FEDERATED);
  const env = {
    ...process.env,
    ...double.env,
    AZURE_FEDERATED_TOKEN_FILE: join(dir, 'token'),
    GOOGLE_FEDERATED_TOKEN_FILE: join(dir, 'token'),
  };
  // The proxy's routes read the endpoint overrides from its environment, as in a pod.
  Object.assign(process.env, env);
  const captured = capturedLogger('operator-hosted');
  const capture = (level: 'info' | 'warn' | 'error') => (msg: string, fields?: LogFields) => {
    captured[level](msg, fields);
    logs.push(`${level} ${msg} ${JSON.stringify(fields ?? {})}`);
  };
  operator = new Operator({
    kubeConfig: kubeConfig(),
    cluster: { organizationId: 'acme', clusterId: 'prod-1', cloud: 'aws', region: 'us-east-1' },
    images: { Ollama: 'ollama/ollama:test' },
    port: 0,
    resyncMs: 0,
    leaderElection: false,
    logger: { info: capture('info'), warn: capture('warn'), error: capture('error') },
    providerEnv: env,
  });
  await operator.start();
  app = await startClusterGateway(
    'sk-hosted-discovery-e2e',
    {
      env,
      logger: {
        info: () => {},
        warn: (msg, fields) => logs.push(`PROXY warn ${msg} ${JSON.stringify(fields ?? {})}`),
        error: (msg, fields) => logs.push(`PROXY ${msg} ${JSON.stringify(fields ?? {})}`),
      },
    },
    { usage: new MemoryUsage(), metrics: new ProxyMetrics() },
  );
  secret('hd-openai-key', OPENAI_KEY);
  secret('hd-anthropic-key', ANTHROPIC_KEY);
  secret('hd-azure-key', AZURE_KEY);
  secret('hd-wrong-key', 'sk-not-a-key-9999');
});

afterAll(async () => {
  await operator?.stop();
  await app?.stop();
  await double?.close();
  kubectl(['delete', 'externalproviders', '--all', '-n', NS]);
  kubectl([
    'delete',
    'secret',
    'hd-openai-key',
    'hd-anthropic-key',
    'hd-azure-key',
    'hd-wrong-key',
    '-n',
    NS,
    '--ignore-not-found',
  ]);
});

const ask = [{ role: 'user' as const, content: `hello ${PROMPT_CANARY}` }];

describe('discovery of each provider into status', () => {
  it('OpenAI: Ready, the key shown by its last 4, each model with its family, kind and price; then routed', async () => {
    provider('hd-openai', {
      provider: 'openai',
      auth: { method: 'APIKey', secretRef: { name: 'hd-openai-key' } },
      models: ['gpt-4o', 'text-embedding-3-small'],
    });
    await phase('hd-openai', 'Ready');
    expect(field('hd-openai', '{.status.accessKeyLast4}')).toBe('0001');
    expect(JSON.parse(field('hd-openai', '{.status.availableModels}'))).toEqual([
      'gpt-4o',
      'gpt-4o-mini',
      'text-embedding-3-small',
    ]);
    expect(JSON.parse(field('hd-openai', '{.status.models}'))).toEqual([
      { id: 'gpt-4o', type: 'Text', family: 'openai', streaming: true, lifecycle: 'Active', priced: true },
      {
        id: 'text-embedding-3-small',
        type: 'Embedding',
        family: 'openai',
        streaming: false,
        lifecycle: 'Active',
        priced: true,
      },
    ]);
    expect(condition('hd-openai', 'ModelsPriced')).toBe('Priced');
    await eventually('routed', 15_000, () => (app.routes.lookup('gpt-4o')?.kind === 'external' ? true : undefined));
    const r = await client().chat.completions.create({ model: 'gpt-4o', messages: ask });
    expect(r.choices[0]?.message.content).toBe('tok0 tok1 tok2 tok3');
  });

  it('Anthropic: an undated alias of a listed dated id is available; an unlisted model degrades the provider', async () => {
    provider('hd-anthropic', {
      provider: 'anthropic',
      auth: { method: 'APIKey', secretRef: { name: 'hd-anthropic-key' } },
      models: ['claude-sonnet-4-5', 'claude-opus-9'],
    });
    await phase('hd-anthropic', 'Degraded');
    expect(condition('hd-anthropic', 'ModelsAvailable')).toBe('ModelsNotAvailable');
    expect(condition('hd-anthropic', 'ModelsAvailable', 'message')).toContain('claude-opus-9');
    const available = JSON.parse(field('hd-anthropic', '{.status.availableModels}')) as string[];
    expect(available).toEqual(expect.arrayContaining(['claude-sonnet-4-5', 'claude-sonnet-4-5-20250929']));
    expect(JSON.parse(field('hd-anthropic', '{.status.models}'))).toEqual([
      {
        id: 'claude-sonnet-4-5',
        type: 'Text',
        family: 'anthropic',
        streaming: true,
        // Anthropic deprecated it (crds/catalog/prices.yaml lifecycle): it retires on 2026-11-30.
        lifecycle: 'Deprecated',
        priced: true,
      },
    ]);
    // Within 30 days of its retirement (or past it): the condition names the replacement Anthropic gives.
    expect(condition('hd-anthropic', 'ModelsRetiring', 'status')).toBe('True');
    expect(condition('hd-anthropic', 'ModelsRetiring', 'message')).toMatch(
      /claude-sonnet-4-5 \(spec\.models\) retire[sd] on 2026-11-30.*: move to claude-sonnet-5-5/,
    );
    await eventually('routed', 15_000, () =>
      app.routes.lookup('claude-sonnet-4-5')?.kind === 'external' ? true : undefined,
    );
    // Chat completions to Claude: translated to Messages at Anthropic. Still served, said to be deprecated.
    const raw = await client().chat.completions.create({ model: 'claude-sonnet-4-5', messages: ask }).withResponse();
    expect(raw.data.choices[0]?.message.content).toBe('tok0 tok1 tok2 tok3');
    expect(raw.response.headers.get('deprecation')).toMatch(/^@\d+$/);
    expect(raw.response.headers.get('sunset')).toBe('Mon, 30 Nov 2026 00:00:00 GMT');
  });

  it('an ApiKey whose allow-list names a retiring model says so, and the replacement', async () => {
    apply({
      apiVersion: 'ai.platform/v1beta1',
      kind: 'ApiKey',
      metadata: { name: 'hd-sonnet-users', namespace: NS },
      spec: { team: 'ml', role: 'User', models: ['claude-sonnet-4-5', 'gpt-4o'] },
    });
    const retiring = () =>
      kubectlOk([
        'get',
        'apikeys',
        'hd-sonnet-users',
        '-n',
        NS,
        '-o',
        'jsonpath={.status.conditions[?(@.type=="ModelsRetiring")].message}',
      ]);
    const message = await eventually('ModelsRetiring on the ApiKey', 30_000, () => retiring() || undefined);
    expect(message).toMatch(/claude-sonnet-4-5 \(spec\.models\) retire[sd] on 2026-11-30.*: move to claude-sonnet-5-5/);
    expect(message).not.toContain('gpt-4o');
    kubectl(['delete', 'apikeys', 'hd-sonnet-users', '-n', NS, '--ignore-not-found']);
  });

  it('Azure OpenAI by key and by workload identity (Entra ID); a deployment of a model the resource lacks is flagged', async () => {
    provider('hd-azure', {
      provider: 'azure-openai',
      auth: { method: 'APIKey', secretRef: { name: 'hd-azure-key' } },
      azure: {
        resourceName: 'pao-e2e',
        deployments: [
          { name: 'gpt4o-prod', model: 'gpt-4o' },
          { name: 'o9-prod', model: 'o9' },
        ],
      },
      models: ['gpt4o-prod', 'o9-prod'],
    });
    provider('hd-azure-wi', {
      provider: 'azure-openai',
      auth: { method: 'WorkloadIdentity', tenantId: TENANT, clientId: CLIENT },
      azure: {
        resourceName: 'pao-e2e',
        apiVersion: '2024-10-21',
        deployments: [{ name: 'gpt4o-wi', model: 'gpt-4o' }],
      },
      models: ['gpt4o-wi'],
    });
    await phase('hd-azure', 'Degraded');
    expect(condition('hd-azure', 'ModelsAvailable', 'message')).toContain('o9-prod');
    expect(field('hd-azure', '{.status.accessKeyLast4}')).toBe('0003');
    await phase('hd-azure-wi', 'Ready');
    expect(field('hd-azure-wi', '{.status.accessKeyLast4}')).toBe('');
    expect(double.calls.some((c) => c.path === `/entra/${TENANT}/oauth2/v2.0/token`)).toBe(true);
    await eventually('routed', 15_000, () => (app.routes.lookup('gpt4o-wi')?.kind === 'external' ? true : undefined));
    expect(
      (await client().chat.completions.create({ model: 'gpt4o-wi', messages: ask })).choices[0]?.message.content,
    ).toBe('tok0 tok1 tok2 tok3');
  });

  it('Vertex AI through Google STS: Gemini and Claude (a versioned id) from the publisher lists', async () => {
    provider('hd-vertex', {
      provider: 'vertex-ai',
      auth: {
        method: 'WorkloadIdentity',
        audience:
          '//iam.googleapis.com/projects/123456789012/locations/global/workloadIdentityPools/pao/providers/cluster',
      },
      vertex: { project: 'pao-e2e-project', location: 'europe-west1' },
      models: ['gemini-2.5-flash', 'claude-sonnet-4-5@20250929'],
    });
    await phase('hd-vertex', 'Ready');
    const models = JSON.parse(field('hd-vertex', '{.status.models}')) as Array<{
      id: string;
      family: string;
      priced: boolean;
    }>;
    expect(models.map((m) => [m.id, m.family, m.priced])).toEqual([
      ['gemini-2.5-flash', 'openai', true],
      ['claude-sonnet-4-5@20250929', 'anthropic', true],
    ]);
    const lists = double.calls.filter((c) => c.path.startsWith('/vertex/v1beta1/publishers/'));
    expect(lists.map((c) => c.headers['x-goog-user-project'])).toEqual(['pao-e2e-project', 'pao-e2e-project']);
  });

  it('an OpenAI-compatible server with no key', async () => {
    provider('hd-vllm', {
      provider: 'openai-compatible',
      baseUrl: `${double.url}/compatible/v1`,
      auth: { method: 'None' },
      models: ['meta-llama/Llama-3.1-8B-Instruct'],
    });
    await phase('hd-vllm', 'Ready');
    expect(condition('hd-vllm', 'ModelsPriced')).toBe('UnpricedModels');
  });
});

describe("each provider's error table at discovery", () => {
  it('a wrong key: CredentialsValid False with the fix, the key never shown beyond its last 4', async () => {
    provider('hd-bad-key', {
      provider: 'openai',
      auth: { method: 'APIKey', secretRef: { name: 'hd-wrong-key' } },
      models: ['gpt-4o-mini'],
    });
    await phase('hd-bad-key', 'Failed');
    expect(condition('hd-bad-key', 'CredentialsValid')).toBe('InvalidAPIKey');
    expect(condition('hd-bad-key', 'CredentialsValid', 'message')).toContain(
      'put a valid key in the Secret named by spec.auth.secretRef',
    );
    expect(field('hd-bad-key', '{.status.accessKeyLast4}')).toBe('9999');
    // Its model exists but is unavailable: callers learn why.
    await eventually('unavailable', 15_000, () =>
      app.routes.lookup('gpt-4o-mini')?.kind === 'unavailable' ? true : undefined,
    );
    const err = await client()
      .chat.completions.create({ model: 'gpt-4o-mini', messages: ask })
      .catch((e: unknown) => e as { status: number; message: string });
    expect(err).toMatchObject({ status: 503 });
    expect((err as { message: string }).message).toContain('refused the API key');
  });

  it('a missing Secret names no Secret', async () => {
    provider('hd-no-secret', {
      provider: 'anthropic',
      auth: { method: 'APIKey', secretRef: { name: 'hd-no-such-key' } },
      models: ['claude-haiku-4-5'],
    });
    await phase('hd-no-secret', 'Failed');
    expect(condition('hd-no-secret', 'Ready')).toBe('SecretNotFound');
    expect(field('hd-no-secret', '{.status}')).not.toContain('hd-no-such-key');
  });

  it('Vertex with the API disabled, and an Azure client id Entra ID does not know', async () => {
    double.fail({
      kind: 'vertex',
      path: /v1beta1\/publishers/,
      status: 403,
      times: 50,
      body: {
        error: {
          code: 403,
          message: 'Vertex AI API has not been used in project 123456789012 before or it is disabled.',
          status: 'PERMISSION_DENIED',
        },
      },
    });
    provider('hd-vertex-off', {
      provider: 'vertex-ai',
      auth: { method: 'WorkloadIdentity' },
      vertex: { project: 'pao-off-project', location: 'us-central1' },
      models: ['gemini-2.5-flash'],
    });
    await phase('hd-vertex-off', 'Failed');
    expect(condition('hd-vertex-off', 'Ready')).toBe('APIDisabled');
    expect(condition('hd-vertex-off', 'Ready', 'message')).toContain('enable aiplatform.googleapis.com');
    expect(condition('hd-vertex-off', 'Ready', 'message')).not.toContain('123456789012');
    double.reset();
    provider('hd-azure-wrong-client', {
      provider: 'azure-openai',
      auth: { method: 'WorkloadIdentity', tenantId: TENANT, clientId: '99999999-9999-9999-9999-999999999999' },
      azure: { resourceName: 'pao-other', deployments: [{ name: 'gpt4o-prod', model: 'gpt-4o' }] },
      models: ['gpt4o-prod'],
    });
    await phase('hd-azure-wrong-client', 'Failed');
    expect(condition('hd-azure-wrong-client', 'CredentialsValid')).toBe('TokenExchangeRefused');
    expect(condition('hd-azure-wrong-client', 'CredentialsValid', 'message')).toContain('AADSTS700016');
    expect(field('hd-azure-wrong-client', '{.status}')).not.toContain('99999999-9999');
  });
});

describe('secrets', () => {
  it('never appear in any object, event or log line', () => {
    const objects = kubectlOk(['get', 'externalproviders', '-n', NS, '-o', 'yaml']);
    const events = kubectlOk(['get', 'events', '-n', NS, '-o', 'yaml']);
    const everything = [objects, events, ...logs].join('\n');
    expect(everything).toContain('0001');
    for (const s of [OPENAI_KEY, ANTHROPIC_KEY, AZURE_KEY, FEDERATED, 'sk-not-a-key-9999', ...double.issuedTokens()]) {
      expect(everything).not.toContain(s);
    }
    expect(everything).not.toContain(PROMPT_CANARY);
  });
});
