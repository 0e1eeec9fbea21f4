import { ProxyError } from './endpoints/errors.js';
import { applyEnforcedTags, parseTags } from './endpoints/tags.js';
import type { Failed, Parsed, Read } from './exchange.js';

/**
 * The third stage: the endpoint's own parser checks the request as its dialect defines it (one
 * 400 naming the field, in the caller's envelope), the memory its answer may cost is reserved
 * with its body's (a small request for a huge answer is bounded too), and its tags are taken
 * from the headers and the body, merged, checked, and the key's enforced tags applied.
 */
export function parse(read: Read): Parsed | Failed {
  const { incoming } = read;
  const request = incoming.endpoint.parse(read.body);
  if (request instanceof ProxyError) return { failed: request, at: read };
  const known = { ...read.known, model: request.model, stream: request.stream };
  const withRequest = { ...read, known };
  if (incoming.endpoint.answerBytes) {
    try {
      read.reservation.atLeast(incoming.endpoint.answerBytes(request));
    } catch (err) {
      if (err instanceof ProxyError) return { failed: err, at: withRequest };
      throw err;
    }
  }
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
