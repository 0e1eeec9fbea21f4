import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { hostedPrice, loadBedrockPrices } from '../catalog/prices.js';
import type { Dialect } from '../constants.js';
import type { ExternalProviderSpec } from '../external-provider.js';
import { undatedMatch } from './anthropic.js';
import { ProviderCredentials } from './credentials.js';
import {
  CredentialError,
  classify,
  isFanOut,
  isRefusal,
  listed,
  type ProviderIdentity,
  type ProviderModule,
  type ProviderTarget,
  redact,
  type WireRequest,
} from './provider.js';
import { PROVIDERS } from './table.js';

/** The provider modules as data: where each call goes, what each error means, what each credential costs. */

/** One call's wire request, as the module addresses it. */
function one(module: ProviderModule, ...args: Parameters<ProviderModule['request']>): WireRequest {
  const wire = module.request(...args);
  if (isRefusal(wire) || isFanOut(wire)) throw new Error(`expected one request, got ${JSON.stringify(wire)}`);
  return wire;
}

/** The headers a request goes out with, its own being none. */
const authorizeOf = (c: ProviderCredentials, id: ProviderIdentity, module: ProviderModule) =>
  c.authorize(id, module, { method: 'POST', url: 'https://provider.example/v1', headers: {} });

const target = (t: Partial<ProviderTarget> & Pick<ProviderTarget, 'type'>): ProviderTarget => ({
  upstreamModel: 'm',
  family: 'openai',
  modelType: 'text',
  baseUrl: 'https://api.example',
  ...t,
});

