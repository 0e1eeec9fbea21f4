import { describe, expect, it } from 'vitest';
import { loadBedrockPrices } from '../../crds/catalog/prices.js';
import type { ExternalProvider } from '../../crds/external-provider.js';
import {
  type DiscoveryOutcome,
  discoveredModels,
  type FoundModel,
  inferenceProfileGeo,
  externalProviderStatus as statusWith,
} from './external-provider-status.js';

const prices = loadBedrockPrices();
const externalProviderStatus = (e: ExternalProvider, outcome: DiscoveryOutcome, at: Date) =>
  statusWith(e, outcome, at, prices);
const TEXT: FoundModel = { type: 'Text', streaming: true, lifecycle: 'Active' };
/** A discovery that found these ids, all on-demand text models. */
const found = (ids: string[], extra: Partial<Extract<DiscoveryOutcome, { ok: true }>> = {}): DiscoveryOutcome => ({
  ok: true,
  models: new Map(ids.map((id) => [id, TEXT])),
  ...extra,
});

const now = new Date('2026-11-21T12:00:00Z');
function ep(
  method: 'IAMRole' | 'AccessKey',
  models = ['anthropic.claude-3-haiku-20240307-v1:0', 'meta.llama3-1-8b-instruct-v1:0'],
): ExternalProvider {
  return {
    apiVersion: 'ai.platform/v1beta1',
    kind: 'ExternalProvider',
    metadata: { name: 'bedrock', namespace: 'platform-agent', generation: 3 },
    spec: {
      provider: 'bedrock',
      displayName: 'B',
      region: 'us-east-1',
      auth:
        method === 'IAMRole'
          ? { method, roleArn: 'arn:aws:iam::123456789012:role/bedrock' }
          : { method, secretRef: { name: 'keys' } },
      includeInCLI: true,
      streaming: true,
      models,
    },
  };
}
const cond = (s: ReturnType<typeof externalProviderStatus>, type: string) => s.conditions?.find((c) => c.type === type);

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

