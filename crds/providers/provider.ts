import type { Dialect } from '../constants.js';
import type { ExternalProviderSpec, ProviderGuardrail, ProviderType } from '../external-provider.js';

/**
 * A hosted provider other than Bedrock, as data and a few functions: where its API is, which
 * dialects each of its models speaks natively, how one call is addressed and authenticated, how
 * its model list is read (the operator's discovery) and what each of its errors means (one
 * table for the operator's conditions and the proxy's caller errors). Adding a provider is a
 * module beside these, a row in table.ts, its prices in catalog/prices.yaml's
 * `providers` section and its double; the proxy's upstream and the operator's controller stay
 * as they are.
 */

export type HostedType = Exclude<ProviderType, 'bedrock'>;

/** The family of a model decides its native dialects: OpenAI-shaped, Anthropic's Messages. */
export type ModelFamily = 'openai' | 'anthropic';

/** What the proxy needs to call one model of a provider: plain values, from the spec and discovery. */
export interface HostedTarget {
  type: HostedType;
  /** The id the provider is called with (an Azure deployment, a Vertex publisher model). */
  upstreamModel: string;
  family: ModelFamily;
  modelType: 'text' | 'embedding';
  /** The API root every path of the provider hangs off (env override applied). */
  baseUrl: string;
  /** Azure's dated api-version, when the spec sets one. */
  apiVersion?: string;
  /** Vertex's project and location. */
  project?: string;
  location?: string;
}

/** What the proxy needs to call one Bedrock model: plain values, from the spec and discovery. */
export interface BedrockTarget {
  type: 'bedrock';
  /** The model id (or inference-profile id) Bedrock is called with. */
  upstreamModel: string;
  /** Text models answer chat (Converse); embedding models answer embeddings (InvokeModel). */
  modelType: 'text' | 'embedding';
  region: string;
  /** Call ConverseStream (the provider streams and so does the model) or Converse. */
  streaming: boolean;
  /** False where discovery found the model takes no images; unknown (standalone): Bedrock decides. */
  images?: boolean;
  /** Bedrock's lifecycle of the model, where discovery ran: Legacy means AWS is retiring it. */
  lifecycle?: 'Active' | 'Legacy';
  guardrail?: ProviderGuardrail;
  /** Changes with the provider's spec: clients and credentials made for it are made anew. */
  version: string;
}

/** How one model of any provider is called. */
export type ProviderTarget = HostedTarget | BedrockTarget;

/** One request as the provider takes it. */
interface WireRequest {
  url: string;
  /** Besides content-type, accept and the credentials' headers. */
  headers: Record<string, string>;
  body: Record<string, unknown>;
}

/** How a credential goes on a request. */
type CredentialStyle = 'bearer' | 'x-api-key' | 'api-key' | 'none';

/** A failure, classified: the same words for the operator's condition and the caller's error. */
export interface ProviderProblem {
  /** Condition (and Event) reason, PascalCase. */
  reason: string;
  /** The credentials themselves failed: the operator sets CredentialsValid False. */
  credentials: boolean;
  /** The caller's answer. */
  status: number;
  type:
    | 'invalid_request_error'
    | 'authentication_error'
    | 'permission_error'
    | 'not_found_error'
    | 'rate_limit_error'
    | 'timeout_error'
    | 'api_error';
  code: string;
  /** Cause and fix, redacted: never the key, a token, a project number or an account. */
  message: string;
  retryAfterSeconds?: number;
}

/** A row of a provider's error table: the first whose status, error type/code and text match wins. */
export interface ErrorRule {
  status?: number | readonly number[];
  /** Matched against the provider's error type or code (OpenAI's code, Anthropic's type, Google's status). */
  kind?: RegExp;
  /** Matched against the provider's error message. */
  text?: RegExp;
  problem: Omit<ProviderProblem, 'message' | 'retryAfterSeconds'> & {
    /** Placeholders: {provider} {model} {detail} (the provider's message, redacted). */
    message: string;
  };
}

/** A provider's error body, read: its kind (type/code/status) and message. */
export interface ProviderErrorBody {
  kind: string;
  message: string;
}

/** One model a provider lists. */
export interface ListedModel {
  id: string;
  family: ModelFamily;
  modelType: 'text' | 'embedding';
}

/** How to fetch JSON for discovery (undici's fetch in production, the same against doubles). */
export type FetchJson = (
  url: string,
  init: { method?: 'GET' | 'POST'; headers: Record<string, string>; body?: string },
) => Promise<{ status: number; headers: Headers; body: unknown }>;