describe('each provider addresses a call', () => {
  const body = { model: 'caller-name', messages: [] };
  it.each([
    [
      'openai chat',
      target({ type: 'openai' }),
      'openai-chat',
      false,
      'https://api.example/chat/completions',
      { model: 'caller-name' },
    ],
    [
      'openai responses',
      target({ type: 'openai' }),
      'openai-responses',
      true,
      'https://api.example/responses',
      { model: 'caller-name' },
    ],
    [
      'anthropic',
      target({ type: 'anthropic', family: 'anthropic' }),
      'anthropic-messages',
      true,
      'https://api.example/v1/messages',
      { model: 'caller-name' },
    ],
    [
      'azure v1: the deployment as model',
      target({ type: 'azure-openai', upstreamModel: 'gpt4o-prod' }),
      'openai-chat',
      false,
      'https://api.example/openai/v1/chat/completions',
      { model: 'gpt4o-prod' },
    ],
    [
      'azure dated: the deployment in the path, no model',
      target({ type: 'azure-openai', upstreamModel: 'gpt4o prod', apiVersion: '2024-10-21' }),
      'openai-embeddings',
      false,
      'https://api.example/openai/deployments/gpt4o%20prod/embeddings?api-version=2024-10-21',
      { model: undefined },
    ],
    [
      'vertex gemini on the OpenAI endpoint',
      target({ type: 'vertex-ai', upstreamModel: 'gemini-2.5-flash', project: 'p', location: 'us-east5' }),
      'openai-chat',
      true,
      'https://api.example/v1/projects/p/locations/us-east5/endpoints/openapi/chat/completions',
      { model: 'google/gemini-2.5-flash' },
    ],
    [
      'vertex claude streamed',
      target({
        type: 'vertex-ai',
        family: 'anthropic',
        upstreamModel: 'claude-sonnet-4-5@20250929',
        project: 'p',
        location: 'global',
      }),
      'anthropic-messages',
      true,
      'https://api.example/v1/projects/p/locations/global/publishers/anthropic/models/claude-sonnet-4-5%4020250929:streamRawPredict',
      { model: undefined, anthropic_version: 'vertex-2023-10-16' },
    ],
    [
      'vertex claude whole',
      target({
        type: 'vertex-ai',
        family: 'anthropic',
        upstreamModel: 'claude-haiku-4-5',
        project: 'p',
        location: 'global',
      }),
      'anthropic-messages',
      false,
      'https://api.example/v1/projects/p/locations/global/publishers/anthropic/models/claude-haiku-4-5:rawPredict',
      { model: undefined },
    ],
    [
      'openai-compatible',
      target({ type: 'openai-compatible', baseUrl: 'http://vllm:8000/v1' }),
      'openai-completions',
      false,
      'http://vllm:8000/v1/completions',
      { model: 'caller-name' },
    ],
  ] as const)('%s', (_name, t, dialect, stream, url, fields) => {
    const wire = one(PROVIDERS[t.type], t, dialect as Dialect, body, stream);
    expect(wire.url).toBe(url);
    expect(wire.body).toMatchObject(Object.fromEntries(Object.entries(fields).filter(([, v]) => v !== undefined)));
    for (const [k, v] of Object.entries(fields)) if (v === undefined) expect(wire.body).not.toHaveProperty(k);
    expect(wire.body.messages).toEqual([]);
  });

  it.each([
    [target({ type: 'openai' }), ['openai-chat', 'openai-responses', 'openai-completions', 'openai-embeddings']],
    [target({ type: 'openai', modelType: 'embedding' }), ['openai-embeddings']],
    [target({ type: 'anthropic', family: 'anthropic' }), ['anthropic-messages']],
    [target({ type: 'anthropic', modelType: 'embedding' }), []],
    [target({ type: 'azure-openai' }), ['openai-chat', 'openai-responses', 'openai-completions', 'openai-embeddings']],
    [
      target({ type: 'azure-openai', apiVersion: '2024-10-21' }),
      ['openai-chat', 'openai-completions', 'openai-embeddings'],
    ],
    [target({ type: 'vertex-ai' }), ['openai-chat']],
    [target({ type: 'vertex-ai', family: 'anthropic' }), ['anthropic-messages']],
    [target({ type: 'openai-compatible' }), ['openai-chat', 'openai-completions', 'openai-embeddings']],
  ])('%o speaks %o natively', (t, dialects) => {
    expect(PROVIDERS[t.type].dialects(t)).toEqual(dialects);
  });

  it('takes the API root from the spec, the env override first', () => {
    const spec = {
      provider: 'azure-openai',
      azure: { resourceName: 'contoso', deployments: [] },
    } as unknown as ExternalProviderSpec;
    expect(PROVIDERS['azure-openai'].baseUrl(spec, {})).toBe('https://contoso.openai.azure.com');
    expect(
      PROVIDERS['azure-openai'].baseUrl(spec, { PAO_ENDPOINT_URL_AZURE_OPENAI: 'http://127.0.0.1:9/azure/' }),
    ).toBe('http://127.0.0.1:9/azure');
    const vertex = {
      provider: 'vertex-ai',
      vertex: { project: 'p', location: 'europe-west4' },
    } as unknown as ExternalProviderSpec;
    expect(PROVIDERS['vertex-ai'].baseUrl(vertex, {})).toBe('https://europe-west4-aiplatform.googleapis.com');
    const global = {
      provider: 'vertex-ai',
      vertex: { project: 'p', location: 'global' },
    } as unknown as ExternalProviderSpec;
    expect(PROVIDERS['vertex-ai'].baseUrl(global, {})).toBe('https://aiplatform.googleapis.com');
    expect(PROVIDERS.openai.baseUrl({ provider: 'openai' } as ExternalProviderSpec, {})).toBe(
      'https://api.openai.com/v1',
    );
    expect(
      PROVIDERS.anthropic.baseUrl({ provider: 'anthropic', baseUrl: 'https://eu.example' } as ExternalProviderSpec, {}),
    ).toBe('https://eu.example');
  });
});

