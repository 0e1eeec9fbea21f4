import * as bedrock from '@aws-sdk/client-bedrock';
import * as runtime from '@aws-sdk/client-bedrock-runtime';
import * as sts from '@aws-sdk/client-sts';
import { describe, expect, it } from 'vitest';
import {
  AWS_ERROR_RULES,
  type AwsErrorContext,
  classifyAwsError,
  redactAws,
  SECRET_FORBIDDEN,
  SECRET_NOT_FOUND,
} from './aws-errors.js';

const invoke: AwsErrorContext = { auth: 'IAMRole', stage: 'invoke', streaming: false, subject: 'Bedrock model m' };

describe('the AWS error table', () => {
  it.each([
    // The seed's troubleshooting rows.
    [
      'AccessDenied on invoke',
      { code: 'AccessDeniedException', message: 'not authorized to perform: bedrock:InvokeModel on resource' },
      invoke,
      'InvokeDenied',
      /add both bedrock:InvokeModel and bedrock:InvokeModelWithResponseStream/,
    ],
    [
      'invoke works, streaming fails',
      {
        code: 'AccessDeniedException',
        message: 'not authorized to perform: bedrock:InvokeModelWithResponseStream on resource',
      },
      { ...invoke, streaming: true },
      'StreamingDenied',
      /lacks bedrock:InvokeModelWithResponseStream; add it/,
    ],
    [
      'a provider guardrail the role may not apply',
      {
        code: 'AccessDeniedException',
        message:
          'not authorized to perform: bedrock:ApplyGuardrail on resource: arn:aws:bedrock:us-east-1:123456789012:guardrail/g1',
      },
      invoke,
      'GuardrailDenied',
      /lacks bedrock:ApplyGuardrail/,
    ],
    [
      'AccessDeniedException on assume role',
      { code: 'AccessDenied', message: 'not authorized to perform: sts:AssumeRole' },
      { auth: 'IAMRole', stage: 'credentials' },
      'AssumeRoleDenied',
      /trust policy must allow sts:AssumeRole.*re-create the provider/,
    ],
    [
      'another assume-role error (no such role, wrong region)',
      { code: 'RegionDisabledException', message: 'STS is not activated in this region' },
      { auth: 'IAMRole', stage: 'credentials' },
      'AssumeRoleFailed',
      /confirm the role ARN in spec.auth.roleArn, the principal in its trust policy and the region/,
    ],
    [
      'ValidationException when called (use case)',
      { code: 'ValidationException', message: 'Model use case details have not been submitted' },
      invoke,
      'ModelNotEnabled',
      /console playground and submit the use-case details/,
    ],
    // Whose credentials decides the fix.
    [
      'an expired token on an access-key provider',
      { code: 'ExpiredTokenException', message: 'expired' },
      { ...invoke, auth: 'AccessKey' },
      'InvalidAccessKey',
      /Secret named in spec.auth.secretRef.*long-term access key/,
    ],
    [
      'an expired token on a role provider',
      { code: 'ExpiredTokenException', message: 'expired' },
      invoke,
      'RoleSessionExpired',
      /retry in a few seconds/,
    ],
    [
      "the gateway's own expired token when assuming",
      { code: 'ExpiredToken', message: 'expired' },
      { auth: 'IAMRole', stage: 'credentials' },
      'BaseCredentialsExpired',
      /identity of its pods/,
    ],
    [
      'a missing Secret',
      { code: SECRET_NOT_FOUND, message: '' },
      { auth: 'AccessKey', stage: 'credentials' },
      'SecretNotFound',
      /create it in the provider's namespace with both keys/,
    ],
    [
      'a Secret the chart does not grant',
      { code: SECRET_FORBIDDEN, message: '' },
      { auth: 'AccessKey', stage: 'credentials' },
      'SecretNotReadable',
      /chart value providerSecrets and run helm upgrade/,
    ],
    [
      'a denied ListFoundationModels',
      { code: 'AccessDeniedException', message: 'no' },
      { auth: 'IAMRole', stage: 'discovery', region: 'eu-west-1' },
      'DiscoveryDenied',
      /ListFoundationModels was denied in eu-west-1/,
    ],
    ['an unknown 429', { code: 'Whatever', message: '', httpStatus: 429 }, invoke, 'Throttled', /throttling/],
  ] as const)('%s', (_name, failure, ctx, reason, message) => {
    const p = classifyAwsError(failure, ctx);
    expect(p.reason).toBe(reason);
    expect(p.message).toMatch(message);
  });

  it('ends with a catch-all rule, and names only codes AWS defines (or our own)', () => {
    const last = AWS_ERROR_RULES.at(-1);
    expect(last && !last.codes && !last.stages && !last.text && !last.auth).toBe(true);
    // Modelled exceptions of the three APIs, from the SDKs generated from AWS's service models.
    const modelled = new Set(
      [bedrock, runtime, sts].flatMap((m) => Object.keys(m).filter((k) => k.endsWith('Exception'))),
    );
    // AWS's common errors (every service, unmodelled) and the SDK's own client-side failures.
    const common = new Set([
      'AccessDenied',
      'ExpiredToken',
      'UnrecognizedClientException',
      'InvalidClientTokenId',
      'InvalidSignatureException',
      'SignatureDoesNotMatch',
      'IncompleteSignatureException',
      'TooManyRequestsException',
      'CredentialsProviderError',
      'TimeoutError',
    ]);
    const ours = new Set([SECRET_NOT_FOUND, SECRET_FORBIDDEN]);
    const unknown = AWS_ERROR_RULES.flatMap((r) => r.codes ?? []).filter(
      (c) => !modelled.has(c) && !common.has(c) && !ours.has(c),
    );
    expect(unknown).toEqual([]);
  });

  it('gives every rule a reachable place: none is shadowed by an earlier, broader rule', () => {
    for (const [i, rule] of AWS_ERROR_RULES.entries()) {
      for (const earlier of AWS_ERROR_RULES.slice(0, i)) {
        const broader =
          (!earlier.codes || (rule.codes ?? []).every((c) => earlier.codes?.includes(c))) &&
          (!earlier.codes || rule.codes !== undefined) &&
          (!earlier.auth || earlier.auth === rule.auth) &&
          (!earlier.stages || (rule.stages ?? []).every((s) => earlier.stages?.includes(s))) &&
          (!earlier.stages || rule.stages !== undefined) &&
          (!earlier.text || earlier.text.source === rule.text?.source) &&
          (earlier.httpStatus === undefined || earlier.httpStatus === rule.httpStatus);
        expect(broader, `rule ${i} (${rule.problem.reason}) is shadowed by ${earlier.problem.reason}`).toBe(false);
      }
    }
  });
});

