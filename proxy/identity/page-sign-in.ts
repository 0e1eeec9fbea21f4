import type { Context, Hono } from 'hono';
import * as oidc from 'openid-client';
import type { IdentityProvider } from '../../crds/identity-provider.js';
import { type Caller, expiredRefusal, type KeyPolicy } from '../access/auth.js';
import type { GatewayAudit } from '../audit/gateway-audit.js';
import { ProxyError } from '../endpoints/errors.js';
import { remoteOf } from '../server/remote-address.js';
import { callerOf, type Identities, identified, type Verified } from './identities.js';
import { originOf } from './protected-resource.js';
import { Refused, refusal } from './refusals.js';

/**
 * Sign-in for the Usage and Analytics pages with the company's OpenID provider: authorization code
 * with PKCE as a public client (openid-client), the ID token's claims mapped to a profile as a
 * token's are, and the session an encrypted cookie (sealed with the key every replica shares, so
 * any replica takes it up). The cookie reads the pages' data only: the routes that take it are GET
 * reads, and SameSite=Lax keeps other sites' pages from sending it with their requests.
 */

export const SESSION_COOKIE = 'pao_session';
const FLOW_COOKIE = 'pao_signin';
const SESSION_MS = 8 * 3600_000;
const FLOW_MS = 10 * 60_000;
const CALLBACK_PATH = '/ui/auth/callback';
const DEFAULT_SCOPES = ['openid', 'profile', 'email'];
/** Discovery of the provider, kept this long per provider and client. */
const CONFIG_TTL_MS = 600_000;

/** What seals and opens the cookies: proxy/mcp/session.ts SessionSealer. */
interface Sealer {
  sealValue(value: unknown): string;
  openValue(token: string): unknown;
}

export interface PageSignInDeps {
  identities: () => Identities | undefined;
  sealer: Sealer;
  profileOf: (name: string) => KeyPolicy | undefined;
  now?: () => number;
  /** Sign-ins, sign-outs and refused sign-ins go to the audit trail. */
  audit?: GatewayAudit;
}

interface Flow {
  k: 'signin';
  provider: string;
  verifier: string;
  state: string;
  nonce: string;
  back: string;
  until: number;
}

interface Session {
  k: 'page';
  v: Verified;
}

const configs = new Map<string, { at: number; config: Promise<oidc.Configuration> }>();

/** The provider's configuration for the pages' client, discovered once per CONFIG_TTL_MS. */
function configOf(ip: IdentityProvider, now: number): Promise<oidc.Configuration> {
  const issuer = ip.spec.issuer ?? '';
  const clientId = ip.spec.pageSignIn?.clientId ?? '';
  const id = `${issuer}\n${clientId}`;
  const kept = configs.get(id);
  if (kept && now - kept.at < CONFIG_TTL_MS) return kept.config;
  // An http issuer is one the platform team configured on purpose (a provider inside the cluster).
  const insecure = issuer.startsWith('http:') ? { execute: [oidc.allowInsecureRequests] } : {};
  // The ID token's signature is checked too, not only trusted for coming over TLS.
  const config = oidc.discovery(new URL(issuer), clientId, undefined, oidc.None(), insecure).then((c) => {
    oidc.enableNonRepudiationChecks(c);
    return c;
  });
  configs.set(id, { at: now, config });
  config.catch(() => configs.delete(id));
  return config;
}

