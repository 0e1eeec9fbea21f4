import { hash } from 'node:crypto';
import type { ApiKey, ApiKeyCache, ApiKeyMcp, ApiKeyRole, BudgetSpec, KeyRouting } from '../../crds/api-key.js';
import { TEAM_TAG } from '../../crds/constants.js';
import { ProxyError } from '../endpoints/errors.js';
import type { Tag } from '../endpoints/tags.js';
import type { Identities } from '../identity/identities.js';
import { looksLikeJwt } from '../identity/token-shape.js';

/**
 * API keys, held only as SHA-256 digests, each with what it may do (a KeyPolicy: plain values
 * resolved from an ApiKey object, or an unrestricted policy for keys from a keys file or the
 * legacy key Secret). A presented key is hashed and looked up by its digest: timing can tell a
 * caller at most something about the digest of their own guess, which says nothing about any
 * key (SHA-256 is preimage resistant), and the lookup costs the same for one key or ten
 * thousand.
 */

// One-shot hashing: no Hash object per request (createHash showed in the request path's profile).
export const sha256 = (text: string): Buffer => hash('sha256', text, 'buffer');
export const sha256Hex = (text: string): string => hash('sha256', text, 'hex');

export interface KeyPolicy {
  /** The ApiKey's name; '' for a key of a keys file or the legacy Secret. */
  name: string;
  /** Its team: records carry it and a User key reads only it. '' for keys of no team. */
  team: string;
  role: ApiKeyRole;
  /** Applied to every request (team:<team> first, for User keys); a caller's other value for one of these keys is refused. */
  tags: Tag[];
  /** Models it may call; every model when absent. */
  models?: ReadonlySet<string>;
  rate?: { requestsPerSecond: number; burst: number };
  tokensPerMinute?: number;
  budget?: BudgetSpec;
  /** Epoch ms; refused with 401 from then on. */
  expiresAt?: number;
  /** MCP servers and tools it may use, its rate per tool; every server and tool when absent (proxy/mcp/). */
  mcp?: ApiKeyMcp;
  /** Whether its requests that name a model are routed (proxy/routing-policy/); Inherit when absent. */
  routing?: KeyRouting;
  /** The RoutingPolicy its routed requests use; `default` when absent. */
  routingPolicy?: string;
  /** The response cache of its requests (proxy/cache/); none when absent. */
  cache?: ApiKeyCache;
}

/** A key of no ApiKey: what every key could do before ApiKeys (read all, no limits of its own). */
const UNRESTRICTED: KeyPolicy = Object.freeze({ name: '', team: '', role: 'Admin', tags: [] });

export interface Caller {
  /**
   * First 12 hex characters of the key's SHA-256: enough to tell keys apart in reports. For a
   * token's caller, of its issuer and subject: stable across the subject's tokens.
   */
  keyHashPrefix: string;
  policy: KeyPolicy;
  /** A token's caller: the IdentityProvider that vouched for it (its rates are its own, not its profile's). */
  identity?: { provider: string };
}

/** The policy of an ApiKey object and the digest it is presented by; none until the operator issued its key. */
export function policyOf(ak: ApiKey): { digest: string; policy: KeyPolicy } | undefined {
  const m = /^sha256:([0-9a-f]{64})$/.exec(ak.status?.digest ?? '');
  return m?.[1] ? { digest: m[1], policy: keyPolicy(ak) } : undefined;
}

