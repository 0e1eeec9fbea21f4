import { describe, expect, it } from 'vitest';
import { challenge, originOf, resourceMetadata } from './protected-resource.js';

const AS = { issuer: 'https://sso.example.com', scopes: ['openid', 'mcp'] };

describe('the gateway as a protected resource', () => {
  it('names the URL the client called: Host, or what an ingress forwards', () => {
    expect(originOf({ host: 'gw.internal:443' })).toBe('http://gw.internal:443');
    expect(
      originOf({ host: 'gw.internal', 'x-forwarded-host': 'gateway.example.com', 'x-forwarded-proto': 'https' }),
    ).toBe('https://gateway.example.com');
    expect(originOf(new Headers({ host: '[::1]:8080' }))).toBe('http://[::1]:8080');
    // Anything but a host and port is not taken: it would reach a header and a URL.
    expect(originOf({ host: 'gw', 'x-forwarded-host': 'evil.example", error="x' })).toBe('http://gw');
    expect(originOf({ host: 'a b' })).toBe('http://localhost');
  });

  it('challenges with the metadata URL, and invalid_token only when a credential was refused', () => {
    expect(challenge('https://gw', '/mcp', AS)).toBe(
      'Bearer resource_metadata="https://gw/.well-known/oauth-protected-resource/mcp", scope="openid mcp"',
    );
    expect(challenge('https://gw', '/mcp/fs', AS, 'token_expired')).toBe(
      'Bearer resource_metadata="https://gw/.well-known/oauth-protected-resource/mcp/fs", scope="openid mcp", error="invalid_token"',
    );
    expect(challenge('https://gw', '/mcp', AS, 'missing_api_key')).not.toContain('error=');
    expect(challenge('https://gw', '/mcp', undefined, 'token_expired')).toBe('Bearer');
  });

  it('describes the resource at its MCP path', () => {
    expect(resourceMetadata('https://gw', '/mcp/fs', { ...AS, scopes: [] })).toEqual({
      resource: 'https://gw/mcp/fs',
      authorization_servers: ['https://sso.example.com'],
      bearer_methods_supported: ['header'],
      resource_name: 'platform-ai-optimizer MCP gateway',
    });
  });
});
