import { Hono } from 'hono';
import { loadBedrockModels } from '../crds/catalog/bedrock-models.js';
import { loadCatalog } from '../crds/catalog/catalog.js';
import { authenticate, type Caller, type KeyPolicy, mayCall, readScope } from './access/auth.js';
import { countTokens } from './count-tokens.js';
import { DIALECTS, type DialectSpec } from './endpoints/dialects.js';
import { ENDPOINTS } from './endpoints/endpoints.js';
import { ProxyError } from './endpoints/errors.js';
import { cliModel, type ModelFacts, ModelMetadata, ollamaShow, openAIModel } from './models/model-metadata.js';
import {
  type EndpointHandler,
  endpointHandlers,
  errorOutput,
  internalError,
  MAX_BODY_BYTES,
  newRequestId,
  type PipelineDeps,
  parseJsonBody,
  readLimited,
} from './pipeline.js';
import type { ModelListing } from './routing/routes.js';
import { webStream } from './upstreams/chunk-source.js';
import { usageRoutes } from './usage/api.js';
import { inThreadReports, type UsageReports } from './usage/reports.js';
import type { UsageStore } from './usage/store.js';

/**
 * The gateway as a Hono app, built from its dependencies so tests call it with app.request().
 * Production serves it through proxy/serve.ts, which hands chat completions to the same
 * handler straight from node:http.
 */

export interface AppDeps extends PipelineDeps {
  /** The usage store the reporting APIs read; without it they are not served. */
  store?: UsageStore;
  /** How reports are answered (a worker thread in production); in the store's thread by default. */
  reports?: UsageReports;
  /** Routes mounted as they are (the Usage and Analytics pages). */
  extraRoutes?: Hono;
  /** Readiness: routes and keys loaded. */
  ready?: () => boolean;
  /**
   * What listed models can do (limits, capabilities, prices). Default: the shipped tables, the
   * cost meter's prices, and Ollama's /api/show for models the catalog lacks; tests replace it.
   */
  metadata?: ModelMetadata;
}

type Vars = { requestId: string };

/** The OpenAI paths served and their method: another method there is a 405, not an unknown route. */
const COUNT_TOKENS_PATH = '/anthropic/v1/messages/count_tokens';
const KNOWN_PATHS = new Map([
  ...Object.values(ENDPOINTS).map((e) => [e.path, 'POST'] as const),
  [COUNT_TOKENS_PATH, 'POST'],
  ['/openai/v1/models', 'GET'],
  ['/v1/models/metadata', 'GET'],
]);

/** An API's prefix: the first segment of its endpoints' paths (/openai, /anthropic). */
const prefixOf = (path: string) => `/${path.split('/')[1] ?? ''}`;
/** Each prefix's dialect, from the first endpoint under it (the OpenAI ones share one envelope). */
const PREFIX_DIALECTS = new Map<string, DialectSpec>();
for (const e of Object.values(ENDPOINTS)) {
  if (!PREFIX_DIALECTS.has(prefixOf(e.path))) PREFIX_DIALECTS.set(prefixOf(e.path), DIALECTS[e.dialect]);
}
/** Errors under an API's prefix leave in its dialect's envelope; all others (and /v1) in OpenAI's. */
const dialectOfPath = (path: string) => PREFIX_DIALECTS.get(prefixOf(path)) ?? DIALECTS['openai-chat'];

export { MAX_BODY_BYTES } from './pipeline.js';

const errorResponse = (err: ProxyError, requestId: string, path = '') => {
  const out = errorOutput(err, requestId, dialectOfPath(path));
  return new Response(out.body, { status: out.status, headers: out.headers });
};

export interface Gateway {
  /** Every route, the OpenAI endpoints included (tests call it with app.request()). */
  app: Hono<{ Variables: Vars }>;
  /** Every POST endpoint's handler by path; proxy/serve.ts serves them straight from node:http. */
  endpoints: Map<string, EndpointHandler>;
}

export const createApp = (deps: AppDeps): Hono<{ Variables: Vars }> => createGateway(deps).app;

