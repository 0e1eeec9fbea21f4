import { AccessDeniedException, ThrottlingException } from '@aws-sdk/client-bedrock-runtime';
import { describe, expect, it } from 'vitest';
import { CredentialsError } from '../../crds/providers/aws-credentials.js';
import { ProxyError } from '../endpoints/errors.js';
import { type BedrockErrorContext, mapBedrockError } from './bedrock-errors.js';

const ctx: BedrockErrorContext = { model: 'claude-haiku', provider: 'team-a/bedrock', streaming: true };
const awsError = (name: string, message: string, httpStatusCode?: number) =>
  Object.assign(new Error(message), { name, $fault: 'client', $metadata: { httpStatusCode } });

describe('mapBedrockError', () => {
  it.each([
    [
      'ThrottlingException',
      new ThrottlingException({ $metadata: { httpStatusCode: 429 }, message: 'Too many requests' }),
      ctx,
      { status: 429, type: 'rate_limit_error', code: 'upstream_rate_limited', headers: { 'Retry-After': '5' } },
      /throttling/,
    ],
    [
      'TooManyRequestsException',
      awsError('TooManyRequestsException', 'Too many requests', 429),
      ctx,
      { status: 429, code: 'upstream_rate_limited', headers: { 'Retry-After': '5' } },
      /throttling/,
    ],
    [
      'an unknown error with HTTP 429',
      awsError('SomethingNew', 'slow', 429),
      ctx,
      { status: 429, code: 'upstream_rate_limited' },
      /throttling/,
    ],
    [
      'AccessDenied for InvokeModelWithResponseStream',
      new AccessDeniedException({
        $metadata: { httpStatusCode: 403 },
        message:
          'User: arn:aws:sts::123456789012:assumed-role/gateway/i-0abc is not authorized to perform: bedrock:InvokeModelWithResponseStream on resource: arn:aws:bedrock:us-east-1::foundation-model/anthropic.claude-3-5-haiku-20241022-v1:0 because no identity-based policy allows the bedrock:InvokeModelWithResponseStream action',
      }),
      ctx,
      { status: 403, type: 'permission_error', code: 'bedrock_access_denied' },
      /lacks bedrock:InvokeModelWithResponseStream; add it/,
    ],
    [
      'AccessDenied for InvokeModel',
      awsError(
        'AccessDeniedException',
        'User: arn:aws:iam::123456789012:user/gw is not authorized to perform: bedrock:InvokeModel on resource: arn:aws:bedrock:us-east-1::foundation-model/x',
        403,
      ),
      { ...ctx, streaming: false },
      { status: 403, code: 'bedrock_access_denied' },
      /lacks bedrock:InvokeModel; add both bedrock:InvokeModel and bedrock:InvokeModelWithResponseStream/,
    ],
    [
      'AccessDenied without model access',
      awsError('AccessDeniedException', "You don't have access to the model with the specified model ID.", 403),
      ctx,
      { status: 403, type: 'permission_error', code: 'bedrock_model_not_enabled' },
      /enable model access in the Bedrock console for this region/,
    ],
    [
      'AccessDenied otherwise, streaming',
      awsError('AccessDeniedException', 'Access denied by an explicit deny in a service control policy', 403),
      ctx,
      { status: 403, code: 'bedrock_access_denied' },
      /needs bedrock:InvokeModelWithResponseStream.*explicit deny/,
    ],
    [
      'AccessDenied otherwise, not streaming',
      awsError('AccessDeniedException', 'Access denied', 403),
      { ...ctx, streaming: false },
      { status: 403, code: 'bedrock_access_denied' },
      /needs bedrock:InvokeModel on/,
    ],
    [
      'ValidationException about the use case form',
      awsError(
        'ValidationException',
        'Model use case details have not been submitted for this account. Fill out the Anthropic use case details form before using the model.',
        400,
      ),
      ctx,
      { status: 400, type: 'invalid_request_error', code: 'bedrock_model_not_enabled' },
      /invoke it once in the Bedrock console playground and submit the use-case details/,
    ],
    [
      'ValidationException otherwise',
      awsError(
        'ValidationException',
        "Invocation of model ID anthropic.claude-3-5-haiku with on-demand throughput isn't supported.",
        400,
      ),
      ctx,
      { status: 400, type: 'invalid_request_error', code: 'upstream_rejected' },
      /on-demand throughput isn't supported/,
    ],
    [
      'ValidationException for a too-long input',
      awsError('ValidationException', 'Input is too long for requested model.', 400),
      ctx,
      { status: 400, code: 'context_length_exceeded' },
      /Input is too long/,
    ],
    [
      'ResourceNotFoundException',
      awsError('ResourceNotFoundException', 'Model not found', 404),
      ctx,
      { status: 404, type: 'not_found_error', code: 'model_not_found' },
      /claude-haiku/,
    ],
    [
      'ModelTimeoutException',
      awsError('ModelTimeoutException', 'timed out', 408),
      ctx,
      { status: 504, type: 'timeout_error', code: 'upstream_timeout' },
      /in time/,
    ],
    [
      'the SDK socket TimeoutError',
      Object.assign(new Error('socket timed out'), { name: 'TimeoutError' }),
      ctx,
      { status: 504, code: 'upstream_timeout' },
      /in time/,
    ],
    [
      'ServiceUnavailableException',
      awsError('ServiceUnavailableException', 'unavailable', 503),
      ctx,
      { status: 503, code: 'upstream_unavailable', headers: { 'Retry-After': '5' } },
      /not available/,
    ],
    [
      'ModelNotReadyException',
      awsError('ModelNotReadyException', 'not ready', 429),
      ctx,
      { status: 503, code: 'upstream_unavailable' },
      /not available/,
    ],
    [
      'InternalServerException',
      awsError('InternalServerException', 'internal', 500),
      ctx,
      { status: 502, type: 'api_error', code: 'upstream_error' },
      /InternalServerException/,
    ],
    [
      'ModelStreamErrorException',
      awsError('ModelStreamErrorException', 'stream broke', 424),
      ctx,
      { status: 502, code: 'upstream_stream_error' },
      /stream broke/,
    ],
    [
      'ServiceQuotaExceededException',
      awsError('ServiceQuotaExceededException', 'quota', 400),
      ctx,
      { status: 429, code: 'upstream_quota_exceeded', headers: {} },
      /quota/,
    ],
    [
      'STS AccessDenied from AssumeRole',
      awsError(
        'AccessDenied',
        'User: arn:aws:sts::123456789012:assumed-role/gw/x is not authorized to perform: sts:AssumeRole on resource: arn:aws:iam::210987654321:role/bedrock',
        403,
      ),
      ctx,
      { status: 403, type: 'permission_error', code: 'assume_role_denied' },
      /cannot be called: STS denied sts:AssumeRole on the provider's role: the role's trust policy must allow sts:AssumeRole for the gateway's principal/,
    ],
    ...(['ExpiredTokenException', 'ExpiredToken'] as const).map(
      (name) =>
        [
          `${name} on a role provider (the session ran out before renewal)`,
          awsError(name, 'The security token included in the request is expired', 403),
          { ...ctx, auth: 'IAMRole' },
          { status: 503, type: 'api_error', code: 'bedrock_credentials_expired', headers: { 'Retry-After': '5' } },
          new RegExp(`role session expired \\(${name}\\)`),
        ] as const,
    ),
    ...(['UnrecognizedClientException', 'InvalidSignatureException'] as const).map(
      (name) =>
        [
          `${name} on a role provider`,
          awsError(name, 'The security token included in the request is invalid.', 403),
          { ...ctx, auth: 'IAMRole' },
          { status: 502, type: 'api_error', code: 'bedrock_credentials_invalid' },
          new RegExp(`rejected the provider's role credentials \\(${name}\\)`),
        ] as const,
    ),
    ...(['ExpiredTokenException', 'UnrecognizedClientException', 'InvalidSignatureException'] as const).map(
      (name) =>
        [
          `${name} on an access-key provider (the stored key, not a role)`,
          awsError(name, 'The security token included in the request is invalid.', 403),
          { ...ctx, auth: 'AccessKey' },
          { status: 502, type: 'api_error', code: 'bedrock_credentials_invalid' },
          new RegExp(
            `rejected the provider's access key \\(${name}\\): check both values in the Secret named in spec.auth.secretRef`,
          ),
        ] as const,
    ),
    [
      'an unknown error',
      awsError('ConflictException', 'conflict', 409),
      ctx,
      { status: 502, type: 'api_error', code: 'upstream_error' },
      /\(ConflictException\): conflict/,
    ],
    ['a thrown string', 'socket hang up', ctx, { status: 502, code: 'upstream_error' }, /socket hang up/],
    ['undefined', undefined, ctx, { status: 502, code: 'upstream_error' }, /Bedrock model claude-haiku/],
  ] as Array<[string, unknown, typeof ctx, Partial<ProxyError>, RegExp]>)(
    'maps %s',
    (_name, err, c, expected, message) => {
      const e = mapBedrockError(err, c);
      expect(e).toBeInstanceOf(ProxyError);
      expect(e).toMatchObject(expected);
      expect(e.message).toMatch(message);
    },
  );

  it('passes a ProxyError through unchanged', () => {
    const original = new ProxyError(400, 'invalid_request_error', 'x', 'y');
    expect(mapBedrockError(original, ctx)).toBe(original);
  });

  it('names the model, not the provider (callers need not know how the gateway is configured)', () => {
    const message = mapBedrockError(awsError('InternalServerException', 'x', 500), ctx).message;
    expect(message).toContain('Bedrock model claude-haiku');
    expect(message).not.toContain('team-a');
  });

  it('names neither the Secret nor the namespace when the Secret is missing or unreadable', () => {
    for (const [code, expected] of [
      ['SecretNotFound', 'provider_credentials_missing'],
      ['SecretForbidden', 'provider_credentials_unreadable'],
    ] as const) {
      const e = mapBedrockError(new CredentialsError(code, 'the Secret may not be read'), {
        ...ctx,
        auth: 'AccessKey',
      });
      expect(e).toMatchObject({ status: 503, code: expected });
      expect(e.message).toContain('the Secret named in spec.auth.secretRef');
      expect(e.message).not.toMatch(/platform-agent|team-a/);
    }
  });

  it.each([
    ['an access key id', 'The security token AKIAIOSFODNN7EXAMPLE is invalid', 'AKIAIOSFODNN7EXAMPLE'],
    ['a temporary access key id', 'key ASIAY34FZKBOKMUTVV7A rejected', 'ASIAY34FZKBOKMUTVV7A'],
    [
      'a secret key',
      'secret wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY leaked',
      'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY',
    ],
    ['the gateway principal', 'User: arn:aws:sts::123456789012:assumed-role/gw/x failed', 'arn:aws:sts::123456789012'],
  ])('never repeats %s', (_name, text, secret) => {
    const e = mapBedrockError(awsError('ConflictException', text, 409), ctx);
    expect(e.message).not.toContain(secret);
    expect(e.message).toMatch(/\[redacted\]|an AWS principal/);
    const denied = mapBedrockError(awsError('AccessDeniedException', text, 403), ctx);
    expect(denied.message).not.toContain(secret);
  });

  it('keeps the message short', () => {
    const e = mapBedrockError(awsError('ValidationException', 'word '.repeat(200), 400), ctx);
    expect(e.message.length).toBeLessThan(400);
  });
});
