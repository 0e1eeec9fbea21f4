import { Hono } from 'hono';
import { type ApiKeys, authenticate, type Caller, readScope } from '../access/auth.js';
import { type AuditRoutesDeps, auditRoutes } from '../audit/audit-routes.js';
import type { GatewayAudit } from '../audit/gateway-audit.js';
import type { CallerDialect } from '../endpoints/dialects.js';
import { ENDPOINTS } from '../endpoints/endpoints.js';
import { errorAnswer } from '../endpoints/error-answer.js';
import { internalError, ProxyError } from '../endpoints/errors.js';
import { type PageSignInDeps, pageSignInRoutes, sessionCaller } from '../identity/page-sign-in.js';
import { type AuthorizationServer, METADATA_PATH, originOf, resourceMetadata } from '../identity/protected-resource.js';
import { mcpPath } from '../mcp/mcp-gateway.js';
import { modelListRoutes } from '../models/model-lists.js';
import type { RoutingPolicies } from '../routing-policy/policies.js';
import type { RouteTable } from '../serving/routes.js';
import { storedResponseRoutes } from '../stored-responses/routes.js';
import type { StoredResponses } from '../stored-responses/stored-responses.js';
import type { Backends } from '../upstreams/backend.js';
import { usageRoutes } from '../usage/api.js';
import type { UsageReports } from '../usage/reports.js';
import { newRequestId } from './request-id.js';

/**
 * Every route of the front door other than the pipeline's endpoints: health and readiness, the
 * model lists, the usage and analytics APIs, the pages. A wrong method on a known path is a 405,
 * an unknown path a 404 naming what is served, each in the envelope of the API it is under.
 */

export interface RoutesDeps {
  keys: ApiKeys;
  routes: RouteTable;
  backends: Backends;
  /** How reports are answered; without them the usage APIs are not served. */
  reports?: UsageReports;
  /** Routes mounted as they are (the Usage and Analytics pages). */
  pages?: Hono;
  /** RoutingPolicies, whose `auto` names the model lists show. */
  policies?: RoutingPolicies;
  /** Stored Responses: GET, DELETE, input_items and cancel of /openai/v1/responses/{id}. */
  storedResponses?: StoredResponses;
  /** The pages' sign-in (proxy/identity/page-sign-in.ts): its routes, and its session cookie as a reader of the pages' data. */
  sessions?: PageSignInDeps;
  /** The audit trail: its rows, the gateway's own records, and who may write (proxy/audit/). */
  audit?: Omit<AuditRoutesDeps, 'reader' | 'audit'> & { gateway: GatewayAudit };
  /** Readiness: routes and keys loaded, not shutting down. */
  ready: () => boolean;
  onError?: (err: unknown, requestId: string) => void;
}

type Vars = { requestId: string };

/** The paths served and their method: another method there is a 405, not an unknown route. */
const KNOWN_PATHS = new Map([
  ...Object.values(ENDPOINTS).map((e) => [e.path, 'POST'] as const),
  ['/openai/v1/models', 'GET'],
  ['/v1/models/metadata', 'GET'],
]);

/** An API's prefix: the first segment of its endpoints' paths (/openai, /anthropic). */
const prefixOf = (path: string) => `/${path.split('/')[1] ?? ''}`;
/** Each prefix's dialect, from the first endpoint under it (the OpenAI ones share one envelope). */
const PREFIX_DIALECTS = new Map<string, CallerDialect>();
for (const e of Object.values(ENDPOINTS)) {
  if (!PREFIX_DIALECTS.has(prefixOf(e.path))) PREFIX_DIALECTS.set(prefixOf(e.path), e.dialect);
}

/** An error in the envelope of the API its path is under (/v1 and the rest in OpenAI's). */
const errorResponse = (err: ProxyError, requestId: string, path: string) => {
  const out = errorAnswer(err, requestId, PREFIX_DIALECTS.get(prefixOf(path)) ?? 'openai-chat');
  return new Response(out.body, { status: out.status, headers: out.headers });
};

function notFound(method: string, path: string): ProxyError {
  const known = KNOWN_PATHS.get(path);
  if (known) {
    return new ProxyError(
      405,
      'invalid_request_error',
      'method_not_allowed',
      `${path} takes ${known}, not ${method}`,
      null,
      {
        Allow: known,
      },
    );
  }
  return new ProxyError(
    404,
    'not_found_error',
    'unknown_route',
    PREFIX_DIALECTS.has(prefixOf(path))
      ? `no route ${method} ${path}; this gateway serves ${[...KNOWN_PATHS.keys()].filter((p) => prefixOf(p) === prefixOf(path)).join(', ')}${prefixOf(path) === '/openai' ? ', GET /openai/v1/models/{model} and /openai/v1/responses/{id} (GET, DELETE, /input_items, /cancel)' : ''}`
      : `no route ${method} ${path}; the OpenAI API is under /openai/v1, Anthropic's under /anthropic/v1`,
  );
}

