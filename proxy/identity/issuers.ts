import type { JWTPayload } from 'jose';
import type { ClusterIssuerApi, TokenReviewStatus } from '../../crds/identity/cluster-issuer.js';
import { discoveryUrl } from '../../crds/identity/get-json.js';
import type { IdentityProvider } from '../../crds/identity-provider.js';
import { KeySet } from './key-set.js';
import { Refused } from './refusals.js';
import { verifyToken } from './verify-token.js';

/**
 * The issuers an IdentityProvider trusts, one module per way of checking its tokens: an OpenID
 * provider (discovery, then its JWKS), the cluster's ServiceAccount issuer by the API server's
 * discovery, or by TokenReview. Each knows its issuer URL and turns a token into verified claims
 * or the check that failed.
 */

export interface TrustedIssuer {
  /** The iss its tokens carry; undefined while it cannot be learnt (the API server unreachable). */
  issuerUrl(): Promise<string | undefined>;
  verify(token: string): Promise<JWTPayload | Refused>;
}

export interface IssuerDeps {
  cluster?: ClusterIssuerApi;
  /** GETs a JSON document of an OpenID provider (its discovery document, its JWKS). */
  getJson: (url: string) => Promise<unknown>;
  now?: () => number;
  onError?: (provider: string, what: string, err: unknown) => void;
}

/** How long a failed discovery is not tried again. */
const DISCOVERY_COOLDOWN_MS = 30_000;

/** A discovery document's field, fetched once it succeeds and at most every cooldown until then. */
function discovered(
  fetchDoc: () => Promise<unknown>,
  field: string,
  now: () => number,
  onError: (err: unknown) => void,
) {
  let value: string | undefined;
  let triedAt = Number.NEGATIVE_INFINITY;
  let inFlight: Promise<string | undefined> | undefined;
  return (): Promise<string | undefined> => {
    if (inFlight) return inFlight;
    if (value !== undefined || now() - triedAt < DISCOVERY_COOLDOWN_MS) return Promise.resolve(value);
    inFlight ??= (async () => {
      triedAt = now();
      try {
        const got = ((await fetchDoc()) as Record<string, unknown> | undefined)?.[field];
        if (typeof got !== 'string' || got === '') throw new Error(`the discovery document has no ${field}`);
        value = got;
      } catch (err) {
        onError(err);
      }
      return value;
    })().finally(() => {
      inFlight = undefined;
    });
    return inFlight;
  };
}

function oidcIssuer(ip: IdentityProvider, deps: IssuerDeps): TrustedIssuer {
  const name = ip.metadata.name ?? '';
  const now = deps.now ?? Date.now;
  const issuer = (ip.spec.issuer ?? '').replace(/\/$/, '');
  const jwksUri = ip.spec.jwksUri
    ? () => Promise.resolve(ip.spec.jwksUri)
    : discovered(
        () => deps.getJson(discoveryUrl(issuer)),
        'jwks_uri',
        now,
        (err) => deps.onError?.(name, 'discovery', err),
      );
  const keys = new KeySet({
    fetch: async () => {
      const uri = await jwksUri();
      if (!uri) throw new Error('no jwks_uri (discovery failed)');
      return deps.getJson(uri);
    },
    now,
    onError: (err) => deps.onError?.(name, 'keys', err),
  });
  const checks = {
    issuer: ip.spec.issuer ?? '',
    audiences: ip.spec.audiences,
    clockSkewSeconds: ip.spec.clockSkewSeconds ?? 60,
    keys: keys.resolve,
    now,
  };
  return { issuerUrl: () => Promise.resolve(checks.issuer), verify: (token) => verifyToken(token, checks) };
}

function clusterIssuer(ip: IdentityProvider, deps: IssuerDeps): TrustedIssuer {
  const name = ip.metadata.name ?? '';
  const now = deps.now ?? Date.now;
  const cluster = deps.cluster;
  if (!cluster) {
    return { issuerUrl: () => Promise.resolve(undefined), verify: async () => new Refused('unknown_issuer') };
  }
  const issuerUrl = discovered(
    () => cluster.discovery(),
    'issuer',
    now,
    (err) => deps.onError?.(name, 'discovery', err),
  );
  const audiences = ip.spec.audiences;
  const keys = new KeySet({ fetch: () => cluster.jwks(), now, onError: (err) => deps.onError?.(name, 'keys', err) });
  const signed = async (token: string): Promise<JWTPayload | Refused> => {
    const issuer = await issuerUrl();
    if (!issuer) return new Refused('issuer_unreachable');
    return verifyToken(token, {
      issuer,
      audiences,
      clockSkewSeconds: ip.spec.clockSkewSeconds ?? 60,
      keys: keys.resolve,
      now,
    });
  };
  if (ip.spec.kubernetes?.verify !== 'TokenReview') return { issuerUrl, verify: signed };
  // The signature first: a forged token costs the API server nothing.
  return {
    issuerUrl,
    verify: async (token) => {
      const claims = await signed(token);
      return claims instanceof Refused ? claims : reviewed(token, claims, audiences, cluster);
    },
  };
}

/**
 * TokenReview of a token whose signature verified: the API server checks it again, and that its pod
 * and ServiceAccount still exist.
 */
async function reviewed(
  token: string,
  claims: JWTPayload,
  audiences: string[],
  cluster: ClusterIssuerApi,
): Promise<JWTPayload | Refused> {
  let status: TokenReviewStatus;
  try {
    status = await cluster.review(token, audiences);
  } catch {
    return new Refused('issuer_unreachable');
  }
  const username = status.user?.username;
  if (!status.authenticated || !username) return new Refused('token_rejected');
  if (!(status.audiences ?? []).some((a) => audiences.includes(a))) return new Refused('wrong_audience');
  return { ...claims, sub: username };
}

/** The issuer of an IdentityProvider, by how its tokens are checked. */
export const trustedIssuer = (ip: IdentityProvider, deps: IssuerDeps): TrustedIssuer =>
  ip.spec.kubernetes ? clusterIssuer(ip, deps) : oidcIssuer(ip, deps);
