import { describe, expect, it } from 'vitest';
import { loadBedrockPrices } from '../../crds/catalog/prices.js';
import type { ExternalProvider, ExternalProviderStatus } from '../../crds/external-provider.js';
import { type AwsFailure, classifyAwsError } from '../../crds/providers/aws-errors.js';
import { bedrock } from '../../crds/providers/bedrock.js';
import type { FoundModel } from '../../crds/providers/bedrock-discovery.js';
import { listed, type ProblemContext } from '../../crds/providers/provider.js';
import { type DiscoveryOutcome, providerStatus } from './provider-status.js';

/**
 * Every provider's status as a pure function of one discovery attempt and the status before it,
 * in the provider module's words: Bedrock's (AWS's error table, regions, profiles, legacy models)
 * and the hosted providers' (their HTTP error tables, undated aliases) through one assembly.
 */

const prices = loadBedrockPrices();
const externalProviderStatus = (e: ExternalProvider, outcome: DiscoveryOutcome, at: Date) =>
  providerStatus(e, outcome, at, prices);
const cond = (s: ExternalProviderStatus, type: string) => s.conditions?.find((c) => c.type === type);
const TEXT: FoundModel = { type: 'Text', streaming: true, lifecycle: 'Active' };
const PROFILES_GUESSED =
  'inference profiles were derived from the region because ListInferenceProfiles was denied: grant bedrock:ListInferenceProfiles to route global., jp., au. and application inference profiles';

/** A discovery that found these ids, all on-demand text models. */
const found = (ids: string[], extra: { keyLast4?: string } = {}): DiscoveryOutcome => ({
  ok: true,
  discovery: { models: ids.map((id) => ({ id, ...TEXT })) },
  ...extra,
});

/**
 * A failed Bedrock discovery as the operator meets it: getting the credentials failed (the AWS
 * table classified it where they failed, crds/providers/credentials.ts), or Bedrock answered
 * ListFoundationModels with an error (restJson1: the code in x-amzn-ErrorType).
 */
function awsFailed(e: ExternalProvider, stage: 'credentials' | 'discovery', failure: AwsFailure): DiscoveryOutcome {
  const ctx: ProblemContext = { stage: 'discovery', identity: e.spec };
  const auth = e.spec.auth.method === 'AccessKey' ? 'AccessKey' : 'IAMRole';
  const p =
    stage === 'credentials'
      ? bedrock.problem(
          {
            kind: 'credentials',
            problem: classifyAwsError(failure, { auth, stage, region: e.spec.region ?? '' }, [
              e.spec.auth.secretRef?.name ?? '',
            ]),
          },
          ctx,
        )
      : bedrock.problem(
          {
            kind: 'answer',
            status: failure.httpStatus ?? 400,
            headers: { 'x-amzn-errortype': `${failure.code}:http://internal.amazon.com/coral/com.amazon.bedrock/` },
            body: { message: failure.message },
          },
          ctx,
        );
  return { ok: false, problem: { reason: p.reason, credentials: p.credentials, message: p.message } };
}

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

describe('a Bedrock provider’s status', () => {
  it("is Ready when every selected model is available, and shows only the key's last 4", () => {
    const s = externalProviderStatus(
      ep('AccessKey'),
      found(['anthropic.claude-3-haiku-20240307-v1:0', 'meta.llama3-1-8b-instruct-v1:0', 'x'], { keyLast4: 'MPLE' }),
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
      awsFailed(ep('IAMRole'), 'credentials', {
        code: 'AccessDenied',
        message: 'User: x is not authorized to perform: sts:AssumeRole',
      }),
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
      awsFailed(ep('IAMRole'), 'credentials', { code: 'NoSuchEntity', message: 'no role' }),
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
      awsFailed(ep('AccessKey'), 'discovery', { code: 'UnrecognizedClientException', message: 'bad' }),
      now,
    );
    expect(cond(bad, 'CredentialsValid')?.reason).toBe('InvalidAccessKey');
    const denied = externalProviderStatus(
      ep('IAMRole'),
      awsFailed(ep('IAMRole'), 'discovery', { code: 'AccessDeniedException', message: 'no' }),
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
        discovery: {
          models: [
            {
              id: 'global.anthropic.claude-sonnet-4-5-20250929-v1:0',
              ...TEXT,
              baseModel: 'anthropic.claude-sonnet-4-5-20250929-v1:0',
              profile: 'SystemDefined',
            },
            { id: 'anthropic.claude-3-haiku-20240307-v1:0', ...TEXT, lifecycle: 'Legacy', streaming: false },
            {
              id: 'a1b2c3d4e5f6',
              ...TEXT,
              baseModel: 'anthropic.claude-3-5-haiku-20241022-v1:0',
              profile: 'Application',
            },
            { id: 'x.unknown-v1:0', ...TEXT },
          ],
          note: PROFILES_GUESSED,
        },
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
      awsFailed(ep('IAMRole'), 'discovery', { code: 'ServiceUnavailableException', message: 'down' }),
      new Date('2026-11-21T12:10:00Z'),
    );
    expect(later.availableModels).toEqual(['a.b-v1:0']);
    expect(later.lastDiscoveryTime).toBe('2026-11-21T12:00:00Z');
  });

  it('a moment of throttling keeps a Ready Bedrock provider routable, as every provider; a denial does not', () => {
    const provider = ep('IAMRole', ['a.b-v1:0']);
    const ready = externalProviderStatus(provider, found(['a.b-v1:0']), now);
    const throttled = externalProviderStatus(
      { ...provider, status: ready },
      awsFailed(provider, 'discovery', { code: 'ThrottlingException', message: 'slow down' }),
      now,
    );
    expect(throttled.phase).toBe('Ready');
    expect(cond(throttled, 'ModelsAvailable')).toMatchObject({ status: 'Unknown', reason: 'Throttled' });
    expect(cond(throttled, 'ModelsAvailable')?.message).toContain('retries in 30 s');
    const denied = externalProviderStatus(
      { ...provider, status: ready },
      awsFailed(provider, 'discovery', { code: 'AccessDeniedException', message: 'no' }),
      now,
    );
    expect(denied.phase).toBe('Failed');
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
      awsFailed(provider, stage, {
        code,
        message:
          'User: arn:aws:sts::999999999999:assumed-role/gw/s is not authorized on arn:aws:iam::123456789012:role/bedrock (account 123456789012, Secret keys)',
      }),
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
      awsFailed(ep('AccessKey'), 'discovery', { code: 'ExpiredTokenException', message: 'expired' }),
      now,
    );
    expect(cond(s, 'CredentialsValid')?.message).toContain('Secret named in spec.auth.secretRef');
    expect(cond(s, 'CredentialsValid')?.message).not.toMatch(/trust policy|role/);
  });
});

