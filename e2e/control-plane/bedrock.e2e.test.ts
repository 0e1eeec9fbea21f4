import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LogFields } from '../../crds/observability/log.js';
import type { AwsCredentials } from '../../crds/providers/aws-credentials.js';
import { Operator } from '../../operator/operator.js';
import { ProxyMetrics } from '../../proxy/telemetry/metrics.js';
import { MemoryUsage } from '../../proxy/usage/record.js';
import { type AwsDouble, startAwsDouble } from '../doubles/aws.js';
import { capturedLogger } from '../support/capture.js';
import { startClusterGateway } from '../support/cluster-gateway.js';
import type { TestGateway } from '../support/gateway.js';
import { BEDROCK_GATEWAY, PROMPT_CANARY, USER_ACCESS_KEY } from '../support/known-secrets.js';
import { eventually, kubeConfig, kubectl, kubectlOk } from '../support/kube.js';

/**
 * Bedrock end to end: ExternalProviders applied to the real API server, the operator assuming
 * roles and listing models through the AWS double (real SDK, SigV4-checked), the proxy
 * chatting through them, and every row of the troubleshooting table surfacing as the
 * documented condition or error. No secret may appear in any object, event or log line.
 */

const NS = 'platform-agent';
const GATEWAY: AwsCredentials = BEDROCK_GATEWAY;
const GATEWAY_ARN = 'arn:aws:iam::999999999999:user/gateway';
const USER_KEY = USER_ACCESS_KEY;
const INVOKE = ['bedrock:InvokeModel', 'bedrock:InvokeModelWithResponseStream', 'bedrock:ListFoundationModels'];
const role = (name: string) => `arn:aws:iam::123456789012:role/${name}`;
const HAIKU = 'anthropic.claude-3-haiku-20240307-v1:0';
const SONNET = 'anthropic.claude-3-7-sonnet-20250219-v1:0';
const TITAN = 'amazon.titan-embed-text-v2:0';
const APP_PROFILE = 'h41ku0profil';
/** The permission policy the README gives today: with ListInferenceProfiles. */
const CURRENT = [...INVOKE, 'bedrock:ListInferenceProfiles'];

let aws: AwsDouble;
let operator: Operator;
const logs: string[] = [];
const usage = new MemoryUsage();
let app: TestGateway;

function provider(name: string, spec: Record<string, unknown>): string {
  return JSON.stringify({
    apiVersion: 'ai.platform/v1beta1',
    kind: 'ExternalProvider',
    metadata: { name, namespace: NS },
    spec: { provider: 'bedrock', displayName: name, region: 'us-east-1', includeInCLI: true, models: [HAIKU], ...spec },
  });
}
const roleAuth = (name: string) => ({ auth: { method: 'IAMRole', roleArn: role(name) } });
const field = (name: string, path: string) =>
  kubectlOk(['get', 'externalproviders', name, '-n', NS, '-o', `jsonpath=${path}`]);
const condition = (name: string, type: string, part: 'reason' | 'message' | 'status' = 'reason') =>
  field(name, `{.status.conditions[?(@.type=="${type}")].${part}}`);
const phase = (name: string, want: string) =>
  eventually(`${name} ${want}`, 30_000, () => (field(name, '{.status.phase}') === want ? want : undefined));

function chat(model: string, stream: boolean, extra: Record<string, unknown> = {}) {
  return app.request('/openai/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': 'sk-bedrock-e2e', 'x-tags': 'team:bedrock' },
    body: JSON.stringify({
      model,
      stream,
      messages: [{ role: 'user', content: `hello from the test ${PROMPT_CANARY}` }],
      ...extra,
    }),
  });
}
const errorOf = async (res: Response) => ((await res.json()) as { error: { code: string; message: string } }).error;

