import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import Anthropic from '@anthropic-ai/sdk';
import { AnthropicVertex } from '@anthropic-ai/vertex-sdk';
import { OAuth2Client } from 'google-auth-library';
import OpenAI, { AzureOpenAI } from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { type HostedDouble, type HostedKind, startHostedDouble } from '../doubles/hosted.js';
import { bin, claudePrint, installClients } from '../support/agent-clients.js';
import { PROMPT_CANARY } from '../support/known-secrets.js';
import { type ProxyProcess, standaloneFiles, startProxyProcess } from '../support/proxy-process.js';

/**
 * The hosted providers other than Bedrock through the real proxy process: OpenAI, Anthropic,
 * Azure OpenAI (API key, and workload identity on the dated API), Vertex AI (Gemini and Claude,
 * workload identity through Google STS with impersonation, and through the GKE metadata
 * server) and an OpenAI-compatible server, each played by a double of its wire protocol
 * (e2e/doubles/hosted.ts). First the official SDKs against each double directly (which checks
 * the double), then the same SDKs through the gateway: every endpoint the model answers,
 * natively or translated, streaming and not, tools, JSON output, every row of each provider's
 * error table, throttling with retry-after, a stream cut mid-way, a fallback across providers,
 * usage and cost to the token, and no key or token in anything the proxy printed or answered.
 */

const run = promisify(execFile);
const KEY = 'sk-hosted-gateway-e2e';
const OPENAI_KEY = 'sk-openai-double-0001';
const ANTHROPIC_KEY = 'sk-ant-double-0002';
const AZURE_KEY = 'azure-key-double-0003';
const FEDERATED = 'federated-sa-token-7c1e';
const TENANT = '11111111-2222-3333-4444-555555555555';
const CLIENT = '66666666-7777-8888-9999-000000000000';

let double: HostedDouble;
let proxy: ProxyProcess;
let dir: string;
const answers: string[] = [];

const provider = (name: string, spec: Record<string, unknown>) =>
  `${JSON.stringify({
    apiVersion: 'ai.platform/v1beta1',
    kind: 'ExternalProvider',
    metadata: { name, namespace: 'platform-agent' },
    spec: { displayName: name, includeInCLI: true, ...spec },
  })}
`;

const apiKey = (secret: string) => ({ auth: { method: 'APIKey', secretRef: { name: secret } } });

beforeAll(async () => {
  double = await startHostedDouble({
    federatedToken: FEDERATED,
    models: {
      vertex: ['gemini-2.5-flash', 'gemini-2.5-pro', 'claude-sonnet-4-5'],
      openai: ['gpt-4o', 'gpt-4o-mini', 'gpt-4.1', 'text-embedding-3-small'],
    },
    azureDeployments: {
      'gpt4o-prod': 'gpt-4o',
      'embed-small': 'text-embedding-3-small',
      'gpt4o-wi': 'gpt-4o',
      'gpt4o-old': 'gpt-4o',
    },
  });
  dir = mkdtempSync(join(tmpdir(), 'hosted-providers-'));
  for (const [name, value] of [
    ['openai-key', OPENAI_KEY],
    ['anthropic-key', ANTHROPIC_KEY],
    ['azure-key', AZURE_KEY],
  ] as const) {
    mkdirSync(join(dir, 'secrets', name), { recursive: true });
    writeFileSync(join(dir, 'secrets', name, 'apiKey'), value);
  }
  writeFileSync(join(dir, 'federated-token'), FEDERATED);
  const files = standaloneFiles(
    dir,
    [
      provider('openai', {
        provider: 'openai',
        ...apiKey('openai-key'),
        models: ['gpt-4o', 'gpt-4o-mini', 'text-embedding-3-small'],
      }),
      provider('openai-fallback', {
        provider: 'openai',
        ...apiKey('openai-key'),
        models: ['gpt-4.1'],
        fallback: ['claude-sonnet-4-5'],
      }),
      provider('anthropic', {
        provider: 'anthropic',
        ...apiKey('anthropic-key'),
        models: ['claude-sonnet-4-5'],
        aliases: [{ name: 'sonnet', model: 'claude-sonnet-4-5' }],
      }),
      provider('azure-old', {
        provider: 'azure-openai',
        ...apiKey('azure-key'),
        azure: {
          resourceName: 'pao-e2e',
          apiVersion: '2024-06-01',
          deployments: [{ name: 'gpt4o-old', model: 'gpt-4o' }],
        },
        models: ['gpt4o-old'],
      }),
      provider('azure', {
        provider: 'azure-openai',
        ...apiKey('azure-key'),
        azure: {
          resourceName: 'pao-e2e',
          deployments: [
            { name: 'gpt4o-prod', model: 'gpt-4o' },
            { name: 'embed-small', model: 'text-embedding-3-small' },
          ],
        },
        models: ['gpt4o-prod', 'embed-small'],
      }),
      provider('azure-wi', {
        provider: 'azure-openai',
        auth: { method: 'WorkloadIdentity', tenantId: TENANT, clientId: CLIENT },
        azure: {
          resourceName: 'pao-e2e',
          apiVersion: '2024-10-21',
          deployments: [{ name: 'gpt4o-wi', model: 'gpt-4o' }],
        },
        models: ['gpt4o-wi'],
      }),
      provider('vertex', {
        provider: 'vertex-ai',
        auth: {
          method: 'WorkloadIdentity',
          audience:
            '//iam.googleapis.com/projects/123456789012/locations/global/workloadIdentityPools/pao/providers/cluster',
          serviceAccount: 'gateway@pao-e2e-project.iam.gserviceaccount.com',
        },
        vertex: { project: 'pao-e2e-project', location: 'us-east5' },
        models: ['gemini-2.5-flash', 'claude-sonnet-4-5@20250929'],
      }),
      provider('vertex-gke', {
        provider: 'vertex-ai',
        auth: { method: 'WorkloadIdentity' },
        vertex: { project: 'pao-e2e-project', location: 'global' },
        models: ['gemini-2.5-pro'],
      }),
      provider('vllm', {
        provider: 'openai-compatible',
        baseUrl: `${double.url}/compatible/v1`,
        auth: { method: 'None' },
        models: ['meta-llama/Llama-3.1-8B-Instruct'],
      }),
    ],
    `${KEY}\n`,
  );
  proxy = await startProxyProcess([...files, '--secrets-dir', join(dir, 'secrets'), '--usage-db', ':memory:'], {
    ...process.env,
    ...double.env,
    AZURE_FEDERATED_TOKEN_FILE: join(dir, 'federated-token'),
    GOOGLE_FEDERATED_TOKEN_FILE: join(dir, 'federated-token'),
  });
}, 60_000);

