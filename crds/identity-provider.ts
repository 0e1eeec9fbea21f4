import type { CommonStatus, Resource } from './meta.js';

/** Discovery checks signatures against the API server's keys; TokenReview asks the API server per new token. */
type KubernetesVerify = 'Discovery' | 'TokenReview';

/** Hashed: records carry a hash of the subject; Name: also the tag user:<subject>. */
type SubjectInRecords = 'Hashed' | 'Name';

/** A rule giving a token an ApiKey's grants when all its conditions hold. */
export interface IdentityProfile {
  apiKey: string;
  /** The claim is one of values, or a list claim contains one of them. */
  claim?: { name: string; values: string[] };
  /** A ServiceAccount token of this namespace (and one of these names, when given). */
  serviceAccount?: { namespace: string; names?: string[] };
}

export interface IdentityProviderSpec {
  /** An OpenID provider's issuer URL; exactly one of issuer and kubernetes. */
  issuer?: string;
  /** The cluster's ServiceAccount issuer, read from the API server's discovery. */
  kubernetes?: { verify?: KubernetesVerify };
  audiences: string[];
  jwksUri?: string;
  /** Defaults to 60. */
  clockSkewSeconds?: number;
  subject?: { claim?: string; inRecords?: SubjectInRecords };
  profiles?: IdentityProfile[];
  /** The pages' sign-in: a public client of this provider (authorization code with PKCE). */
  pageSignIn?: { clientId: string; scopes?: string[] };
  /** This provider is where MCP clients sign in (the gateway's RFC 9728 metadata names it). */
  mcpAuthorization?: { scopes?: string[] };
  /** A claim naming the ApiKey, one of allowed. */
  profileClaim?: { name: string; allowed: string[] };
}

export type IdentityProvider = Resource<'IdentityProvider', IdentityProviderSpec, CommonStatus>;
