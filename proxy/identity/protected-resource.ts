import type { IncomingHttpHeaders } from 'node:http';

/**
 * The gateway as an OAuth 2.0 protected resource for MCP clients (the MCP authorization spec):
 * its Protected Resource Metadata (RFC 9728) names the authorization server clients sign in with,
 * and a 401 at an MCP path points at that metadata in WWW-Authenticate. The resource is the MCP URL
 * the client called, as it called it (behind an ingress, X-Forwarded-Proto and -Host say how).
 */

export const METADATA_PATH = '/.well-known/oauth-protected-resource';

const HOST = /^[A-Za-z0-9.-]{1,253}(:[0-9]{1,5})?$|^\[[0-9A-Fa-f:.]{2,45}\](:[0-9]{1,5})?$/;

/** Where MCP clients sign in: an IdentityProvider with spec.mcpAuthorization. */
export interface AuthorizationServer {
  issuer: string;
  scopes: string[];
}

/** scheme://host the client used. */
export function originOf(headers: IncomingHttpHeaders | Headers): string {
  const get = (name: string): string | undefined => {
    const v = headers instanceof Headers ? headers.get(name) : headers[name];
    return (Array.isArray(v) ? v[0] : (v ?? undefined))?.split(',')[0]?.trim() || undefined;
  };
  const proto = get('x-forwarded-proto') === 'https' ? 'https' : 'http';
  // A host name, IPv4 or [IPv6] address and port only: nothing else reaches a header or a URL.
  const host = [get('x-forwarded-host'), get('host')].find((h) => h !== undefined && HOST.test(h)) ?? 'localhost';
  return `${proto}://${host}`;
}

/** The metadata URL of an MCP path (RFC 9728 section 3.1: the well-known path before the resource's). */
const metadataUrl = (origin: string, mcpPath: string): string => `${origin}${METADATA_PATH}${mcpPath}`;

/** The Protected Resource Metadata of the MCP resource at `resourcePath` (/mcp or /mcp/<server>). */
export function resourceMetadata(
  origin: string,
  resourcePath: string,
  as: AuthorizationServer,
): Record<string, unknown> {
  return {
    resource: `${origin}${resourcePath}`,
    authorization_servers: [as.issuer],
    bearer_methods_supported: ['header'],
    ...(as.scopes.length ? { scopes_supported: as.scopes } : {}),
    resource_name: 'platform-ai-optimizer MCP gateway',
  };
}

/**
 * The challenge of a 401 at an MCP path (RFC 6750 section 3, RFC 9728 section 5.1): invalid_token
 * when a credential was sent and refused; none when nothing was sent, as RFC 6750 asks.
 */
export function challenge(
  origin: string,
  mcpPath: string,
  as: AuthorizationServer | undefined,
  refusedCode?: string,
): string {
  if (!as) return 'Bearer';
  const params = [`resource_metadata="${metadataUrl(origin, mcpPath)}"`];
  if (as.scopes.length) params.push(`scope="${as.scopes.join(' ')}"`);
  if (refusedCode && refusedCode !== 'missing_api_key') params.push('error="invalid_token"');
  return `Bearer ${params.join(', ')}`;
}
