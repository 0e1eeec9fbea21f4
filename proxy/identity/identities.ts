import { decodeJwt, type JWTPayload } from 'jose';
import type { IdentityProvider } from '../../crds/identity-provider.js';
import { type Caller, type KeyPolicy, sha256Hex } from '../access/auth.js';
import type { ProxyError } from '../endpoints/errors.js';
import { isTagValue, type Tag } from '../endpoints/tags.js';
import { type IssuerDeps, type TrustedIssuer, trustedIssuer } from './issuers.js';
import { type Identity, identityOf } from './profiles.js';
import type { AuthorizationServer } from './protected-resource.js';
import { Refused, refusal } from './refusals.js';
import { MAX_TOKEN_BYTES } from './token-shape.js';

/**
 * Callers who present a token instead of a key: the IdentityProviders' issuers, and the tokens
 * already verified (by a digest of the token, until it expires, at most MAX_VERIFIED of them), so
 * that a caller's next request costs a hash and a lookup, not a signature check. The grants are
 * looked up on every request, so an edited ApiKey profile applies at once. Records name the
 * caller by a hash of issuer and subject (the key hash prefix), and by name only where the
 * provider says so.
 */

const MAX_VERIFIED = 10_000;
/** TokenReview answers are kept at most this long (the point of it is noticing revoked tokens). */
const REVIEW_TTL_MS = 60_000;
const USER_TAG = 'user';

/** A caller an issuer vouched for: kept by token digest, or sealed in a pages session cookie. */
export interface Verified {
  provider: string;
  /** The provider's spec it was verified under (Provider.version): a changed provider checks again. */
  version: string;
  identity: Identity;
  subjectHash: string;
  userTag?: Tag;
  /** Epoch ms. */
  until: number;
}

interface Provider {
  resource: IdentityProvider;
  issuer: TrustedIssuer;
  /** A digest of the spec: an unchanged provider keeps its issuer (and its cached keys) across updates. */
  version: string;
}

export class Identities {
  private providers: Provider[] = [];
  private verified = new Map<string, Verified>();
  private readonly now: () => number;

  constructor(private readonly deps: IssuerDeps) {
    this.now = deps.now ?? Date.now;
  }

  /** Swaps the providers; tokens verified under a changed or removed one are checked again. */
  set(resources: IdentityProvider[]): void {
    const old = new Map(this.providers.map((p) => [p.resource.metadata.name ?? '', p]));
    const unchanged = new Set<string>();
    this.providers = [...resources]
      .sort((a, b) => (a.metadata.name ?? '').localeCompare(b.metadata.name ?? ''))
      .map((resource) => {
        const name = resource.metadata.name ?? '';
        const version = sha256Hex(JSON.stringify(resource.spec)).slice(0, 16);
        const kept = old.get(name);
        if (kept?.version !== version) return { resource, version, issuer: trustedIssuer(resource, this.deps) };
        unchanged.add(name);
        return { ...kept, resource };
      });
    for (const [digest, v] of this.verified) if (!unchanged.has(v.provider)) this.verified.delete(digest);
  }

  /**
   * Whether what a provider verified still stands: the provider is there, unchanged since. A token
   * verified while the providers changed is checked again; a pages session of a changed one ends.
   */
  current(v: Verified): boolean {
    return this.providers.some((p) => p.resource.metadata.name === v.provider && p.version === v.version);
  }

  get size(): number {
    return this.providers.length;
  }

  /** The provider the pages sign people in with: the first (by name) with spec.pageSignIn. */
  pageSignIn(): { resource: IdentityProvider; version: string } | undefined {
    const p = this.providers.find((x) => x.resource.spec.pageSignIn && x.resource.spec.issuer);
    return p ? { resource: p.resource, version: p.version } : undefined;
  }

  /** Where MCP clients sign in: the first provider (by name) with spec.mcpAuthorization. */
  authorizationServer(): AuthorizationServer | undefined {
    const p = this.providers.find((x) => x.resource.spec.mcpAuthorization && x.resource.spec.issuer);
    return p?.resource.spec.issuer
      ? { issuer: p.resource.spec.issuer, scopes: p.resource.spec.mcpAuthorization?.scopes ?? [] }
      : undefined;
  }

