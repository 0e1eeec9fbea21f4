import type { Dialect } from '../constants.js';
import { isRecord } from '../is-record.js';
import {
  API_KEY_REFUSED,
  allPages,
  betaHeader,
  COMMON_ERRORS,
  type ErrorRule,
  type ListedModel,
  listed,
  MODEL_NOT_FOUND,
  type ProviderErrorBody,
  type ProviderModule,
  records,
  rootOf,
} from './provider.js';
import { statusTableProvider } from './status-table-provider.js';

/**
 * Anthropic's API (https://api.anthropic.com): Messages natively (chat and Responses callers
 * through the gateway's translators), the key in x-api-key, the API version in
 * anthropic-version. Errors are `{type: 'error', error: {type, message}}` with the types of
 * https://docs.anthropic.com/en/api/errors; 529 is overloaded.
 */

const ANTHROPIC_VERSION = '2023-06-01';
const NATIVE: readonly Dialect[] = ['anthropic-messages'];

/** Anthropic's error body (also Claude's on Vertex, inside rawPredict answers). */
export function anthropicErrorBody(body: unknown): ProviderErrorBody | undefined {
  const e = isRecord(body) ? body.error : undefined;
  if (!isRecord(e)) return undefined;
  return {
    kind: typeof e.type === 'string' ? e.type : '',
    message: typeof e.message === 'string' ? e.message : '',
  };
}

const ERRORS: readonly ErrorRule[] = [
  API_KEY_REFUSED,
  {
    status: 403,
    problem: {
      reason: 'ModelAccessDenied',
      credentials: false,
      status: 403,
      type: 'permission_error',
      code: 'provider_access_denied',
      message: "{provider} denied the key access to {model}{detail}; check the key's workspace and its model access",
    },
  },
  MODEL_NOT_FOUND,
  {
    status: 400,
    text: /credit balance/i,
    problem: {
      reason: 'QuotaExceeded',
      credentials: false,
      status: 429,
      type: 'rate_limit_error',
      code: 'provider_quota_exceeded',
      message: "{provider}'s credit balance is spent{detail}; add credit in the organization's billing",
    },
  },
  ...COMMON_ERRORS,
];

/**
 * Anthropic lists dated ids (claude-sonnet-4-5-20250929) and serves their undated and `-latest`
 * aliases too (claude-sonnet-4-5, claude-3-5-haiku-latest): an alias matches its newest dated id.
 */
export function undatedMatch(selected: string, models: readonly ListedModel[]): ListedModel | undefined {
  const exact = models.find((m) => m.id === selected);
  if (exact) return exact;
  const bare = selected.replace(/-latest$/, '');
  return models
    .filter((m) => /-[0-9]{8}$/.test(m.id) && m.id.slice(0, -9) === bare)
    .sort((a, b) => b.id.localeCompare(a.id))[0];
}

const baseUrl: ProviderModule['baseUrl'] = (spec, env) =>
  rootOf(env, 'PAO_ENDPOINT_URL_ANTHROPIC', spec.baseUrl ?? 'https://api.anthropic.com');

export const anthropic: ProviderModule = statusTableProvider({
  type: 'anthropic',
  label: 'Anthropic',
  system: 'anthropic',
  endpointEnv: 'PAO_ENDPOINT_URL_ANTHROPIC',
  baseUrl,
  credentialStyle: 'x-api-key',
  fixedHeaders: { 'anthropic-version': ANTHROPIC_VERSION },
  dialects: (t) => (t.modelType === 'text' ? NATIVE : []),
  request: (t, _dialect, body, _stream, betas) => ({
    url: `${t.baseUrl}/v1/messages`,
    headers: betaHeader(betas),
    body,
  }),
  countTokens: (t, body) => ({ url: `${t.baseUrl}/v1/messages/count_tokens`, headers: {}, body }),
  // GET /v1/models pages with after_id while has_more.
  discover: async (spec, env, fetch) => {
    const first = `${baseUrl(spec, env)}/v1/models?limit=1000`;
    const models = await allPages(
      first,
      { 'anthropic-version': ANTHROPIC_VERSION },
      fetch,
      (body) =>
        records(isRecord(body) ? body.data : undefined).flatMap((m) =>
          typeof m.id === 'string' ? [listed(m.id)] : [],
        ),
      (body) =>
        isRecord(body) && body.has_more === true && typeof body.last_id === 'string'
          ? `${first}&after_id=${encodeURIComponent(body.last_id)}`
          : undefined,
    );
    return { models };
  },
  matches: undatedMatch,
  errorBody: anthropicErrorBody,
  errors: ERRORS,
});