export interface HostedProvider {
  type: HostedType;
  /** How messages name it: OpenAI, Azure OpenAI. */
  label: string;
  /** Its OpenTelemetry gen_ai.provider.name (the semantic conventions' well-known value where there is one). */
  system: string;
  /** Replaces the default API root (a private endpoint, or a double in tests). */
  endpointEnv: string;
  /** The API root for a provider's spec. */
  baseUrl(spec: ExternalProviderSpec, env: NodeJS.ProcessEnv): string;
  /** How an API key goes on a request (a workload identity's token is always a bearer token). */
  credentialStyle: CredentialStyle;
  /** Headers every call carries (Anthropic's version). */
  fixedHeaders?: Readonly<Record<string, string>>;
  /** The dialects a model answers natively, preferred first; empty: none (every endpoint is a 400). */
  dialects(target: HostedTarget): readonly Dialect[];
  /** Why the provider cannot take this body (a 400 to the caller), checked before the call. */
  refuse?(target: HostedTarget, dialect: Dialect, body: Record<string, unknown>): string | undefined;
  /** Whether a chat or completions stream may ask for its usage chunk (stream_options); true when absent. */
  streamUsage?(target: HostedTarget): boolean;
  /** One call in a native dialect. */
  request(target: HostedTarget, dialect: Dialect, body: Record<string, unknown>, stream: boolean): WireRequest;
  /**
   * Anthropic's count_tokens for a model that speaks Messages, where the provider counts exactly
   * (its answer is `{input_tokens}`); absent: the gateway estimates.
   */
  countTokens?(target: HostedTarget, body: Record<string, unknown>): WireRequest | undefined;
  /** The models the provider lists for the credentials (every page), for status.availableModels. */
  discover(
    spec: ExternalProviderSpec,
    baseUrl: string,
    auth: Record<string, string>,
    fetch: FetchJson,
  ): Promise<ListedModel[]>;
  /**
   * Whether a selected model is one the list has: exactly, or an undated alias of a listed dated
   * id (Anthropic lists claude-sonnet-4-5-20250929 and serves claude-sonnet-4-5 too).
   */
  matches?(selected: string, listed: readonly ListedModel[]): ListedModel | undefined;
  /** Reads the provider's error body. */
  errorBody(body: unknown): ProviderErrorBody | undefined;
  errors: readonly ErrorRule[];
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** The model's family and kind from its id, where the provider's list does not say. */
export function familyOf(id: string): ModelFamily {
  return /^(anthropic\/)?claude/.test(id) ? 'anthropic' : 'openai';
}

export function modelTypeOf(id: string): 'text' | 'embedding' {
  return /embed/.test(id) ? 'embedding' : 'text';
}

export const listed = (id: string): ListedModel => ({ id, family: familyOf(id), modelType: modelTypeOf(id) });

/** OpenAI's `{error: {message, type, code}}` (also Azure's, whose code carries the kind). */
export function openAIErrorBody(body: unknown): ProviderErrorBody | undefined {
  const e = isRecord(body) ? body.error : undefined;
  if (typeof e === 'string') return { kind: '', message: e };
  if (!isRecord(e)) return undefined;
  const kind = [e.code, e.type].find((v) => typeof v === 'string' && v !== '') as string | undefined;
  return { kind: kind ?? '', message: typeof e.message === 'string' ? e.message : '' };
}

/** Secrets and identifiers a provider's message may carry: keys, tokens, emails, long numbers. */
const SECRETISH = [
  /\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b/gi,
  /\b(sk|pk|sess|rk)-[A-Za-z0-9_*-]{2,}/g,
  /\b(proj|org|acct)[_-][A-Za-z0-9]{3,}/g,
  /\beyJ[A-Za-z0-9_-]{10,}(\.[A-Za-z0-9_-]+)*/g,
  /\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[a-z]{2,}\b/g,
  // Account and project numbers (10+ digits), not token counts or limits.
  /\b[0-9]{10,}\b/g,
  /\*{3,}[A-Za-z0-9]{2,}/g,
];

/** A provider's message, fit to show: secrets and identifiers removed, one line, bounded. */
export function redact(message: string): string {
  let out = message.replace(/\s+/g, ' ').trim();
  for (const re of SECRETISH) out = out.replace(re, '<redacted>');
  return out.length > 300 ? `${out.slice(0, 300)}...` : out;
}

const statusMatches = (rule: ErrorRule, status: number) =>
  rule.status === undefined ||
  (typeof rule.status === 'number' ? rule.status === status : rule.status.includes(status));

/** The table's answer for one failure; the last row of every table matches anything. */
export function classify(
  provider: HostedProvider,
  status: number,
  body: unknown,
  vars: { provider: string; model?: string },
  retryAfter?: string | null,
): ProviderProblem {
  const err = provider.errorBody(body) ?? { kind: '', message: '' };
  const rule =
    provider.errors.find(
      (r) => statusMatches(r, status) && (!r.kind || r.kind.test(err.kind)) && (!r.text || r.text.test(err.message)),
    ) ?? GENERIC;
  const detail = redact(err.message);
  const message = rule.problem.message
    .replaceAll('{provider}', vars.provider)
    .replaceAll('{model}', vars.model ?? 'the model')
    .replaceAll('{detail}', detail ? `: ${detail}` : '')
    .replaceAll('{status}', String(status));
  const seconds = retryAfter ? Number(retryAfter) : Number.NaN;
  return {
    ...rule.problem,
    message,
    ...(Number.isFinite(seconds) && seconds >= 0 ? { retryAfterSeconds: Math.ceil(seconds) } : {}),
  };
}

const GENERIC: ErrorRule = {
  problem: {
    reason: 'ProviderError',
    credentials: false,
    status: 502,
    type: 'api_error',
    code: 'upstream_error',
    message: '{provider} answered {status}{detail}',
  },
};

/** A provider's 401 to an API key: the key in the Secret is wrong. */
export const API_KEY_REFUSED: ErrorRule = {
  status: 401,
  problem: {
    reason: 'InvalidAPIKey',
    credentials: true,
    status: 502,
    type: 'api_error',
    code: 'provider_auth_failed',
    message:
      '{provider} refused the API key{detail}; put a valid key in the Secret named by spec.auth.secretRef (key apiKey)',
  },
};

/** A provider's 404 to a model id. */
export const MODEL_NOT_FOUND: ErrorRule = {
  status: 404,
  problem: {
    reason: 'ModelNotFound',
    credentials: false,
    status: 404,
    type: 'not_found_error',
    code: 'model_not_found',
    message: '{provider} does not have {model}{detail}; check the id against status.availableModels',
  },
};

/**
 * Rows every provider shares after its own: throttling, overload, server errors, bad requests.
 * A provider's table lists its own rows first, then these.
 */
export const COMMON_ERRORS: readonly ErrorRule[] = [
  {
    status: 429,
    problem: {
      reason: 'Throttled',
      credentials: false,
      status: 429,
      type: 'rate_limit_error',
      code: 'upstream_rate_limited',
      message:
        '{provider} is throttling {model}{detail}; retry after the time it gives, or raise the rate limit of the account or deployment',
    },
  },
  {
    status: [500, 502, 503, 529],
    problem: {
      reason: 'ProviderUnavailable',
      credentials: false,
      status: 502,
      type: 'api_error',
      code: 'upstream_error',
      message: '{provider} failed ({status}){detail}; it is retried, and fallbacks serve meanwhile',
    },
  },
  {
    status: [408, 504],
    problem: {
      reason: 'ProviderTimeout',
      credentials: false,
      status: 504,
      type: 'timeout_error',
      code: 'upstream_timeout',
      message: '{provider} timed out{detail}',
    },
  },
  {
    status: [400, 413, 422],
    problem: {
      reason: 'RequestRejected',
      credentials: false,
      status: 400,
      type: 'invalid_request_error',
      code: 'upstream_rejected',
      message: '{provider} rejected the request for {model}{detail}',
    },
  },
];

/** Paths of the OpenAI-shaped dialects under an API root that ends in its version (…/v1). */
export const OPENAI_PATHS: Readonly<Partial<Record<Dialect, string>>> = {
  'openai-chat': '/chat/completions',
  'openai-completions': '/completions',
  'openai-embeddings': '/embeddings',
  'openai-responses': '/responses',
};

/** The env override, or the default; never a trailing slash. */
export const rootOf = (env: NodeJS.ProcessEnv, name: string, fallback: string): string =>
  (env[name] || fallback).replace(/\/+$/, '');

/** Every page of a list: `next` gives the next page's URL from one page's body, or undefined. */
export async function allPages<T>(
  first: string,
  headers: Record<string, string>,
  fetch: FetchJson,
  items: (body: unknown) => T[],
  next: (body: unknown) => string | undefined,
): Promise<T[]> {
  const out: T[] = [];
  let url: string | undefined = first;
  for (let page = 0; url && page < 50; page++) {
    const res = await fetch(url, { headers });
    if (res.status >= 400) throw new ProviderHttpError(res.status, res.body, res.headers.get('retry-after'));
    out.push(...items(res.body));
    url = next(res.body);
  }
  return out;
}

/** A provider's HTTP error, kept whole for its error table. */
export class ProviderHttpError extends Error {
  constructor(
    readonly status: number,
    readonly body: unknown,
    readonly retryAfter: string | null = null,
  ) {
    super(`provider answered ${status}`);
  }
}

export const records = (v: unknown): Record<string, unknown>[] =>
  Array.isArray(v) ? v.filter((x): x is Record<string, unknown> => isRecord(x)) : [];

export { isRecord };
