import type { Dialect } from '../constants.js';
import { isRecord } from '../is-record.js';
import {
  API_KEY_REFUSED,
  allPages,
  COMMON_ERRORS,
  type ErrorRule,
  listed,
  MODEL_NOT_FOUND,
  OPENAI_PATHS,
  openAIErrorBody,
  type ProviderModule,
  records,
  rootOf,
} from './provider.js';
import { statusTableProvider } from './status-table-provider.js';

/**
 * OpenAI's API (https://api.openai.com/v1, or a regional root such as https://eu.api.openai.com/v1
 * in spec.baseUrl): every OpenAI dialect passes through as the caller sent it, the key as a
 * bearer token. Its errors are `{error: {message, type, code}}`; the codes below are the ones its
 * API reference documents for each status.
 */

const NATIVE: readonly Dialect[] = ['openai-chat', 'openai-responses', 'openai-completions', 'openai-embeddings'];
const EMBEDDINGS: readonly Dialect[] = ['openai-embeddings'];

/** The rows of OpenAI's own errors, shared by the providers that speak its API. */
export const OPENAI_ERRORS: readonly ErrorRule[] = [
  API_KEY_REFUSED,
  {
    status: 403,
    kind: /unsupported_country_region_territory/,
    problem: {
      reason: 'RegionNotSupported',
      credentials: false,
      status: 502,
      type: 'api_error',
      code: 'provider_region_refused',
      message: '{provider} does not serve the region the gateway calls from{detail}',
    },
  },
  {
    status: 403,
    problem: {
      reason: 'ModelAccessDenied',
      credentials: false,
      status: 403,
      type: 'permission_error',
      code: 'provider_access_denied',
      message:
        "{provider} denied access to {model}{detail}; give the key's project access to the model (project limits in the provider's console)",
    },
  },
  MODEL_NOT_FOUND,
  {
    status: 429,
    kind: /insufficient_quota/,
    problem: {
      reason: 'QuotaExceeded',
      credentials: false,
      status: 429,
      type: 'rate_limit_error',
      code: 'provider_quota_exceeded',
      message: "{provider}'s quota for the account is spent{detail}; add credit or raise the project's budget",
    },
  },
  ...COMMON_ERRORS,
];

/** GET {root}/models, OpenAI's list (also OpenAI-compatible servers'): `{data: [{id}]}`, one page. */
export const listOpenAIModels =
  (baseUrl: ProviderModule['baseUrl']): ProviderModule['discover'] =>
  async (spec, env, fetch) => ({
    models: await allPages(
      `${baseUrl(spec, env)}/models`,
      {},
      fetch,
      (body) =>
        records(isRecord(body) ? body.data : undefined).flatMap((m) =>
          typeof m.id === 'string' ? [listed(m.id)] : [],
        ),
      () => undefined,
    ),
  });

const baseUrl: ProviderModule['baseUrl'] = (spec, env) =>
  rootOf(env, 'PAO_ENDPOINT_URL_OPENAI', spec.baseUrl ?? 'https://api.openai.com/v1');

export const openai: ProviderModule = statusTableProvider({
  type: 'openai',
  label: 'OpenAI',
  system: 'openai',
  endpointEnv: 'PAO_ENDPOINT_URL_OPENAI',
  baseUrl,
  credentialStyle: 'bearer',
  dialects: (t) => (t.modelType === 'embedding' ? EMBEDDINGS : NATIVE),
  request: (t, dialect, body) => ({
    url: `${t.baseUrl}${OPENAI_PATHS[dialect] ?? ''}`,
    headers: {},
    body,
  }),
  discover: listOpenAIModels(baseUrl),
  errorBody: openAIErrorBody,
  errors: OPENAI_ERRORS,
});
