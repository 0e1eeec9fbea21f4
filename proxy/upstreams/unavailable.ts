import { DIALECTS, type Dialect } from '../endpoints/dialects.js';
import { ProxyError } from '../endpoints/errors.js';
import type { Unavailable } from '../serving/routes.js';
import type { Backend } from './backend.js';

/**
 * A model that exists but cannot take traffic now: deploying (503 with Retry-After: try again)
 * or failed (503: not until someone fixes it). Every endpoint reaches it, so the caller learns
 * why whatever it called, and the model's fallbacks serve meanwhile. Not listed, not priced;
 * count_tokens still estimates for it.
 */
const EVERY_DIALECT = Object.keys(DIALECTS) as Dialect[];

export function unavailableBackend(deployingRetryAfterSeconds = 30): Backend<Unavailable> {
  return {
    who: () => ({ label: 'unavailable' }),
    refuse: (route) => unavailable(route, deployingRetryAfterSeconds),
    dialects: () => EVERY_DIALECT,
    send: async (call) => {
      throw unavailable(call.route, deployingRetryAfterSeconds);
    },
    countTokens: async () => undefined,
    price: () => undefined,
    credits: () => 0,
    facts: async () => undefined,
  };
}

/** When to try a failed model again: a fix and a redeploy take minutes, not seconds. */
const FAILED_RETRY_AFTER_SECONDS = 60;

function unavailable(entry: Unavailable, retryAfterSeconds: number): ProxyError {
  if (entry.phase === 'Deploying') {
    return new ProxyError(
      503,
      'api_error',
      'model_deploying',
      `the model ${entry.model} is still being deployed (${entry.reason}); retry in ${retryAfterSeconds} s`,
      'model',
      { 'Retry-After': String(retryAfterSeconds) },
    );
  }
  return new ProxyError(
    503,
    'api_error',
    'model_failed',
    `the model ${entry.model} is not available: ${entry.reason}; retry once its deployment is fixed`,
    'model',
    // Not the caller's error and not for a quick retry: the time the operator takes to redeploy.
    { 'Retry-After': String(FAILED_RETRY_AFTER_SECONDS) },
  );
}
