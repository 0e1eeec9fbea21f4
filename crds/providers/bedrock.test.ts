import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AwsDouble, startAwsDouble } from '../../e2e/doubles/aws.js';
import type { ExternalProvider, ExternalProviderSpec } from '../external-provider.js';
import { bedrock } from './bedrock.js';
import { discoveredModels, inferenceProfileGeo } from './bedrock-discovery.js';
import { ProviderCredentials } from './credentials.js';
import {
  CredentialError,
  type FetchJson,
  isFanOut,
  isRefusal,
  type ProviderTarget,
  type WireFanOut,
  type WireRequest,
} from './provider.js';

/**
 * Bedrock as a provider module: where each call goes and what it carries (Converse and
 * ConverseStream, InvokeModel for Claude's Messages and for embeddings, CountTokens), the
 * dialects of each kind of model, its targets from discovery, and discovery itself over the AWS
 * double, every request signed with SigV4 (the double verifies each signature and IAM action).
 */

const NOVA = 'amazon.nova-lite-v1:0';
const HAIKU = 'anthropic.claude-3-haiku-20240307-v1:0';
const TITAN = 'amazon.titan-embed-text-v2:0';

const target = (t: Partial<ProviderTarget> = {}): ProviderTarget => ({
  type: 'bedrock',
  upstreamModel: NOVA,
  family: 'openai',
  modelType: 'text',
  baseUrl: 'https://bedrock-runtime.us-east-1.amazonaws.com',
  region: 'us-east-1',
  streaming: true,
  ...t,
});

function one(w: ReturnType<typeof bedrock.request>): WireRequest {
  if (isRefusal(w) || isFanOut(w)) throw new Error(`expected one request, got ${JSON.stringify(w)}`);
  return w;
}

const messages = [{ role: 'user', content: [{ text: 'hi' }] }];

