import { foldedBetas, foldSystemMessages } from '../anthropic-system-messages.js';
import type { Dialect } from '../constants.js';
import type { ExternalProviderSpec } from '../external-provider.js';
import { isRecord } from '../is-record.js';
import { anthropicErrorBody } from './anthropic.js';
import {
  allPages,
  betaHeader,
  COMMON_ERRORS,
  type ErrorRule,
  type ListedModel,
  listedAs,
  type ProviderErrorBody,
  type ProviderModule,
  type ProviderTarget,
  records,
  rootOf,
} from './provider.js';
import { statusTableProvider } from './status-table-provider.js';

/**
 * Google Vertex AI in one project and location. Gemini models through Vertex's OpenAI-compatible
 * chat endpoint (…/endpoints/openapi/chat/completions, `model` google/<id>), which Google
 * documents for the OpenAI libraries; Anthropic's models through rawPredict/streamRawPredict with
 * Anthropic's Messages body (anthropic_version vertex-2023-10-16, the model in the path). Calls
 * carry an OAuth token of the workload identity (the GKE metadata server, or Google STS for a
 * federated token). Errors are Google's `{error: {code, message, status}}`, or Anthropic's for
 * a Claude model's own refusals.
 */

/** The anthropic_version Claude on Vertex takes in the body instead of a header. */
const VERTEX_ANTHROPIC_VERSION = 'vertex-2023-10-16';
/** The scope of the token every call carries. */
export const GOOGLE_CLOUD_SCOPE = 'https://www.googleapis.com/auth/cloud-platform';

const GEMINI: readonly Dialect[] = ['openai-chat'];
const CLAUDE: readonly Dialect[] = ['anthropic-messages'];
const PUBLISHERS = ['google', 'anthropic'] as const;

const hostOf = (location: string) =>
  location === 'global' ? 'https://aiplatform.googleapis.com' : `https://${location}-aiplatform.googleapis.com`;

/** Google's error body, or Anthropic's (Claude's own errors), or either wrapped in a one-element array. */
function vertexErrorBody(body: unknown): ProviderErrorBody | undefined {
  const b = Array.isArray(body) ? body[0] : body;
  const e = isRecord(b) ? b.error : undefined;
  if (!isRecord(e)) return undefined;
  if (typeof e.status === 'string' || typeof e.code === 'number') {
    return {
      kind: typeof e.status === 'string' ? e.status : '',
      message: typeof e.message === 'string' ? e.message : '',
    };
  }
  return anthropicErrorBody(b);
}

const ERRORS: readonly ErrorRule[] = [
  {
    status: 401,
    problem: {
      reason: 'InvalidCredentials',
      credentials: true,
      status: 502,
      type: 'api_error',
      code: 'provider_auth_failed',
      message:
        "{provider} refused the token{detail}; check the workload identity binding of the proxy's ServiceAccount (spec.auth.audience, spec.auth.serviceAccount)",
    },
  },
  {
    status: 403,
    text: /has not been used|is disabled|SERVICE_DISABLED/i,
    problem: {
      reason: 'APIDisabled',
      credentials: false,
      status: 502,
      type: 'api_error',
      code: 'provider_api_disabled',
      message: '{provider}: the Vertex AI API is not enabled in the project{detail}; enable aiplatform.googleapis.com',
    },
  },
  {
    status: 403,
    problem: {
      reason: 'AccessDenied',
      credentials: false,
      status: 403,
      type: 'permission_error',
      code: 'provider_access_denied',
      message:
        '{provider} denied access to {model}{detail}; grant the identity roles/aiplatform.user on the project, and enable the model in Model Garden',
    },
  },
  {
    status: 404,
    problem: {
      reason: 'ModelNotFound',
      credentials: false,
      status: 404,
      type: 'not_found_error',
      code: 'model_not_found',
      message:
        '{provider} has no {model} in the location{detail}; check vertex.location and the model id (claude-…@version)',
    },
  },
  {
    status: 429,
    kind: /RESOURCE_EXHAUSTED/,
    problem: {
      reason: 'QuotaExceeded',
      credentials: false,
      status: 429,
      type: 'rate_limit_error',
      // Google answers RESOURCE_EXHAUSTED for a moment's shared-capacity throttling as for a spent
      // quota: retried like any 429, then the fallbacks.
      code: 'upstream_rate_limited',
      message:
        "{provider}'s quota for {model} in the location is exhausted{detail}; retried after a moment; if it lasts, request more quota or use another location",
    },
  },
  {
    status: 400,
    kind: /FAILED_PRECONDITION/,
    text: /billing/i,
    problem: {
      reason: 'BillingDisabled',
      credentials: false,
      status: 502,
      type: 'api_error',
      code: 'provider_billing_disabled',
      message: '{provider}: billing is not enabled for the project{detail}',
    },
  },
  ...COMMON_ERRORS,
];

