import {
  type AuthorizationServerMetadata,
  type AuthProvider,
  ClientCredentialsProvider,
  type FetchLike,
  fetchToken,
  InsecureTokenEndpointError,
  OAuthError,
} from '@modelcontextprotocol/client';
import { type McpServer, mcpServerUrl } from '../mcp-server.js';
import type { SecretLookup } from '../providers/aws-credentials.js';

/**
 * How the gateway and the operator authenticate to an MCP server (spec.auth), as the MCP SDK's
 * AuthProvider that its Streamable HTTP transport asks for a bearer token before each request and
 * tells of a 401. Shared by the operator (discovery) and the proxy (calls), so both send the same
 * credentials. The Secret is read at each token fetch, never kept, so a rotated Secret applies
 * from the next request; an OAuth token is kept in memory until shortly before it expires or the
 * server refuses it.
 *
 * OAuthClientCredentials posts the client-credentials grant to spec.auth.tokenUrl through the
 * SDK's own ClientCredentialsProvider and fetchToken (client_secret_basic, RFC 8707 resource).
 * The SDK's auth() flow is not used: it discovers the authorization server from the MCP server's
 * protected-resource metadata, which a server behind a plain token endpoint does not publish;
 * the spec names the endpoint instead.
 */

/** The Secret key of a Bearer server's token. */
export const MCP_TOKEN_KEY = 'token';
/** The Secret key of an OAuthClientCredentials server's client secret. */
export const MCP_CLIENT_SECRET_KEY = 'clientSecret';

/** Why no credential could be had; the same words as the McpServer's Ready condition reasons. */
export type McpCredentialReason =
  | 'SecretMissing'
  | 'SecretNotReadable'
  | 'TokenRefused'
  | 'TokenEndpointUnreachable'
  | 'AuthMisconfigured';

/**
 * No credential: the message names the Secret's key or the token endpoint's answer, never the
 * Secret's name or a value (it reaches conditions, logs and callers' errors).
 */
export class McpCredentialError extends Error {
  override readonly name = 'McpCredentialError';
  constructor(
    readonly reason: McpCredentialReason,
    message: string,
  ) {
    super(message);
  }
}

export type SecretOf = (name: string) => SecretLookup | undefined;

/** A token is fetched again this long before it expires. */
const REFRESH_BEFORE_EXPIRY_MS = 60_000;
/** How long a token whose answer has no expires_in is used, unless the server refuses it first. */
const UNDATED_TOKEN_MS = 15 * 60_000;

/** One key of the referenced Secret, decoded; a typed error naming the key when absent. */
function secretValue(server: McpServer, secret: SecretOf, key: string): string {
  const name = server.spec.auth?.secretRef?.name;
  if (!name) {
    throw new McpCredentialError('AuthMisconfigured', `spec.auth.secretRef names no Secret holding the key ${key}`);
  }
  const found = secret(name);
  if (found?.forbidden) {
    throw new McpCredentialError(
      'SecretNotReadable',
      "the Secret named in spec.auth.secretRef may not be read: list it in the chart's providerSecrets",
    );
  }
  const encoded = found?.data?.[key];
  const value = encoded ? Buffer.from(encoded, 'base64').toString('utf8').trim() : '';
  if (!value) {
    throw new McpCredentialError(
      'SecretMissing',
      `the Secret named in spec.auth.secretRef is missing or has no value under the key ${key}`,
    );
  }
  return value;
}

/** Bearer: the Secret's token, read before each request. */
function bearer(server: McpServer, secret: SecretOf): AuthProvider {
  return { token: async () => secretValue(server, secret, MCP_TOKEN_KEY) };
}

/**
 * The token endpoint as the SDK's metadata: only token_endpoint is used by fetchToken; the issuer
 * is the endpoint itself, which the credentials are bound to (the SDK refuses to send them
 * elsewhere).
 */
const endpointMetadata = (tokenUrl: string): AuthorizationServerMetadata => ({
  issuer: tokenUrl,
  authorization_endpoint: tokenUrl,
  token_endpoint: tokenUrl,
  response_types_supported: [],
  grant_types_supported: ['client_credentials'],
});