describe('Bedrock addresses each call', () => {
  it('Converse: ConverseStream when the provider and the model stream, for every caller; Converse otherwise', () => {
    const streamed = one(bedrock.request(target(), 'bedrock-converse', { messages }, false));
    expect(streamed.url).toBe(
      'https://bedrock-runtime.us-east-1.amazonaws.com/model/amazon.nova-lite-v1%3A0/converse-stream',
    );
    expect(streamed.stream).toBe(true);
    const whole = one(bedrock.request(target({ streaming: false }), 'bedrock-converse', { messages }, true));
    expect(whole.url).toMatch(/\/converse$/);
    expect(whole.stream).toBe(false);
    expect(whole.body).toEqual({ messages });
  });

  it('sends the provider guardrail, with streamProcessingMode only on ConverseStream', () => {
    const guardrail = { identifier: 'gr1abc', version: '2', streamProcessingMode: 'async' } as const;
    const streaming = one(bedrock.request(target({ guardrail }), 'bedrock-converse', { messages }, true));
    const whole = one(bedrock.request(target({ guardrail, streaming: false }), 'bedrock-converse', { messages }, true));
    expect(streaming.body.guardrailConfig).toEqual({
      guardrailIdentifier: 'gr1abc',
      guardrailVersion: '2',
      trace: 'disabled',
      streamProcessingMode: 'async',
    });
    expect(whole.body.guardrailConfig).toEqual({
      guardrailIdentifier: 'gr1abc',
      guardrailVersion: '2',
      trace: 'disabled',
    });
    expect(one(bedrock.request(target(), 'bedrock-converse', { messages }, true)).body).not.toHaveProperty(
      'guardrailConfig',
    );
  });

  it('refuses image parts for a model discovery found text-only, before the call', () => {
    const body = { messages: [{ role: 'user', content: [{ image: { format: 'png', source: { bytes: 'AA==' } } }] }] };
    const llama = 'meta.llama3-1-8b-instruct-v1:0';
    expect(bedrock.request(target({ upstreamModel: llama, images: false }), 'bedrock-converse', body, false)).toEqual({
      refused: `${llama} takes text only: send the request without image parts`,
      param: 'messages',
      code: 'unsupported_content',
    });
    expect(isRefusal(bedrock.request(target({ upstreamModel: llama }), 'bedrock-converse', body, false))).toBe(false);
  });

  it("Claude's Messages through InvokeModel: Bedrock's anthropic_version, no model or stream, the betas in the body", () => {
    const claude = target({ upstreamModel: `us.${HAIKU}`, family: 'anthropic' });
    const body = { model: 'x', stream: true, max_tokens: 10, messages: [] };
    const streamed = one(
      bedrock.request(claude, 'anthropic-messages', body, true, ['interleaved-thinking-2025-05-14']),
    );
    expect(streamed.url).toMatch(
      /\/model\/us\.anthropic\.claude-3-haiku-20240307-v1%3A0\/invoke-with-response-stream$/,
    );
    expect(streamed.body).toEqual({
      anthropic_version: 'bedrock-2023-05-31',
      max_tokens: 10,
      messages: [],
      anthropic_beta: ['interleaved-thinking-2025-05-14'],
    });
    expect(one(bedrock.request(claude, 'anthropic-messages', body, false)).url).toMatch(/\/invoke$/);
  });

  it('counts tokens of a Claude model as its foundation model, the Messages body as CountTokens takes it', () => {
    const claude = target({ upstreamModel: `us.${HAIKU}`, family: 'anthropic' });
    const wire = bedrock.countTokens?.(claude, { model: 'x', messages: [] }, HAIKU);
    if (!wire) throw new Error('Claude on Bedrock counts its tokens');
    expect(wire.url).toMatch(/\/model\/anthropic\.claude-3-haiku-20240307-v1%3A0\/count-tokens$/);
    const blob = (wire.body.input as { invokeModel: { body: string } }).invokeModel.body;
    expect(JSON.parse(Buffer.from(blob, 'base64').toString('utf8'))).toEqual({
      anthropic_version: 'bedrock-2023-05-31',
      max_tokens: 1,
      messages: [],
    });
    expect(bedrock.countTokens?.(target(), {}, NOVA)).toBeUndefined();
    expect(bedrock.countedIn).toBe('inputTokens');
  });

  it('embeddings as a fan-out of InvokeModel calls, 8 at a time, the tokens from Bedrock’s header', () => {
    const titan = target({ upstreamModel: TITAN, modelType: 'embedding' });
    const fan = bedrock.request(titan, 'openai-embeddings', { model: TITAN, input: ['a b', 'c'] }, false) as WireFanOut;
    expect(fan.concurrency).toBe(8);
    expect(fan.calls.map((c) => [c.url, c.body])).toEqual([
      [`${titan.baseUrl}/model/amazon.titan-embed-text-v2%3A0/invoke`, { inputText: 'a b', normalize: true }],
      [`${titan.baseUrl}/model/amazon.titan-embed-text-v2%3A0/invoke`, { inputText: 'c', normalize: true }],
    ]);
    const joined = fan.join([
      { json: { embedding: [1, 0] }, headers: { 'x-amzn-bedrock-input-token-count': '2' } },
      { json: { embedding: [0, 1] }, headers: { 'x-amzn-bedrock-input-token-count': '1' } },
    ]);
    expect(joined).toMatchObject({ body: { usage: { prompt_tokens: 3, total_tokens: 3 } } });
    expect(
      bedrock.request(titan, 'openai-embeddings', { model: TITAN, input: 'x', dimensions: 7 }, false),
    ).toMatchObject({ refused: expect.stringContaining('dimensions'), param: 'dimensions' });
  });

  it.each([
    [target(), ['bedrock-converse']],
    [target({ family: 'anthropic' }), ['bedrock-converse', 'anthropic-messages']],
    [target({ modelType: 'embedding' }), ['openai-embeddings']],
  ])('%o speaks %o natively', (t, dialects) => {
    expect(bedrock.dialects(t)).toEqual(dialects);
  });

  it("takes the runtime's root from the region, our override first, then AWS's own variables", () => {
    const spec = { provider: 'bedrock', region: 'eu-west-1' } as ExternalProviderSpec;
    expect(bedrock.baseUrl(spec, {})).toBe('https://bedrock-runtime.eu-west-1.amazonaws.com');
    expect(bedrock.baseUrl(spec, { AWS_ENDPOINT_URL_BEDROCK_RUNTIME: 'http://aws.test/' })).toBe('http://aws.test');
    expect(
      bedrock.baseUrl(spec, { PAO_ENDPOINT_URL_BEDROCK_RUNTIME: 'http://ours', AWS_ENDPOINT_URL_BEDROCK_RUNTIME: 'x' }),
    ).toBe('http://ours');
  });
});

