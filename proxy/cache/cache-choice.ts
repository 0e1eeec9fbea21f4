import type { ApiKeyCache } from '../../crds/api-key.js';
import type { KeyPolicy } from '../access/auth.js';
import type { ParsedRequest } from '../endpoints/chat-request.js';
import type { Endpoint } from '../endpoints/endpoints.js';
import { invalidRequest, type ProxyError } from '../endpoints/errors.js';

/**
 * Whether a request is answered from the response cache and kept in it, and how: its key's
 * spec.cache, a request's own X-Gateway-Cache (exact, semantic, off), Cache-Control (no-cache:
 * read nothing, keep the answer; no-store: neither), and what the request is: only generation
 * (not count_tokens), and only at temperature 0 unless the key allows any (no temperature is
 * most providers' 1). A Responses request's answer from the cache gets an id of its own and is
 * kept as any (stored Responses run after the cache); one in the background is not cached.
 */

export type CacheMode = 'exact' | 'semantic';

export interface CacheChoice {
  mode: CacheMode;
  ttlMs: number;
  /** Whose requests answer each other's: `team:<team>` or `key:<key hash prefix>`. */
  scope: string;
  read: boolean;
  similarity: number;
}

const CACHE_HEADER = 'x-gateway-cache';

const DEFAULTS: Required<ApiKeyCache> = {
  mode: 'Exact',
  ttlSeconds: 3600,
  scope: 'Team',
  anyTemperature: false,
  similarity: 0.95,
};

const MODES: Readonly<Record<string, CacheMode | 'off'>> = { exact: 'exact', semantic: 'semantic', off: 'off' };

export function cacheChoice(
  policy: KeyPolicy,
  keyHashPrefix: string,
  header: (name: string) => string | undefined,
  endpoint: Endpoint,
  request: ParsedRequest,
): CacheChoice | ProxyError | undefined {
  const asked = header(CACHE_HEADER)?.trim().toLowerCase();
  const byHeader = asked === undefined || asked === '' ? undefined : MODES[asked];
  if (asked && !byHeader)
    return invalidRequest(`${CACHE_HEADER} must be exact, semantic or off`, CACHE_HEADER, 'invalid_cache_header');
  const directives = (header('cache-control') ?? '').toLowerCase();
  if (byHeader === 'off' || /(^|[\s,])no-store([\s,]|$)/.test(directives)) return undefined;
  const key = policy.cache;
  // A key's Off is final, and a request may only narrow what its key allows: a key without
  // spec.cache lets its requests opt in (in its team's scope), a key with one keeps its scope.
  if (key?.mode === 'Off') return undefined;
  const keyed = key ? (key.mode === 'Semantic' ? 'semantic' : 'exact') : undefined;
  let mode = byHeader ?? keyed;
  if (!mode) return undefined;
  // Semantic answers near texts: not embeddings (a vector is no answer to a near text).
  if (mode === 'semantic' && (endpoint.dialect === 'openai-embeddings' || keyed === 'exact')) mode = 'exact';
  const spec = { ...DEFAULTS, ...key };
  if (endpoint.does !== 'generate' || !eligible(endpoint, request.forward, spec.anyTemperature)) return undefined;
  return {
    mode,
    ttlMs: spec.ttlSeconds * 1000,
    scope: spec.scope === 'Key' || policy.team === '' ? `key:${keyHashPrefix}` : `team:${policy.team}`,
    read: !/(^|[\s,])no-cache([\s,]|$)/.test(directives),
    similarity: spec.similarity,
  };
}

function eligible(endpoint: Endpoint, body: Record<string, unknown>, anyTemperature: boolean): boolean {
  if (endpoint.dialect === 'openai-embeddings' || anyTemperature) return true;
  return body.temperature === 0;
}