export function createGateway(deps: AppDeps): Gateway {
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

  app.notFound((c) => {
    const { method, path } = c.req;
    const known = KNOWN_PATHS.get(path);
    const err = known
      ? new ProxyError(
          405,
          'invalid_request_error',
          'method_not_allowed',
          `${path} takes ${known}, not ${method}`,
          null,
          {
            Allow: known,
          },
        )
      : new ProxyError(
          404,
          'not_found_error',
          'unknown_route',
          PREFIX_DIALECTS.has(prefixOf(path))
            ? `no route ${method} ${path}; this gateway serves ${[...KNOWN_PATHS.keys()].filter((p) => prefixOf(p) === prefixOf(path)).join(', ')}${prefixOf(path) === '/openai' ? ' and GET /openai/v1/models/{model}' : ''}`
            : `no route ${method} ${path}; the OpenAI API is under /openai/v1, Anthropic's under /anthropic/v1`,
        );
    return errorResponse(err, c.get('requestId') ?? '', path);
  });

  app.get('/healthz', (c) => c.text('ok'));
  // Claude Code and other Anthropic clients check the base URL answers before their first call.
  app.on(['GET', 'HEAD'], ['/anthropic', '/anthropic/'], (c) => c.text('ok'));
  app.post(COUNT_TOKENS_PATH, async (c) => {
    const raw = c.req.raw;
    const limit = deps.maxBodyBytes ?? MAX_BODY_BYTES;
    const text = raw.body ? await readLimited(raw.body, limit, c.req.header('content-length')) : '';
    // The same bounds as every endpoint's body: a count must not cost more than the message would.
    const body = parseJsonBody(text);
    if (body instanceof ProxyError) throw body;
    const counted = await countTokens(
      {
        keys: deps.keys,
        routes: deps.routes,
        ...(deps.upstreams.bedrock ? { bedrock: deps.upstreams.bedrock } : {}),
        ...(deps.upstreams.hosted ? { hosted: deps.upstreams.hosted } : {}),
      },
      { apiKey: c.req.header('x-api-key'), authorization: c.req.header('authorization') },
      body,
      raw.signal,
    );
    return c.json({ input_tokens: counted.inputTokens }, 200, {
      'x-gateway-token-count': counted.exact ? 'exact' : 'estimate',
    });
  });
  app.get('/readyz', (c) => {
    const ready = deps.ready?.() ?? true;
    return c.text(ready ? 'ok' : 'not ready', ready ? 200 : 503);
  });

  const auth = (headers: { apiKey?: string | undefined; authorization?: string | undefined }): Caller => {
    const caller = authenticate(deps.keys, headers);
    if (caller instanceof ProxyError) throw caller;
    return caller;
  };

  if (deps.store) {
    usageRoutes(app, deps.reports ?? inThreadReports(deps.store), (headers) =>
      readScope(
        auth({
          apiKey: headers.get('x-api-key') ?? undefined,
          authorization: headers.get('authorization') ?? undefined,
        }),
      ),
    );
  }
  if (deps.extraRoutes) app.route('/', deps.extraRoutes);

  const metadata =
    deps.metadata ??
    new ModelMetadata({
      catalog: loadCatalog(),
      bedrockModels: loadBedrockModels(),
      priceOf: (entry) => deps.cost?.priceOf(entry),
      ask: ollamaShow(),
    });
  /** The listed names the key may use: by the name itself, or by the model an alias stands for. */
  const visible = (policy: KeyPolicy) =>
    deps.routes.models().filter((m) => mayCall(policy, m.id) || mayCall(policy, m.model));
  const factsOf = async (m: ModelListing): Promise<ModelFacts | undefined> => {
    const entry = deps.routes.lookup(m.id);
    return entry && entry.kind !== 'unavailable' ? metadata.facts(entry) : undefined;
  };
  const callerPolicy = (h: (name: string) => string | undefined) =>
    auth({ apiKey: h('x-api-key'), authorization: h('authorization') }).policy;

  app.get('/openai/v1/models', async (c) => {
    const listed = visible(callerPolicy((n) => c.req.header(n)));
    const data = await Promise.all(listed.map(async (m) => openAIModel(m, await factsOf(m))));
    return c.json({ object: 'list', data });
  });
  // The CLI model list: the coding CLI and the editor plugin read it; include_in_cli=true keeps the
  // models whose resource has includeInCLI.
  app.get('/v1/models/metadata', async (c) => {
    const cliOnly = c.req.query('include_in_cli');
    if (cliOnly !== undefined && cliOnly !== 'true' && cliOnly !== 'false') {
      throw new ProxyError(
        400,
        'invalid_request_error',
        'invalid_value',
        'include_in_cli must be true or false',
        'include_in_cli',
      );
    }
    const listed = visible(callerPolicy((n) => c.req.header(n))).filter((m) => cliOnly !== 'true' || m.cli);
    const models = (
      await Promise.all(
        listed.map(async (m) => {
          const facts = await factsOf(m);
          return facts ? cliModel(m, facts) : undefined;
        }),
      )
    ).filter((m) => m !== undefined);
    return c.json({ object: 'list', models });
  });
  // Model ids may contain slashes and colons (namespace/model:tag, Bedrock ids): the rest of the path is the id.
  app.get('/openai/v1/models/:id{.+}', async (c) => {
    const id = c.req.param('id');
    const model = visible(callerPolicy((n) => c.req.header(n))).find((m) => m.id === id);
    if (!model) {
      throw new ProxyError(
        404,
        'invalid_request_error',
        'model_not_found',
        `the model ${JSON.stringify(id.slice(0, 256))} does not exist or is not listed here; GET /openai/v1/models lists the models you can use`,
        'model',
      );
    }
    return c.json(openAIModel(model, await factsOf(model)));
  });

  const handlers = endpointHandlers(deps);
  const endpoints = new Map<string, EndpointHandler>();
  for (const endpoint of Object.values(ENDPOINTS)) {
    const handler = handlers[endpoint.name];
    endpoints.set(endpoint.path, handler);
    app.post(endpoint.path, async (c) => {
      const raw = c.req.raw;
      const out = await handler({
        requestId: c.get('requestId'),
        header: (name) => c.req.header(name),
        body: (limit, grow) =>
          raw.body ? readLimited(raw.body, limit, c.req.header('content-length'), grow) : Promise.resolve(''),
        signal: raw.signal,
      });
      if (out.durable) await out.durable;
      return new Response(out.kind === 'stream' ? webStream(out.body) : out.body, {
        status: out.status,
        headers: out.headers,
      });
    });
  }

  return { app, endpoints };
}
