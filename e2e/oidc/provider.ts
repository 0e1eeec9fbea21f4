import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { exportJWK, generateKeyPair, type JWK } from 'jose';
import Provider from 'oidc-provider';

/**
 * A real OpenID provider on loopback: oidc-provider (npm, an OpenID Certified implementation),
 * with a client that gets JWT access tokens by client credentials (a CI job, a service), for the
 * resource the gateway is. Its signing keys can be rotated, and it can be stopped and started on
 * the same port (an outage).
 */

/** The audience the provider writes into access tokens for the gateway. */
export const GATEWAY_AUDIENCE = 'platform-ai-optimizer';
const RESOURCE = 'urn:platform-ai-optimizer';

export interface OidcClient {
  clientId: string;
  clientSecret: string;
  /** Claims written into its access tokens (groups, a profile claim). */
  claims: Record<string, unknown>;
}

export interface OidcProvider {
  issuer: string;
  /** A fresh access token of a client, by client credentials at the token endpoint. */
  token: (clientId: string) => Promise<string>;
  /** Publishes a new signing key first in the set (new tokens use it); the old stays published. */
  rotate: () => Promise<void>;
  /** Stops answering (the port closed) until start(). */
  stop: () => Promise<void>;
  start: () => Promise<void>;
  close: () => Promise<void>;
}

export async function startOidcProvider(clients: OidcClient[]): Promise<OidcProvider> {
  const keys: JWK[] = [await signingKey()];
  // The port first, since the issuer URL names it.
  let server: Server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  const issuer = `http://127.0.0.1:${port}`;
  const byId = new Map(clients.map((c) => [c.clientId, c]));

  const build = () =>
    new Provider(issuer, {
      clients: clients.map((c) => ({
        client_id: c.clientId,
        client_secret: c.clientSecret,
        grant_types: ['client_credentials'],
        redirect_uris: [],
        response_types: [],
        scope: 'api',
      })),
      jwks: { keys },
      scopes: ['api'],
      ttl: { ClientCredentials: 300 },
      features: {
        devInteractions: { enabled: false },
        clientCredentials: { enabled: true },
        resourceIndicators: {
          enabled: true,
          defaultResource: () => RESOURCE,
          useGrantedResource: () => true,
          getResourceServerInfo: () => ({
            scope: 'api',
            audience: GATEWAY_AUDIENCE,
            accessTokenTTL: 300,
            accessTokenFormat: 'jwt',
            jwt: { sign: { alg: 'RS256' } },
          }),
        },
      },
      extraTokenClaims: (_ctx, token) => byId.get(String((token as { clientId?: unknown }).clientId))?.claims,
    });

  const listen = async () => {
    const app = build().callback();
    // No kept-alive connections: a client's next request after stop() and start() opens a new one.
    server = createServer((req, res) => {
      res.setHeader('connection', 'close');
      return app(req, res);
    });
    await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
  };
  const stop = () =>
    new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    });
  await listen();

  return {
    issuer,
    token: async (clientId) => {
      const client = byId.get(clientId);
      if (!client) throw new Error(`no client ${clientId}`);
      const res = await fetch(`${issuer}/token`, {
        method: 'POST',
        headers: {
          'content-type': 'application/x-www-form-urlencoded',
          authorization: `Basic ${Buffer.from(`${client.clientId}:${client.clientSecret}`).toString('base64')}`,
        },
        body: new URLSearchParams({ grant_type: 'client_credentials', scope: 'api', resource: RESOURCE }),
      });
      const body = (await res.json()) as { access_token?: string; error?: string; error_description?: string };
      if (!body.access_token) throw new Error(`token endpoint: ${res.status} ${body.error}: ${body.error_description}`);
      return body.access_token;
    },
    rotate: async () => {
      keys.unshift(await signingKey());
      await stop();
      await listen();
    },
    stop,
    start: listen,
    close: stop,
  };
}

async function signingKey(): Promise<JWK> {
  const pair = await generateKeyPair('RS256', { extractable: true });
  return {
    ...(await exportJWK(pair.privateKey)),
    kid: `k${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}`,
    alg: 'RS256',
    use: 'sig',
  };
}
