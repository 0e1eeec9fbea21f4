import type { KubeClient } from '../kube/kube-client.js';

/** What a TokenReview says of a token. */
export interface TokenReviewStatus {
  authenticated?: boolean;
  user?: { username?: string };
  audiences?: string[];
  error?: string;
}

/** The API server as the ServiceAccount issuer: discovery, keys, and TokenReview. */
export interface ClusterIssuerApi {
  discovery(): Promise<unknown>;
  jwks(): Promise<unknown>;
  /** The TokenReview's status for a token and audiences. */
  review(token: string, audiences: string[]): Promise<TokenReviewStatus>;
}

/**
 * The API server as the ServiceAccount issuer, through the caller's own credentials (the proxy's,
 * the operator's): its discovery
 * document and keys (which Kubernetes lets every ServiceAccount read, by the default binding of
 * system:service-account-issuer-discovery) and TokenReview (which the chart grants the proxy).
 * The keys are read from the API server itself, never from the jwks_uri it advertises, which may
 * name an address outside the cluster.
 */
export function clusterIssuerApi(client: KubeClient): ClusterIssuerApi {
  return {
    discovery: () => client.request('GET', '/.well-known/openid-configuration'),
    jwks: () => client.request('GET', '/openid/v1/jwks', { accept: 'application/jwk-set+json, application/json' }),
    review: async (token, audiences) => {
      const review = await client.request<{ status?: TokenReviewStatus }>(
        'POST',
        '/apis/authentication.k8s.io/v1/tokenreviews',
        { body: { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenReview', spec: { token, audiences } } },
      );
      return review.status ?? {};
    },
  };
}