afterAll(async () => {
  await proxy?.stop('SIGTERM');
  await double?.close();
});

beforeEach(() => double.reset());

const gatewayOpenAI = (tags = 'team:hosted') =>
  new OpenAI({
    apiKey: KEY,
    baseURL: `${proxy.base}/openai/v1`,
    maxRetries: 0,
    defaultHeaders: { 'x-tags': tags },
  });
const gatewayAnthropic = (tags = 'team:hosted') =>
  new Anthropic({ apiKey: KEY, baseURL: `${proxy.base}/anthropic`, maxRetries: 0, defaultHeaders: { 'x-tags': tags } });

const ask = [{ role: 'user' as const, content: `say four words ${PROMPT_CANARY}` }];
const TOKENS = 'tok0 tok1 tok2 tok3';

function keep<T>(v: T): T {
  answers.push(JSON.stringify(v));
  return v;
}

async function chatText(client: OpenAI, model: string): Promise<string> {
  const r = keep(await client.chat.completions.create({ model, messages: ask }));
  return r.choices[0]?.message.content ?? '';
}

async function streamText(
  client: OpenAI,
  model: string,
): Promise<{ text: string; usage?: OpenAI.CompletionUsage | null }> {
  const stream = await client.chat.completions.create({
    model,
    messages: ask,
    stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  let usage: OpenAI.CompletionUsage | null | undefined;
  for await (const chunk of stream) {
    keep(chunk);
    text += chunk.choices[0]?.delta.content ?? '';
    if (chunk.usage) usage = chunk.usage;
  }
  return { text, usage };
}

/** A token from the double's GKE metadata server, as a pod on GKE gets one. */
const gkeToken = async (): Promise<string> =>
  (
    (await (
      await fetch(`http://${double.env.GCE_METADATA_HOST}/computeMetadata/v1/instance/service-accounts/default/token`, {
        headers: { 'Metadata-Flavor': 'Google' },
      })
    ).json()) as { access_token: string }
  ).access_token;

describe('the official SDKs against each double directly (the doubles speak the real protocols)', () => {
  it('openai: chat, stream, tools, embeddings, responses', async () => {
    const client = new OpenAI({ apiKey: OPENAI_KEY, baseURL: double.env.PAO_ENDPOINT_URL_OPENAI, maxRetries: 0 });
    expect(await chatText(client, 'gpt-4o')).toBe(TOKENS);
    expect((await streamText(client, 'gpt-4o')).text).toBe(TOKENS);
    const tool = await client.chat.completions.create({
      model: 'gpt-4o',
      messages: ask,
      tools: [
        {
          type: 'function',
          function: { name: 'weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } },
        },
      ],
    });
    const call = tool.choices[0]?.message.tool_calls?.[0];
    expect(call?.type === 'function' ? JSON.parse(call.function.arguments) : undefined).toEqual({ city: 'x' });
    const emb = await client.embeddings.create({ model: 'text-embedding-3-small', input: ['a b', 'c'] });
    expect(emb.data).toHaveLength(2);
    expect(emb.data[0]?.embedding).toHaveLength(4);
    const resp = await client.responses.create({ model: 'gpt-4o', input: 'hello there' });
    expect(resp.output_text).toBe(TOKENS);
    const events: string[] = [];
    for await (const e of await client.responses.create({ model: 'gpt-4o', input: 'hello', stream: true }))
      events.push(e.type);
    expect(events.at(-1)).toBe('response.completed');
    await expect(
      new OpenAI({ apiKey: 'sk-wrong', baseURL: double.env.PAO_ENDPOINT_URL_OPENAI, maxRetries: 0 }).models.list(),
    ).rejects.toBeInstanceOf(OpenAI.AuthenticationError);
  });

  it('anthropic: messages, stream, tools, models', async () => {
    const client = new Anthropic({
      apiKey: ANTHROPIC_KEY,
      baseURL: double.env.PAO_ENDPOINT_URL_ANTHROPIC,
      maxRetries: 0,
    });
    const m = await client.messages.create({ model: 'claude-sonnet-4-5', max_tokens: 100, messages: ask });
    expect(m.content[0]?.type === 'text' ? m.content[0].text : '').toBe(TOKENS);
    const streamed = await client.messages
      .stream({ model: 'claude-sonnet-4-5', max_tokens: 100, messages: ask })
      .finalMessage();
    expect(streamed.content[0]?.type === 'text' ? streamed.content[0].text : '').toBe(TOKENS);
    const tool = await client.messages.create({
      model: 'claude-sonnet-4-5',
      max_tokens: 100,
      messages: ask,
      tools: [{ name: 'weather', input_schema: { type: 'object', properties: { city: { type: 'string' } } } }],
    });
    expect(tool.content[0]).toMatchObject({ type: 'tool_use', name: 'weather', input: { city: 'x' } });
    const models = [];
    for await (const model of client.models.list()) models.push(model.id);
    expect(models).toContain('claude-sonnet-4-5-20250929');
  });

  it("vertex: the OpenAI SDK on Vertex's OpenAI-compatible endpoint, as Google documents it", async () => {
    const token = await gkeToken();
    const client = new OpenAI({
      apiKey: token,
      baseURL: `${double.env.PAO_ENDPOINT_URL_VERTEX_AI}/v1/projects/p/locations/us-central1/endpoints/openapi`,
      maxRetries: 0,
    });
    expect(await chatText(client, 'google/gemini-2.5-flash')).toBe(TOKENS);
    expect((await streamText(client, 'google/gemini-2.5-flash')).text).toBe(TOKENS);
  });

  it('vertex: the Anthropic Vertex SDK (rawPredict, streamRawPredict) with a Google OAuth client', async () => {
    const token = await gkeToken();
    const authClient = new OAuth2Client();
    authClient.setCredentials({ access_token: token, expiry_date: Date.now() + 3_600_000 });
    const client = new AnthropicVertex({
      region: 'us-east5',
      projectId: 'pao-e2e-project',
      authClient,
      baseURL: `${double.env.PAO_ENDPOINT_URL_VERTEX_AI}/v1`,
      maxRetries: 0,
    });
    const m = await client.messages.create({ model: 'claude-sonnet-4-5@20250929', max_tokens: 64, messages: ask });
    expect(m.content[0]?.type === 'text' ? m.content[0].text : '').toBe(TOKENS);
    const s = await client.messages
      .stream({ model: 'claude-sonnet-4-5@20250929', max_tokens: 64, messages: ask })
      .finalMessage();
    expect(s.usage.output_tokens).toBe(4);
    expect(double.calls.filter((c) => c.kind === 'vertex').map((c) => c.path)).toEqual([
      '/vertex/v1/projects/pao-e2e-project/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929:rawPredict',
      '/vertex/v1/projects/pao-e2e-project/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929:streamRawPredict',
    ]);
  });

  it('openai-compatible: the OpenAI SDK on the server directly', async () => {
    const client = new OpenAI({ apiKey: 'unused', baseURL: `${double.url}/compatible/v1`, maxRetries: 0 });
    expect(await chatText(client, 'meta-llama/Llama-3.1-8B-Instruct')).toBe(TOKENS);
    const models = [];
    for await (const m of client.models.list()) models.push(m.id);
    expect(models).toEqual(['meta-llama/Llama-3.1-8B-Instruct']);
  });

  it('azure: AzureOpenAI on the v1 API with the key and on the dated API', async () => {
    const v1 = new OpenAI({
      apiKey: AZURE_KEY,
      baseURL: `${double.env.PAO_ENDPOINT_URL_AZURE_OPENAI}/openai/v1`,
      defaultHeaders: { 'api-key': AZURE_KEY },
      maxRetries: 0,
    });
    expect(await chatText(v1, 'gpt4o-prod')).toBe(TOKENS);
    const dated = new AzureOpenAI({
      apiKey: AZURE_KEY,
      endpoint: double.env.PAO_ENDPOINT_URL_AZURE_OPENAI,
      apiVersion: '2024-10-21',
      deployment: 'gpt4o-prod',
      maxRetries: 0,
    });
    expect(await chatText(dated, 'gpt-4o')).toBe(TOKENS);
    await expect(
      new AzureOpenAI({
        apiKey: AZURE_KEY,
        endpoint: double.env.PAO_ENDPOINT_URL_AZURE_OPENAI,
        apiVersion: '2024-10-21',
        deployment: 'nope',
        maxRetries: 0,
      }).chat.completions.create({ model: 'x', messages: ask }),
    ).rejects.toMatchObject({ status: 404, code: 'DeploymentNotFound' });
  });
});

describe('through the gateway: each provider with the official SDKs', () => {
  it('OpenAI: chat, stream with usage, tools, JSON output, completions, embeddings, responses (native)', async () => {
    const client = gatewayOpenAI();
    expect(await chatText(client, 'gpt-4o')).toBe(TOKENS);
    const streamed = await streamText(client, 'gpt-4o');
    expect(streamed.text).toBe(TOKENS);
    expect(streamed.usage?.completion_tokens).toBe(4);
    const tool = await client.chat.completions.create({
      model: 'gpt-4o-mini',
      messages: ask,
      tools: [
        {
          type: 'function',
          function: { name: 'weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } },
        },
      ],
    });
    expect(tool.choices[0]?.finish_reason).toBe('tool_calls');
    const json = await client.chat.completions.create({
      model: 'gpt-4o',
      messages: ask,
      response_format: { type: 'json_object' },
    });
    expect(JSON.parse(json.choices[0]?.message.content ?? '')).toEqual({ answer: 'tok0 from gpt-4o' });
    const completion = await client.completions.create({ model: 'gpt-4o-mini', prompt: 'one two' });
    expect(completion.choices[0]?.text).toBe(TOKENS);
    const emb = await client.embeddings.create({ model: 'text-embedding-3-small', input: 'a b c' });
    expect(emb.data[0]?.embedding).toHaveLength(4);
    const resp = await client.responses.create({ model: 'gpt-4o', input: 'hello there' });
    expect(resp.output_text).toBe(TOKENS);
    // Native: the double saw the Responses call itself, with the key the Secret holds.
    const seen = double.calls.filter((c) => c.kind === 'openai');
    expect(seen.map((c) => c.path)).toContain('/openai-api/v1/responses');
    expect(seen.every((c) => c.headers.authorization === `Bearer ${OPENAI_KEY}`)).toBe(true);
  });

  it('Anthropic: Messages natively (create, stream, tools, beta header), chat and Responses translated', async () => {
    const client = gatewayAnthropic();
    const m = keep(await client.messages.create({ model: 'claude-sonnet-4-5', max_tokens: 64, messages: ask }));
    expect(m.content[0]?.type === 'text' ? m.content[0].text : '').toBe(TOKENS);
    const streamed = await client.messages
      .stream(
        { model: 'claude-sonnet-4-5', max_tokens: 64, messages: ask },
        { headers: { 'anthropic-beta': 'interleaved-thinking-2025-05-14' } },
      )
      .finalMessage();
    expect(streamed.content[0]?.type === 'text' ? streamed.content[0].text : '').toBe(TOKENS);
    expect(streamed.usage.output_tokens).toBe(4);
    const tool = await client.messages.create({
      model: 'claude-sonnet-4-5',
      max_tokens: 64,
      messages: ask,
      tools: [{ name: 'weather', input_schema: { type: 'object', properties: { city: { type: 'string' } } } }],
    });
    expect(tool.stop_reason).toBe('tool_use');
    const calls = double.calls.filter((c) => c.kind === 'anthropic');
    expect(
      calls.every((c) => c.headers['x-api-key'] === ANTHROPIC_KEY && c.headers['anthropic-version'] === '2023-06-01'),
    ).toBe(true);
    expect(calls.some((c) => c.headers['anthropic-beta'] === 'interleaved-thinking-2025-05-14')).toBe(true);
    // Chat completions and the Responses API reach the same model through the translators.
    const openai = gatewayOpenAI();
    expect(await chatText(openai, 'claude-sonnet-4-5')).toBe(TOKENS);
    expect((await streamText(openai, 'claude-sonnet-4-5')).text).toBe(TOKENS);
    const resp = await openai.responses.create({ model: 'claude-sonnet-4-5', input: 'hello there' });
    expect(resp.output_text).toBe(TOKENS);
    expect(
      double.calls.filter((c) => c.kind === 'anthropic').every((c) => c.path === '/anthropic-api/v1/messages'),
    ).toBe(true);
  });

  it('Azure OpenAI: the key on the v1 API, workload identity (Entra ID, token cached) on the dated API', async () => {
    const client = gatewayOpenAI();
    expect(await chatText(client, 'gpt4o-prod')).toBe(TOKENS);
    expect((await streamText(client, 'gpt4o-prod')).text).toBe(TOKENS);
    expect((await client.embeddings.create({ model: 'embed-small', input: 'a' })).data).toHaveLength(1);
    const v1 = double.calls.filter((c) => c.kind === 'azure');
    expect(v1.every((c) => c.headers['api-key'] === AZURE_KEY && c.path.startsWith('/azure/openai/v1/'))).toBe(true);
    expect(v1.map((c) => (c.body as { model?: string }).model)).toContain('gpt4o-prod');
    double.reset();
    expect(await chatText(client, 'gpt4o-wi')).toBe(TOKENS);
    expect(await chatText(client, 'gpt4o-wi')).toBe(TOKENS);
    const entra = double.calls.filter((c) => c.path.startsWith('/entra/'));
    expect(entra).toHaveLength(1);
    expect(entra[0]?.path).toBe(`/entra/${TENANT}/oauth2/v2.0/token`);
    expect(entra[0]?.body).toMatchObject({ client_id: CLIENT, scope: 'https://cognitiveservices.azure.com/.default' });
    const wi = double.calls.filter((c) => c.kind === 'azure');
    expect(wi.map((c) => c.path)).toEqual([
      '/azure/openai/deployments/gpt4o-wi/chat/completions?api-version=2024-10-21',
      '/azure/openai/deployments/gpt4o-wi/chat/completions?api-version=2024-10-21',
    ]);
    expect(
      wi.every((c) => /^Bearer entra-/.test(String(c.headers.authorization)) && c.headers['api-key'] === undefined),
    ).toBe(true);
  });

  it('Vertex AI: Gemini on its OpenAI endpoint, Claude by rawPredict; STS + impersonation, and the GKE metadata server', async () => {
    const client = gatewayOpenAI();
    expect(await chatText(client, 'gemini-2.5-flash')).toBe(TOKENS);
    expect((await streamText(client, 'gemini-2.5-flash')).text).toBe(TOKENS);
    const anthropic = gatewayAnthropic();
    const m = await anthropic.messages.create({ model: 'claude-sonnet-4-5@20250929', max_tokens: 64, messages: ask });
    expect(m.content[0]?.type === 'text' ? m.content[0].text : '').toBe(TOKENS);
    const s = await anthropic.messages
      .stream({ model: 'claude-sonnet-4-5@20250929', max_tokens: 64, messages: ask })
      .finalMessage();
    expect(s.content[0]?.type === 'text' ? s.content[0].text : '').toBe(TOKENS);
    expect(await chatText(client, 'claude-sonnet-4-5@20250929')).toBe(TOKENS);
    const vertex = double.calls.filter((c) => c.kind === 'vertex').map((c) => c.path);
    // Claude on Vertex: Vertex's own anthropic_version, the model in the path only.
    const raw = double.calls.filter((c) => /:(stream)?[rR]awPredict$/.test(c.path));
    expect(raw.length).toBeGreaterThanOrEqual(3);
    for (const c of raw) {
      expect(c.body).toMatchObject({ anthropic_version: 'vertex-2023-10-16' });
      expect(c.body).not.toHaveProperty('model');
    }
    expect(vertex).toContain(
      '/vertex/v1/projects/pao-e2e-project/locations/us-east5/endpoints/openapi/chat/completions',
    );
    expect(vertex).toContain(
      '/vertex/v1/projects/pao-e2e-project/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5%4020250929:rawPredict',
    );
    expect(vertex).toContain(
      '/vertex/v1/projects/pao-e2e-project/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5%4020250929:streamRawPredict',
    );
    // One exchange at STS, one impersonation: then the cached token.
    expect(double.calls.filter((c) => c.path === '/sts/v1/token')).toHaveLength(1);
    expect(double.calls.filter((c) => c.path.startsWith('/iam/'))).toHaveLength(1);
    expect(double.calls.find((c) => c.path === '/sts/v1/token')?.body).toMatchObject({
      audience:
        '//iam.googleapis.com/projects/123456789012/locations/global/workloadIdentityPools/pao/providers/cluster',
      subjectTokenType: 'urn:ietf:params:oauth:token-type:jwt',
    });
    double.reset();
    expect(await chatText(client, 'gemini-2.5-pro')).toBe(TOKENS);
    expect(double.calls.map((c) => c.path)).toEqual([
      '/computeMetadata/v1/instance/service-accounts/default/token',
      '/vertex/v1/projects/pao-e2e-project/locations/global/endpoints/openapi/chat/completions',
    ]);
  });

  it('count_tokens is exact where the provider counts (Anthropic, Claude on Vertex), an estimate elsewhere', async () => {
    const anthropic = gatewayAnthropic();
    const words = ask[0]?.content.split(/\s+/).length ?? 0;
    // A gateway alias counts as its model: the provider is asked with the model's own id.
    for (const model of ['claude-sonnet-4-5', 'sonnet', 'claude-sonnet-4-5@20250929']) {
      const { data, response } = await anthropic.messages.countTokens({ model, messages: ask }).withResponse();
      expect(data.input_tokens).toBe(words);
      expect(response.headers.get('x-gateway-token-count')).toBe('exact');
    }
    expect(
      double.calls.filter((c) => c.path.endsWith('count_tokens')).map((c) => (c.body as { model: string }).model),
    ).toEqual(['claude-sonnet-4-5', 'claude-sonnet-4-5']);
    expect(double.calls.map((c) => c.path)).toEqual(
      expect.arrayContaining([
        '/anthropic-api/v1/messages/count_tokens',
        '/vertex/v1/projects/pao-e2e-project/locations/us-east5/publishers/anthropic/models/count-tokens:rawPredict',
      ]),
    );
    const { response } = await anthropic.messages
      .countTokens({ model: 'gemini-2.5-flash', messages: ask })
      .withResponse();
    expect(response.headers.get('x-gateway-token-count')).toBe('estimate');
  });

  it('an OpenAI-compatible server: chat and stream pass through; Responses and Messages callers are translated to chat', async () => {
    const model = 'meta-llama/Llama-3.1-8B-Instruct';
    const client = gatewayOpenAI();
    expect(await chatText(client, model)).toBe(TOKENS);
    expect((await streamText(client, model)).text).toBe(TOKENS);
    expect((await client.responses.create({ model, input: 'hello' })).output_text).toBe(TOKENS);
    const m = await gatewayAnthropic().messages.create({ model, max_tokens: 64, messages: ask });
    expect(m.content[0]?.type === 'text' ? m.content[0].text : '').toBe(TOKENS);
    expect(
      double.calls.filter((c) => c.kind === 'compatible').every((c) => c.path === '/compatible/v1/chat/completions'),
    ).toBe(true);
    expect(double.calls.every((c) => c.headers.authorization === undefined)).toBe(true);
  });

  it('Azure on a dated API older than stream_options: streams without the usage chunk, usage counted from the stream', async () => {
    const client = gatewayOpenAI('team:azure-old');
    // The client asks for the usage chunk; that API version cannot give it.
    const streamed = await streamText(client, 'gpt4o-old');
    expect(streamed.text).toBe(TOKENS);
    expect(streamed.usage).toBeUndefined();
    expect(double.calls.find((c) => c.kind === 'azure')?.body).not.toHaveProperty('stream_options');
    await new Promise((r) => setTimeout(r, 400));
    const usage = (await (
      await fetch(`${proxy.base}/v1/usage?tag=team:azure-old`, { headers: { 'x-api-key': KEY } })
    ).json()) as {
      totals: { requests: number; outputTokens: number };
    };
    expect(usage.totals).toMatchObject({ requests: 1, outputTokens: 4 });
  });

  it('Claude on Vertex takes images inline only: a linked image is a clear 400 before any call', async () => {
    const err = await gatewayOpenAI()
      .chat.completions.create({
        model: 'claude-sonnet-4-5@20250929',
        messages: [
          {
            role: 'user',
            content: [
              { type: 'image_url', image_url: { url: 'https://example.com/cat.png' } },
              { type: 'text', text: 'what is it' },
            ],
          },
        ],
      })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect((err as Error).message).toContain('Claude on Vertex AI takes images and documents inline');
    expect(double.calls.filter((c) => c.kind === 'vertex')).toEqual([]);
    // Inline, it goes through.
    const png = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==';
    const ok = await gatewayOpenAI().chat.completions.create({
      model: 'claude-sonnet-4-5@20250929',
      messages: [
        {
          role: 'user',
          content: [
            { type: 'image_url', image_url: { url: `data:image/png;base64,${png}` } },
            { type: 'text', text: 'what is it' },
          ],
        },
      ],
    });
    expect(ok.choices[0]?.message.content).toBe(TOKENS);
  });

  it('a pair no provider serves is one 400 naming the endpoint and the provider', async () => {
    const err = await gatewayOpenAI()
      .embeddings.create({ model: 'claude-sonnet-4-5', input: 'a' })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect((err as Error).message).toMatch(
      /\/openai\/v1\/embeddings is not served for claude-sonnet-4-5 \(Anthropic\)/,
    );
    expect((err as { code?: string }).code).toBe('unsupported_endpoint');
  });
});

/** One row of a provider's error table as a caller sees it. */
interface Row {
  kind: HostedKind;
  model: string;
  status: number;
  body: unknown;
  expect: { status: number; code: string; text: RegExp };
}

const ROWS: Row[] = [
  {
    kind: 'openai',
    model: 'gpt-4o',
    status: 401,
    body: {
      error: {
        message: 'Incorrect API key provided: sk-abc***wxyz',
        type: 'invalid_request_error',
        code: 'invalid_api_key',
      },
    },
    expect: { status: 502, code: 'provider_auth_failed', text: /refused the API key/ },
  },
  {
    kind: 'openai',
    model: 'gpt-4o',
    status: 403,
    body: {
      error: {
        message: 'Country, region, or territory not supported',
        type: 'request_forbidden',
        code: 'unsupported_country_region_territory',
      },
    },
    expect: { status: 502, code: 'provider_region_refused', text: /does not serve the region/ },
  },
  {
    kind: 'openai',
    model: 'gpt-4o',
    status: 403,
    body: {
      error: {
        message: 'Project proj_123 does not have access to model gpt-4o',
        type: 'invalid_request_error',
        code: 'model_not_found',
      },
    },
    expect: { status: 403, code: 'provider_access_denied', text: /denied access to gpt-4o/ },
  },
  {
    kind: 'openai',
    model: 'gpt-4o',
    status: 404,
    body: {
      error: { message: 'The model `gpt-4o` does not exist', type: 'invalid_request_error', code: 'model_not_found' },
    },
    expect: { status: 404, code: 'model_not_found', text: /does not have gpt-4o/ },
  },
  {
    kind: 'openai',
    model: 'gpt-4o',
    status: 429,
    body: {
      error: { message: 'You exceeded your current quota', type: 'insufficient_quota', code: 'insufficient_quota' },
    },
    expect: { status: 429, code: 'provider_quota_exceeded', text: /quota for the account is spent/ },
  },
  {
    kind: 'openai',
    model: 'gpt-4o',
    status: 400,
    body: { error: { message: "Invalid value for 'temperature'", type: 'invalid_request_error', code: null } },
    expect: { status: 400, code: 'upstream_rejected', text: /rejected the request for gpt-4o: Invalid value/ },
  },
  {
    kind: 'anthropic',
    model: 'claude-sonnet-4-5',
    status: 401,
    body: { type: 'error', error: { type: 'authentication_error', message: 'invalid x-api-key' } },
    expect: { status: 502, code: 'provider_auth_failed', text: /refused the API key/ },
  },
  {
    kind: 'anthropic',
    model: 'claude-sonnet-4-5',
    status: 403,
    body: { type: 'error', error: { type: 'permission_error', message: 'Your API key does not have permission' } },
    expect: { status: 403, code: 'provider_access_denied', text: /denied the key access/ },
  },
  {
    kind: 'anthropic',
    model: 'claude-sonnet-4-5',
    status: 400,
    body: {
      type: 'error',
      error: { type: 'invalid_request_error', message: 'Your credit balance is too low to access the Anthropic API.' },
    },
    expect: { status: 429, code: 'provider_quota_exceeded', text: /credit balance is spent/ },
  },
  {
    kind: 'anthropic',
    model: 'claude-sonnet-4-5',
    status: 529,
    body: { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } },
    expect: { status: 502, code: 'upstream_error', text: /failed \(529\): Overloaded/ },
  },
  {
    kind: 'azure',
    model: 'gpt4o-prod',
    status: 401,
    body: { error: { code: '401', message: 'Access denied due to invalid subscription key or wrong API endpoint.' } },
    expect: { status: 502, code: 'provider_auth_failed', text: /Cognitive|WorkloadIdentity/ },
  },
  {
    kind: 'azure',
    model: 'gpt4o-prod',
    status: 403,
    body: {
      error: {
        code: 'PermissionDenied',
        message:
          'The principal lacks the required data action Microsoft.CognitiveServices/accounts/OpenAI/deployments/chat/completions/action',
      },
    },
    expect: { status: 502, code: 'provider_access_denied', text: /Cognitive Services OpenAI User/ },
  },
  {
    kind: 'azure',
    model: 'gpt4o-prod',
    status: 404,
    body: { error: { code: 'DeploymentNotFound', message: 'The API deployment for this resource does not exist.' } },
    expect: { status: 404, code: 'model_not_found', text: /has no deployment gpt4o-prod/ },
  },
  {
    kind: 'azure',
    model: 'gpt4o-prod',
    status: 400,
    body: {
      error: {
        code: 'content_filter',
        message: "The response was filtered due to the prompt triggering Azure OpenAI's content management policy.",
      },
    },
    expect: { status: 400, code: 'content_filter', text: /content filter blocked/ },
  },
  {
    kind: 'vertex',
    model: 'gemini-2.5-flash',
    status: 403,
    body: {
      error: {
        code: 403,
        message: 'Vertex AI API has not been used in project 123456789012 before or it is disabled.',
        status: 'PERMISSION_DENIED',
      },
    },
    expect: { status: 502, code: 'provider_api_disabled', text: /enable aiplatform.googleapis.com/ },
  },
  {
    kind: 'vertex',
    model: 'gemini-2.5-flash',
    status: 403,
    body: {
      error: {
        code: 403,
        message: "Permission 'aiplatform.endpoints.predict' denied on resource",
        status: 'PERMISSION_DENIED',
      },
    },
    expect: { status: 403, code: 'provider_access_denied', text: /roles\/aiplatform.user/ },
  },
  {
    kind: 'vertex',
    model: 'gemini-2.5-flash',
    status: 404,
    body: { error: { code: 404, message: 'Publisher Model was not found', status: 'NOT_FOUND' } },
    expect: { status: 404, code: 'model_not_found', text: /vertex.location/ },
  },
  {
    kind: 'vertex',
    model: 'gemini-2.5-flash',
    status: 429,
    body: {
      error: {
        code: 429,
        message:
          'Quota exceeded for aiplatform.googleapis.com/generate_content_requests_per_minute_per_project_per_base_model',
        status: 'RESOURCE_EXHAUSTED',
      },
    },
    expect: { status: 429, code: 'upstream_rate_limited', text: /request more quota/ },
  },
  {
    kind: 'vertex',
    model: 'gemini-2.5-flash',
    status: 400,
    body: {
      error: { code: 400, message: 'Billing is disabled for project 123456789012.', status: 'FAILED_PRECONDITION' },
    },
    expect: { status: 502, code: 'provider_billing_disabled', text: /billing is not enabled/ },
  },
  {
    kind: 'compatible',
    model: 'meta-llama/Llama-3.1-8B-Instruct',
    status: 500,
    body: { error: { message: 'CUDA out of memory', type: 'InternalServerError', code: 500 } },
    expect: { status: 502, code: 'upstream_error', text: /failed \(500\): CUDA out of memory/ },
  },
];

describe('the coding agents against hosted providers through the gateway', () => {
  const clients = installClients();

  it('Claude Code (claude -p) completes a tool turn against Claude at Anthropic', async () => {
    const out = await claudePrint(clients, {
      base: proxy.base,
      key: KEY,
      model: 'claude-sonnet-4-5',
      prompt: 'Use Bash to run: echo gateway-ok',
    });
    expect(out.is_error).toBe(false);
    expect(out.result).toContain('tok0');
    // The double's Claude called Bash; Claude Code ran it and sent the result back.
    const messages = double.calls.filter((c) => c.kind === 'anthropic' && c.path === '/anthropic-api/v1/messages');
    expect(
      messages.some((c) =>
        JSON.stringify((c.body as { messages: unknown[] }).messages.at(-1)).includes('"type":"tool_result"'),
      ),
    ).toBe(true);
    expect(messages.every((c) => c.headers['x-api-key'] === ANTHROPIC_KEY)).toBe(true);
  }, 600_000);

  it('Codex (codex exec) completes a turn over the Responses API at OpenAI', async () => {
    const home = mkdtempSync(join(tmpdir(), 'pao-codex-home-'));
    writeFileSync(
      join(home, 'config.toml'),
      [
        'model = "gpt-4o"',
        'model_provider = "gateway"',
        'web_search = "disabled"',
        '[model_providers.gateway]',
        'name = "gateway"',
        `base_url = "${proxy.base}/openai/v1"`,
        'env_key = "GATEWAY_KEY"',
        'wire_api = "responses"',
        'request_max_retries = 0',
        'stream_max_retries = 0',
        '[analytics]',
        'enabled = false',
        '[otel]',
        'exporter = "none"',
      ].join('\n'),
    );
    const codex = run(bin(clients, 'codex'), ['exec', '--skip-git-repo-check', 'Say hi'], {
      cwd: home,
      timeout: 300_000,
      env: { PATH: process.env.PATH ?? '', HOME: home, CODEX_HOME: home, GATEWAY_KEY: KEY },
    });
    codex.child.stdin?.end();
    const { stdout } = await codex;
    expect(stdout).toContain('tok0');
    expect(double.calls.filter((c) => c.kind === 'openai').map((c) => c.path)).toContain('/openai-api/v1/responses');
  }, 600_000);
});

describe("each row of each provider's error table, as a caller sees it", () => {
  it.each(ROWS.map((r) => [`${r.kind} ${r.status} -> ${r.expect.code}`, r] as const))('%s', async (_name, row) => {
    // Enough failures for every retry the proxy makes.
    double.fail({ kind: row.kind, status: row.status, body: row.body, times: 5 });
    const res = await fetch(`${proxy.base}/openai/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': KEY },
      body: JSON.stringify({ model: row.model, messages: ask }),
    });
    const body = (await res.json()) as { error: { message: string; code: string } };
    answers.push(JSON.stringify(body));
    expect(res.status).toBe(row.expect.status);
    expect(body.error.code).toBe(row.expect.code);
    expect(body.error.message).toMatch(row.expect.text);
    // Redacted: no project number, no key fragment.
    expect(body.error.message).not.toMatch(/123456789012|sk-abc|proj_123/);
  });
});

describe('throttling, cuts and fallbacks', () => {
  it('a 429 with retry-after is retried after the time it gives; a lasting one reaches the caller with the headers', async () => {
    double.fail({
      kind: 'openai',
      status: 429,
      body: { error: { message: 'Rate limit reached for gpt-4o', type: 'requests', code: 'rate_limit_exceeded' } },
      headers: { 'retry-after': '1', 'x-ratelimit-remaining-requests': '0' },
    });
    const started = Date.now();
    expect(await chatText(gatewayOpenAI(), 'gpt-4o')).toBe(TOKENS);
    expect(Date.now() - started).toBeGreaterThanOrEqual(900);
    double.reset();
    double.fail({
      kind: 'anthropic',
      status: 429,
      body: {
        type: 'error',
        error: {
          type: 'rate_limit_error',
          message: 'Number of request tokens has exceeded your per-minute rate limit',
        },
      },
      headers: { 'retry-after': '30', 'anthropic-ratelimit-requests-remaining': '0' },
      times: 10,
    });
    const res = await fetch(`${proxy.base}/anthropic/v1/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': KEY, 'anthropic-version': '2023-06-01' },
      body: JSON.stringify({ model: 'claude-sonnet-4-5', max_tokens: 10, messages: ask }),
    });
    expect(res.status).toBe(429);
    expect(res.headers.get('retry-after')).toBe('30');
    expect(res.headers.get('anthropic-ratelimit-requests-remaining')).toBe('0');
    expect(((await res.json()) as { error: { type: string } }).error.type).toBe('rate_limit_error');
  });

  it('a stream the provider cuts mid-way ends with an error the SDK raises, and is recorded', async () => {
    double.behave({ cutAfterTokens: 2 });
    const client = gatewayOpenAI('team:cut');
    await expect(streamText(client, 'gpt-4o')).rejects.toThrow(/ended the stream early|broke off/);
    await expect(
      gatewayAnthropic('team:cut')
        .messages.stream({ model: 'claude-sonnet-4-5', max_tokens: 10, messages: ask })
        .finalMessage(),
    ).rejects.toThrow();
    await new Promise((r) => setTimeout(r, 400));
    const usage = await (await fetch(`${proxy.base}/v1/usage?tag=team:cut`, { headers: { 'x-api-key': KEY } })).json();
    expect((usage as { totals: { requests: number } }).totals.requests).toBe(2);
  });

  it('a stream cut through the translators (chat to Claude, Responses to Claude) ends with the error the SDK raises', async () => {
    double.behave({ cutAfterTokens: 2 });
    await expect(streamText(gatewayOpenAI(), 'claude-sonnet-4-5')).rejects.toThrow(/ended the stream early|broke off/);
    const events: string[] = [];
    const run = async () => {
      for await (const e of await gatewayOpenAI().responses.create({
        model: 'claude-sonnet-4-5',
        input: 'hi',
        stream: true,
      }))
        events.push(e.type);
    };
    await expect(run()).rejects.toThrow();
    expect(events).not.toContain('response.completed');
  });

  it('a Vertex RESOURCE_EXHAUSTED for a moment is retried, not passed on', async () => {
    double.fail({
      kind: 'vertex',
      status: 429,
      body: {
        error: { code: 429, message: 'Resource exhausted. Please try again later.', status: 'RESOURCE_EXHAUSTED' },
      },
    });
    expect(await chatText(gatewayOpenAI(), 'gemini-2.5-flash')).toBe(TOKENS);
    expect(double.calls.filter((c) => c.kind === 'vertex')).toHaveLength(2);
  });

  it('OpenAI failing falls back to Claude at Anthropic (translated), and the answer says who served', async () => {
    double.fail({
      kind: 'openai',
      status: 503,
      body: { error: { message: 'The server is overloaded', type: 'server_error', code: null } },
      times: 10,
    });
    const res = await fetch(`${proxy.base}/openai/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': KEY },
      body: JSON.stringify({ model: 'gpt-4.1', messages: ask }),
    });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { choices: Array<{ message: { content: string } }> };
    expect(body.choices[0]?.message.content).toBe(TOKENS);
    expect(double.calls.filter((c) => c.kind === 'anthropic')).toHaveLength(1);
  });
});

/** The usage report's totals for one tag. */
const totals = async (tag: string) =>
  (
    (await (await fetch(`${proxy.base}/v1/usage?tag=${tag}`, { headers: { 'x-api-key': KEY } })).json()) as {
      totals: { requests: number; inputTokens: number; outputTokens: number; costUsd: number };
    }
  ).totals;

describe('usage and cost, to the token, from each provider’s own counts', () => {
  it('OpenAI cached input, Anthropic cache reads and writes, Vertex Gemini: priced apart as the table says', async () => {
    double.behave({ cacheRead: 2, cacheWrite: 1 });
    const words = ask[0]?.content.split(/\s+/).length ?? 0;
    await chatText(gatewayOpenAI('cost:openai'), 'gpt-4o');
    await gatewayAnthropic('cost:anthropic').messages.create({
      model: 'claude-sonnet-4-5',
      max_tokens: 10,
      messages: ask,
    });
    await chatText(gatewayOpenAI('cost:vertex'), 'gemini-2.5-flash');
    await new Promise((r) => setTimeout(r, 400));
    const openai = await totals('cost:openai');
    expect(openai).toMatchObject({ requests: 1, inputTokens: words, outputTokens: 4 });
    // gpt-4o: 2.50 in, 1.25 cached, 10 out per 1M.
    expect(openai.costUsd).toBeCloseTo(((words - 2) * 2.5 + 2 * 1.25 + 4 * 10) / 1e6, 12);
    const anthropic = await totals('cost:anthropic');
    expect(anthropic).toMatchObject({ requests: 1, inputTokens: words, outputTokens: 4 });
    // claude-sonnet-4-5: 3 in, 0.30 cache read, 3.75 cache write, 15 out.
    expect(anthropic.costUsd).toBeCloseTo(((words - 3) * 3 + 2 * 0.3 + 1 * 3.75 + 4 * 15) / 1e6, 12);
    const vertex = await totals('cost:vertex');
    // gemini-2.5-flash: 0.30 in, 0.03 cached, 2.50 out.
    expect(vertex.costUsd).toBeCloseTo(((words - 2) * 0.3 + 2 * 0.03 + 4 * 2.5) / 1e6, 12);
  });

  it('streamed answers, Claude on Vertex, Azure deployments and 1-hour cache writes', async () => {
    // The prompt is 4 words: 1 fresh, 1 read, 2 written (1 of them for an hour).
    double.behave({ cacheRead: 1, cacheWrite: 2, cacheWrite1h: 1 });
    const words = ask[0]?.content.split(/\s+/).length ?? 0;
    await streamText(gatewayOpenAI('cost:stream-openai'), 'gpt-4o');
    await gatewayAnthropic('cost:stream-claude')
      .messages.stream({ model: 'claude-sonnet-4-5', max_tokens: 10, messages: ask })
      .finalMessage();
    await gatewayAnthropic('cost:vertex-claude').messages.create({
      model: 'claude-sonnet-4-5@20250929',
      max_tokens: 10,
      messages: ask,
    });
    await chatText(gatewayOpenAI('cost:azure'), 'gpt4o-prod');
    await new Promise((r) => setTimeout(r, 400));
    expect(words).toBe(4);
    const gpt4o = ((words - 1) * 2.5 + 1 * 1.25 + 4 * 10) / 1e6;
    expect((await totals('cost:stream-openai')).costUsd).toBeCloseTo(gpt4o, 12);
    // Azure's deployment of gpt-4o at gpt-4o's prices.
    expect((await totals('cost:azure')).costUsd).toBeCloseTo(gpt4o, 12);
    // claude-sonnet-4-5: 3 in, 0.30 read, 3.75 5-minute write, 6.00 1-hour write, 15 out.
    const claude = (1 * 3 + 1 * 0.3 + 1 * 3.75 + 1 * 6 + 4 * 15) / 1e6;
    expect(await totals('cost:stream-claude')).toMatchObject({ requests: 1, inputTokens: words, outputTokens: 4 });
    expect((await totals('cost:stream-claude')).costUsd).toBeCloseTo(claude, 12);
    expect((await totals('cost:vertex-claude')).costUsd).toBeCloseTo(claude, 12);
  });
});

describe('secrets', () => {
  it('no key, token or federated token in anything the proxy printed or answered', () => {
    const seen = `${proxy.output()}\n${answers.join('\n')}`;
    for (const secret of [OPENAI_KEY, ANTHROPIC_KEY, AZURE_KEY, FEDERATED, ...double.issuedTokens()]) {
      expect(seen).not.toContain(secret);
    }
    expect(proxy.output()).not.toContain(PROMPT_CANARY);
  });
});