describe('Bedrock targets', () => {
  const ep = (status?: ExternalProvider['status']): ExternalProvider => ({
    apiVersion: 'ai.platform/v1beta1',
    kind: 'ExternalProvider',
    metadata: { name: 'b', namespace: 'platform-agent' },
    spec: {
      provider: 'bedrock',
      displayName: 'b',
      region: 'us-east-1',
      auth: { method: 'AccessKey', secretRef: { name: 'k' } },
      includeInCLI: true,
      streaming: true,
      models: [],
    },
    ...(status ? { status } : {}),
  });

  it('routes what discovery found, with its findings: a profile as its foundation model, streaming, images, lifecycle', () => {
    const found = ep({
      availableModels: ['a1b2c3d4e5f6', 'cohere.command-r-v1:0'],
      models: [
        {
          id: 'a1b2c3d4e5f6',
          type: 'Text',
          baseModel: HAIKU,
          profile: 'Application',
          streaming: true,
          lifecycle: 'Legacy',
          priced: true,
        },
        { id: 'cohere.command-r-v1:0', type: 'Text', streaming: false, lifecycle: 'Active', priced: true },
      ],
    });
    const env = {};
    expect(bedrock.target(found, 'a1b2c3d4e5f6', { standalone: false, env })).toMatchObject({
      baseModel: HAIKU,
      target: { family: 'anthropic', streaming: true, images: false, lifecycle: 'Legacy', region: 'us-east-1' },
    });
    expect(bedrock.target(found, 'cohere.command-r-v1:0', { standalone: false, env })?.target.streaming).toBe(false);
    expect(bedrock.target(found, NOVA, { standalone: false, env })).toBeUndefined();
  });

  it('routes every selected model standalone, by what its id says', () => {
    const t = bedrock.target(ep(), `global.${HAIKU}`, { standalone: true, env: {} });
    expect(t).toMatchObject({ baseModel: HAIKU, target: { family: 'anthropic', modelType: 'text', streaming: true } });
    expect(t?.target).not.toHaveProperty('images');
    expect(bedrock.target(ep(), TITAN, { standalone: true, env: {} })?.target.modelType).toBe('embedding');
  });
});

