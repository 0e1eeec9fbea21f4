import type { ContentfulStatusCode } from 'hono/utils/http-status';
import { CredentialsError } from '../../crds/providers/aws-credentials.js';
import { type AwsAuthMethod, awsFailure, classifyAwsError } from '../../crds/providers/aws-errors.js';
import { ProxyError } from '../endpoints/errors.js';

export interface BedrockErrorContext {
  /** The model as the caller named it. */
  model: string;
  /** The configured provider, for logs; callers are not told its name. */
  provider: string;
  /** Streaming calls need bedrock:InvokeModelWithResponseStream, others bedrock:InvokeModel. */
  streaming: boolean;
  /** Whose credentials failed decides the fix (an expired token is the stored key's fault, or the role session's). */
  auth?: AwsAuthMethod;
}

function subject(ctx: { model: string }): string {
  return ctx.model ? `Bedrock model ${ctx.model}` : 'Bedrock';
}

/**
 * An AWS SDK, STS or Secret failure as the caller should see it: the shared table
 * (crds/providers/aws-errors.ts) gives status, code, cause and fix, the same words the operator writes
 * into the provider's status.
 */
export function mapBedrockError(err: unknown, ctx: BedrockErrorContext): ProxyError {
  if (err instanceof ProxyError) return err;
  const who = subject(ctx);
  const problem = classifyAwsError(awsFailure(err), {
    auth: ctx.auth ?? 'IAMRole',
    stage: err instanceof CredentialsError ? 'credentials' : 'invoke',
    streaming: ctx.streaming,
    subject: who,
  });
  const message = problem.credentials ? `${who} cannot be called: ${problem.message}` : problem.message;
  return new ProxyError(
    problem.status as ContentfulStatusCode,
    problem.type,
    problem.code,
    message,
    null,
    problem.retryAfterSeconds ? { 'Retry-After': String(problem.retryAfterSeconds) } : {},
  );
}