beforeAll(async () => {
  aws = await startAwsDouble({
    principals: [
      {
        accessKeyId: GATEWAY.accessKeyId,
        secretAccessKey: GATEWAY.secretAccessKey,
        arn: GATEWAY_ARN,
        allow: ['sts:AssumeRole'],
        account: '999999999999',
      },
      {
        accessKeyId: USER_KEY.id,
        secretAccessKey: USER_KEY.secret,
        arn: 'arn:aws:iam::123456789012:user/bedrock',
        allow: INVOKE,
        account: '123456789012',
      },
    ],
    roles: [
      { arn: role('bedrock'), trusted: [GATEWAY_ARN], allow: INVOKE },
      { arn: role('wrong-trust'), trusted: ['arn:aws:iam::111111111111:root'], allow: INVOKE },
      {
        arn: role('no-stream'),
        trusted: [GATEWAY_ARN],
        allow: ['bedrock:InvokeModel', 'bedrock:ListFoundationModels'],
      },
      { arn: role('no-invoke'), trusted: [GATEWAY_ARN], allow: ['bedrock:ListFoundationModels'] },
      { arn: role('current'), trusted: [GATEWAY_ARN], allow: CURRENT },
    ],
    models: {
      'us-east-1': [
        { modelId: HAIKU, providerName: 'Anthropic' },
        { modelId: 'meta.llama3-1-8b-instruct-v1:0', providerName: 'Meta' },
        { modelId: SONNET, providerName: 'Anthropic', inferenceTypesSupported: ['INFERENCE_PROFILE'], global: true },
        { modelId: TITAN, providerName: 'Amazon', outputModalities: ['EMBEDDING'] },
        { modelId: 'cohere.command-r-v1:0', providerName: 'Cohere', streaming: false, inputModalities: ['TEXT'] },
        { modelId: 'ai21.jamba-1-5-mini-v1:0', providerName: 'AI21 Labs', inputModalities: ['TEXT'] },
        { modelId: 'anthropic.claude-v2:1', providerName: 'Anthropic', lifecycle: 'LEGACY', inputModalities: ['TEXT'] },
        { modelId: 'mistral.mistral-large-2402-v1:0', providerName: 'Mistral AI' },
        { modelId: 'anthropic.claude-3-5-sonnet-20240620-v1:0', providerName: 'Anthropic' },
        { modelId: 'amazon.titan-image-generator-v2:0', providerName: 'Amazon', outputModalities: ['IMAGE'] },
      ],
      'eu-central-1': [{ modelId: 'amazon.nova-lite-v1:0', providerName: 'Amazon' }],
    },
    applicationProfiles: { 'us-east-1': [{ id: APP_PROFILE, name: 'team-ml-haiku', modelId: HAIKU }] },
    notEnabled: ['mistral.mistral-large-2402-v1:0'],
    needsUseCase: ['anthropic.claude-3-5-sonnet-20240620-v1:0'],
  });
  const base = async () => GATEWAY;
  const proxyLog = capturedLogger('proxy-bedrock');
  const captured = capturedLogger('operator-bedrock');
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
    aws: { base },
    providerEnv: { PAO_ENDPOINT_URL_BEDROCK: aws.url, PAO_ENDPOINT_URL_AWS_STS: aws.url },
  });
  await operator.start();
  app = await startClusterGateway(
    'sk-bedrock-e2e',
    {
      aws: { base },
      env: { ...process.env, PAO_ENDPOINT_URL_BEDROCK_RUNTIME: aws.url, PAO_ENDPOINT_URL_AWS_STS: aws.url },
      logger: {
        ...proxyLog,
        error: (msg, fields) => {
          proxyLog.error(msg, fields);
          logs.push(`PROXY ${msg} ${JSON.stringify(fields ?? {})}`);
        },
      },
    },
    { usage, metrics: new ProxyMetrics() },
  );
});

afterAll(async () => {
  await operator?.stop();
  await app?.stop();
  await aws?.close();
  kubectl(['delete', 'externalproviders', '--all', '-n', NS]);
  kubectl(['delete', 'secret', 'bedrock-keys', '-n', NS, '--ignore-not-found']);
});

