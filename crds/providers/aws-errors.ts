/**
 * AWS failures of an ExternalProvider, classified once for the operator (conditions) and the
 * proxy (caller errors), so that the cause, the fix and the redaction are the same everywhere.
 *
 * The table is data: the first rule whose error codes, auth method, stage and message pattern
 * all match gives the problem. Texts are written for whoever runs the gateway and name no
 * Secret, role ARN, account id or key: the reader finds the values in the provider's spec
 * (`spec.auth.roleArn`, `spec.auth.secretRef`), which only its administrators can read. The
 * AWS message itself is shown only where it helps (validation details) and only redacted.
 * Causes and fixes follow the seed's troubleshooting table.
 */

export type AwsAuthMethod = 'IAMRole' | 'AccessKey';
/** Where the failure happened: getting credentials (STS or the Secret), ListFoundationModels, or a model call. */
type AwsStage = 'credentials' | 'discovery' | 'invoke';
type CallerErrorType =
  | 'invalid_request_error'
  | 'permission_error'
  | 'not_found_error'
  | 'rate_limit_error'
  | 'timeout_error'
  | 'api_error';

/** Our own codes for credential failures that never reached AWS. */
export const SECRET_NOT_FOUND = 'SecretNotFound';
export const SECRET_FORBIDDEN = 'SecretForbidden';

export interface AwsErrorContext {
  auth: AwsAuthMethod;
  stage: AwsStage;
  /** Invoke calls: streaming needs bedrock:InvokeModelWithResponseStream, others bedrock:InvokeModel. */
  streaming?: boolean;
  region?: string;
  /** Who failed, for the caller: "Bedrock model <id>"; defaults to "Bedrock". */
  subject?: string;
}

export interface AwsProblem {
  /** Condition reason (PascalCase), also the Event reason. */
  reason: string;
  /** True when the credentials themselves failed: the operator sets CredentialsValid False. */
  credentials: boolean;
  /** The caller's answer: HTTP status, OpenAI error type and code. */
  status: number;
  type: CallerErrorType;
  code: string;
  retryAfterSeconds?: number;
  /** Cause and fix, in words, redacted. */
  message: string;
}

interface Rule {
  codes?: readonly string[];
  auth?: AwsAuthMethod;
  stages?: readonly AwsStage[];
  /** Tested on the raw AWS message. */
  text?: RegExp;
  httpStatus?: number;
  problem: Omit<AwsProblem, 'message'> & {
    /** Placeholders: {subject} {code} {action} {region} {detail} (the redacted AWS message, "" if none). */
    message: string;
  };
}

const ACCESS_DENIED = ['AccessDenied', 'AccessDeniedException'];
const SIGNATURE = [
  'UnrecognizedClientException',
  'InvalidClientTokenId',
  'InvalidSignatureException',
  'SignatureDoesNotMatch',
  'IncompleteSignatureException',
];
const EXPIRED = ['ExpiredToken', 'ExpiredTokenException'];
const TRUST_FIX =
  "the role's trust policy must allow sts:AssumeRole for the gateway's principal (statement AllowKimchi): compare it with the documented trust policy, then delete and re-create the provider";
const RECREATE =
  'confirm the role ARN in spec.auth.roleArn, the principal in its trust policy and the region, then delete and re-create the provider';

const credentialProblem = (reason: string, code: string, status: number, type: CallerErrorType = 'api_error') => ({
  reason,
  credentials: true,
  status,
  type,
  code,
});
const callProblem = (reason: string, code: string, status: number, type: CallerErrorType) => ({
  reason,
  credentials: false,
  status,
  type,
  code,
});

// Problems two rules reach by different evidence (an error code, or only a message or status).
const ASSUME_ROLE_DENIED: Rule['problem'] = {
  ...credentialProblem('AssumeRoleDenied', 'assume_role_denied', 403, 'permission_error'),
  message: `STS denied sts:AssumeRole on the provider's role: ${TRUST_FIX}`,
};
const THROTTLED: Rule['problem'] = {
  ...callProblem('Throttled', 'upstream_rate_limited', 429, 'rate_limit_error'),
  retryAfterSeconds: 5,
  message: '{subject} is throttling requests; retry in a few seconds',
};

