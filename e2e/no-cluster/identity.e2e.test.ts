import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Anthropic from '@anthropic-ai/sdk';
import {
  Client,
  ClientCredentialsProvider,
  type OAuthClientProvider,
  StreamableHTTPClientTransport,
  UnauthorizedError,
} from '@modelcontextprotocol/client';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type OllamaDouble, startOllamaDouble } from '../doubles/ollama.js';
import { type RunningServer, startEverything } from '../mcp/servers.js';
import { GATEWAY_AUDIENCE, type OidcProvider, startOidcProvider } from '../oidc/provider.js';
import { bin, claudeSandbox, installClients } from '../support/agent-clients.js';
import { launchChromium } from '../support/browser.js';
import { type ProxyProcess, routedModel, standaloneFiles, startProxyProcess } from '../support/proxy-process.js';

/**
 * Callers signed in with the company's OpenID provider, no static key: a real provider
 * (oidc-provider) issues JWT access tokens by client credentials, and the proxy process trusts it
 * through an IdentityProvider. The official SDKs call with the token as their API key; the token's
 * groups choose the ApiKey whose grants apply; records carry the subject; the provider's key
 * rotation and an outage of it behave as the IdentityProvider reference says.
 */

const ADMIN_KEY = 'sk-identity-admin-0000000000000000000000';
const MODEL = 'llama3.1:8b';
const OTHER = 'qwen2.5:0.5b';
let oidc: OidcProvider;
let double: OllamaDouble;
let proxy: ProxyProcess;
let dir: string;
let everything: RunningServer;

beforeAll(async () => {
  oidc = await startOidcProvider(
    [
      { clientId: 'ci-ml', clientSecret: 'ci-ml-secret-0000000000000000000000', claims: { groups: ['ml'] } },
      { clientId: 'ci-stranger', clientSecret: 'ci-stranger-secret-000000000000000000', claims: { groups: ['sales'] } },
      { clientId: 'mcp-agent', clientSecret: 'mcp-agent-secret-00000000000000000000', claims: { groups: ['ml'] } },
      { clientId: 'gateway-pages', redirectUris: ['http://127.0.0.1/ui/auth/callback'], claims: {} },
    ],
    { alice: { groups: ['ml'] } },
  );
  everything = await startEverything();
  double = await startOllamaDouble({ models: [MODEL, OTHER], record: false });
  dir = mkdtempSync(join(tmpdir(), 'pao-identity-'));
  const files = standaloneFiles(
    dir,
    [
      routedModel(MODEL, double.url),
      `apiVersion: ai.platform/v1beta1
kind: ModelDeployment
metadata: { name: qwen }
spec: { model: "${OTHER}", serviceName: qwen, endpoint: "${double.url}" }
`,
      `apiVersion: ai.platform/v1beta1
kind: McpServer
metadata: { name: everything }
spec: { url: "${everything.url}" }
`,
      `apiVersion: ai.platform/v1beta1
kind: ApiKey
metadata: { name: team-ml }
spec: { team: ml, models: ["${MODEL}"] }
`,
      `apiVersion: ai.platform/v1beta1
kind: IdentityProvider
metadata: { name: company-sso }
spec:
  issuer: ${oidc.issuer}
  audiences: [${GATEWAY_AUDIENCE}]
  subject: { inRecords: Name }
  mcpAuthorization: { scopes: [api] }
  pageSignIn: { clientId: gateway-pages, scopes: [openid] }
  profiles:
    - apiKey: team-ml
      claim: { name: groups, values: [ml] }
`,
    ],
    `${ADMIN_KEY}\n`,
  );
  proxy = await startProxyProcess([...files, '--usage-db', join(dir, 'usage.db')]);
}, 60_000);