describe('error tables', () => {
  const call = {
    stage: 'call',
    provider: 'ns/p',
    model: 'm',
    identity: { provider: 'openai', auth: { method: 'APIKey', secretRef: { name: 's' } } },
  } as const;
  it.each([
    [
      'openai',
      429,
      { error: { type: 'insufficient_quota', code: 'insufficient_quota', message: 'quota' } },
      'QuotaExceeded',
      429,
    ],
    [
      'openai',
      429,
      { error: { type: 'requests', code: 'rate_limit_exceeded', message: 'slow down' } },
      'Throttled',
      429,
    ],
    ['openai', 401, { error: { code: 'invalid_api_key', message: 'bad' } }, 'InvalidAPIKey', 502],
    [
      'anthropic',
      529,
      { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } },
      'ProviderUnavailable',
      502,
    ],
    [
      'anthropic',
      413,
      { type: 'error', error: { type: 'request_too_large', message: 'too big' } },
      'RequestRejected',
      400,
    ],
    ['azure-openai', 404, { error: { code: 'DeploymentNotFound', message: 'no' } }, 'DeploymentNotFound', 404],
    ['azure-openai', 404, { error: { code: '404', message: 'Resource not found' } }, 'ResourceNotFound', 404],
    [
      'vertex-ai',
      429,
      { error: { code: 429, status: 'RESOURCE_EXHAUSTED', message: 'Quota exceeded' } },
      'QuotaExceeded',
      429,
    ],
    [
      'vertex-ai',
      429,
      [{ error: { code: 429, status: 'RESOURCE_EXHAUSTED', message: 'Quota exceeded' } }],
      'QuotaExceeded',
      429,
    ],
    [
      'vertex-ai',
      400,
      { type: 'error', error: { type: 'invalid_request_error', message: 'max_tokens: field required' } },
      'RequestRejected',
      400,
    ],
    ['openai-compatible', 418, 'not json', 'ProviderError', 502],
  ] as const)('%s %i -> %s', (type, status, body, reason, callerStatus) => {
    const p = PROVIDERS[type].problem({ kind: 'answer', status, headers: {}, body }, call);
    expect([p.reason, p.status]).toEqual([reason, callerStatus]);
  });

  it("gives retry-after in whole seconds, and shows the provider's message redacted", () => {
    const p = PROVIDERS.openai.problem(
      {
        kind: 'answer',
        status: 429,
        headers: { 'retry-after': '1.5' },
        body: { error: { message: 'Limit for org-AbCd123 on sk-proj-abcdef' } },
      },
      call,
    );
    expect(p.retryAfterSeconds).toBe(2);
    expect(p.message).toBe(
      'OpenAI (ns/p) is throttling m: Limit for <redacted> on <redacted>; retry after the time it gives, or raise the rate limit of the account or deployment',
    );
    // Azure's retry-after-ms, rounded up.
    const azure = PROVIDERS['azure-openai'].problem(
      { kind: 'answer', status: 429, headers: { 'retry-after-ms': '2100' }, body: {} },
      call,
    );
    expect(azure.retryAfterSeconds).toBe(3);
  });

  it('says the same cause to the operator (the provider by its label) and to callers (the resource)', () => {
    const answer = { kind: 'answer', status: 401, headers: {}, body: { error: { message: 'bad' } } } as const;
    const operator = PROVIDERS.openai.problem(answer, { stage: 'discovery', identity: call.identity });
    expect(operator.message).toMatch(/^OpenAI refused the API key: bad/);
    expect(PROVIDERS.openai.problem(answer, call).message).toMatch(/^OpenAI \(ns\/p\) refused the API key: bad/);
    expect(classify(PROVIDERS.openai, 401, answer.body, { provider: 'OpenAI' }).reason).toBe('InvalidAPIKey');
  });

  it.each([
    ['Incorrect API key provided: sk-abc***wxyz.', 'Incorrect API key provided: <redacted>.'],
    [
      'project 123456789012 denied for gateway@proj.iam.gserviceaccount.com',
      'project <redacted> denied for <redacted>',
    ],
    ['Bearer eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.sig', 'Bearer <redacted>'],
    ['client 66666666-7777-8888-9999-000000000000', 'client <redacted>'],
    [
      'maximum context length is 128000 tokens, you asked for 130532',
      'maximum context length is 128000 tokens, you asked for 130532',
    ],
    ['a\n  b', 'a b'],
  ])('redacts %j', (raw, shown) => {
    expect(redact(raw)).toBe(shown);
  });
});