describe('ExternalProvider discovery', () => {
  it("an IAM-role provider becomes Ready with the region's text models, inference profiles included", async () => {
    kubectlOk(
      ['apply', '-f', '-'],
      provider('by-role', { ...roleAuth('bedrock'), models: [HAIKU, 'us.anthropic.claude-3-7-sonnet-20250219-v1:0'] }),
    );
    await phase('by-role', 'Ready');
    const available = JSON.parse(field('by-role', '{.status.availableModels}')) as string[];
    expect(available).toContain(HAIKU);
    expect(available).toContain('us.anthropic.claude-3-7-sonnet-20250219-v1:0');
    expect(available).not.toContain('amazon.titan-image-generator-v2:0');
    expect(condition('by-role', 'CredentialsValid', 'status')).toBe('True');
    expect(field('by-role', '{.status.accessKeyLast4}')).toBe('');
  });

  it('lists inference profiles (global., application) and says per model: kind, streaming, lifecycle, price', async () => {
    const selected = [
      `global.${SONNET}`,
      APP_PROFILE,
      TITAN,
      'cohere.command-r-v1:0',
      'ai21.jamba-1-5-mini-v1:0',
      'anthropic.claude-v2:1',
    ];
    kubectlOk(['apply', '-f', '-'], provider('current', { ...roleAuth('current'), models: selected }));
    await phase('current', 'Ready');
    const models = JSON.parse(field('current', '{.status.models}')) as Array<Record<string, unknown>>;
    expect(Object.fromEntries(models.map(({ id, ...rest }) => [id, rest]))).toEqual({
      [`global.${SONNET}`]: {
        type: 'Text',
        baseModel: SONNET,
        profile: 'SystemDefined',
        streaming: true,
        images: true,
        lifecycle: 'Active',
        priced: true,
      },
      [APP_PROFILE]: {
        type: 'Text',
        baseModel: HAIKU,
        profile: 'Application',
        streaming: true,
        images: true,
        lifecycle: 'Active',
        priced: true,
      },
      [TITAN]: { type: 'Embedding', streaming: false, lifecycle: 'Active', priced: true },
      'cohere.command-r-v1:0': { type: 'Text', streaming: false, lifecycle: 'Active', priced: true },
      'ai21.jamba-1-5-mini-v1:0': { type: 'Text', streaming: true, lifecycle: 'Active', priced: false },
      'anthropic.claude-v2:1': { type: 'Text', streaming: true, lifecycle: 'Legacy', priced: false },
    });
    expect(condition('current', 'ModelsPriced')).toBe('UnpricedModels');
    expect(condition('current', 'ModelsPriced', 'message')).toContain(
      'no price for ai21.jamba-1-5-mini-v1:0, anthropic.claude-v2:1',
    );
    expect(condition('current', 'ModelsAvailable')).toBe('LegacyModels');
    expect(condition('current', 'ModelsAvailable', 'message')).not.toContain('ListInferenceProfiles was denied');
    // The older policy (no ListInferenceProfiles) still works, with geographic ids derived and a hint.
    expect(condition('by-role', 'ModelsAvailable', 'message')).toContain('grant bedrock:ListInferenceProfiles');
    expect(aws.calls.filter((c) => c.action === 'ListInferenceProfiles').map((c) => c.status)).toContain(200);

    // The proxy routes what discovery found: the application profile by its id, the embedding
    // model on /embeddings, the non-streaming model through Converse.
    await eventually('routes of current', 20_000, () =>
      app.routes.lookup(APP_PROFILE)?.kind === 'external' ? true : undefined,
    );
    const before = aws.calls.length;
    expect((await chat(APP_PROFILE, false)).status).toBe(200);
    expect((await chat('cohere.command-r-v1:0', true)).status).toBe(200);
    // An image for a text-only model is refused before the call, naming why.
    const image = await chat('cohere.command-r-v1:0', false, {
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'what is this?' },
            { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0KGgo=' } },
          ],
        },
      ],
    });
    expect(image.status).toBe(400);
    expect(await errorOf(image)).toMatchObject({
      code: 'unsupported_content',
      message: expect.stringContaining('takes text only'),
    });
    const embedded = await app.request('/openai/v1/embeddings', {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': 'sk-bedrock-e2e', 'x-tags': 'team:bedrock' },
      body: JSON.stringify({ model: TITAN, input: ['one two three', 'four'], encoding_format: 'float' }),
    });
    expect(embedded.status).toBe(200);
    expect(((await embedded.json()) as { usage: unknown }).usage).toEqual({ prompt_tokens: 4, total_tokens: 4 });
    expect(usage.records.at(-1)).toMatchObject({ model: TITAN, promptTokens: 4, completionTokens: 0, status: 200 });
    // (The proxy assumed the role first: STS calls aside.)
    const runtime = aws.calls.slice(before).filter((c) => c.service === 'bedrock');
    expect(runtime.map((c) => `${c.action} ${c.status}`)).toEqual([
      'ConverseStream 200',
      'Converse 200',
      'InvokeModel 200',
      'InvokeModel 200',
    ]);
  });

  it("an access-key provider becomes Ready and shows only the key's last 4 characters", async () => {
    kubectlOk(
      ['apply', '-f', '-'],
      JSON.stringify({
        apiVersion: 'v1',
        kind: 'Secret',
        metadata: { name: 'bedrock-keys', namespace: NS },
        stringData: { accessKeyId: USER_KEY.id, secretAccessKey: USER_KEY.secret },
      }),
    );
    kubectlOk(
      ['apply', '-f', '-'],
      provider('by-key', {
        region: 'eu-central-1',
        auth: { method: 'AccessKey', secretRef: { name: 'bedrock-keys' } },
        models: ['amazon.nova-lite-v1:0'],
      }),
    );
    await phase('by-key', 'Ready');
    expect(field('by-key', '{.status.accessKeyLast4}')).toBe('MPLE');
    // Editing the provider without touching the Secret keeps the stored key.
    kubectlOk([
      'patch',
      'externalproviders',
      'by-key',
      '-n',
      NS,
      '--type=merge',
      '-p',
      '{"spec":{"displayName":"EU renamed"}}',
    ]);
    await eventually('rediscovered', 30_000, () =>
      field('by-key', '{.status.observedGeneration}') === '2' ? true : undefined,
    );
    expect(field('by-key', '{.status.phase}')).toBe('Ready');
  });

  it('a role whose trust policy names another principal fails with the trust-policy fix', async () => {
    kubectlOk(['apply', '-f', '-'], provider('wrong-trust', roleAuth('wrong-trust')));
    await phase('wrong-trust', 'Failed');
    expect(condition('wrong-trust', 'CredentialsValid')).toBe('AssumeRoleDenied');
    expect(condition('wrong-trust', 'CredentialsValid', 'message')).toContain(
      "trust policy must allow sts:AssumeRole for the gateway's principal",
    );
  });

  it('a missing Secret fails naming no Secret, to the operator and to callers', async () => {
    kubectlOk(
      ['apply', '-f', '-'],
      provider('missing-secret', {
        auth: { method: 'AccessKey', secretRef: { name: 'no-such-keys' } },
        models: ['meta.llama3-1-8b-instruct-v1:0'],
      }),
    );
    await phase('missing-secret', 'Failed');
    expect(condition('missing-secret', 'Ready')).toBe('SecretNotFound');
    expect(condition('missing-secret', 'Ready', 'message')).toContain('the Secret named in spec.auth.secretRef');
    expect(field('missing-secret', '{.status}')).not.toContain('no-such-keys');
    const res = await chat('meta.llama3-1-8b-instruct-v1:0', false);
    expect(res.status).toBe(503);
    const error = await errorOf(res);
    expect(error.message).toContain('the Secret named in spec.auth.secretRef is missing');
    expect(error.message).not.toMatch(/no-such-keys|platform-agent/);
  });

  it('a denied AssumeRole reaches callers without the role ARN or an account id', async () => {
    kubectlOk(
      ['apply', '-f', '-'],
      provider('denied', { ...roleAuth('wrong-trust'), models: ['amazon.titan-text-express-v1'] }),
    );
    await phase('denied', 'Failed');
    expect(field('denied', '{.status}')).not.toMatch(/arn:aws|123456789012|999999999999|111111111111/);
    const res = await chat('amazon.titan-text-express-v1', false);
    expect(res.status).toBe(503);
    const error = await errorOf(res);
    expect(error.message).toContain("STS denied sts:AssumeRole on the provider's role");
    expect(error.message).not.toMatch(/arn:aws|123456789012|999999999999|111111111111|wrong-trust/);
  });

  it('a region with no models fails as wrong account or region; an unavailable selected model degrades', async () => {
    kubectlOk(['apply', '-f', '-'], provider('empty-region', { ...roleAuth('bedrock'), region: 'sa-east-1' }));
    await phase('empty-region', 'Failed');
    expect(condition('empty-region', 'ModelsAvailable')).toBe('NoModelsInRegion');
    expect(condition('empty-region', 'ModelsAvailable', 'message')).toContain('wrong account or region');

    kubectlOk(
      ['apply', '-f', '-'],
      provider('partial', { ...roleAuth('bedrock'), models: [HAIKU, 'cohere.command-r-plus-v1:0'] }),
    );
    await phase('partial', 'Degraded');
    expect(condition('partial', 'ModelsAvailable', 'message')).toContain('cohere.command-r-plus-v1:0');
  });
});

