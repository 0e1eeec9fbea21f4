import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { exportJWK, generateKeyPair, type JWK } from 'jose';
import Provider from 'oidc-provider';

/**
 * A real OpenID provider on loopback: oidc-provider (npm, an OpenID Certified implementation).
 * Clients get JWT access tokens for the resource the gateway is: services by client credentials,
 * people by authorization code with PKCE (its development sign-in form takes any login; accounts
 * say which groups each has), and clients may register themselves (RFC 7591, as MCP clients do).
 * Its signing keys can be rotated, and it can be stopped and started on the same port (an outage).
 */

/** The audience the provider writes into access tokens for the gateway. */
export const GATEWAY_AUDIENCE = 'platform-ai-optimizer';
const RESOURCE = 'urn:platform-ai-optimizer';

export interface OidcClient {
  clientId: string;
  /** A service's secret (client credentials); none: a public client of people signing in, at redirectUris. */
  clientSecret?: string;
  /** Loopback redirect URIs of a public client (any port, RFC 8252). */
  redirectUris?: string[];
  /** Claims written into its access tokens (groups, a profile claim). */
  claims: Record<string, unknown>;
}

/** A person's account: the groups its tokens carry. */
export type Accounts = Record<string, { groups: string[] }>;

export interface OidcProvider {
  issuer: string;
  /**
   * A person signing in at an authorization URL, as a browser would: the sign-in form with
   * `login`, then the consent; returns the URL the provider sent the browser back to (the client's
   * redirect URI with the code).
   */
  signIn: (authorizationUrl: string, login: string) => Promise<URL>;
  /** A fresh access token of a client, by client credentials at the token endpoint. */
  token: (clientId: string) => Promise<string>;
  /** Publishes a new signing key first in the set (new tokens use it); the old stays published. */
  rotate: () => Promise<void>;
  /** Stops answering (the port closed) until start(). */
  stop: () => Promise<void>;
  start: () => Promise<void>;
  close: () => Promise<void>;
}

export async function startOidcProvider(clients: OidcClient[], accounts: Accounts = {}): Promise<OidcProvider> {
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
      clients: clients.map((c) =>
        c.clientSecret
          ? {
              client_id: c.clientId,
              client_secret: c.clientSecret,
              grant_types: ['client_credentials'],
              redirect_uris: [],
              response_types: [],
              scope: 'api',
            }
          : {
              client_id: c.clientId,
              application_type: 'native',
              token_endpoint_auth_method: 'none',
              grant_types: ['authorization_code'],
              response_types: ['code'],
              redirect_uris: c.redirectUris ?? [],
            },
      ),
      jwks: { keys },
      scopes: ['openid', 'api', 'offline_access'],
      claims: { openid: ['sub', 'groups'] },
      conformIdTokenClaims: false,
      findAccount: (_ctx, id) => ({ accountId: id, claims: () => ({ sub: id, groups: accounts[id]?.groups ?? [] }) }),
      ttl: { ClientCredentials: 300 },
      features: {
        devInteractions: { enabled: true },
        registration: { enabled: true },
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
      extraTokenClaims: (_ctx, token) => {
        const { accountId, clientId } = token as { accountId?: string; clientId?: string };
        return accountId ? { groups: accounts[accountId]?.groups ?? [] } : byId.get(String(clientId))?.claims;
      },
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
    signIn: (url, login) => signIn(url, login),
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

/** Follows the provider's redirects with a cookie jar, posting the sign-in and consent forms on the way. */
async function signIn(authorizationUrl: string, login: string): Promise<URL> {
  const cookies = new Map<string, string>();
  let url = new URL(authorizationUrl);
  let form: URLSearchParams | undefined;
  const origin = url.origin;
  for (let hop = 0; hop < 20; hop++) {
    if (url.origin !== origin) return url;
    const res = await fetch(url, {
      method: form ? 'POST' : 'GET',
      redirect: 'manual',
      headers: {
        cookie: [...cookies].map(([k, v]) => `${k}=${v}`).join('; '),
        ...(form ? { 'content-type': 'application/x-www-form-urlencoded' } : {}),
      },
      ...(form ? { body: form } : {}),
    });
    for (const c of res.headers.getSetCookie()) {
      const [pair] = c.split(';');
      const eq = pair?.indexOf('=') ?? -1;
      if (pair && eq > 0) cookies.set(pair.slice(0, eq), pair.slice(eq + 1));
    }
    const location = res.headers.get('location');
    if (location) {
      url = new URL(location, url);
      form = undefined;
      continue;
    }
    // A form of the interaction: the sign-in (any password), else the consent.
    const page = await res.text();
    if (!url.pathname.startsWith('/interaction/')) throw new Error(`sign-in stopped at ${url.pathname}: ${res.status}`);
    form = page.includes('name="login"')
      ? new URLSearchParams({ prompt: 'login', login, password: 'any' })
      : new URLSearchParams({ prompt: 'consent' });
  }
  throw new Error('sign-in did not finish');
}