describe('model matching and prices', () => {
  it('Anthropic serves undated aliases of the dated ids it lists', () => {
    const list = ['claude-sonnet-4-5-20250929', 'claude-3-5-haiku-20241022', 'claude-3-5-haiku-20240307'].map(listed);
    expect(undatedMatch('claude-sonnet-4-5', list)?.id).toBe('claude-sonnet-4-5-20250929');
    expect(undatedMatch('claude-3-5-haiku-latest', list)?.id).toBe('claude-3-5-haiku-20241022');
    expect(undatedMatch('claude-3-5-haiku', list)?.id).toBe('claude-3-5-haiku-20241022');
    expect(undatedMatch('claude-sonnet-4', list)).toBeUndefined();
    expect(undatedMatch('claude-sonnet-4-5-2025', list)).toBeUndefined();
  });

  it('Vertex ids carry a version after @', () => {
    const list = ['claude-sonnet-4-5', 'gemini-2.5-flash'].map(listed);
    expect(PROVIDERS['vertex-ai'].matches?.('claude-sonnet-4-5@20250929', list)?.family).toBe('anthropic');
    expect(PROVIDERS['vertex-ai'].matches?.('gemini-2.5-pro', list)).toBeUndefined();
  });

  it.each([
    ['openai', 'gpt-4o-2024-08-06', 2.5],
    ['azure-openai', 'gpt-4o-mini', 0.15],
    ['anthropic', 'claude-sonnet-4-5-20250929', 3],
    ['vertex-ai', 'claude-sonnet-4-5@20250929', 3],
    ['vertex-ai', 'gemini-2.5-flash', 0.3],
    ['openai-compatible', 'gpt-4o', undefined],
    ['openai', 'gpt-9', undefined],
  ])('%s %s costs %s per 1M input tokens', (type, model, input) => {
    expect(hostedPrice(loadBedrockPrices(), type, model)?.input).toBe(input);
  });
});

/** A fetch that answers from a table and counts calls. */
function fakeFetch(answer: (url: string, init?: RequestInit) => { status: number; body: unknown }) {
  const calls: string[] = [];
  const f = (async (input: string | URL | Request, init?: RequestInit) => {
    const url = String(input);
    calls.push(url);
    const a = answer(url, init);
    return new Response(JSON.stringify(a.body), { status: a.status, headers: { 'content-type': 'application/json' } });
  }) as typeof fetch;
  return { f, calls };
}