describe('discoveredModels', () => {
  const summaries = [
    {
      modelId: 'anthropic.claude-3-haiku-20240307-v1:0',
      outputModalities: ['TEXT'],
      inferenceTypesSupported: ['ON_DEMAND'],
      responseStreamingSupported: true,
      modelLifecycle: { status: 'LEGACY' },
    },
    {
      modelId: 'anthropic.claude-sonnet-4-5-20250929-v1:0',
      inputModalities: ['TEXT', 'IMAGE'],
      outputModalities: ['TEXT'],
      inferenceTypesSupported: ['INFERENCE_PROFILE'],
      responseStreamingSupported: true,
      modelLifecycle: { status: 'ACTIVE' },
    },
    {
      modelId: 'amazon.titan-embed-text-v2:0',
      outputModalities: ['EMBEDDING'],
      inferenceTypesSupported: ['ON_DEMAND'],
      responseStreamingSupported: false,
    },
    {
      modelId: 'amazon.titan-image-generator-v2:0',
      outputModalities: ['IMAGE'],
      inferenceTypesSupported: ['ON_DEMAND'],
    },
    {
      modelId: 'cohere.command-r-v1:0',
      outputModalities: ['TEXT'],
      inferenceTypesSupported: ['ON_DEMAND'],
      responseStreamingSupported: false,
    },
    { modelId: 'meta.llama3-1-8b-instruct-v1:0', outputModalities: ['TEXT'], inferenceTypesSupported: ['PROVISIONED'] },
  ];
  const arn = (id: string, region = 'us-east-1') => `arn:aws:bedrock:${region}::foundation-model/${id}`;
  const sonnet = 'anthropic.claude-sonnet-4-5-20250929-v1:0';
  const TEXT = { type: 'Text', streaming: true, lifecycle: 'Active' } as const;

  it('routes every active profile AWS lists (global., jp., application ids) as its foundation model', () => {
    const models = discoveredModels(
      summaries,
      [
        {
          inferenceProfileId: `us.${sonnet}`,
          type: 'SYSTEM_DEFINED',
          status: 'ACTIVE',
          models: [{ modelArn: arn(sonnet) }],
        },
        {
          inferenceProfileId: `global.${sonnet}`,
          type: 'SYSTEM_DEFINED',
          status: 'ACTIVE',
          models: [{ modelArn: arn(sonnet) }, { modelArn: arn(sonnet, 'eu-west-1') }],
        },
        {
          inferenceProfileId: 'a1b2c3d4e5f6',
          type: 'APPLICATION',
          status: 'ACTIVE',
          models: [{ modelArn: arn(sonnet) }],
        },
        // A profile whose model this region does not list still serves text.
        {
          inferenceProfileId: 'jp.other.model-v1:0',
          type: 'SYSTEM_DEFINED',
          models: [{ modelArn: arn('other.model-v1:0') }],
        },
      ],
      'us-east-1',
    );
    expect([...models.keys()].sort()).toEqual([
      'a1b2c3d4e5f6',
      'amazon.titan-embed-text-v2:0',
      'anthropic.claude-3-haiku-20240307-v1:0',
      'cohere.command-r-v1:0',
      `global.${sonnet}`,
      'jp.other.model-v1:0',
      `us.${sonnet}`,
    ]);
    expect(models.get('a1b2c3d4e5f6')).toEqual({ ...TEXT, images: true, baseModel: sonnet, profile: 'Application' });
    expect(models.get(`global.${sonnet}`)).toEqual({
      ...TEXT,
      images: true,
      baseModel: sonnet,
      profile: 'SystemDefined',
    });
    expect(models.get('amazon.titan-embed-text-v2:0')).toEqual({
      type: 'Embedding',
      streaming: false,
      lifecycle: 'Active',
    });
    expect(models.get('anthropic.claude-3-haiku-20240307-v1:0')?.lifecycle).toBe('Legacy');
    // responseStreamingSupported false: the gateway calls Converse for it.
    expect(models.get('cohere.command-r-v1:0')?.streaming).toBe(false);
  });

  it('derives the geographic ids from the region when the profiles cannot be listed', () => {
    const models = discoveredModels(summaries, undefined, 'us-east-1');
    expect(models.get(`us.${sonnet}`)).toEqual({ ...TEXT, images: true, baseModel: sonnet, profile: 'SystemDefined' });
    expect(models.has(`global.${sonnet}`)).toBe(false);
    expect(['eu-central-1', 'ap-northeast-1', 'us-gov-west-1'].map(inferenceProfileGeo)).toEqual([
      'eu',
      'apac',
      'us-gov',
    ]);
  });

  it('leaves out inactive profiles', () => {
    const models = discoveredModels(
      [],
      [{ inferenceProfileId: 'x1', type: 'APPLICATION', status: 'DELETING' }],
      'us-east-1',
    );
    expect(models.size).toBe(0);
  });
});