export const AWS_ERROR_RULES: readonly Rule[] = [
  // Credentials that never reached AWS.
  {
    codes: [SECRET_NOT_FOUND],
    problem: {
      ...credentialProblem('SecretNotFound', 'provider_credentials_missing', 502),
      message:
        "the Secret named in spec.auth.secretRef is missing or lacks the keys accessKeyId and secretAccessKey: create it in the provider's namespace with both keys",
    },
  },
  {
    codes: [SECRET_FORBIDDEN],
    problem: {
      ...credentialProblem('SecretNotReadable', 'provider_credentials_unreadable', 502),
      message:
        'the gateway may not read the Secret named in spec.auth.secretRef: add its name to the chart value providerSecrets and run helm upgrade (the gateway reads only the Secrets listed there)',
    },
  },
  {
    codes: ['CredentialsProviderError'],
    problem: {
      ...credentialProblem('NoBaseCredentials', 'bedrock_credentials_invalid', 502),
      message:
        "the gateway has no AWS identity of its own to assume the provider's role with: give its pods one (IRSA, EKS Pod Identity or AWS environment variables)",
    },
  },
  // STS refused the role: the trust policy (seed: AccessDeniedException on assume role).
  { codes: ACCESS_DENIED, stages: ['credentials'], problem: ASSUME_ROLE_DENIED },
  { text: /sts:AssumeRole/, problem: ASSUME_ROLE_DENIED },
  // Rejected or expired credentials: whose they are decides the fix.
  {
    codes: [...SIGNATURE, ...EXPIRED],
    auth: 'AccessKey',
    problem: {
      ...credentialProblem('InvalidAccessKey', 'bedrock_credentials_invalid', 502),
      message:
        "AWS rejected the provider's access key ({code}): check both values in the Secret named in spec.auth.secretRef, or create a new long-term access key (temporary credentials expire)",
    },
  },
  {
    codes: SIGNATURE,
    stages: ['credentials'],
    problem: {
      ...credentialProblem('InvalidBaseCredentials', 'bedrock_credentials_invalid', 502),
      message:
        "AWS rejected the gateway's own credentials ({code}) when assuming the provider's role: check the AWS identity of the gateway's pods",
    },
  },
  {
    codes: EXPIRED,
    stages: ['credentials'],
    problem: {
      ...credentialProblem('BaseCredentialsExpired', 'bedrock_credentials_expired', 503),
      retryAfterSeconds: 5,
      message:
        "the gateway's own AWS credentials expired ({code}): the identity of its pods (IRSA token or environment) is not being renewed",
    },
  },
  {
    codes: EXPIRED,
    problem: {
      ...credentialProblem('RoleSessionExpired', 'bedrock_credentials_expired', 503),
      retryAfterSeconds: 5,
      message:
        "the provider's role session expired ({code}) before the gateway renewed it; retry in a few seconds (if it persists, the role's maximum session duration is below 15 minutes)",
    },
  },
  {
    codes: SIGNATURE,
    problem: {
      ...credentialProblem('RoleCredentialsRejected', 'bedrock_credentials_invalid', 502),
      message: `AWS rejected the provider's role credentials ({code}): the role may have been deleted or its sessions revoked; ${RECREATE}`,
    },
  },
  {
    stages: ['credentials'],
    problem: {
      ...credentialProblem('AssumeRoleFailed', 'assume_role_failed', 502),
      message: `assuming the provider's role failed ({code}): ${RECREATE}`,
    },
  },
  // Discovery.
  {
    codes: ACCESS_DENIED,
    stages: ['discovery'],
    problem: {
      ...callProblem('DiscoveryDenied', 'bedrock_access_denied', 403, 'permission_error'),
      message:
        'ListFoundationModels was denied in {region}: the permission policy lacks bedrock:ListFoundationModels (statement BedrockDiscovery, resource *)',
    },
  },
  // Invoke (seed: AccessDenied on invoke; invoke works, streaming fails; model not enabled).
  {
    codes: ACCESS_DENIED,
    text: /don'?t have access to the model/i,
    problem: {
      ...callProblem('ModelNotEnabled', 'bedrock_model_not_enabled', 403, 'permission_error'),
      message:
        '{subject} is not enabled for the AWS account in this region: enable model access in the Bedrock console for this region, or invoke the model once in the console playground',
    },
  },
  {
    codes: ACCESS_DENIED,
    text: /bedrock:ApplyGuardrail/,
    problem: {
      ...callProblem('GuardrailDenied', 'bedrock_access_denied', 403, 'permission_error'),
      message:
        "the gateway's AWS role may not apply the guardrail of spec.guardrail to {subject}: its permission policy lacks bedrock:ApplyGuardrail on the guardrail",
    },
  },
  {
    codes: ACCESS_DENIED,
    text: /bedrock:InvokeModelWithResponseStream/,
    problem: {
      ...callProblem('StreamingDenied', 'bedrock_access_denied', 403, 'permission_error'),
      message:
        "the gateway's AWS role may not call {subject}: its permission policy lacks bedrock:InvokeModelWithResponseStream; add it (with bedrock:InvokeModel) for this model's resource",
    },
  },
  {
    codes: ACCESS_DENIED,
    text: /bedrock:InvokeModel\b/,
    problem: {
      ...callProblem('InvokeDenied', 'bedrock_access_denied', 403, 'permission_error'),
      message:
        "the gateway's AWS role may not call {subject}: its permission policy lacks bedrock:InvokeModel; add both bedrock:InvokeModel and bedrock:InvokeModelWithResponseStream for this model's resource",
    },
  },
  {
    codes: ACCESS_DENIED,
    problem: {
      ...callProblem('AccessDenied', 'bedrock_access_denied', 403, 'permission_error'),
      message: "AWS denied the gateway access to {subject}; its role needs {action} on this model's resource{detail}",
    },
  },
  { codes: ['ThrottlingException', 'TooManyRequestsException'], problem: THROTTLED },
  {
    codes: ['ServiceQuotaExceededException'],
    problem: {
      ...callProblem('QuotaExceeded', 'upstream_quota_exceeded', 429, 'rate_limit_error'),
      message: '{subject} is over an AWS service quota{detail}',
    },
  },
  {
    codes: ['ValidationException'],
    text: /use case/i,
    problem: {
      ...callProblem('ModelNotEnabled', 'bedrock_model_not_enabled', 400, 'invalid_request_error'),
      message:
        '{subject} is not enabled for the AWS account: invoke it once in the Bedrock console playground and submit the use-case details',
    },
  },
  {
    codes: ['ValidationException'],
    text: /too long|context (?:window|length)|too many (?:input )?tokens/i,
    problem: {
      // OpenAI's code for this, which client libraries look for to trim the conversation.
      ...callProblem('ContextTooLong', 'context_length_exceeded', 400, 'invalid_request_error'),
      message: '{subject} rejected the request{detail}',
    },
  },
  {
    codes: ['ValidationException'],
    problem: {
      ...callProblem('Rejected', 'upstream_rejected', 400, 'invalid_request_error'),
      message: '{subject} rejected the request{detail}',
    },
  },
  {
    codes: ['ResourceNotFoundException'],
    problem: {
      ...callProblem('ModelNotFound', 'model_not_found', 404, 'not_found_error'),
      message: "{subject} was not found in the provider's region{detail}",
    },
  },
  {
    codes: ['ModelTimeoutException', 'TimeoutError'],
    problem: {
      ...callProblem('Timeout', 'upstream_timeout', 504, 'timeout_error'),
      message: '{subject} did not answer in time',
    },
  },
  {
    codes: ['ServiceUnavailableException', 'ModelNotReadyException'],
    problem: {
      ...callProblem('Unavailable', 'upstream_unavailable', 503, 'api_error'),
      retryAfterSeconds: 5,
      message: '{subject} is not available right now; retry in a few seconds',
    },
  },
  {
    codes: ['ModelStreamErrorException'],
    problem: {
      ...callProblem('StreamError', 'upstream_stream_error', 502, 'api_error'),
      message: '{subject} failed in the middle of the answer{detail}',
    },
  },
  // Any other 429: after the named codes, which may carry 429 and mean something else.
  { httpStatus: 429, problem: THROTTLED },
  {
    stages: ['discovery'],
    problem: {
      ...callProblem('DiscoveryFailed', 'upstream_error', 502, 'api_error'),
      message: 'ListFoundationModels failed in {region} ({code}){detail}',
    },
  },
  {
    problem: {
      ...callProblem('UpstreamError', 'upstream_error', 502, 'api_error'),
      message: '{subject} failed ({code}){detail}',
    },
  },
];