const NOW = new Date('2026-11-26T12:00:00Z');

const hostedProvider = (models: string[], status?: ExternalProviderStatus): ExternalProvider => ({
  apiVersion: 'ai.platform/v1beta1',
  kind: 'ExternalProvider',
  metadata: { name: 'p', namespace: 'platform-agent', generation: 2 },
  spec: {
    provider: 'anthropic',
    displayName: 'p',
    auth: { method: 'APIKey', secretRef: { name: 's' } },
    includeInCLI: false,
    streaming: true,
    models,
  },
  ...(status ? { status } : {}),
});

const ready = providerStatus(
  hostedProvider(['claude-sonnet-4-5']),
  { ok: true, discovery: { models: [listed('claude-sonnet-4-5-20250929')] }, keyLast4: 'abcd' },
  NOW,
  prices,
);

describe('a hosted provider’s status', () => {
  it('Ready: the selected alias available under its own name, priced, the key by its last 4', () => {
    expect(ready).toMatchObject({
      phase: 'Ready',
      availableModels: ['claude-sonnet-4-5', 'claude-sonnet-4-5-20250929'],
      models: [{ id: 'claude-sonnet-4-5', type: 'Text', family: 'anthropic', priced: true }],
      accessKeyLast4: 'abcd',
      lastDiscoveryTime: '2026-11-26T12:00:00Z',
    });
  });

  const transient: DiscoveryOutcome = {
    ok: false,
    problem: { reason: 'ProviderUnavailable', credentials: false, message: 'Anthropic failed (529): Overloaded' },
  };

  it('a moment of overload keeps a Ready provider routable, and says discovery retries', () => {
    const next = providerStatus(hostedProvider(['claude-sonnet-4-5'], ready), transient, NOW, prices);
    expect(next.phase).toBe('Ready');
    expect(next.models).toEqual(ready.models);
    expect(cond(next, 'ModelsAvailable')).toMatchObject({ status: 'Unknown', reason: 'ProviderUnavailable' });
    expect(cond(next, 'ModelsAvailable')?.message).toContain('retries in 30 s');
    expect(cond(next, 'Ready')?.status).toBe('True');
  });

  it('the same failure with nothing found before is Failed', () => {
    expect(providerStatus(hostedProvider(['claude-sonnet-4-5']), transient, NOW, prices).phase).toBe('Failed');
  });

  it('a refused key fails at once, even a provider that was Ready', () => {
    const next = providerStatus(
      hostedProvider(['claude-sonnet-4-5'], ready),
      { ok: false, problem: { reason: 'InvalidAPIKey', credentials: true, message: 'refused' } },
      NOW,
      prices,
    );
    expect(next.phase).toBe('Failed');
    expect(cond(next, 'CredentialsValid')).toMatchObject({ status: 'False', reason: 'InvalidAPIKey' });
  });

  it('keeps every selected model within the 1000 ids of availableModels', () => {
    const many = Array.from({ length: 1500 }, (_, i) => listed(`a-model-${String(i).padStart(4, '0')}`));
    const next = providerStatus(
      hostedProvider(['z-selected', 'claude-haiku-4-5']),
      { ok: true, discovery: { models: [...many, listed('z-selected'), listed('claude-haiku-4-5-20251001')] } },
      NOW,
      prices,
    );
    expect(next.availableModels).toHaveLength(1000);
    expect(next.availableModels).toEqual(expect.arrayContaining(['z-selected', 'claude-haiku-4-5']));
    expect(next.phase).toBe('Ready');
    expect(cond(next, 'ModelsPriced')).toMatchObject({ status: 'False', reason: 'UnpricedModels' });
  });
});