  /** The caller a token stands for under the profiles' grants, or the 401 or 403 that says why not. */
  async authenticate(
    token: string,
    /** The token's SHA-256 (hex), as the key lookup before this computed it. */
    digest: string,
    profileOf: (name: string) => KeyPolicy | undefined,
  ): Promise<Caller | ProxyError> {
    if (Buffer.byteLength(token) > MAX_TOKEN_BYTES) return refusal('token_too_large');
    let found = this.verified.get(digest);
    if (found && found.until <= this.now()) {
      this.verified.delete(digest);
      found = undefined;
    }
    if (!found) {
      let fresh = await this.verify(token);
      // The providers changed while it was checked (a fetch, a review): once more, under the new ones.
      if (!(fresh instanceof Refused) && !this.current(fresh)) fresh = await this.verify(token);
      if (fresh instanceof Refused) return refusal(fresh.code);
      if (!this.current(fresh)) return refusal('issuer_unreachable');
      found = fresh;
      this.remember(digest, found);
    }
    return callerOf(found, profileOf);
  }

  private remember(digest: string, v: Verified): void {
    if (this.verified.size >= MAX_VERIFIED) {
      const oldest = this.verified.keys().next().value;
      if (oldest !== undefined) this.verified.delete(oldest);
    }
    this.verified.set(digest, v);
  }

  /** The first provider of the token's issuer that verifies it and gives it a profile; else the first refusal. */
  private async verify(token: string): Promise<Verified | Refused> {
    let iss: unknown;
    try {
      iss = decodeJwt(token).iss;
    } catch {
      return new Refused('malformed_token');
    }
    if (typeof iss !== 'string') return new Refused('invalid_claims');
    let first: Refused | undefined;
    for (const p of this.providers) {
      // Exactly as jose checks it (OpenID Connect compares the issuer as a string).
      if ((await p.issuer.issuerUrl()) !== iss) continue;
      const claims = await p.issuer.verify(token);
      if (claims instanceof Refused) {
        first ??= claims;
        continue;
      }
      const expMs = typeof claims.exp === 'number' ? claims.exp * 1000 : this.now();
      const reviewed = p.resource.spec.kubernetes?.verify === 'TokenReview';
      const until = reviewed ? Math.min(expMs, this.now() + REVIEW_TTL_MS) : expMs;
      const found = identified(p.resource, p.version, iss, claims, until);
      if (found instanceof Refused) {
        first ??= found;
        continue;
      }
      return found;
    }
    return first ?? new Refused('unknown_issuer');
  }
}

const withTag = (policy: KeyPolicy, tag: Tag): KeyPolicy => ({ ...policy, tags: [...policy.tags, tag] });

/**
 * Verified claims of a provider as the caller records name: its profile, a hash of issuer and
 * subject, and the tag user:<subject> where the provider allows names; valid until `until`.
 */
export function identified(
  provider: IdentityProvider,
  version: string,
  iss: string,
  claims: JWTPayload,
  until: number,
): Verified | Refused {
  const identity = identityOf(provider.spec, claims);
  if (identity instanceof Refused) return identity;
  const subjectHash = sha256Hex(`${iss}\n${identity.sub}`).slice(0, 12);
  const byName = provider.spec.subject?.inRecords === 'Name';
  return {
    provider: provider.metadata.name ?? '',
    version,
    identity,
    subjectHash,
    ...(byName
      ? { userTag: { key: USER_TAG, value: isTagValue(identity.subject) ? identity.subject : subjectHash } }
      : {}),
    until,
  };
}

/** The caller of a verified identity under its profile's current grants; 403 when the profile is gone. */
export function callerOf(found: Verified, profileOf: (name: string) => KeyPolicy | undefined): Caller | ProxyError {
  const profile = profileOf(found.identity.profile);
  if (!profile) return refusal('profile_not_found');
  return {
    keyHashPrefix: found.subjectHash,
    policy: found.userTag && !profile.tags.some((t) => t.key === USER_TAG) ? withTag(profile, found.userTag) : profile,
    identity: { provider: found.provider },
  };
}
