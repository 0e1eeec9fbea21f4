import type { CallerDialect, Dialect } from '../../crds/constants.js';
import type { ErrorType, ProxyError } from './errors.js';

/**
 * The wire dialects the gateway speaks, to callers and to upstreams. An endpoint is written in
 * one (proxy/endpoints/endpoints.ts); an upstream serves some natively (Upstream.dialects); a translator
 * bridges a pair (proxy/translators/). Each dialect says how its errors leave: as a JSON body,
 * and as an event inside a stream that already began, then how its streams end.
 */

export type { CallerDialect, Dialect };

export interface DialectSpec {
  name: CallerDialect;
  /** The error as this dialect's JSON error body. */
  errorBody(err: ProxyError, requestId: string): object;
  /** The error as an SSE event, for a stream that already began (status 200 is on the wire). */
  streamError(err: ProxyError): string;
  /** What ends a stream of this dialect after its last event ('' where the last event says so). */
  streamEnd: string;
}

const sse = (data: object, event?: string) => `${event ? `event: ${event}\n` : ''}data: ${JSON.stringify(data)}\n\n`;

const openAIBody = (err: ProxyError) => ({
  error: { message: err.message, type: err.type, param: err.param, code: err.code },
});

/**
 * Anthropic's error types by the gateway's (https://docs.anthropic.com/en/api/errors): the SDKs
 * and Claude Code pick their exception and their retry from the status and this type. A spent
 * budget is a rate_limit_error with retry-after, the nearest Anthropic has to a quota.
 */
const ANTHROPIC_TYPES: Readonly<Record<ErrorType, string>> = {
  invalid_request_error: 'invalid_request_error',
  authentication_error: 'authentication_error',
  permission_error: 'permission_error',
  not_found_error: 'not_found_error',
  rate_limit_error: 'rate_limit_error',
  insufficient_quota: 'rate_limit_error',
  api_error: 'api_error',
  server_error: 'api_error',
  timeout_error: 'timeout_error',
};

/** Anthropic types a status first (OpenAI calls a missing model an invalid_request_error, Anthropic not_found_error). */
const anthropicType = (err: ProxyError): string =>
  err.status === 413 ? 'request_too_large' : err.status === 404 ? 'not_found_error' : ANTHROPIC_TYPES[err.type];

const anthropicBody = (err: ProxyError, requestId: string) => ({
  type: 'error',
  // The gateway's code travels in the message: Anthropic's envelope has no field for it.
  error: { type: anthropicType(err), message: `${err.message} (${err.code})` },
  ...(requestId ? { request_id: requestId } : {}),
});

const openAI = (name: CallerDialect): DialectSpec => ({
  name,
  errorBody: openAIBody,
  streamError: (err) => sse(openAIBody(err)),
  streamEnd: 'data: [DONE]\n\n',
});

export const DIALECTS: Readonly<Record<CallerDialect, DialectSpec>> = {
  'openai-chat': openAI('openai-chat'),
  'openai-completions': openAI('openai-completions'),
  'openai-embeddings': openAI('openai-embeddings'),
  'openai-responses': {
    name: 'openai-responses',
    errorBody: openAIBody,
    // The Responses stream's own error event (ResponseErrorEvent); the SDKs raise it as an APIError.
    streamError: (err) =>
      sse({ type: 'error', code: err.code, message: err.message, param: err.param, sequence_number: 0 }, 'error'),
    streamEnd: '',
  },
  'anthropic-messages': {
    name: 'anthropic-messages',
    errorBody: anthropicBody,
    streamError: (err) => sse(anthropicBody(err, ''), 'error'),
    streamEnd: '',
  },
};

/** A dialect callers speak; an upstream's own (Converse) where a caller's was due is the gateway's bug. */
export function callerDialect(dialect: Dialect): CallerDialect {
  if (!Object.hasOwn(DIALECTS, dialect)) throw new Error(`${dialect} is no caller's dialect`);
  return dialect as CallerDialect;
}