export function otherRoutes(deps: RoutesDeps): Hono<{ Variables: Vars }> {
  const app = new Hono<{ Variables: Vars }>();
  app.use('*', async (c, next) => {
    c.set('requestId', newRequestId());
    await next();
  });
  app.onError((err, c) => {
    const requestId = c.get('requestId') ?? '';
    if (err instanceof ProxyError) return errorResponse(err, requestId, c.req.path);
    deps.onError?.(err, requestId);
    return errorResponse(internalError(requestId), requestId, c.req.path);
  });
  app.notFound((c) => errorResponse(notFound(c.req.method, c.req.path), c.get('requestId') ?? '', c.req.path));

  app.get('/healthz', (c) => c.text('ok'));
  app.get('/readyz', (c) => {
    const ready = deps.ready();
    return c.text(ready ? 'ok' : 'not ready', ready ? 200 : 503);
  });
  protectedResourceRoutes(app, () => deps.keys.identities?.authorizationServer());
  // Claude Code and other Anthropic clients check the base URL answers before their first call.
  app.on(['GET', 'HEAD'], ['/anthropic', '/anthropic/'], (c) => c.text('ok'));

  const caller = async (header: (name: string) => string | undefined): Promise<Caller> => {
    const found = await authenticate(deps.keys, {
      apiKey: header('x-api-key'),
      authorization: header('authorization'),
    });
    if (found instanceof ProxyError) {
      deps.audit?.gateway.refused(found, undefined);
      throw found;
    }
    return found;
  };
  // The pages read with a key, or with their sign-in's session cookie when no key is sent.
  const reader = async (header: (name: string) => string | undefined): Promise<Caller> => {
    const session =
      deps.sessions && !header('x-api-key') && !header('authorization')
        ? sessionCaller(header('cookie'), deps.sessions)
        : undefined;
    if (session instanceof ProxyError) throw session;
    return session ?? caller(header);
  };
  if (deps.pages && deps.sessions) {
    pageSignInRoutes(app, { ...deps.sessions, ...(deps.audit ? { audit: deps.audit.gateway } : {}) });
  }
  if (deps.reports)
    usageRoutes(app, deps.reports, async (headers) => readScope(await reader((n) => headers.get(n) ?? undefined)));
  if (deps.storedResponses)
    storedResponseRoutes(app, deps.storedResponses, (headers) => caller((n) => headers.get(n) ?? undefined));
  if (deps.audit) {
    auditRoutes(app, {
      ...deps.audit,
      audit: deps.audit.gateway,
      reader: (headers) => reader((n) => headers.get(n) ?? undefined),
    });
  }
  if (deps.pages) app.route('/', deps.pages);
  modelListRoutes(app, {
    routes: deps.routes,
    backends: deps.backends,
    caller: reader,
    ...(deps.policies ? { policies: deps.policies } : {}),
  });
  return app;
}

/**
 * The Protected Resource Metadata (RFC 9728) of /mcp and /mcp/<server>, while an IdentityProvider
 * is where MCP clients sign in; public and readable from any origin (a browser-based client reads
 * it before it has a token).
 */
function protectedResourceRoutes(
  app: Hono<{ Variables: Vars }>,
  authorizationServer: () => AuthorizationServer | undefined,
): void {
  app.get(METADATA_PATH, (c) => metadataAnswer(c.req.raw.headers, '', authorizationServer(), c.req.path));
  app.get(`${METADATA_PATH}/*`, (c) =>
    metadataAnswer(c.req.raw.headers, c.req.path.slice(METADATA_PATH.length), authorizationServer(), c.req.path),
  );
}

function metadataAnswer(headers: Headers, suffix: string, as: AuthorizationServer | undefined, path: string): Response {
  const where = suffix === '' ? {} : mcpPath(suffix);
  if (!as || !where || where.server === '') throw notFound('GET', path);
  const resource = where.server ? `/mcp/${where.server}` : '/mcp';
  return new Response(JSON.stringify(resourceMetadata(originOf(headers), resource, as)), {
    headers: {
      'content-type': 'application/json',
      'access-control-allow-origin': '*',
      'cache-control': 'max-age=300',
      // The resource is the URL the client called: a cache keeps one answer per host it was called at.
      vary: 'Host, X-Forwarded-Host, X-Forwarded-Proto',
    },
  });
}