/** The data of each server-sent event of a response, in order. */
const sseData = async (res: Response): Promise<string[]> =>
  (await res.text())
    .split('\n\n')
    .filter(Boolean)
    .map((f) => f.replace(/^data: /, ''));

describe('chat through Bedrock', () => {
  it('answers a non-streaming client by aggregating ConverseStream, with usage and tags recorded', async () => {
    await eventually('route', 10_000, () => (app.routes.lookup(HAIKU)?.kind === 'external' ? true : undefined));
    const before = aws.calls.length;
    const res = await chat(HAIKU, false);
    expect(res.status).toBe(200);
    const body = (await res.json()) as {
      object: string;
      choices: Array<{ message: { content: string }; finish_reason: string }>;
      usage: { prompt_tokens: number; completion_tokens: number };
    };
    expect(body.object).toBe('chat.completion');
    expect(body.choices[0]?.message.content).toBe('tok0 tok1 tok2 tok3 tok4 tok5 tok6 tok7');
    expect(body.choices[0]?.finish_reason).toBe('stop');
    expect(body.usage).toMatchObject({ prompt_tokens: 5, completion_tokens: 8 });
    expect(aws.calls.slice(before).map((c) => c.action)).toContain('ConverseStream');
    expect(usage.records.at(-1)).toMatchObject({
      provider: 'platform-agent/by-role',
      promptTokens: 5,
      completionTokens: 8,
      tags: [{ key: 'team', value: 'bedrock' }],
    });
  });

  it('streams chunks ending with [DONE] and still records the streamed token counts', async () => {
    const res = await chat(HAIKU, true);
    expect(res.headers.get('content-type')).toContain('text/event-stream');
    const frames = await sseData(res);
    expect(frames.at(-1)).toBe('[DONE]');
    const chunks = frames
      .slice(0, -1)
      .map((f) => JSON.parse(f) as { choices: Array<{ delta: { content?: string }; finish_reason: string | null }> });
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? '').join('')).toBe(
      'tok0 tok1 tok2 tok3 tok4 tok5 tok6 tok7',
    );
    expect(chunks.at(-1)?.choices[0]?.finish_reason).toBe('stop');
    await new Promise((r) => setTimeout(r, 20));
    expect(usage.records.at(-1)).toMatchObject({ stream: true, promptTokens: 5, completionTokens: 8, status: 200 });
  });

  it('assumes the role once and reuses the temporary credentials', async () => {
    const assumed = () => aws.calls.filter((c) => c.action === 'AssumeRole').length;
    const before = assumed();
    for (let i = 0; i < 3; i++) expect((await chat(HAIKU, false)).status).toBe(200);
    expect(assumed()).toBe(before);
  });

  it.each([
    ['no-stop', 'no messageStop'],
    ['no-usage', 'no usage metadata'],
  ] as const)('a stream cut off (%s) is an error for both kinds of client, and recorded as one', async (how, why) => {
    // A non-streaming client has received nothing yet: the gateway tries again, as for any broken call.
    const calls = () => aws.calls.filter((c) => c.action === 'ConverseStream').length;
    aws.breakStreams(1, how);
    const before = calls();
    expect((await chat(HAIKU, false)).status).toBe(200);
    expect(calls() - before).toBe(2);
    // Cut off on every attempt: 502, never a truncated answer passed off as complete.
    aws.breakStreams(3, how);
    const whole = await chat(HAIKU, false);
    expect(whole.status).toBe(502);
    const err = ((await whole.json()) as { error: { code: string; message: string } }).error;
    expect(err.code).toBe('upstream_stream_broken');
    expect(err.message).toContain(why);
    await new Promise((r) => setTimeout(r, 20));
    expect(usage.records.at(-1)).toMatchObject({ status: 502, errorType: 'upstream_stream_broken' });

    aws.breakStreams(1, how);
    const res = await chat(HAIKU, true);
    const frames = await sseData(res);
    expect(frames.at(-1)).toBe('[DONE]');
    // The text that came is passed on, then the error: never a finish_reason of a complete answer.
    expect(frames.some((f) => f.includes('"finish_reason":"stop"'))).toBe(how === 'no-usage');
    expect((JSON.parse(frames.at(-2) ?? '{}') as { error: { code: string } }).error.code).toBe(
      'upstream_stream_broken',
    );
    await new Promise((r) => setTimeout(r, 20));
    expect(usage.records.at(-1)).toMatchObject({ status: 502, errorType: 'upstream_stream_broken', stream: true });
  });

  it('an exception frame mid-stream (the SDK throws it) ends the stream with the mapped error', async () => {
    aws.breakStreams(1, 'exception');
    const res = await chat(HAIKU, true);
    const frames = await sseData(res);
    expect(frames.at(-1)).toBe('[DONE]');
    const error = (JSON.parse(frames.at(-2) ?? '{}') as { error: { code: string; message: string } }).error;
    expect(error.code).toMatch(/^bedrock_|upstream_/);
    expect(error.message).toContain('The model stopped unexpectedly');
    aws.breakStreams(3, 'exception');
    expect((await chat(HAIKU, false)).status).toBeGreaterThanOrEqual(500);
    aws.breakStreams(0, 'exception');
  });

  it('passes throttling on as 429 with Retry-After', async () => {
    aws.throttle(1);
    const res = await chat(HAIKU, false);
    expect(res.status).toBe(429);
    expect(res.headers.get('retry-after')).toBeTruthy();
  });
});

