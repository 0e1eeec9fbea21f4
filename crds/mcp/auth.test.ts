import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { McpServer, McpServerAuth } from '../mcp-server.js';
import type { SecretLookup } from '../providers/aws-credentials.js';
import { MCP_CLIENT_SECRET_KEY, MCP_TOKEN_KEY, McpCredentialError, mcpAuthProvider, mcpSecretName } from './auth.js';

/**
 * spec.auth as the SDK's AuthProvider: Bearer from the Secret, OAuth client credentials against
 * a real token endpoint on a local port (the request the SDK sends, the token kept until it
 * expires, a refusal or an unreachable endpoint read as a reason), and the errors of a missing
 * Secret naming its key but never the Secret.
 */

const SECRET = 'mcp-creds-7f3a';
const b64 = (s: string) => Buffer.from(s).toString('base64');

const server = (auth: McpServerAuth | undefined, url = 'https://tools.example.com/mcp'): McpServer => ({
  apiVersion: 'ai.platform/v1beta1',
  kind: 'McpServer',
  metadata: { name: 'tools', namespace: 'platform-agent' },
  spec: { url, ...(auth ? { auth } : {}) },
});

const secrets = (data: Record<string, string> | undefined, forbidden = false) => {
  const lookups: string[] = [];
  const lookup = (name: string): SecretLookup | undefined => {
    lookups.push(name);
    if (forbidden) return { forbidden: true };
    return data ? { data } : undefined;
  };
  return { lookup, lookups };
};

async function credentialError(p: Promise<unknown>): Promise<McpCredentialError> {
  try {
    await p;
  } catch (err) {
    if (err instanceof McpCredentialError) return err;
    throw err;
  }
  throw new Error('no error');
}

describe('mcpAuthProvider: None and Bearer', () => {
  it('has no provider for method None or no auth', () => {
    expect(mcpAuthProvider(server(undefined), () => undefined)).toBeUndefined();
    expect(mcpAuthProvider(server({ method: 'None' }), () => undefined)).toBeUndefined();
    expect(mcpSecretName(server({ method: 'None' }))).toBeUndefined();
  });

  it("sends the Secret's token, read at each request (a rotated Secret applies at once)", async () => {
    let data: Record<string, string> = { [MCP_TOKEN_KEY]: b64('tok-1\n') };
    const auth = mcpAuthProvider(server({ method: 'Bearer', secretRef: { name: SECRET } }), (name) =>
      name === SECRET ? { data } : undefined,
    );
    expect(await auth?.token()).toBe('tok-1');
    data = { [MCP_TOKEN_KEY]: b64('tok-2') };
    expect(await auth?.token()).toBe('tok-2');
    expect(mcpSecretName(server({ method: 'Bearer', secretRef: { name: SECRET } }))).toBe(SECRET);
  });

  const missing: Array<[string, ReturnType<typeof secrets>]> = [
    ['a Secret that does not exist', secrets(undefined)],
    ['a Secret without the key', secrets({ other: b64('x') })],
    ['an empty value', secrets({ [MCP_TOKEN_KEY]: '' })],
  ];
  it.each(missing)('%s is SecretMissing, naming the key and not the Secret', async (_, s) => {
    const auth = mcpAuthProvider(server({ method: 'Bearer', secretRef: { name: SECRET } }), s.lookup);
    const err = await credentialError(auth?.token() ?? Promise.resolve());
    expect(err.reason).toBe('SecretMissing');
    expect(err.message).toContain(MCP_TOKEN_KEY);
    expect(err.message).not.toContain(SECRET);
    expect(s.lookups).toEqual([SECRET]);
  });

  it('a Secret this component may not read is SecretNotReadable, with the fix', async () => {
    const auth = mcpAuthProvider(server({ method: 'Bearer', secretRef: { name: SECRET } }), secrets({}, true).lookup);
    const err = await credentialError(auth?.token() ?? Promise.resolve());
    expect(err.reason).toBe('SecretNotReadable');
    expect(err.message).toContain('providerSecrets');
    expect(err.message).not.toContain(SECRET);
  });
});

interface TokenRequest {
  authorization: string | undefined;
  contentType: string | undefined;
  form: URLSearchParams;
}

let endpoint: Server;
let tokenUrl: string;
const requests: TokenRequest[] = [];
let answer: { status: number; body: object } = { status: 200, body: {} };
let issued = 0;

const body = (req: IncomingMessage): Promise<string> =>
  new Promise((resolve) => {
    let text = '';
    req.on('data', (c: Buffer) => {
      text += c.toString();
    });
    req.on('end', () => resolve(text));
  });

beforeAll(async () => {
  endpoint = createServer(async (req, res) => {
    requests.push({
      authorization: req.headers.authorization,
      contentType: req.headers['content-type'],
      form: new URLSearchParams(await body(req)),
    });
    issued += 1;
    const out =
      answer.status === 200 ? { access_token: `at-${issued}`, token_type: 'Bearer', ...answer.body } : answer.body;
    res.writeHead(answer.status, { 'content-type': 'application/json' }).end(JSON.stringify(out));
  });
  await new Promise<void>((resolve) => endpoint.listen(0, '127.0.0.1', resolve));
  tokenUrl = `http://127.0.0.1:${(endpoint.address() as AddressInfo).port}/oauth2/token`;
});

