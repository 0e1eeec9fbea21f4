import { ProxyError } from '../endpoints/errors.js';

/**
 * A failed HTTP exchange with an upstream as the caller should see it, from undici's own error
 * codes: unreachable or broken (502), too slow to connect, answer or go on (504). `name` says who
 * ("the model server of llama (ns/name)", "OpenAI (ns/name)"); `idleMs` the silence allowed.
 */

export const errorCode = (err: unknown): string | undefined =>
  (err as { code?: string })?.code ?? (err as { cause?: { code?: string } })?.cause?.code;

export function transportError(err: unknown, name: string, idleMs: number): ProxyError {
  const code = errorCode(err);
  switch (code) {
    case 'UND_ERR_CONNECT_TIMEOUT':
      return new ProxyError(504, 'timeout_error', 'upstream_timeout', `${name} did not accept a connection in time`);
    case 'UND_ERR_HEADERS_TIMEOUT':
      return new ProxyError(504, 'timeout_error', 'upstream_timeout', `${name} did not answer in time`);
    case 'UND_ERR_BODY_TIMEOUT':
      return new ProxyError(504, 'timeout_error', 'upstream_idle_timeout', `${name} sent nothing for ${idleMs} ms`);
    case 'UND_ERR_SOCKET':
    case 'ECONNRESET':
      return new ProxyError(502, 'api_error', 'upstream_stream_broken', `${name} broke off the connection`);
    default:
      return new ProxyError(
        502,
        'api_error',
        'upstream_unreachable',
        `could not reach ${name}${code ? ` (${code})` : ''}`,
      );
  }
}