afterAll(async () => {
  await proxy?.stop('SIGTERM');
  await oidc?.close();
  await double?.close();
  await everything?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const openai = (apiKey: string) => new OpenAI({ baseURL: `${proxy.base}/openai/v1`, apiKey, maxRetries: 0 });
const chat = (apiKey: string, model = MODEL) =>
  openai(apiKey).chat.completions.create({ model, messages: [{ role: 'user', content: 'hello' }], max_tokens: 8 });

async function statusOf(call: Promise<unknown>): Promise<{ status: number; code?: string; type?: string }> {
  try {
    await call;
    return { status: 200 };
  } catch (err) {
    const e = err as { status?: number; code?: string; type?: string; error?: { error?: { type?: string } } };
    return { status: e.status ?? 0, ...(e.code ? { code: e.code } : {}), ...(e.type ? { type: e.type } : {}) };
  }
}

describe('a signed-in caller of the OpenID provider', () => {
  it("calls with its token through the OpenAI SDK and gets its profile's grants", async () => {
    const token = await oidc.token('ci-ml');
    const answer = await chat(token);
    expect(answer.choices[0]?.message.content).toBeTruthy();
    // The profile's allow-list holds for the token: listed and callable models are the profile's.
    const listed = (await openai(token).models.list()).data.map((m) => m.id);
    expect(listed).toEqual([MODEL]);
    expect(await statusOf(chat(token, OTHER))).toMatchObject({ status: 403, code: 'model_not_allowed' });
    // The management API takes the same token: a User profile reads its team's usage only.
    await new Promise((r) => setTimeout(r, 600));
    const own = await fetch(`${proxy.base}/v1/usage?groupBy=team`, { headers: { authorization: `Bearer ${token}` } });
    expect(own.status).toBe(200);
    const groups = ((await own.json()) as { groups: Array<{ group: string }> }).groups.map((g) => g.group);
    expect(groups).toEqual(['ml']);
    // Records carry the subject by name, as the provider allows: usage per person.
    const perUser = await fetch(`${proxy.base}/v1/usage?tag=user:ci-ml`, { headers: { 'x-api-key': ADMIN_KEY } });
    expect(((await perUser.json()) as { totals: { requests: number } }).totals.requests).toBeGreaterThanOrEqual(1);
  });

  it('is refused in each dialect when its groups match no profile, or its token is not this issuer’s', async () => {
    const stranger = await oidc.token('ci-stranger');
    expect(await statusOf(chat(stranger))).toMatchObject({ status: 403, code: 'no_profile' });
    const anthropic = new Anthropic({ baseURL: `${proxy.base}/anthropic`, apiKey: stranger, maxRetries: 0 });
    const refused = await statusOf(
      anthropic.messages.create({ model: MODEL, max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] }),
    );
    expect(refused.status).toBe(403);
    const raw = await fetch(`${proxy.base}/anthropic/v1/messages`, {
      method: 'POST',
      headers: { 'x-api-key': stranger, 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
      body: JSON.stringify({ model: MODEL, max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] }),
    });
    const body = (await raw.json()) as { type: string; error: { type: string; message: string } };
    expect(body).toMatchObject({ type: 'error', error: { type: 'permission_error' } });
    expect(body.error.message).not.toContain(stranger.split('.')[2]);
    // A token of another signer with the same issuer and kid is a forgery.
    const [h, p] = stranger.split('.');
    const forged = `${h}.${p}.${Buffer.from('not the signature').toString('base64url')}`;
    expect(await statusOf(chat(forged))).toMatchObject({ status: 401, code: 'invalid_signature' });
  });

  it('signs an MCP client in through the OAuth discovery the MCP spec defines (RFC 9728), no static key', async () => {
    // Unauthenticated: a 401 whose challenge names the gateway's Protected Resource Metadata.
    const bare = await fetch(`${proxy.base}/mcp/everything`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' }),
    });
    expect(bare.status).toBe(401);
    const metadataUrl = `${proxy.base}/.well-known/oauth-protected-resource/mcp/everything`;
    expect(bare.headers.get('www-authenticate')).toBe(`Bearer resource_metadata="${metadataUrl}", scope="api"`);
    expect(await (await fetch(metadataUrl)).json()).toMatchObject({
      resource: `${proxy.base}/mcp/everything`,
      authorization_servers: [oidc.issuer],
      scopes_supported: ['api'],
    });
    // The official SDK's OAuth client follows it: the metadata, the provider's, its token endpoint.
    const client = new Client({ name: 'e2e-oauth', version: '1.0.0' });
    const authProvider = new ClientCredentialsProvider({
      clientId: 'mcp-agent',
      clientSecret: 'mcp-agent-secret-00000000000000000000',
      expectedIssuer: oidc.issuer,
    });
    await client.connect(new StreamableHTTPClientTransport(new URL(`${proxy.base}/mcp/everything`), { authProvider }));
    try {
      const echoed = await client.callTool({ name: 'echo', arguments: { message: 'signed in' } });
      expect(JSON.stringify(echoed.content)).toContain('signed in');
    } finally {
      await client.close();
    }
    // The tool call is recorded for the signed-in client, by name.
    await new Promise((r) => setTimeout(r, 600));
    const tools = await fetch(`${proxy.base}/v1/usage/tools?tag=user:mcp-agent`, {
      headers: { 'x-api-key': ADMIN_KEY },
    });
    expect(((await tools.json()) as { totals: { calls: number } }).totals.calls).toBe(1);
  });

  it('signs a person in for an MCP client: registration, authorization code with PKCE, the SDK reconnecting', async () => {
    const person = new PersonSigningIn('alice');
    const url = new URL(`${proxy.base}/mcp/everything`);
    const client = new Client({ name: 'e2e-person', version: '1.0.0' });
    // The first connection sends the person to the provider and stops there, as in a real client.
    await expect(
      client.connect(new StreamableHTTPClientTransport(url, { authProvider: person })),
    ).rejects.toBeInstanceOf(UnauthorizedError);
    const back = person.redirectedTo;
    expect(back?.searchParams.get('code')).toBeTruthy();
    const transport = new StreamableHTTPClientTransport(url, { authProvider: person });
    await transport.finishAuth(back?.searchParams ?? new URLSearchParams());
    await client.connect(transport);
    try {
      const echoed = await client.callTool({ name: 'echo', arguments: { message: 'hello alice' } });
      expect(JSON.stringify(echoed.content)).toContain('hello alice');
    } finally {
      await client.close();
    }
    await new Promise((r) => setTimeout(r, 600));
    const tools = await fetch(`${proxy.base}/v1/usage/tools?tag=user:alice`, { headers: { 'x-api-key': ADMIN_KEY } });
    expect(((await tools.json()) as { totals: { calls: number } }).totals.calls).toBe(1);
  });

  it('sends Claude Code to the provider: `claude mcp list` finds where to sign in; with a token it connects', async () => {
    // Run asynchronously: the provider answers Claude Code's discovery from this process.
    const { home, claude } = claudeSandbox(installClients());
    try {
      await claude('mcp', 'add', '--transport', 'http', 'gateway', `${proxy.base}/mcp`);
      const token = await oidc.token('mcp-agent');
      await claude(
        'mcp',
        'add',
        '--transport',
        'http',
        'signed-in',
        `${proxy.base}/mcp`,
        '--header',
        `Authorization: Bearer ${token}`,
      );
      const listed = await claude('mcp', 'list');
      expect(listed).toMatch(/gateway: .* - ! Needs authentication/);
      expect(listed).toMatch(/signed-in: .* - \S Connected/);
    } finally {
      rmSync(home, { recursive: true, force: true });
    }
  }, 120_000);

  it('signs a person in to the pages in Chromium: their team only, a session that reads and does nothing else', async () => {
    // A request of team ml for the page to show (records reach the store in batches).
    await chat(await oidc.token('ci-ml'));
    await new Promise((r) => setTimeout(r, 600));
    const browser = await launchChromium();
    try {
      const page = await (await browser.newContext()).newPage();
      await page.goto(`${proxy.base}/ui/usage`);
      await page.getByTestId('sign-in').click();
      // The provider's own sign-in and consent pages.
      await page.locator('input[name="login"]').fill('alice');
      await page.locator('input[name="password"]').fill('any');
      await page.locator('button[type="submit"]').click();
      await page.locator('button[type="submit"]').click();
      await page.waitForURL(`${proxy.base}/ui/usage`);
      await expect.poll(() => page.getByTestId('signed-in').textContent()).toBe('Signed in as alice (team ml)');
      expect(await page.getByTestId('api-key').isVisible()).toBe(false);
      // The page read the usage with the session: team ml's requests, no error.
      await expect
        .poll(async () => Number((await page.getByTestId('total-requests').textContent())?.replace(/\D/g, '')))
        .toBeGreaterThan(0);
      expect(await page.getByTestId('error').isVisible()).toBe(false);
      // The audit trail on the same page: this sign-in, by name, for team ml.
      await expect
        .poll(() => page.getByTestId('audit-table').textContent())
        .toMatch(/alice \(token\)signed-inSession pages/);
      const cookies = await page.context().cookies(proxy.base);
      const session = cookies.find((c) => c.name === 'pao_session');
      expect(session).toMatchObject({ httpOnly: true, sameSite: 'Lax' });
      // The cookie reads the pages' data, and is no credential for the model endpoints.
      const asCookie = { cookie: `pao_session=${session?.value}` };
      const byTeam = await fetch(`${proxy.base}/v1/usage?groupBy=team`, { headers: asCookie });
      expect(byTeam.status).toBe(200);
      expect(((await byTeam.json()) as { groups: Array<{ group: string }> }).groups.map((g) => g.group)).toEqual([
        'ml',
      ]);
      const chatWithCookie = await fetch(`${proxy.base}/openai/v1/chat/completions`, {
        method: 'POST',
        headers: { ...asCookie, 'content-type': 'application/json' },
        body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }] }),
      });
      expect(chatWithCookie.status).toBe(401);
      await page.getByTestId('sign-out').click();
      await expect.poll(() => page.getByTestId('sign-in').isVisible()).toBe(true);
    } finally {
      await browser.close();
    }
  }, 60_000);

  it('signs a person in through Claude Code itself: `claude mcp login --no-browser`, then Connected, no static key', async () => {
    const clients = installClients();
    const { home, env, claude } = claudeSandbox(clients);
    try {
      await claude('mcp', 'add', '--transport', 'http', 'gateway', `${proxy.base}/mcp`);
      // Headless: Claude Code prints the provider's URL and takes the address the browser came back to.
      // It asks for a terminal: script(1) gives it one (wide, so that the URL stays on one line).
      const login = spawn(
        'script',
        [
          '-qfec',
          `stty cols 4000 rows 50; exec '${bin(clients, 'claude')}' mcp login gateway --no-browser`,
          '/dev/null',
        ],
        { cwd: home, env },
      );
      let printed = '';
      login.stdout.on('data', (d: Buffer) => {
        printed += d.toString();
      });
      login.stderr.on('data', (d: Buffer) => {
        printed += d.toString();
      });
      const exited = new Promise<number | null>((resolve) => login.once('exit', resolve));
      const url = await expect
        .poll(() => /(https?:\/\/127\.0\.0\.1:\d+\/auth\?\S+)/.exec(printed)?.[1], { timeout: 60_000 })
        .toBeTruthy()
        .then(() => /(https?:\/\/127\.0\.0\.1:\d+\/auth\?\S+)/.exec(printed)?.[1] ?? '');
      const back = await oidc.signIn(url, 'alice');
      login.stdin.write(`${back.href}\r`);
      expect(await exited, printed).toBe(0);
      expect(await claude('mcp', 'list')).toMatch(/gateway: .* - \S Connected/);
    } finally {
      rmSync(home, { recursive: true, force: true });
    }
  }, 180_000);

  it('opens an MCP session with its token and no static key', async () => {
    const token = await oidc.token('ci-ml');
    const init = (auth: Record<string, string>) =>
      fetch(`${proxy.base}/mcp`, {
        method: 'POST',
        headers: { ...auth, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
        body: JSON.stringify({
          jsonrpc: '2.0',
          id: 1,
          method: 'initialize',
          params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'e2e', version: '1' } },
        }),
      });
    expect((await init({ authorization: `Bearer ${token}` })).status).toBe(200);
    expect((await init({})).status).toBe(401);
  });

  it("takes the provider's rotated key, and keeps known keys through its outage while refusing unknown ones", async () => {
    await oidc.rotate();
    const rotated = await oidc.token('ci-ml');
    // The keys are fetched again on an unknown kid at most every 10 s.
    await expect
      .poll(async () => (await statusOf(chat(rotated))).status, { timeout: 20_000, interval: 1_000 })
      .toBe(200);
    const known = await oidc.token('ci-ml');
    await oidc.rotate();
    const unknown = await oidc.token('ci-ml');
    await oidc.stop();
    try {
      expect(await statusOf(chat(known))).toMatchObject({ status: 200 });
      expect(await statusOf(chat(unknown))).toMatchObject({ status: 401, code: 'unknown_signing_key' });
    } finally {
      await oidc.start();
    }
    for (const t of [known, unknown]) expect(proxy.output()).not.toContain(t.split('.')[2]);
  }, 40_000);
});