describe('credentials', () => {
  const secrets =
    (data: Record<string, string> | undefined, forbidden = false) =>
    () =>
      data || forbidden ? { ...(data ? { data } : {}), forbidden } : undefined;
  const b64 = (s: string) => Buffer.from(s).toString('base64');
  const keyed = (provider: ProviderIdentity['provider']): ProviderIdentity => ({
    provider,
    auth: { method: 'APIKey', secretRef: { name: 's' } },
  });

  it.each([
    ['openai', { authorization: 'Bearer k-1234' }],
    ['anthropic', { 'x-api-key': 'k-1234' }],
    ['azure-openai', { 'api-key': 'k-1234' }],
  ] as const)('%s: the key from the Secret in its own header', async (type, headers) => {
    const c = new ProviderCredentials(secrets({ apiKey: b64('k-1234\n') }), { env: {} });
    expect(await authorizeOf(c, keyed(type), PROVIDERS[type])).toEqual(headers);
  });

  it.each([
    [undefined, false, 'SecretNotFound'],
    [{ other: 'x' }, false, 'SecretKeyMissing'],
    [undefined, true, 'SecretForbidden'],
  ] as const)('a Secret that is %j (forbidden %s) is %s, naming no Secret', async (data, forbidden, reason) => {
    const c = new ProviderCredentials(secrets(data, forbidden), { env: {} });
    const err = await authorizeOf(c, keyed('openai'), PROVIDERS.openai).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CredentialError);
    expect((err as CredentialError).problem.reason).toBe(reason);
    expect((err as CredentialError).message).not.toContain("'s'");
  });

  it('Azure workload identity: one exchange for concurrent calls, refreshed 5 minutes before expiry', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'wi-'));
    writeFileSync(join(dir, 'token'), 'federated\n');
    let issued = 0;
    const { f, calls } = fakeFetch(() => ({ status: 200, body: { access_token: `t${++issued}`, expires_in: 3600 } }));
    let now = 1_000_000;
    const c = new ProviderCredentials(secrets(undefined), {
      env: { AZURE_FEDERATED_TOKEN_FILE: join(dir, 'token'), AZURE_AUTHORITY_HOST: 'https://login.example/' },
      fetch: f,
      now: () => now,
    });
    const id: ProviderIdentity = {
      provider: 'azure-openai',
      auth: { method: 'WorkloadIdentity', tenantId: 'tenant', clientId: 'client' },
    };
    const both = await Promise.all([
      authorizeOf(c, id, PROVIDERS['azure-openai']),
      authorizeOf(c, id, PROVIDERS['azure-openai']),
    ]);
    expect(both).toEqual([{ authorization: 'Bearer t1' }, { authorization: 'Bearer t1' }]);
    expect(calls).toEqual(['https://login.example/tenant/oauth2/v2.0/token']);
    now += 54 * 60_000;
    expect(await authorizeOf(c, id, PROVIDERS['azure-openai'])).toEqual({ authorization: 'Bearer t1' });
    now += 2 * 60_000;
    expect(await authorizeOf(c, id, PROVIDERS['azure-openai'])).toEqual({ authorization: 'Bearer t2' });
  });

  it("a refused exchange says the AADSTS code and the fix, never the description's identifiers", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'wi-'));
    writeFileSync(join(dir, 'token'), 'federated');
    const { f } = fakeFetch(() => ({
      status: 400,
      body: {
        error: 'invalid_client',
        error_description:
          "AADSTS700213: No matching federated identity record found for presented assertion subject 'system:serviceaccount:platform-agent:proxy'.",
      },
    }));
    const c = new ProviderCredentials(secrets(undefined), {
      env: { AZURE_FEDERATED_TOKEN_FILE: join(dir, 'token') },
      fetch: f,
    });
    const err = (await authorizeOf(
      c,
      { provider: 'azure-openai', auth: { method: 'WorkloadIdentity', tenantId: 't', clientId: 'c' } },
      PROVIDERS['azure-openai'],
    ).catch((e: unknown) => e)) as CredentialError;
    expect(err.problem.reason).toBe('TokenExchangeRefused');
    expect(err.message).toContain('(invalid_client, AADSTS700213)');
    expect(err.message).not.toContain('platform-agent:proxy');
  });

  it('Vertex: the GKE metadata server without audience; STS then IAM Credentials with one', async () => {
    const { f, calls } = fakeFetch((url) =>
      url.includes('generateAccessToken')
        ? { status: 200, body: { accessToken: 'sa-token', expireTime: '2099-01-01T00:00:00Z' } }
        : {
            status: 200,
            body: { access_token: url.includes('metadata') ? 'gke-token' : 'sts-token', expires_in: 3600 },
          },
    );
    const dir = mkdtempSync(join(tmpdir(), 'wi-'));
    writeFileSync(join(dir, 'token'), 'federated');
    const c = new ProviderCredentials(secrets(undefined), {
      env: { GCE_METADATA_HOST: 'metadata.test', GOOGLE_FEDERATED_TOKEN_FILE: join(dir, 'token') },
      fetch: f,
    });
    const vertex = PROVIDERS['vertex-ai'];
    expect(await authorizeOf(c, { provider: 'vertex-ai', auth: { method: 'WorkloadIdentity' } }, vertex)).toEqual({
      authorization: 'Bearer gke-token',
    });
    expect(
      await authorizeOf(
        c,
        {
          provider: 'vertex-ai',
          auth: { method: 'WorkloadIdentity', audience: '//iam/pool', serviceAccount: 'sa@p.iam.gserviceaccount.com' },
        },
        vertex,
      ),
    ).toEqual({ authorization: 'Bearer sa-token' });
    expect(calls).toEqual([
      'http://metadata.test/computeMetadata/v1/instance/service-accounts/default/token',
      'https://sts.googleapis.com/v1/token',
      'https://iamcredentials.googleapis.com/v1/projects/-/serviceAccounts/sa%40p.iam.gserviceaccount.com:generateAccessToken',
    ]);
  });

  it('no federated token mounted is a credential problem that names the chart values', async () => {
    const c = new ProviderCredentials(secrets(undefined), {
      env: { GOOGLE_FEDERATED_TOKEN_FILE: '/nonexistent/token' },
    });
    const err = (await authorizeOf(
      c,
      { provider: 'vertex-ai', auth: { method: 'WorkloadIdentity', audience: '//iam/pool' } },
      PROVIDERS['vertex-ai'],
    ).catch((e: unknown) => e)) as CredentialError;
    expect(err.problem.reason).toBe('FederatedTokenMissing');
  });
});