describe('externalProviderStatus', () => {
  it("is Ready when every selected model is available, and shows only the key's last 4", () => {
    const s = externalProviderStatus(
      ep('AccessKey'),
      found(['anthropic.claude-3-haiku-20240307-v1:0', 'meta.llama3-1-8b-instruct-v1:0', 'x'], {
        accessKeyLast4: 'MPLE',
      }),
      now,
    );
    expect(s.phase).toBe('Ready');
    expect(s.accessKeyLast4).toBe('MPLE');
    expect(s.lastDiscoveryTime).toBe('2026-11-21T12:00:00Z');
    expect(s.observedGeneration).toBe(3);
    expect(cond(s, 'ModelsAvailable')?.status).toBe('True');
  });

  it('is Degraded naming the selected models that are not available', () => {
    const s = externalProviderStatus(ep('IAMRole'), found(['anthropic.claude-3-haiku-20240307-v1:0']), now);
    expect(s.phase).toBe('Degraded');
    expect(cond(s, 'ModelsAvailable')).toMatchObject({ status: 'False', reason: 'ModelsNotAvailable' });
    expect(cond(s, 'ModelsAvailable')?.message).toContain('meta.llama3-1-8b-instruct-v1:0');
    expect(cond(s, 'ModelsAvailable')?.message).toContain('console playground');
  });

  it('fails with the wrong-account-or-region fix when the region lists no model', () => {
    const s = externalProviderStatus(ep('IAMRole'), found([]), now);
    expect(s.phase).toBe('Failed');
    expect(cond(s, 'ModelsAvailable')?.message).toContain('wrong account or region');
  });

  it('maps a denied AssumeRole to the trust-policy fix', () => {
    const s = externalProviderStatus(
      ep('IAMRole'),
      {
        ok: false,
        stage: 'credentials',
        failure: { code: 'AccessDenied', message: 'User: x is not authorized to perform: sts:AssumeRole' },
      },
      now,
    );
    expect(s.phase).toBe('Failed');
    expect(cond(s, 'CredentialsValid')).toMatchObject({ status: 'False', reason: 'AssumeRoleDenied' });
    expect(cond(s, 'CredentialsValid')?.message).toContain(
      "trust policy must allow sts:AssumeRole for the gateway's principal",
    );
  });

  it('maps other AssumeRole failures to checking ARN, principal and region', () => {
    const s = externalProviderStatus(
      ep('IAMRole'),
      { ok: false, stage: 'credentials', failure: { code: 'NoSuchEntity', message: 'no role' } },
      now,
    );
    expect(cond(s, 'CredentialsValid')?.reason).toBe('AssumeRoleFailed');
    expect(cond(s, 'CredentialsValid')?.message).toContain(
      'confirm the role ARN in spec.auth.roleArn, the principal in its trust policy and the region',
    );
  });

  it('maps a rejected access key and a denied ListFoundationModels', () => {
    const bad = externalProviderStatus(
      ep('AccessKey'),
      { ok: false, stage: 'discovery', failure: { code: 'UnrecognizedClientException', message: 'bad' } },
      now,
    );
    expect(cond(bad, 'CredentialsValid')?.reason).toBe('InvalidAccessKey');
    const denied = externalProviderStatus(
      ep('IAMRole'),
      { ok: false, stage: 'discovery', failure: { code: 'AccessDeniedException', message: 'no' } },
      now,
    );
    expect(cond(denied, 'Ready')?.reason).toBe('DiscoveryDenied');
    expect(cond(denied, 'Ready')?.message).toContain('lacks bedrock:ListFoundationModels');
  });

  it('records what discovery found of each selected model, and flags legacy and unpriced ones', () => {
    const provider = ep('IAMRole', [
      'global.anthropic.claude-sonnet-4-5-20250929-v1:0',
      'anthropic.claude-3-haiku-20240307-v1:0',
      'a1b2c3d4e5f6',
      'x.unknown-v1:0',
    ]);
    const s = externalProviderStatus(
      provider,
      {
        ok: true,
        models: new Map<string, FoundModel>([
          [
            'global.anthropic.claude-sonnet-4-5-20250929-v1:0',
            { ...TEXT, baseModel: 'anthropic.claude-sonnet-4-5-20250929-v1:0', profile: 'SystemDefined' },
          ],
          ['anthropic.claude-3-haiku-20240307-v1:0', { ...TEXT, lifecycle: 'Legacy', streaming: false }],
          ['a1b2c3d4e5f6', { ...TEXT, baseModel: 'anthropic.claude-3-5-haiku-20241022-v1:0', profile: 'Application' }],
          ['x.unknown-v1:0', TEXT],
        ]),
        profilesGuessed: true,
      },
      now,
    );
    expect(s.phase).toBe('Ready');
    expect(s.models?.map((m) => [m.id, m.priced])).toEqual([
      ['global.anthropic.claude-sonnet-4-5-20250929-v1:0', true],
      ['anthropic.claude-3-haiku-20240307-v1:0', true],
      ['a1b2c3d4e5f6', true],
      ['x.unknown-v1:0', false],
    ]);
    expect(s.models?.[1]).toMatchObject({ lifecycle: 'Legacy', streaming: false });
    expect(cond(s, 'ModelsPriced')).toMatchObject({ status: 'False', reason: 'UnpricedModels' });
    expect(cond(s, 'ModelsPriced')?.message).toContain('no price for x.unknown-v1:0');
    expect(cond(s, 'ModelsAvailable')).toMatchObject({ status: 'True', reason: 'LegacyModels' });
    expect(cond(s, 'ModelsAvailable')?.message).toContain(
      'legacy (AWS is retiring them, move to a current model): anthropic.claude-3-haiku-20240307-v1:0',
    );
    expect(cond(s, 'ModelsAvailable')?.message).toContain('grant bedrock:ListInferenceProfiles');
    const priced = externalProviderStatus(
      ep('IAMRole', ['anthropic.claude-3-haiku-20240307-v1:0']),
      found(['anthropic.claude-3-haiku-20240307-v1:0']),
      now,
    );
    expect(cond(priced, 'ModelsPriced')).toMatchObject({ status: 'True', reason: 'Priced' });
  });

  it('keeps the last discovered models and time through a failed rediscovery', () => {
    const first = externalProviderStatus(ep('IAMRole'), found(['a.b-v1:0']), now);
    const later = externalProviderStatus(
      { ...ep('IAMRole'), status: first },
      { ok: false, stage: 'discovery', failure: { code: 'ServiceUnavailableException', message: 'down' } },
      new Date('2026-11-21T12:10:00Z'),
    );
    expect(later.availableModels).toEqual(['a.b-v1:0']);
    expect(later.lastDiscoveryTime).toBe('2026-11-21T12:00:00Z');
  });

  it.each([
    ['IAMRole', 'credentials', 'AccessDenied', 'AssumeRoleDenied'],
    ['IAMRole', 'credentials', 'NoSuchEntity', 'AssumeRoleFailed'],
    ['IAMRole', 'credentials', 'ExpiredToken', 'BaseCredentialsExpired'],
    ['IAMRole', 'discovery', 'ExpiredTokenException', 'RoleSessionExpired'],
    ['AccessKey', 'discovery', 'ExpiredTokenException', 'InvalidAccessKey'],
    ['AccessKey', 'credentials', 'SecretNotFound', 'SecretNotFound'],
    ['AccessKey', 'credentials', 'SecretForbidden', 'SecretNotReadable'],
    ['IAMRole', 'discovery', 'ThrottlingException', 'Throttled'],
    ['IAMRole', 'discovery', 'SomethingNew', 'DiscoveryFailed'],
  ] as const)('%s at %s: %s is %s, and the status names no role, account or Secret', (method, stage, code, reason) => {
    const provider = ep(method);
    const s = externalProviderStatus(
      provider,
      {
        ok: false,
        stage,
        failure: {
          code,
          message:
            'User: arn:aws:sts::999999999999:assumed-role/gw/s is not authorized on arn:aws:iam::123456789012:role/bedrock (account 123456789012, Secret keys)',
        },
      },
      now,
    );
    expect(cond(s, 'Ready')?.reason).toBe(reason);
    const text = JSON.stringify(s);
    const secretName = method === 'AccessKey' ? ['Secret keys'] : [];
    for (const leak of ['arn:aws', '123456789012', '999999999999', ...secretName]) expect(text).not.toContain(leak);
  });

  it('says an expired token on an access-key provider is about the stored key, not the role', () => {
    const s = externalProviderStatus(
      ep('AccessKey'),
      { ok: false, stage: 'discovery', failure: { code: 'ExpiredTokenException', message: 'expired' } },
      now,
    );
    expect(cond(s, 'CredentialsValid')?.message).toContain('Secret named in spec.auth.secretRef');
    expect(cond(s, 'CredentialsValid')?.message).not.toMatch(/trust policy|role/);
  });
});
