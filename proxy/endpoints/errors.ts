import type { ContentfulStatusCode } from 'hono/utils/http-status';

/**
 * Errors are values: a type and an HTTP status, rendered as the OpenAI error envelope
 * {"error": {"message", "type", "param", "code"}}. Messages are written for the caller and
 * never carry credentials, prompt text or stack traces.
 */

export type ErrorType =
  | 'invalid_request_error'
  | 'authentication_error'
  | 'permission_error'
  | 'not_found_error'
  | 'rate_limit_error'
  // OpenAI's type and code for a spent quota; the SDKs surface it as a RateLimitError with this code.
  | 'insufficient_quota'
  | 'api_error'
  | 'server_error'
  | 'timeout_error';

export class ProxyError extends Error {
  constructor(
    readonly status: ContentfulStatusCode,
    readonly type: ErrorType,
    readonly code: string,
    message: string,
    readonly param: string | null = null,
    /** Extra response headers, e.g. Retry-After. */
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
    this.name = 'ProxyError';
  }

  toJSON(): ErrorEnvelope {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }
}

export interface ErrorEnvelope {
  error: { message: string; type: string; param: string | null; code: string | null };
}

export const invalidRequest = (message: string, param: string | null = null, code = 'invalid_request') =>
  new ProxyError(400, 'invalid_request_error', code, message, param);

/** The gateway's own failure (a bug, never a caller's or an upstream's): the request id to find it in the log. */
export const internalError = (requestId: string) =>
  new ProxyError(
    500,
    'server_error',
    'internal_error',
    `the gateway failed to handle the request (request id ${requestId})`,
  );