describe('troubleshooting table at invoke time', () => {
  it('streaming fails while invoke works: the policy lacks bedrock:InvokeModelWithResponseStream', async () => {
    kubectlOk(
      ['apply', '-f', '-'],
      provider('no-stream', { ...roleAuth('no-stream'), models: ['meta.llama3-1-8b-instruct-v1:0'] }),
    );
    kubectlOk(
      ['apply', '-f', '-'],
      provider('no-stream-converse', {
        ...roleAuth('no-stream'),
        streaming: false,
        models: ['us.anthropic.claude-3-7-sonnet-20250219-v1:0'],
      }),
    );
    await phase('no-stream', 'Ready');
    await phase('no-stream-converse', 'Ready');
    await eventually('routes', 10_000, () =>
      app.routes.lookup('us.anthropic.claude-3-7-sonnet-20250219-v1:0') ? true : undefined,
    );
    const streamed = await chat('meta.llama3-1-8b-instruct-v1:0', true);
    expect(streamed.status).toBe(403);
    const e = await errorOf(streamed);
    expect(e.code).toBe('bedrock_access_denied');
    expect(e.message).toContain('bedrock:InvokeModelWithResponseStream');
    expect((await chat('us.anthropic.claude-3-7-sonnet-20250219-v1:0', false)).status).toBe(200);
  });

  it('AccessDenied on invoke: the policy lacks bedrock:InvokeModel', async () => {
    kubectlOk(
      ['apply', '-f', '-'],
      provider('no-invoke', { ...roleAuth('no-invoke'), streaming: false, models: ['meta.llama3-1-8b-instruct-v1:0'] }),
    );
    await phase('no-invoke', 'Ready');
    // The no-stream provider serves this model id first; ask through a fresh route table entry.
    kubectlOk(['delete', 'externalproviders', 'no-stream', '-n', NS]);
    await eventually('route moved', 10_000, () =>
      app.routes.lookup('meta.llama3-1-8b-instruct-v1:0')?.provider === 'platform-agent/no-invoke' ? true : undefined,
    );
    const res = await chat('meta.llama3-1-8b-instruct-v1:0', false);
    expect(res.status).toBe(403);
    expect((await errorOf(res)).message).toContain('bedrock:InvokeModel');
  });

  it('a model not enabled for the account, and one needing use-case details, say how to enable them', async () => {
    kubectlOk(
      ['apply', '-f', '-'],
      provider('not-enabled', {
        ...roleAuth('bedrock'),
        models: ['mistral.mistral-large-2402-v1:0', 'anthropic.claude-3-5-sonnet-20240620-v1:0'],
      }),
    );
    await phase('not-enabled', 'Ready');
    await eventually('routes', 10_000, () => (app.routes.lookup('mistral.mistral-large-2402-v1:0') ? true : undefined));
    const denied = await chat('mistral.mistral-large-2402-v1:0', false);
    expect(denied.status).toBe(403);
    expect((await errorOf(denied)).code).toBe('bedrock_model_not_enabled');
    const useCase = await chat('anthropic.claude-3-5-sonnet-20240620-v1:0', false);
    expect(useCase.status).toBe(400);
    const e = await errorOf(useCase);
    expect(e.code).toBe('bedrock_model_not_enabled');
    expect(e.message).toContain('playground');
  });
});

