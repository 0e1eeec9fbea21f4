import { ProxyError } from '../endpoints/errors.js';
import type { RouteEntry, RouteTable } from '../serving/routes.js';
import { type KeyPolicy, mayCall } from './auth.js';

/** Model names quoted back in errors are cut to this many characters. */
export const MAX_MODEL_CHARS = 256;

/**
 * The route a key may use for a model name, or the error it gets: the one check every endpoint
 * shares (chat, responses, messages, count_tokens). An alias routes to its model's entry and a key
 * allowed either name may use it. Permission is judged before existence, so a key cannot probe
 * which models exist beyond its allow-list.
 */
export function routeFor(routes: RouteTable, policy: KeyPolicy, model: string): RouteEntry | ProxyError {
  const entry = routes.lookup(model);
  const quoted = JSON.stringify(model.slice(0, MAX_MODEL_CHARS));
  if (!mayCall(policy, model) && !(entry && mayCall(policy, entry.model))) {
    return new ProxyError(
      403,
      'permission_error',
      'model_not_allowed',
      `this API key may not call the model ${quoted}; GET /openai/v1/models lists the models it may call`,
      'model',
    );
  }
  if (!entry) {
    return new ProxyError(
      404,
      'invalid_request_error',
      'model_not_found',
      `the model ${quoted} does not exist or is not routable here; GET /openai/v1/models lists the models you can use`,
      'model',
    );
  }
  return entry;
}