function cookieOf(header: string | undefined, name: string): string | undefined {
  for (const part of (header ?? '').split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}

function setCookie(name: string, value: string, origin: string, maxAgeMs: number, path = '/'): string {
  const secure = origin.startsWith('https:') ? '; Secure' : '';
  return `${name}=${value}; Path=${path}; Max-Age=${Math.floor(maxAgeMs / 1000)}; HttpOnly; SameSite=Lax${secure}`;
}

/** Only a page of this gateway is a place to come back to after signing in. */
const backTo = (path: string | undefined): string => (path && /^\/ui\/[a-z]+$/.test(path) ? path : '/ui/usage');

/** The caller of a pages session cookie, when it holds a live session of a provider still trusted. */
export function sessionCaller(cookieHeader: string | undefined, deps: PageSignInDeps): Caller | ProxyError | undefined {
  const raw = cookieOf(cookieHeader, SESSION_COOKIE);
  if (!raw) return undefined;
  const session = deps.sealer.openValue(raw) as Session | undefined;
  const now = deps.now?.() ?? Date.now();
  // Ended: its time is up, or its provider is gone or changed (a removed group rule applies at once).
  if (session?.k !== 'page' || !(session.v.until > now) || !deps.identities()?.current(session.v)) {
    return new ProxyError(401, 'authentication_error', 'session_expired', 'the pages session has ended; sign in again');
  }
  const caller = callerOf(session.v, deps.profileOf);
  return caller instanceof ProxyError ? caller : (expiredRefusal(caller.policy, now) ?? caller);
}

/** GET /ui/sign-in, GET /ui/auth/callback, POST /ui/sign-out, GET /ui/session. */
export function pageSignInRoutes<E extends { Variables: { requestId: string } }>(
  app: Hono<E>,
  deps: PageSignInDeps,
): void {
  const now = () => deps.now?.() ?? Date.now();

  app.get('/ui/session', (c) => {
    const caller = sessionCaller(c.req.header('cookie'), deps);
    const signIn = deps.identities()?.pageSignIn() ? '/ui/sign-in' : null;
    if (!caller || caller instanceof ProxyError) return c.json({ signedIn: false, signIn });
    const { team, role, name, tags } = caller.policy;
    const user = tags.find((t) => t.key === 'user')?.value ?? caller.keyHashPrefix;
    return c.json({ signedIn: true, user, team, role, profile: name });
  });

  app.get('/ui/sign-in', async (c) => {
    const ip = deps.identities()?.pageSignIn()?.resource;
    if (!ip)
      throw new ProxyError(
        404,
        'not_found_error',
        'sign_in_not_configured',
        'no IdentityProvider offers sign-in for the pages',
      );
    const origin = originOf(c.req.raw.headers);
    const config = await configOf(ip, now()).catch(() => {
      throw refusal('issuer_unreachable');
    });
    const flow: Flow = {
      k: 'signin',
      provider: ip.metadata.name ?? '',
      verifier: oidc.randomPKCECodeVerifier(),
      state: oidc.randomState(),
      nonce: oidc.randomNonce(),
      back: backTo(c.req.query('back')),
      until: now() + FLOW_MS,
    };
    const url = oidc.buildAuthorizationUrl(config, {
      redirect_uri: `${origin}${CALLBACK_PATH}`,
      scope: (ip.spec.pageSignIn?.scopes ?? DEFAULT_SCOPES).join(' '),
      code_challenge: await oidc.calculatePKCECodeChallenge(flow.verifier),
      code_challenge_method: 'S256',
      state: flow.state,
      nonce: flow.nonce,
    });
    c.header('set-cookie', setCookie(FLOW_COOKIE, deps.sealer.sealValue(flow), origin, FLOW_MS, '/ui/auth'));
    c.header('cache-control', 'no-store');
    return c.redirect(url.href, 302);
  });

  app.get(CALLBACK_PATH, async (c) => {
    try {
      return await callback(c);
    } catch (err) {
      if (err instanceof ProxyError) deps.audit?.refused(err, remoteOf(c));
      throw err;
    }
  });
  const callback = async (c: Context<E>) => {
    const origin = originOf(c.req.raw.headers);
    const flow = deps.sealer.openValue(cookieOf(c.req.header('cookie'), FLOW_COOKIE) ?? '') as Flow | undefined;
    const signIn = deps.identities()?.pageSignIn();
    const ip = signIn?.resource;
    if (flow?.k !== 'signin' || flow.until <= now() || !signIn || !ip || ip.metadata.name !== flow.provider) {
      throw new ProxyError(
        400,
        'invalid_request_error',
        'sign_in_expired',
        'this sign-in has expired or was not started here; sign in again',
      );
    }
    const config = await configOf(ip, now()).catch(() => {
      throw refusal('issuer_unreachable');
    });
    const query = new URL(c.req.url).search;
    let claims: oidc.IDToken | undefined;
    try {
      const tokens = await oidc.authorizationCodeGrant(config, new URL(`${origin}${CALLBACK_PATH}${query}`), {
        pkceCodeVerifier: flow.verifier,
        expectedState: flow.state,
        expectedNonce: flow.nonce,
        idTokenExpected: true,
      });
      claims = tokens.claims();
    } catch (err) {
      const why = err instanceof Error ? err.message.slice(0, 200) : 'the provider refused the sign-in';
      throw new ProxyError(401, 'authentication_error', 'sign_in_failed', `the sign-in did not complete: ${why}`);
    }
    const found = claims
      ? identified(ip, signIn.version, claims.iss, claims, now() + SESSION_MS)
      : new Refused('invalid_claims');
    if (found instanceof Refused) throw refusal(found.code);
    const caller = callerOf(found, deps.profileOf);
    if (!(caller instanceof ProxyError)) deps.audit?.signedIn(caller, remoteOf(c));
    const session: Session = { k: 'page', v: found };
    c.header('set-cookie', setCookie(SESSION_COOKIE, deps.sealer.sealValue(session), origin, SESSION_MS));
    c.header('set-cookie', setCookie(FLOW_COOKIE, '', origin, 0, '/ui/auth'), { append: true });
    return c.redirect(flow.back, 302);
  };

  app.post('/ui/sign-out', (c) => {
    const caller = sessionCaller(c.req.header('cookie'), deps);
    if (caller && !(caller instanceof ProxyError)) deps.audit?.signedOut(caller, remoteOf(c));
    c.header('set-cookie', setCookie(SESSION_COOKIE, '', originOf(c.req.raw.headers), 0));
    return c.body(null, 204);
  });
}