afterAll(() => {
  endpoint.closeAllConnections();
  endpoint.close();
});

beforeEach(() => {
  requests.length = 0;
  issued = 0;
  answer = { status: 200, body: { expires_in: 3600 } };
});

const CLIENT_SECRET = 'cs-very-secret-91b2';
const oauth = (extra: Partial<McpServerAuth> = {}): McpServerAuth => ({
  method: 'OAuthClientCredentials',
  secretRef: { name: SECRET },
  tokenUrl,
  clientId: 'gateway',
  ...extra,
});
const clientSecret = secrets({ [MCP_CLIENT_SECRET_KEY]: b64(CLIENT_SECRET) });

describe('mcpAuthProvider: OAuth client credentials', () => {
  it('posts the client-credentials grant with HTTP Basic client auth, the scopes and the resource', async () => {
    const auth = mcpAuthProvider(server(oauth({ scopes: ['tools.read', 'tools.call'] })), clientSecret.lookup);
    expect(await auth?.token()).toBe('at-1');
    expect(requests).toHaveLength(1);
    const [req] = requests;
    expect(req?.contentType).toContain('application/x-www-form-urlencoded');
    expect(req?.authorization).toBe(`Basic ${b64(`gateway:${CLIENT_SECRET}`)}`);
    expect(req?.form.get('grant_type')).toBe('client_credentials');
    expect(req?.form.get('scope')).toBe('tools.read tools.call');
    // RFC 8707: the token is asked for the server it is sent to, unless the spec names another resource.
    expect(req?.form.get('resource')).toBe('https://tools.example.com/mcp');
    expect(req?.form.get('client_secret')).toBeNull();
  });

  it('asks for spec.auth.resource when set, and no scope when none is listed', async () => {
    const auth = mcpAuthProvider(server(oauth({ resource: 'https://tools.example.com' })), clientSecret.lookup);
    await auth?.token();
    expect(requests[0]?.form.get('resource')).toBe('https://tools.example.com');
    expect(requests[0]?.form.has('scope')).toBe(false);
  });

  it('keeps the token until shortly before it expires; concurrent requests share one fetch', async () => {
    let now = 1_000_000;
    const auth = mcpAuthProvider(server(oauth()), clientSecret.lookup, { now: () => now });
    const first = await Promise.all([auth?.token(), auth?.token(), auth?.token()]);
    expect(first).toEqual(['at-1', 'at-1', 'at-1']);
    now += 3_000_000;
    expect(await auth?.token()).toBe('at-1');
    // 3600 s less the minute before expiry.
    now = 1_000_000 + 3_540_000;
    expect(await auth?.token()).toBe('at-2');
    expect(requests).toHaveLength(2);
  });

  it('fetches a new token after the server refused the one it had (401)', async () => {
    const auth = mcpAuthProvider(server(oauth()), clientSecret.lookup);
    expect(await auth?.token()).toBe('at-1');
    await auth?.onUnauthorized?.({
      response: new Response(null, { status: 401 }),
      serverUrl: new URL('https://tools.example.com/mcp'),
      fetchFn: fetch,
    });
    expect(await auth?.token()).toBe('at-2');
  });

  it('a refusal is TokenRefused with the OAuth error code, never the client secret', async () => {
    answer = { status: 401, body: { error: 'invalid_client', error_description: 'bad secret' } };
    const auth = mcpAuthProvider(server(oauth()), clientSecret.lookup);
    const err = await credentialError(auth?.token() ?? Promise.resolve());
    expect(err.reason).toBe('TokenRefused');
    expect(err.message).toContain('invalid_client');
    expect(err.message).not.toContain(CLIENT_SECRET);
  });

  it('a missing client secret is SecretMissing naming clientSecret, and nothing is posted', async () => {
    const auth = mcpAuthProvider(server(oauth()), secrets({ [MCP_TOKEN_KEY]: b64('x') }).lookup);
    const err = await credentialError(auth?.token() ?? Promise.resolve());
    expect(err.reason).toBe('SecretMissing');
    expect(err.message).toContain(MCP_CLIENT_SECRET_KEY);
    expect(err.message).not.toContain(SECRET);
    expect(requests).toHaveLength(0);
  });

  it('an endpoint that does not answer is TokenEndpointUnreachable', async () => {
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const port = (closed.address() as AddressInfo).port;
    await new Promise((resolve) => closed.close(resolve));
    const auth = mcpAuthProvider(server(oauth({ tokenUrl: `http://127.0.0.1:${port}/token` })), clientSecret.lookup);
    const err = await credentialError(auth?.token() ?? Promise.resolve());
    expect(err.reason).toBe('TokenEndpointUnreachable');
    expect(err.message).toContain('ECONNREFUSED');
  });

  it('a plain-http endpoint off this host is AuthMisconfigured: the secret never leaves in clear text', async () => {
    const auth = mcpAuthProvider(server(oauth({ tokenUrl: 'http://auth.example.com/token' })), clientSecret.lookup);
    const err = await credentialError(auth?.token() ?? Promise.resolve());
    expect(err.reason).toBe('AuthMisconfigured');
    expect(err.message).toContain('https');
  });
});