/** What an ApiKey grants, to its own key and to the tokens its IdentityProvider profiles map to it. */
export function keyPolicy(ak: ApiKey): KeyPolicy {
  const { team, role, tags, models, rateLimit, budget, expiresAt, mcp, routing, routingPolicy, cache } = ak.spec;
  const rps = rateLimit?.requestsPerSecond;
  const policy: KeyPolicy = {
    name: ak.metadata.name ?? '',
    team,
    role: role ?? 'User',
    // A User key always bills its own team; an Admin (the platform team) may attribute a request
    // to any team by tag, though its records stay its own team's.
    tags: [
      ...(role === 'Admin' && !tags?.[TEAM_TAG] ? [] : [{ key: TEAM_TAG, value: team }]),
      ...Object.entries(tags ?? {})
        .filter(([k]) => k !== TEAM_TAG)
        .map(([key, value]) => ({ key, value })),
    ],
    ...(models ? { models: new Set(models) } : {}),
    ...(rps ? { rate: { requestsPerSecond: rps, burst: rateLimit?.burst ?? Math.max(1, Math.ceil(2 * rps)) } } : {}),
    ...(rateLimit?.tokensPerMinute ? { tokensPerMinute: rateLimit.tokensPerMinute } : {}),
    ...(budget ? { budget } : {}),
    ...(expiresAt ? { expiresAt: Date.parse(expiresAt) } : {}),
    ...(mcp ? { mcp } : {}),
    ...(routing && routing !== 'Inherit' ? { routing } : {}),
    ...(routingPolicy ? { routingPolicy } : {}),
    ...(cache ? { cache } : {}),
  };
  return policy;
}

export class ApiKeys {
  /** Keys of a keys file or the legacy Secret, by hex digest. */
  private legacy: Map<string, KeyPolicy>;
  /** Keys of ApiKey objects, by hex digest. */
  private managed = new Map<string, KeyPolicy>();
  /** What each ApiKey grants, by name: the profiles tokens map to (issued or not). */
  private profiles = new Map<string, KeyPolicy>();
  /** Issuers whose tokens stand for a profile's grants; none: only keys are taken. */
  identities: Identities | undefined;

  constructor(digests: Buffer[] = []) {
    this.legacy = new Map(digests.map((d) => [d.toString('hex'), UNRESTRICTED]));
  }

  /** Keys given in clear text are hashed at once; the text is not kept. */
  static fromKeys(keys: string[]): ApiKeys {
    return new ApiKeys(keys.map(sha256));
  }

  /**
   * Lines of a keys file or Secret value: `sha256:<64 hex>` for a digest, anything else is a
   * key in clear text; blank lines and `#` comments are skipped.
   */
  static parse(text: string): ApiKeys {
    const digests: Buffer[] = [];
    for (const raw of text.split('\n')) {
      const line = raw.trim();
      if (!line || line.startsWith('#')) continue;
      const m = /^sha256:([0-9a-f]{64})$/i.exec(line);
      digests.push(m?.[1] ? Buffer.from(m[1].toLowerCase(), 'hex') : sha256(line));
    }
    return new ApiKeys(digests);
  }

  /** Swaps the legacy key set (a Secret or file update) without disturbing requests in flight. */
  replace(next: ApiKeys): void {
    this.legacy = next.legacy;
  }

  /** Takes both key sets of another (standalone: a reloaded config). */
  replaceAll(next: ApiKeys): void {
    this.legacy = next.legacy;
    this.managed = next.managed;
    this.profiles = next.profiles;
  }

  /** Swaps the ApiKey-issued keys, and the profiles: every ApiKey's grants by name. */
  setManaged(entries: Array<{ digest: string; policy: KeyPolicy }>, profiles: KeyPolicy[] = []): void {
    this.managed = new Map(entries.map((e) => [e.digest, e.policy]));
    this.profiles = new Map(profiles.map((p) => [p.name, p]));
  }

  /** An ApiKey's grants by name (a token's profile). */
  profile(name: string): KeyPolicy | undefined {
    return this.profiles.get(name);
  }

  /** The ApiKey-issued policies (budgets and status reports walk them). */
  policies(): KeyPolicy[] {
    return [...this.managed.values()];
  }

  get size(): number {
    return this.legacy.size + this.managed.size;
  }

  verify(key: string): Caller | undefined {
    return this.verifyDigest(sha256Hex(key));
  }

  /** A key by its SHA-256 (hex), computed once by a caller that may need it again (a token's lookup). */
  verifyDigest(hex: string): Caller | undefined {
    const policy = this.managed.get(hex) ?? this.legacy.get(hex);
    return policy ? { keyHashPrefix: hex.slice(0, 12), policy } : undefined;
  }
}

/**
 * Standalone keys: ApiKey documents with their digest in status.digest, or given by a line
 * `<ApiKey name>=<key or sha256:hex>` of the keys file; the file's other lines are keys of no
 * ApiKey (unrestricted), as before ApiKeys.
 */
