import { DIALECTS } from './dialects.js';
import type { ProxyError } from './errors.js';

/** A whole JSON answer, as the front door writes it (exchange.ts's Answer of kind json). */
export interface JsonAnswer {
  kind: 'json';
  status: number;
  headers: Record<string, string>;
  body: string;
}

/**
 * An error as the caller's dialect answers it, with the headers every answer to the request
 * carries: the one envelope of every refusal, from the stages and from the routes beside them.
 */
export function errorAnswer(
  err: ProxyError,
  requestId: string,
  dialect: keyof typeof DIALECTS = 'openai-chat',
  headers: Readonly<Record<string, string>> = {},
): JsonAnswer {
  return {
    kind: 'json',
    status: err.status,
    headers: { 'content-type': 'application/json', ...headers, 'x-request-id': requestId, ...err.headers },
    body: JSON.stringify(DIALECTS[dialect].errorBody(err, requestId)),
  };
}
