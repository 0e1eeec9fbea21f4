import { ProxyError } from './endpoints/errors.js';
import { applyEnforcedTags, parseTags } from './endpoints/tags.js';
import type { Failed, Parsed, Read } from './exchange.js';

/**
 * The third stage: the endpoint's own parser checks the request as its dialect defines it (one
 * 400 naming the field, in the caller's envelope), and its tags are taken from the headers and
 * the body, merged, checked, and the key's enforced tags applied. The memory its answer may cost
 * is reserved once its model is known (proxy/route.ts): an unknown model is a 404 first.
 */
export function parse(read: Read): Parsed | Failed {
  const { incoming } = read;
  const request = incoming.endpoint.parse(read.body);
  if (request instanceof ProxyError) return { failed: request, at: read };
  const known = { ...read.known, model: request.model, stream: request.stream };
  const withRequest = { ...read, known };
  const tags = parseTags({
    xTags: incoming.header('x-tags'),
    xGatewayTags: incoming.header('x-gateway-tags'),
    xLitellmTags: incoming.header('x-litellm-tags'),
    body: request.tags,
  });
  if (tags instanceof ProxyError) return { failed: tags, at: withRequest };
  const enforced = applyEnforcedTags(tags, read.caller.policy.tags);
  if (enforced instanceof ProxyError) return { failed: enforced, at: withRequest };
  return { ...withRequest, request, known: { ...known, tags: enforced } };
}