/** What a failed token request means for the Ready condition: refused, unreachable or misconfigured. */
function tokenFailure(err: unknown): McpCredentialError {
  if (err instanceof InsecureTokenEndpointError) {
    return new McpCredentialError('AuthMisconfigured', 'spec.auth.tokenUrl must be https (or a loopback address)');
  }
  if (err instanceof OAuthError) {
    // The code is the authorization server's (invalid_client, invalid_scope...): no credential in it.
    return new McpCredentialError('TokenRefused', `the token endpoint refused the client credentials: ${err.code}`);
  }
  const e = err as { name?: string; cause?: { code?: unknown } };
  const code = typeof e.cause?.code === 'string' ? e.cause.code : (e.name ?? 'error');
  return new McpCredentialError('TokenEndpointUnreachable', `the token endpoint could not be reached (${code})`);
}

interface Held {
  token: string;
  refreshAt: number;
}

/**
 * OAuth client credentials: a token from spec.auth.tokenUrl, kept until shortly before it expires;
 * concurrent requests share one fetch, and a 401 drops it so the transport's retry fetches anew.
 */
function clientCredentials(server: McpServer, secret: SecretOf, opts: McpAuthOptions): AuthProvider {
  const now = opts.now ?? Date.now;
  const auth = server.spec.auth ?? { method: 'OAuthClientCredentials' };
  let held: Held | undefined;
  let pending: Promise<string> | undefined;
  const fetchOnce = async (): Promise<string> => {
    const tokenUrl = auth.tokenUrl;
    const clientId = auth.clientId;
    if (!tokenUrl || !clientId) {
      throw new McpCredentialError('AuthMisconfigured', 'OAuthClientCredentials needs spec.auth.tokenUrl and clientId');
    }
    const scope = auth.scopes?.length ? auth.scopes.join(' ') : undefined;
    const provider = new ClientCredentialsProvider({
      clientId,
      clientSecret: secretValue(server, secret, MCP_CLIENT_SECRET_KEY),
      expectedIssuer: tokenUrl,
      ...(scope ? { scope } : {}),
    });
    const resource = auth.resource ?? mcpServerUrl(server);
    const started = now();
    try {
      const tokens = await fetchToken(provider, tokenUrl, {
        metadata: endpointMetadata(tokenUrl),
        ...(resource ? { resource } : {}),
        ...(scope ? { scope } : {}),
        ...(opts.fetch ? { fetchFn: opts.fetch } : {}),
      });
      const lifetime = tokens.expires_in ? tokens.expires_in * 1000 : UNDATED_TOKEN_MS;
      const margin = Math.min(REFRESH_BEFORE_EXPIRY_MS, lifetime / 2);
      held = { token: tokens.access_token, refreshAt: started + lifetime - margin };
      return tokens.access_token;
    } catch (err) {
      throw err instanceof McpCredentialError ? err : tokenFailure(err);
    }
  };
  return {
    async token() {
      if (held && now() < held.refreshAt) return held.token;
      pending ??= fetchOnce().finally(() => {
        pending = undefined;
      });
      return pending;
    },
    async onUnauthorized() {
      held = undefined;
    },
  };
}

export interface McpAuthOptions {
  /** The token request's fetch; the platform's by default. */
  fetch?: FetchLike;
  /** The clock tokens expire by (tests). */
  now?: () => number;
}

/**
 * The AuthProvider of a server's spec.auth; undefined for method None (or no auth). `secret`
 * looks a Secret up by name in the server's namespace (the operator's NamedSecrets, the proxy's
 * cluster source). One provider per server and process: it holds the server's OAuth token.
 */
export function mcpAuthProvider(
  server: McpServer,
  secret: SecretOf,
  opts: McpAuthOptions = {},
): AuthProvider | undefined {
  const method = server.spec.auth?.method ?? 'None';
  if (method === 'Bearer') return bearer(server, secret);
  if (method === 'OAuthClientCredentials') return clientCredentials(server, secret, opts);
  return undefined;
}

/** The Secret a server's auth reads, if any (what the operator and the proxy watch by name). */
export const mcpSecretName = (server: McpServer): string | undefined =>
  server.spec.auth?.method && server.spec.auth.method !== 'None' ? server.spec.auth.secretRef?.name : undefined;