describe('discovery over signed HTTP, against the AWS double', () => {
  const FULL = { accessKeyId: 'AKIADISCOVERY0000001', secretAccessKey: 'discoverySecret0000000000000000000000000' };
  const OLD = { accessKeyId: 'AKIADISCOVERY0000002', secretAccessKey: 'discoverySecret1111111111111111111111111' };
  let aws: AwsDouble;
  const b64 = (s: string) => Buffer.from(s).toString('base64');
  const secrets = (keys: typeof FULL) => () => ({
    data: { accessKeyId: b64(keys.accessKeyId), secretAccessKey: b64(keys.secretAccessKey) },
  });
  const spec: ExternalProviderSpec = {
    provider: 'bedrock',
    displayName: 'b',
    region: 'us-east-1',
    auth: { method: 'AccessKey', secretRef: { name: 'aws-keys' } },
    includeInCLI: true,
    streaming: true,
    models: [],
  };
  const fetchOf =
    (credentials: ProviderCredentials): FetchJson =>
    async (url, init) => {
      const headers = await credentials.authorize(spec, bedrock, { method: 'GET', url, headers: init.headers });
      const res = await fetch(url, { headers });
      return { status: res.status, headers: res.headers, body: await res.json() };
    };

  beforeAll(async () => {
    aws = await startAwsDouble({
      principals: [
        { ...FULL, arn: 'arn:aws:iam::123456789012:user/full', allow: ['bedrock:*'], account: '123456789012' },
        // A policy written before the gateway listed inference profiles.
        {
          ...OLD,
          arn: 'arn:aws:iam::123456789012:user/old',
          allow: ['bedrock:ListFoundationModels', 'bedrock:InvokeModel*'],
          account: '123456789012',
        },
      ],
      models: {
        'us-east-1': [
          { modelId: NOVA, providerName: 'Amazon' },
          {
            modelId: HAIKU,
            providerName: 'Anthropic',
            inferenceTypesSupported: ['ON_DEMAND', 'INFERENCE_PROFILE'],
            global: true,
          },
          { modelId: TITAN, providerName: 'Amazon', outputModalities: ['EMBEDDING'] },
        ],
      },
    });
  });
  afterAll(() => aws?.close());

  it('lists the foundation models and every inference profile, signed with the Secret’s key', async () => {
    const credentials = new ProviderCredentials(secrets(FULL), { env: {} });
    const found = await bedrock.discover(spec, { PAO_ENDPOINT_URL_BEDROCK: aws.url }, fetchOf(credentials));
    const ids = found.models.map((m) => m.id);
    expect(ids).toEqual(expect.arrayContaining([NOVA, HAIKU, TITAN, `global.${HAIKU}`]));
    expect(found.models.find((m) => m.id === TITAN)?.type).toBe('Embedding');
    expect(found.note).toBeUndefined();
    const actions = aws.calls.filter((c) => c.accessKeyId === FULL.accessKeyId).map((c) => [c.action, c.status]);
    expect(actions).toEqual([
      ['ListFoundationModels', 200],
      ['ListInferenceProfiles', 200],
      ['ListInferenceProfiles', 200],
    ]);
    expect(credentials.keyLast4(spec)).toBe('0001');
  });

  it('derives the profiles when IAM denies ListInferenceProfiles, and says so', async () => {
    const credentials = new ProviderCredentials(secrets(OLD), { env: {} });
    const found = await bedrock.discover(spec, { AWS_ENDPOINT_URL_BEDROCK: aws.url }, fetchOf(credentials));
    expect(found.models.map((m) => m.id)).toContain(NOVA);
    expect(found.note).toMatch(/grant bedrock:ListInferenceProfiles/);
  });

  it('a Secret without the keys is a credential problem of the AWS table, naming no Secret', async () => {
    const credentials = new ProviderCredentials(() => undefined, { env: {} });
    const err = await bedrock
      .discover(spec, { PAO_ENDPOINT_URL_BEDROCK: aws.url }, fetchOf(credentials))
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CredentialError);
    expect((err as CredentialError).problem).toMatchObject({
      reason: 'SecretNotFound',
      credentials: true,
      status: 502,
    });
    expect((err as CredentialError).message).not.toContain('aws-keys');
  });
});
