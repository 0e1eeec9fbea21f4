import { createLocalJWKSet, type JSONWebKeySet, type JWTVerifyGetKey } from 'jose';

/**
 * An issuer's signing keys (its JWKS), cached. They are fetched on first use, again on a token whose
 * kid they lack (at most once per cooldown, so a flood of made-up kids costs one fetch per 10 s), and
 * every maxAge. A failed fetch keeps what was known: known keys go on verifying through an outage of
 * the issuer, unknown ones fail closed. jose's remote set drops its keys when a refresh fails, so
 * the cache is ours and only the key matching is jose's.
 */

export interface KeySetOptions {
  /** The JWKS document (the issuer's jwks_uri, or the API server's /openid/v1/jwks). */
  fetch: () => Promise<unknown>;
  cooldownMs?: number;
  maxAgeMs?: number;
  now?: () => number;
  /** Told a fetch that failed (the log says which issuer). */
  onError?: (err: unknown) => void;
}

export class KeySet {
  private local: ReturnType<typeof createLocalJWKSet> | undefined;
  private kids = new Set<string>();
  private fetchedAt = Number.NEGATIVE_INFINITY;
  private triedAt = Number.NEGATIVE_INFINITY;
  private inFlight: Promise<void> | undefined;
  private readonly cooldownMs: number;
  private readonly maxAgeMs: number;
  private readonly now: () => number;

  constructor(private readonly opts: KeySetOptions) {
    this.cooldownMs = opts.cooldownMs ?? 10_000;
    this.maxAgeMs = opts.maxAgeMs ?? 600_000;
    this.now = opts.now ?? Date.now;
  }

  /** The key for a token's header, for jose's jwtVerify; throws jose's JWKSNoMatchingKey when none. */
  readonly resolve: JWTVerifyGetKey = async (header, token) => {
    // A fetch under way (the first, or one for a new kid) may bring this token's key: wait for it.
    if (this.inFlight) await this.inFlight;
    if (this.wantsFetch(header.kid)) await this.refresh();
    if (!this.local) throw new KeysUnavailable();
    return this.local(header, token);
  };

  /** How many keys are known (the operator's Ready message). */
  get size(): number {
    return this.kids.size;
  }

  private wantsFetch(kid: string | undefined): boolean {
    const now = this.now();
    if (now - this.triedAt < this.cooldownMs) return false;
    if (!this.local) return true;
    return now - this.fetchedAt >= this.maxAgeMs || (kid !== undefined && !this.kids.has(kid));
  }

  /** One fetch at a time; every caller waiting on it. */
  refresh(): Promise<void> {
    this.inFlight ??= this.fetchOnce().finally(() => {
      this.inFlight = undefined;
    });
    return this.inFlight;
  }

  private async fetchOnce(): Promise<void> {
    this.triedAt = this.now();
    try {
      const doc = await this.opts.fetch();
      const keys = (doc as { keys?: unknown } | undefined)?.keys;
      if (!Array.isArray(keys)) throw new Error('the JWKS document has no keys array');
      const jwks = { keys: keys.filter((k) => typeof k === 'object' && k !== null) } as JSONWebKeySet;
      this.local = createLocalJWKSet(jwks);
      this.kids = new Set(jwks.keys.flatMap((k) => (typeof k.kid === 'string' ? [k.kid] : [])));
      this.fetchedAt = this.now();
    } catch (err) {
      this.opts.onError?.(err);
    }
  }
}

/** No keys were ever fetched (the issuer unreachable since start). */
export class KeysUnavailable extends Error {
  override name = 'KeysUnavailable';
}