describe('aliases and the CLI model list', () => {
  const ALIAS = 'claude-haiku-e2e';
  const mdCondition = (part: 'status' | 'reason' | 'message') =>
    kubectlOk([
      'get',
      'modeldeployments',
      'alias-clash',
      '-n',
      'platform-llms',
      '-o',
      `jsonpath={.status.conditions[?(@.type=="AliasesAccepted")].${part}}`,
    ]);
  afterAll(() => {
    kubectl(['delete', 'modeldeployments', 'alias-clash', '-n', 'platform-llms', '--ignore-not-found']);
  });

  it('an alias routes to its Bedrock model and is listed; a younger clashing claim gets AliasConflict and an Event', async () => {
    kubectlOk(
      ['apply', '-f', '-'],
      provider('aliased', { ...roleAuth('bedrock'), aliases: [{ name: ALIAS, model: HAIKU }] }),
    );
    await phase('aliased', 'Ready');
    await eventually('provider aliases accepted', 15_000, () =>
      condition('aliased', 'AliasesAccepted', 'status') === 'True' ? true : undefined,
    );
    // creationTimestamp has whole seconds: a claim made in the same second would tie (and the tie goes to the deployment).
    await new Promise((r) => setTimeout(r, 1100));
    kubectlOk(
      ['apply', '-f', '-'],
      JSON.stringify({
        apiVersion: 'ai.platform/v1beta1',
        kind: 'ModelDeployment',
        metadata: { name: 'alias-clash', namespace: 'platform-llms' },
        spec: { model: 'qwen2.5:0.5b', serviceName: 'alias-clash', aliases: [ALIAS, 'qwen-e2e'], replicas: 0 },
      }),
    );
    await eventually('deployment alias refused', 15_000, () => (mdCondition('status') === 'False' ? true : undefined));
    expect(mdCondition('reason')).toBe('AliasConflict');
    expect(mdCondition('message')).toContain(
      `alias ${ALIAS} already stands for ${HAIKU} (ExternalProvider platform-agent/aliased, the older claim)`,
    );
    await eventually('AliasConflict Event', 15_000, () =>
      kubectlOk([
        'get',
        'events',
        '-n',
        'platform-llms',
        '--field-selector',
        'involvedObject.name=alias-clash',
      ]).includes('AliasConflict')
        ? true
        : undefined,
    );
    // The older claim keeps routing: a chat to the alias is Bedrock's Haiku, recorded under its real id.
    const res = await chat(ALIAS, false);
    expect(res.status).toBe(200);
    expect(usage.records.at(-1)).toMatchObject({ model: HAIKU, provider: `${NS}/aliased` });
    const listed = (await (
      await app.request('/v1/models/metadata?include_in_cli=true', { headers: { 'x-api-key': 'sk-bedrock-e2e' } })
    ).json()) as { models: Array<Record<string, unknown>> };
    expect(listed.models.find((m) => m.slug === ALIAS)).toMatchObject({
      alias_of: HAIKU,
      display_name: 'Claude 3 Haiku',
      provider: 'aws.bedrock',
      status: 'active',
      limits: { context_window: 200_000, max_output_tokens: 4096 },
    });
  });

  it('deleting the provider frees the alias: the deployment takes it', async () => {
    kubectlOk(['delete', 'externalproviders', 'aliased', '-n', NS]);
    await eventually('deployment alias accepted', 15_000, () => (mdCondition('status') === 'True' ? true : undefined));
    expect(mdCondition('message')).toBe('all 2 aliases route here');
  });
});

describe('secrets', () => {
  it('never appear in any object, event or log line', () => {
    const objects = kubectlOk(['get', 'externalproviders', '-n', NS, '-o', 'yaml']);
    const events = kubectlOk(['get', 'events', '-n', NS, '-o', 'yaml']);
    const everything = [objects, events, ...logs].join('\n');
    expect(everything).toContain('MPLE');
    for (const secret of [USER_KEY.secret, USER_KEY.id, GATEWAY.secretAccessKey, GATEWAY.accessKeyId]) {
      expect(everything).not.toContain(secret);
    }
    expect(everything).not.toMatch(/ASIA[0-9A-Z]{16}/);
  });
});