const ACCESS_KEY_ID = /\b(?:AKIA|ASIA|AROA|AIDA)[0-9A-Z]{16}\b/g;
// Secret keys are 40 base64 characters and session tokens hundreds; prose and ARNs break up such runs.
const LONG_TOKEN = /(?<![A-Za-z0-9+/=])[A-Za-z0-9+/=]{40,}(?![A-Za-z0-9+/=])/g;
// Principals (the gateway's, the customer's role) and every other ARN: they name accounts and roles.
const PRINCIPAL_ARN = /arn:aws[a-z-]*:(?:sts|iam)::\d{12}:[^\s,;"']+/g;
const OTHER_ARN = /arn:aws[a-z-]*:[a-z0-9-]+:[a-z0-9-]*:\d{0,12}:[^\s,;"']+/g;
const ACCOUNT_ID = /(?<![0-9])\d{12}(?![0-9])/g;

/**
 * An AWS (or our own) message with keys, tokens, ARNs and account ids replaced, and the given
 * names (a Secret's, a namespace's) removed; short enough for a condition or an error.
 */
export function redactAws(message: string, names: readonly string[] = []): string {
  let out = message
    .replace(ACCESS_KEY_ID, '[redacted]')
    .replace(PRINCIPAL_ARN, 'an AWS principal')
    .replace(OTHER_ARN, 'an AWS resource')
    .replace(LONG_TOKEN, '[redacted]')
    .replace(ACCOUNT_ID, '[account]');
  for (const name of names) if (name.length > 2) out = out.split(name).join('[name]');
  return out.length > 300 ? `${out.slice(0, 299)}…` : out;
}

export interface AwsFailure {
  /** The AWS error name (or one of our codes). */
  code: string;
  message: string;
  httpStatus?: number;
}

/** The AWS error name, message and HTTP status of whatever an SDK call threw. */
export function awsFailure(err: unknown): AwsFailure {
  const field = (o: unknown, key: string): unknown =>
    typeof o === 'object' && o !== null ? (o as Record<string, unknown>)[key] : undefined;
  const code = field(err, 'code') ?? field(err, 'name');
  const message = typeof err === 'string' ? err : field(err, 'message');
  const httpStatus = field(field(err, '$metadata'), 'httpStatusCode');
  return {
    code: typeof code === 'string' && code ? code : 'Error',
    message: typeof message === 'string' ? message : '',
    ...(typeof httpStatus === 'number' ? { httpStatus } : {}),
  };
}

/**
 * A restJson1 error answer (Bedrock's, Bedrock Runtime's): the code from x-amzn-ErrorType
 * (`Code:namespace`), else the body's __type or code (`namespace#Code`); the message from the body.
 */
export function awsAnswerFailure(httpStatus: number, errorType: string | undefined, body: unknown): AwsFailure {
  const field = (key: string): unknown =>
    typeof body === 'object' && body !== null ? (body as Record<string, unknown>)[key] : undefined;
  const raw = [errorType, field('__type'), field('code')].find((v): v is string => typeof v === 'string' && v !== '');
  const code = raw?.split(':')[0]?.split('#').pop()?.trim();
  const message = [field('message'), field('Message')].find((v): v is string => typeof v === 'string');
  return { code: code || `HTTP${httpStatus}`, message: message ?? '', httpStatus };
}

/**
 * An exception message of an event stream (`:message-type: exception`), by its member name: an
 * internal error or a model stream error both mean the answer broke off midway (the table's
 * stream error); the others name their error as is (throttlingException: ThrottlingException).
 */
export function awsStreamFailure(type: string, message: string): AwsFailure {
  const code =
    type === 'internalServerException' || type === 'modelStreamErrorException'
      ? 'ModelStreamErrorException'
      : `${type.charAt(0).toUpperCase()}${type.slice(1)}`;
  return { code, message };
}

function matches(rule: Rule, failure: AwsFailure, ctx: AwsErrorContext): boolean {
  if (rule.codes && !rule.codes.includes(failure.code)) return false;
  if (rule.auth && rule.auth !== ctx.auth) return false;
  if (rule.stages && !rule.stages.includes(ctx.stage)) return false;
  if (rule.text && !rule.text.test(failure.message)) return false;
  if (rule.httpStatus !== undefined && rule.httpStatus !== failure.httpStatus) return false;
  return true;
}

/** The problem of one AWS failure in its context; `names` are redacted from the AWS message. */
export function classifyAwsError(failure: AwsFailure, ctx: AwsErrorContext, names: readonly string[] = []): AwsProblem {
  const rule = AWS_ERROR_RULES.find((r) => matches(r, failure, ctx)) ?? AWS_ERROR_RULES[AWS_ERROR_RULES.length - 1];
  if (!rule) throw new Error('the AWS error table has no catch-all rule');
  const detail = redactAws(failure.message, names);
  const values: Record<string, string> = {
    subject: ctx.subject ?? 'Bedrock',
    code: redactAws(failure.code),
    action: ctx.streaming ? 'bedrock:InvokeModelWithResponseStream' : 'bedrock:InvokeModel',
    region: ctx.region ?? 'the region',
    detail: detail ? `: ${detail}` : '',
  };
  const message = rule.problem.message.replace(/\{(\w+)\}/g, (m, key: string) => values[key] ?? m);
  return { ...rule.problem, message };
}