export function standaloneKeys(apiKeys: ApiKey[], keysFile: string): ApiKeys {
  const names = new Set(apiKeys.map((k) => k.metadata.name ?? ''));
  const named = new Map<string, string>();
  const legacy: string[] = [];
  for (const raw of keysFile.split('\n')) {
    const m = /^\s*([a-z0-9]([-a-z0-9]*[a-z0-9])?)=(\S+)\s*$/.exec(raw);
    if (m?.[1] && m[3] && names.has(m[1])) {
      const digest = /^sha256:([0-9a-f]{64})$/i.exec(m[3])?.[1]?.toLowerCase() ?? sha256(m[3]).toString('hex');
      named.set(m[1], `sha256:${digest}`);
    } else legacy.push(raw);
  }
  const keys = ApiKeys.parse(legacy.join('\n'));
  keys.setManaged(
    apiKeys.flatMap((ak) => {
      const digest = named.get(ak.metadata.name ?? '') ?? ak.status?.digest;
      return policyOf({ ...ak, status: { ...ak.status, ...(digest ? { digest } : {}) } }) ?? [];
    }),
    apiKeys.map(keyPolicy),
  );
  return keys;
}

/** The key from `X-API-Key` (in-cluster) or `Authorization: Bearer` (gateway). */
function presentedKey(headers: {
  apiKey?: string | undefined;
  authorization?: string | undefined;
}): string | undefined {
  if (headers.apiKey?.trim()) return headers.apiKey.trim();
  const m = /^Bearer\s+(\S+)\s*$/i.exec(headers.authorization ?? '');
  return m?.[1];
}

/**
 * The caller of a request: its key, or (with IdentityProviders) the token it presents in its place.
 * A JWT-shaped credential is still looked up as a key first, so no key a keys file holds changes
 * meaning.
 */
export async function authenticate(
  keys: ApiKeys,
  headers: { apiKey?: string | undefined; authorization?: string | undefined },
  now: number = Date.now(),
): Promise<Caller | ProxyError> {
  const key = presentedKey(headers);
  if (!key) {
    return new ProxyError(
      401,
      'authentication_error',
      'missing_api_key',
      keys.identities?.size
        ? 'no credentials: send an API key as "X-API-Key: <key>", or a key or a token of a trusted issuer as "Authorization: Bearer <token>"'
        : 'no API key: send it as "X-API-Key: <key>" or "Authorization: Bearer <key>"',
    );
  }
  const digest = sha256Hex(key);
  let caller: Caller | ProxyError | undefined = keys.verifyDigest(digest);
  if (!caller && keys.identities?.size && looksLikeJwt(key)) {
    caller = await keys.identities.authenticate(key, digest, (name) => keys.profile(name));
    if (caller instanceof ProxyError) return caller;
  }
  if (!caller) {
    return new ProxyError(401, 'authentication_error', 'invalid_api_key', 'the API key is not valid for this gateway');
  }
  return expiredRefusal(caller.policy, now) ?? caller;
}

/** The 401 of a key (or a profile) past its expiresAt; undefined while it lives. */
export function expiredRefusal(policy: KeyPolicy, now: number): ProxyError | undefined {
  const expiresAt = policy.expiresAt;
  if (expiresAt === undefined || expiresAt > now) return undefined;
  return new ProxyError(
    401,
    'authentication_error',
    'expired_api_key',
    `the API key expired at ${new Date(expiresAt).toISOString()}; ask for a new one`,
  );
}

/**
 * Whose rate a caller spends: an ApiKey's by its name (a rotated key keeps its rates), a token's
 * caller its own by subject (a profile many people share is not one bucket for all of them).
 */
export const rateBucketOf = (caller: Caller): string =>
  caller.identity
    ? `sub:${caller.keyHashPrefix}`
    : caller.policy.name
      ? `key:${caller.policy.name}`
      : caller.keyHashPrefix;

/** Usage, analytics and tags a caller may read: its own team's, or all for an Admin. */
export const readScope = (caller: Caller): { team?: string } =>
  caller.policy.role === 'Admin' ? {} : { team: caller.policy.team };

/** Whether the key may call a model (its allow-list, if it has one). */
export const mayCall = (policy: KeyPolicy, model: string): boolean => !policy.models || policy.models.has(model);
