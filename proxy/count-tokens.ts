import { type ApiKeys, authenticate } from './access/auth.js';
import { routeFor } from './access/model-access.js';
import { estimateInputTokens, parseAnthropicRequest } from './endpoints/anthropic-request.js';
import { isRecord } from './endpoints/chat-request.js';
import { invalidRequest, ProxyError } from './endpoints/errors.js';
import type { BedrockRoute, HostedRoute, RouteTable } from './routing/routes.js';
import type { Upstream } from './upstreams/upstream.js';

/**
 * Anthropic's POST /v1/messages/count_tokens (Claude Code calls it to size its context): exact
 * where the upstream counts (Bedrock's CountTokens for its Claude models), otherwise an
 * estimate from the request's length, said so in `x-gateway-token-count: estimate`. Auth and the
 * model allow-list apply as to a message; nothing is generated, so nothing is billed.
 */

export interface CountTokensDeps {
  keys: ApiKeys;
  routes: RouteTable;
  bedrock?: Upstream<BedrockRoute> & {
    countTokens?(route: BedrockRoute, body: Record<string, unknown>, signal: AbortSignal): Promise<number>;
  };
  /** Hosted providers that count (Anthropic, Claude on Vertex). */
  hosted?: Upstream<HostedRoute> & {
    countTokens?(route: HostedRoute, body: Record<string, unknown>, signal: AbortSignal): Promise<number | undefined>;
  };
}

export interface CountTokensAnswer {
  inputTokens: number;
  exact: boolean;
}

export async function countTokens(
  deps: CountTokensDeps,
  headers: { apiKey?: string | undefined; authorization?: string | undefined },
  body: unknown,
  signal: AbortSignal,
): Promise<CountTokensAnswer> {
  const caller = authenticate(deps.keys, headers);
  if (caller instanceof ProxyError) throw caller;
  // count_tokens takes a Messages body without max_tokens.
  const req = parseAnthropicRequest(isRecord(body) ? { max_tokens: 1, ...body } : body);
  if (req instanceof ProxyError) throw req;
  const route = routeFor(deps.routes, caller.policy, req.model);
  if (route instanceof ProxyError) throw route;
  const { tags: _tags, ...forward } = req.forward;
  if (
    route.kind === 'bedrock' &&
    deps.bedrock?.countTokens &&
    deps.bedrock.dialects(route).includes('anthropic-messages')
  ) {
    return { inputTokens: await deps.bedrock.countTokens(route, forward, signal), exact: true };
  }
  if (route.kind === 'hosted' && deps.hosted?.countTokens) {
    // The served model's own name (not an alias), and no max_tokens: count_tokens refuses it.
    const { max_tokens: _max, ...counted_ } = forward;
    const counted = await deps.hosted.countTokens(route, { ...counted_, model: route.model }, signal);
    if (counted !== undefined) return { inputTokens: counted, exact: true };
  }
  if (!Array.isArray(forward.messages)) throw invalidRequest('messages must be an array', 'messages');
  return { inputTokens: estimateInputTokens(forward), exact: false };
}