/** A content block anywhere in the messages with `source: {type: 'url'}`. */
function hasUrlSource(messages: unknown): boolean {
  if (!Array.isArray(messages)) return false;
  return messages.some(
    (m) =>
      isRecord(m) &&
      Array.isArray(m.content) &&
      m.content.some(
        (b) =>
          isRecord(b) &&
          ((isRecord(b.source) && b.source.type === 'url') ||
            (Array.isArray(b.content) &&
              b.content.some((c) => isRecord(c) && isRecord(c.source) && c.source.type === 'url'))),
      ),
  );
}

/** Vertex's Claude ids carry a version after @; the list names the model without it. */
function vertexMatch(selected: string, models: readonly ListedModel[]): ListedModel | undefined {
  const bare = selected.split('@')[0] ?? selected;
  return models.find((m) => m.id === selected || m.id === bare);
}

const baseUrl: ProviderModule['baseUrl'] = (spec, env) =>
  rootOf(env, 'PAO_ENDPOINT_URL_VERTEX_AI', hostOf(spec.vertex?.location ?? 'global'));

export const vertexAi: ProviderModule = statusTableProvider({
  type: 'vertex-ai',
  label: 'Vertex AI',
  system: 'gcp.vertex_ai',
  endpointEnv: 'PAO_ENDPOINT_URL_VERTEX_AI',
  baseUrl,
  credentialStyle: 'bearer',
  dialects: (t) => (t.modelType === 'embedding' ? [] : t.family === 'anthropic' ? CLAUDE : GEMINI),
  request: (t: ProviderTarget, _dialect, body, stream, betas) => {
    const at = `${t.baseUrl}/v1/projects/${t.project}/locations/${t.location}`;
    if (t.family === 'anthropic') {
      // Claude on Vertex takes images and documents inline only; the gateway fetches no URL for it.
      if (hasUrlSource(body.messages)) {
        return {
          refused: 'Claude on Vertex AI takes images and documents inline (base64, or a data: URL), not by URL',
        };
      }
      // Vertex's Messages API trails Anthropic's: system messages inside messages are folded.
      const { model: _, ...rest } = foldSystemMessages(body);
      return {
        url: `${at}/publishers/anthropic/models/${encodeURIComponent(t.upstreamModel)}:${stream ? 'streamRawPredict' : 'rawPredict'}`,
        headers: betaHeader(foldedBetas(betas)),
        body: { ...rest, anthropic_version: VERTEX_ANTHROPIC_VERSION },
      };
    }
    return {
      url: `${at}/endpoints/openapi/chat/completions`,
      headers: {},
      body: { ...body, model: `google/${t.upstreamModel}` },
    };
  },
  // Claude's token count on Vertex: the count-tokens model's rawPredict, the model in the body.
  countTokens: (t, body) =>
    t.family === 'anthropic'
      ? {
          url: `${t.baseUrl}/v1/projects/${t.project}/locations/${t.location}/publishers/anthropic/models/count-tokens:rawPredict`,
          headers: {},
          body: { ...foldSystemMessages(body), model: t.upstreamModel, anthropic_version: VERTEX_ANTHROPIC_VERSION },
        }
      : undefined,
  /** publishers.models.list (v1beta1) of Google's and Anthropic's models, every page. */
  discover: async (spec: ExternalProviderSpec, env, fetch) => {
    const out: ListedModel[] = [];
    for (const publisher of PUBLISHERS) {
      const first = `${baseUrl(spec, env)}/v1beta1/publishers/${publisher}/models?pageSize=200`;
      const names = await allPages(
        first,
        { 'x-goog-user-project': spec.vertex?.project ?? '' },
        fetch,
        (body) =>
          records(isRecord(body) ? body.publisherModels : undefined).flatMap((m) =>
            typeof m.name === 'string' ? [m.name.split('/').pop() ?? ''] : [],
          ),
        (body) =>
          isRecord(body) && typeof body.nextPageToken === 'string' && body.nextPageToken
            ? `${first}&pageToken=${encodeURIComponent(body.nextPageToken)}`
            : undefined,
      );
      for (const id of names) if (id) out.push(listedAs(id, publisher === 'anthropic' ? 'anthropic' : 'openai'));
    }
    return { models: out };
  },
  matches: vertexMatch,
  errorBody: vertexErrorBody,
  errors: ERRORS,
});
