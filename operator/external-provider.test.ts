import { describe, expect, it } from 'vitest';
import type { ExternalProvider } from '../crds/external-provider.js';
import { availableModelIds, externalProviderStatus, inferenceProfileGeo } from './external-provider-status.js';

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

describe('availableModelIds', () => {
  it('keeps text models: on-demand ids and geo-prefixed inference-profile ids', () => {
    expect(
      availableModelIds(
        [
          {
            modelId: 'anthropic.claude-3-haiku-20240307-v1:0',
            outputModalities: ['TEXT'],
            inferenceTypesSupported: ['ON_DEMAND'],
          },
          {
            modelId: 'anthropic.claude-3-7-sonnet-20250219-v1:0',
            outputModalities: ['TEXT'],
            inferenceTypesSupported: ['INFERENCE_PROFILE'],
          },
          {
            modelId: 'amazon.titan-image-generator-v2:0',
            outputModalities: ['IMAGE'],
            inferenceTypesSupported: ['ON_DEMAND'],
          },
          { modelId: 'cohere.command-r-v1:0', outputModalities: ['TEXT'], inferenceTypesSupported: ['PROVISIONED'] },
        ],
        'us-east-1',
      ),
    ).toEqual(['anthropic.claude-3-haiku-20240307-v1:0', 'us.anthropic.claude-3-7-sonnet-20250219-v1:0']);
    expect(['eu-central-1', 'ap-northeast-1', 'us-gov-west-1'].map(inferenceProfileGeo)).toEqual([
      'eu',
      'apac',
      'us-gov',
    ]);
  });
});

describe('externalProviderStatus', () => {
  it("is Ready when every selected model is available, and shows only the key's last 4", () => {
    const s = externalProviderStatus(
      ep('AccessKey'),
      {
        ok: true,
        modelIds: ['anthropic.claude-3-haiku-20240307-v1:0', 'meta.llama3-1-8b-instruct-v1:0', 'x'],
        accessKeyLast4: 'MPLE',
      },
      now,
    );
    expect(s.phase).toBe('Ready');
    expect(s.accessKeyLast4).toBe('MPLE');
    expect(s.lastDiscoveryTime).toBe('2026-11-21T12:00:00Z');
    expect(s.observedGeneration).toBe(3);
    expect(cond(s, 'ModelsAvailable')?.status).toBe('True');
  });

  it('is Degraded naming the selected models that are not available', () => {
    const s = externalProviderStatus(
      ep('IAMRole'),
      { ok: true, modelIds: ['anthropic.claude-3-haiku-20240307-v1:0'] },
      now,
    );
    expect(s.phase).toBe('Degraded');
    expect(cond(s, 'ModelsAvailable')).toMatchObject({ status: 'False', reason: 'ModelsNotAvailable' });
    expect(cond(s, 'ModelsAvailable')?.message).toContain('meta.llama3-1-8b-instruct-v1:0');
    expect(cond(s, 'ModelsAvailable')?.message).toContain('console playground');
  });

  it('fails with the wrong-account-or-region fix when the region lists no model', () => {
    const s = externalProviderStatus(ep('IAMRole'), { ok: true, modelIds: [] }, now);
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

  it('keeps the last discovered models and time through a failed rediscovery', () => {
    const first = externalProviderStatus(ep('IAMRole'), { ok: true, modelIds: ['a.b-v1:0'] }, now);
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
