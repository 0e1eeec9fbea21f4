import type { BedrockPriceTable, TokenPrice } from '../catalog/prices.js';
import type { Dialect } from '../constants.js';
import type {
  DiscoveredModel,
  ExternalProvider,
  ExternalProviderSpec,
  ProviderGuardrail,
  ProviderType,
} from '../external-provider.js';
import { isRecord } from '../is-record.js';

/**
 * A provider as data and a few functions: where its API is, which dialects each of its models
 * speaks natively, how one call is addressed and authenticated, how its model list is read (the
 * operator's discovery), what its models cost and can do, and what each of its errors means (one
 * classification for the operator's conditions and the proxy's caller errors). The proxy's one
 * upstream (proxy/upstreams/provider-upstream.ts) and the operator's one discovery and status
 * (operator/external-provider/provider-status.ts) read every provider through this contract.
 * Adding a provider is a module beside these, a row in table.ts, its prices in
 * catalog/prices.yaml and its double.
 */

/** The family of a model decides its native dialects: OpenAI-shaped, Anthropic's Messages. */
export type ModelFamily = 'openai' | 'anthropic';

/**
 * What the proxy needs to call one model of a provider: plain values, from the spec and
 * discovery. Like the spec, one shape for every provider: each module reads the fields its
 * provider has.
 */
export interface ProviderTarget {
  type: ProviderType;
  /** The id the provider is called with (an Azure deployment, a Vertex publisher model, a Bedrock model or profile). */
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
  /** Bedrock: the region its calls are signed for. */
  region?: string;
  /** Bedrock: call ConverseStream (the provider and the model stream; the default) or Converse. */
  streaming?: boolean;
  /** Bedrock: false where discovery found the model takes no images; unknown (standalone): Bedrock decides. */
  images?: boolean;
  /** The model's lifecycle in status.models, where discovery ran: Legacy means AWS is retiring it. */
  lifecycle?: 'Active' | 'Legacy' | 'Deprecated';
  guardrail?: ProviderGuardrail;
}

/** Who a provider's calls are made as: its kind, spec.auth, and (AWS) the region signatures are scoped to. */
export type ProviderIdentity = Pick<ExternalProviderSpec, 'provider' | 'auth' | 'region'>;

/** One request as the provider takes it. */
export interface WireRequest {
  url: string;
  /** Besides content-type, accept and the credentials' headers. */
  headers: Record<string, string>;
  body: Record<string, unknown>;
  /**
   * The answer comes as a stream (true) or whole (false) whatever the caller asked (Bedrock's
   * ConverseStream also serves callers that want the answer whole); absent: as the caller asked.
   */
  stream?: boolean;
}

/** One answer of a provider, read whole. */
export interface WireAnswer {
  json: unknown;
  headers: Readonly<Record<string, string | string[] | undefined>>;
}

/**
 * One caller's request as several of the provider's, sent at most `concurrency` at once (the
 * first failure fails the request), their answers joined into one answer of the dialect:
 * Bedrock's embedding models take one text per call (Titan) or 96 (Cohere).
 */
export interface WireFanOut {
  calls: readonly WireRequest[];
  concurrency: number;
  /** The answers in the calls' order as one; `unreadable` where they are not what the provider documents. */
  join(answers: readonly WireAnswer[]): { body: unknown } | { unreadable: string };
}

/** Why the provider cannot take a request: the caller's 400, before anything is sent. */
export interface Refusal {
  refused: string;
  /** The request field at fault; `messages` where absent. */
  param?: string;
  /** The caller's error code; `unsupported_content` where absent. */
  code?: string;
}

/** A credential failure, classified like the provider's own errors (AWS's with the caller's status too). */
export type CredentialProblem = Omit<ProviderProblem, 'status' | 'type' | 'code'> &
  Partial<Pick<ProviderProblem, 'status' | 'type' | 'code'>>;

/** The credentials could not be had (a Secret, a token exchange, AssumeRole): why, in the provider's words. */
export class CredentialError extends Error {
  constructor(readonly problem: CredentialProblem) {
    super(problem.message);
  }
}

export const isRefusal = (w: WireRequest | WireFanOut | Refusal): w is Refusal => 'refused' in w;
export const isFanOut = (w: WireRequest | WireFanOut | Refusal): w is WireFanOut => 'calls' in w;

/** How a credential goes on a request: a header with a key or token, or a SigV4 signature. */
type CredentialStyle = 'bearer' | 'x-api-key' | 'api-key' | 'none' | 'sigv4';

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
  /** Cause and fix, redacted: never the key, a token, a project number, an ARN, an account or a Secret's name. */
  message: string;
  retryAfterSeconds?: number;
}

/** Headers of an HTTP answer as undici and the platform's fetch give them, lower-case names. */
export type AnswerHeaders = Readonly<Record<string, string | readonly string[] | undefined>>;