/**
 * An MCP client a person uses (Claude Code, the Inspector), as the SDK's OAuthClientProvider: it
 * registers itself with the provider, sends the person to sign in, and keeps the tokens. The
 * browser is the provider's sign-in form, filled in for the person.
 */
class PersonSigningIn implements OAuthClientProvider {
  redirectedTo: URL | undefined;
  private info: Awaited<ReturnType<OAuthClientProvider['clientInformation']>>;
  private saved: Awaited<ReturnType<OAuthClientProvider['tokens']>>;
  private verifier = '';

  constructor(private readonly login: string) {}

  get redirectUrl(): string {
    return 'http://127.0.0.1:8765/callback';
  }
  get clientMetadata() {
    return {
      client_name: 'e2e MCP client',
      redirect_uris: [this.redirectUrl],
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: 'none',
    };
  }
  clientInformation() {
    return this.info;
  }
  saveClientInformation(info: NonNullable<Awaited<ReturnType<OAuthClientProvider['clientInformation']>>>): void {
    this.info = info;
  }
  tokens() {
    return this.saved;
  }
  saveTokens(tokens: NonNullable<Awaited<ReturnType<OAuthClientProvider['tokens']>>>): void {
    this.saved = tokens;
  }
  async redirectToAuthorization(authorizationUrl: URL): Promise<void> {
    this.redirectedTo = await oidc.signIn(authorizationUrl.href, this.login);
  }
  saveCodeVerifier(verifier: string): void {
    this.verifier = verifier;
  }
  codeVerifier(): string {
    return this.verifier;
  }
}
