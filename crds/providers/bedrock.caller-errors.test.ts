import { describe, expect, it } from 'vitest';
import { type AwsAuthMethod, awsFailure, classifyAwsError } from './aws-errors.js';
import { bedrock } from './bedrock.js';
import type { ProviderFailure, ProviderProblem } from './provider.js';

/**
 * Bedrock's failures as a caller of one of its models meets them (its module's problem() in the
 * proxy's context): the shared AWS table (aws-errors.ts) gives status, code, cause and fix, the
 * same words the operator writes into the provider's status; the caller reads the model, never
 * the provider resource, a key, an ARN, an account or a Secret.
 */

interface Ctx {
  model: string;
  provider: string;
  streaming: boolean;
  auth?: AwsAuthMethod;
}

const ctx: Ctx = { model: 'claude-haiku', provider: 'team-a/bedrock', streaming: true };

/** Bedrock's restJson1 error answer: the code in x-amzn-ErrorType, the message in the body. */
const awsError = (name: string, message: string, status = 400): ProviderFailure => ({
  kind: 'answer',
  status,
  headers: { 'x-amzn-errortype': `${name}:http://internal.amazon.com/coral/com.amazon.bedrock/` },
  body: { message },
});

/** A failure getting the credentials (STS, the Secret), classified where it happened (credentials.ts). */
const stsError = (name: string, message: string, _status?: number): ProviderFailure => ({
  kind: 'credentials',
  problem: classifyAwsError(awsFailure({ name, message }), { auth: 'IAMRole', stage: 'credentials' }),
});

function mapBedrockError(failure: ProviderFailure, c: Ctx): ProviderProblem {
  return bedrock.problem(failure, {
    stage: 'call',
    provider: c.provider,
    model: c.model,
    streaming: c.streaming,
    identity: {
      provider: 'bedrock',
      region: 'us-east-1',
      auth:
        c.auth === 'AccessKey'
          ? { method: 'AccessKey', secretRef: { name: 'team-a-keys' } }
          : { method: 'IAMRole', roleArn: 'arn:aws:iam::123456789012:role/r' },
    },
  });
}

describe('Bedrock errors as callers get them', () => {
  it.each([
    [
      'ThrottlingException',
      awsError('ThrottlingException', 'Too many requests', 429),
      ctx,
      { status: 429, type: 'rate_limit_error', code: 'upstream_rate_limited', retryAfterSeconds: 5 },
      /throttling/,
    ],
    [
      'TooManyRequestsException',
      awsError('TooManyRequestsException', 'Too many requests', 429),
      ctx,
      { status: 429, code: 'upstream_rate_limited', retryAfterSeconds: 5 },
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
      awsError(
        'AccessDeniedException',
        'User: arn:aws:sts::123456789012:assumed-role/gateway/i-0abc is not authorized to perform: bedrock:InvokeModelWithResponseStream on resource: arn:aws:bedrock:us-east-1::foundation-model/anthropic.claude-3-5-haiku-20241022-v1:0 because no identity-based policy allows the bedrock:InvokeModelWithResponseStream action',
        403,
      ),
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
      'ServiceUnavailableException',
      awsError('ServiceUnavailableException', 'unavailable', 503),
      ctx,
      { status: 503, code: 'upstream_unavailable', retryAfterSeconds: 5 },
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
      { status: 429, code: 'upstream_quota_exceeded' },
      /quota/,
    ],
    [
      'STS AccessDenied from AssumeRole (getting the credentials)',
      stsError(
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
          { status: 503, type: 'api_error', code: 'bedrock_credentials_expired', retryAfterSeconds: 5 },
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
  ] as Array<[string, ProviderFailure, Ctx, Partial<ProviderProblem>, RegExp]>)(
    'maps %s',
    (_name, err, c, expected, message) => {
      const e = mapBedrockError(err, c);
      expect(e).toMatchObject(expected);
      expect(e.message).toMatch(message);
    },
  );

  it('gives no Retry-After for a spent quota: waiting does not help', () => {
    expect(mapBedrockError(awsError('ServiceQuotaExceededException', 'quota', 400), ctx)).not.toHaveProperty(
      'retryAfterSeconds',
    );
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
      const problem = classifyAwsError(
        { code, message: 'the Secret team-a-keys may not be read' },
        {
          auth: 'AccessKey',
          stage: 'credentials',
        },
        ['team-a-keys'],
      );
      const e = mapBedrockError({ kind: 'credentials', problem }, { ...ctx, auth: 'AccessKey' });
      // A configuration error, as every provider's missing Secret (502): no 503 that a retry would not fix.
      expect(e).toMatchObject({ status: 502, code: expected });
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

  it("never repeats the provider's Secret name", () => {
    const e = mapBedrockError(awsError('ConflictException', 'the Secret team-a-keys is wrong', 409), {
      ...ctx,
      auth: 'AccessKey',
    });
    expect(e.message).not.toContain('team-a-keys');
  });

  it('keeps the message short', () => {
    const e = mapBedrockError(awsError('ValidationException', 'word '.repeat(200), 400), ctx);
    expect(e.message.length).toBeLessThan(400);
  });

  it.each([
    ['internalServerException', 502, 'upstream_stream_error'],
    ['modelStreamErrorException', 502, 'upstream_stream_error'],
    ['validationException', 400, 'upstream_rejected'],
    ['throttlingException', 429, 'upstream_rate_limited'],
    ['serviceUnavailableException', 503, 'upstream_unavailable'],
  ] as const)('maps an exception message %s in the middle of a stream', (type, status, code) => {
    const e = mapBedrockError({ kind: 'exception', type, message: 'overloaded' }, ctx);
    expect(e).toMatchObject({ status, code });
    expect(e.message).toContain('claude-haiku');
  });

  it('keeps the Bedrock detail of a mid-stream model error and a Retry-After on throttling', () => {
    expect(
      mapBedrockError({ kind: 'exception', type: 'modelStreamErrorException', message: 'overloaded' }, ctx).message,
    ).toMatch(/overloaded/);
    expect(
      mapBedrockError({ kind: 'exception', type: 'throttlingException', message: 'slow' }, ctx).retryAfterSeconds,
    ).toBe(5);
  });
});