/** What failed, as the proxy and the operator meet it. */
export type ProviderFailure =
  /** The provider answered with an error status. */
  | { kind: 'answer'; status: number; headers: AnswerHeaders; body: unknown }
  /** The credentials could not be had (a Secret, a token exchange, AssumeRole). */
  | { kind: 'credentials'; problem: CredentialProblem }
  /** An exception event in the middle of a stream (AWS event streams): its type and message. */
  | { kind: 'exception'; type: string; message: string }
  /** The operator could not reach the provider: undici's or the system's error code. */
  | { kind: 'unreachable'; code?: string };

/** Where a failure happened and whose it is. */
export interface ProblemContext {
  identity: ProviderIdentity;
  /** The caller's call (the proxy), or the operator's discovery. */
  stage: 'call' | 'discovery';
  /** A caller's call: the provider resource (namespace/name); absent in the operator. */
  provider?: string;
  /** A caller's call: the model as called. */
  model?: string;
  /** A caller's call streams (Bedrock's IAM action differs). */
  streaming?: boolean;
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

/** One model a provider lists, as discovery found it: what status.models records of it but its price. */
export type ListedModel = Omit<DiscoveredModel, 'priced'>;

/** What one discovery found: the models the credentials may call, and anything the status should add. */
export interface Discovery {
  models: readonly ListedModel[];
  /** Said after the models' availability (Bedrock: the profiles had to be derived). */
  note?: string;
}

/** How to fetch JSON for discovery; the request is authorized on its way (the provider's credentials). */
export type FetchJson = (
  url: string,
  init: { method?: 'GET' | 'POST'; headers: Record<string, string>; body?: string },
) => Promise<{ status: number; headers: Headers; body: unknown }>;

/** The provider's own words in its status, around what discovery found. */
interface DiscoveryWords {
  /** CredentialsValid True. */
  accepted: string;
  /** Where the models were looked for, for messages (" in us-east-1"); '' where nothing narrows it. */
  where: string;
  /** ModelsAvailable False: the selected models discovery did not find, and the fix. */
  missing(ids: readonly string[]): string;
  /** ModelsPriced False: where to add a price. */
  priceFix: string;
  /** A list without a single model fails the provider with this (Bedrock: a wrong account or region). */
  empty?: string;
  /** Said of the selected models the provider is retiring. */
  legacy?: string;
}

/** What a provider's model can do, for the gateway's model lists. */
export interface ProviderModelFacts {
  displayName: string;
  /** Who serves it: OpenTelemetry's system for Bedrock (aws.bedrock), spec.provider for the others. */
  provider: string;
  contextWindow?: number;
  maxOutputTokens?: number;
  tools: boolean;
  reasoning: boolean;
  images: boolean;
  /**
   * Abilities the provider does not say (its model list has none): false above then means "not
   * known", and the routing policy's constraints do not rule the model out on them.
   */
  unknown?: ReadonlyArray<'tools' | 'reasoning' | 'images'>;
  /** Deprecated: the provider is retiring the model (Bedrock's Legacy). */
  status: 'active' | 'deprecated';
  replacement?: string;
  /** When the provider deprecated it and when it retires (YYYY-MM-DD), where the lifecycle table has them. */
  deprecatedAt?: string;
  retiresAt?: string;
}

export interface ProviderModule {
  type: ProviderType;
  /** How messages name it: OpenAI, Azure OpenAI, Bedrock. */
  label: string;
  /** Its OpenTelemetry gen_ai.provider.name (the semantic conventions' well-known value where there is one). */
  system: string;
  /** Replaces the default API root (a private endpoint, or a double in tests). */
  endpointEnv: string;
  /** The API root for a provider's spec (for Bedrock the runtime's; its discovery's is its own). */
  baseUrl(spec: ExternalProviderSpec, env: NodeJS.ProcessEnv): string;
  /**
   * How one selected model of a usable provider is called, and the model whose price and limits
   * apply; undefined where discovery did not find it (standalone, without discovery: every one).
   */
  target(
    ep: ExternalProvider,
    model: string,
    at: { standalone: boolean; env: NodeJS.ProcessEnv },
  ): { target: ProviderTarget; baseModel: string } | undefined;
  /** How a credential goes on a request (a workload identity's token is always a bearer token). */
  credentialStyle: CredentialStyle;
  /** SigV4: the service signatures are scoped to. */
  signingName?: string;
  /** Headers every call carries (Anthropic's version). */
  fixedHeaders?: Readonly<Record<string, string>>;
  /** The dialects a model answers natively, preferred first; empty: none (every endpoint is a 400). */
  dialects(target: ProviderTarget): readonly Dialect[];
  /** Whether a chat or completions stream may ask for its usage chunk (stream_options); true when absent. */
  streamUsage?(target: ProviderTarget): boolean;
  /**
   * One call in a native dialect, several (a fan-out), or why the provider cannot take it.
   * `betas`: the anthropic-beta flags a caller of Anthropic's Messages sent, where the provider
   * takes them (a header, or Bedrock's body).
   */
  request(
    target: ProviderTarget,
    dialect: Dialect,
    body: Record<string, unknown>,
    stream: boolean,
    betas?: readonly string[],
  ): WireRequest | WireFanOut | Refusal;
  /**
   * Anthropic's count_tokens for a model that speaks Messages, where the provider counts exactly
   * (`baseModel`: the foundation model, which Bedrock counts for); absent: the gateway estimates.
   */
  countTokens?(target: ProviderTarget, body: Record<string, unknown>, baseModel: string): WireRequest | undefined;
  /** The field of the count's answer that holds the input tokens; input_tokens (Anthropic's) when absent. */
  countedIn?: string;
  /**
   * The models the provider lists for the credentials (every page), for status.availableModels.
   * `fetch` authorizes each request with the provider's credentials.
   */
  discover(spec: ExternalProviderSpec, env: NodeJS.ProcessEnv, fetch: FetchJson): Promise<Discovery>;
  /**
   * Whether a selected model is one the list has: exactly, or an undated alias of a listed dated
   * id (Anthropic lists claude-sonnet-4-5-20250929 and serves claude-sonnet-4-5 too).
   */
  matches?(selected: string, listed: readonly ListedModel[]): ListedModel | undefined;
  /** The model whose price and limits apply: an inference profile's foundation model, an Azure deployment's model. */
  baseModel(spec: ExternalProviderSpec, model: string, found?: ListedModel): string;
  /** USD per 1M tokens of a model of the provider, where the table has one. */
  price(
    table: BedrockPriceTable,
    at: Pick<ProviderIdentity, 'region'>,
    model: string,
    baseModel: string,
  ): TokenPrice | undefined;
  /** What a model can do, for the model lists. */
  facts(model: string, baseModel: string, target: ProviderTarget): ProviderModelFacts;
  /** The provider's words in its status. */
  words(spec: ExternalProviderSpec): DiscoveryWords;
  /** What a failure means, for the condition and the caller. */
  problem(failure: ProviderFailure, ctx: ProblemContext): ProviderProblem;
  /** The rows of its HTTP error table, where it classifies by one (the docs render them). */
  errors?: readonly ErrorRule[];
}

/** The model's family and kind from its id, where the provider's list does not say. */
export function familyOf(id: string): ModelFamily {
  return /^(anthropic\/)?claude/.test(id) ? 'anthropic' : 'openai';
}

export function modelTypeOf(id: string): 'text' | 'embedding' {
  return /embed/.test(id) ? 'embedding' : 'text';
}

/** A model a provider's list names, of a family, its kind from `kindOf` (the model behind a deployment). */
export function listedAs(id: string, family: ModelFamily, kindOf = id): ListedModel {
  const text = modelTypeOf(kindOf) === 'text';
  return { id, type: text ? 'Text' : 'Embedding', family, streaming: text, lifecycle: 'Active' };
}

/** A model a provider's list names, its family and kind from its id. */
export const listed = (id: string): ListedModel => listedAs(id, familyOf(id));

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
  provider: { errors?: readonly ErrorRule[]; errorBody?(body: unknown): ProviderErrorBody | undefined },
  status: number,
  body: unknown,
  vars: { provider: string; model?: string },
  retryAfter?: string | null,
): ProviderProblem {
  const err = provider.errorBody?.(body) ?? { kind: '', message: '' };
  const rule =
    provider.errors?.find(
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

/** Anthropic's beta flags as its API and Claude on Vertex take them. */
export const betaHeader = (betas: readonly string[] = []): Record<string, string> =>
  betas.length > 0 ? { 'anthropic-beta': betas.join(',') } : {};

/** Paths of the OpenAI-shaped dialects under an API root that ends in its version (…/v1). */
export const OPENAI_PATHS: Readonly<Partial<Record<Dialect, string>>> = {
  'openai-chat': '/chat/completions',
  'openai-completions': '/completions',
  'openai-embeddings': '/embeddings',
  'openai-responses': '/responses',
};

/** The first env override set, or the default; never a trailing slash. */
export const rootOf = (env: NodeJS.ProcessEnv, names: string | readonly string[], fallback: string): string => {
  const set = (typeof names === 'string' ? [names] : names).map((n) => env[n]).find((v) => v);
  return (set || fallback).replace(/\/+$/, '');
};

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
    if (res.status >= 400) throw new ProviderHttpError(res.status, res.body, res.headers);
    out.push(...items(res.body));
    url = next(res.body);
  }
  return out;
}

/** A provider's HTTP error, kept whole for its error table. */
export class ProviderHttpError extends Error {
  readonly headers: Record<string, string>;

  constructor(
    readonly status: number,
    readonly body: unknown,
    headers: Headers = new Headers(),
  ) {
    super(`provider answered ${status}`);
    this.headers = Object.fromEntries(headers.entries());
  }
}

export const records = (v: unknown): Record<string, unknown>[] =>
  Array.isArray(v) ? v.filter((x): x is Record<string, unknown> => isRecord(x)) : [];

/** One header's first value. */
export const headerOf = (headers: AnswerHeaders, name: string): string | undefined => {
  const v = headers[name];
  return typeof v === 'string' ? v : v?.[0];
};