describe('redactAws', () => {
  it.each([
    ['an access key id', 'key AKIAIOSFODNN7EXAMPLE rejected', 'AKIAIOSFODNN7EXAMPLE'],
    ['a temporary key id', 'key ASIAY34FZKBOKMUTVV7A', 'ASIAY34FZKBOKMUTVV7A'],
    ['a secret key', 'secret wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY', 'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY'],
    ['a role ARN', 'on arn:aws:iam::123456789012:role/bedrock-prod.', 'role/bedrock-prod'],
    ['an assumed-role ARN', 'User: arn:aws:sts::123456789012:assumed-role/gw/x is', 'assumed-role/gw'],
    ['a resource ARN with an account', 'arn:aws:bedrock:us-east-1:123456789012:inference-profile/x', '123456789012'],
    ['a bare account id', 'account 123456789012 is not subscribed', '123456789012'],
  ])('removes %s', (_name, text, secret) => {
    expect(redactAws(text)).not.toContain(secret);
  });

  it('removes the names it is given and keeps the words', () => {
    expect(redactAws('Secret team-keys not found in platform-agent', ['team-keys'])).toBe(
      'Secret [name] not found in platform-agent',
    );
  });

  it('keeps messages short', () => {
    expect(redactAws('word '.repeat(200)).length).toBeLessThanOrEqual(300);
  });
});
