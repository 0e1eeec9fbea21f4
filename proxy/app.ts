import { randomBytes } from 'node:crypto';
import { Hono } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import { type ApiKeys, authenticate, type Caller } from './auth.js';
import { parseChatRequest } from './chat-request.js';
import type { CostMeter } from './cost.js';
import { invalidRequest, ProxyError } from './errors.js';
import type { ProxyMetrics } from './metrics.js';
import { type Admission, KeyRateLimiter, type RateLimit } from './rate-limit.js';
import { DEFAULT_RETRY, type RetryPolicy, shouldFallBack, withRetries } from './resilience.js';
import type { BedrockRoute, OpenAICompatibleRoute, RouteEntry, RouteTable, Unavailable } from './routing.js';
import { parseTags, type Tag } from './tags.js';
import type { ChatCall, ChatResult, StreamOutcome, Upstream, Usage } from './upstream.js';
import type { UsageSink } from './usage.js';
import { usageRoutes } from './usage-api.js';
import type { UsageStore } from './usage-store.js';

/**
 * The gateway as a Hono app, built from its dependencies so tests call it with
 * app.request() and production serves it with @hono/node-server.
 */

export interface AppDeps {
  keys: ApiKeys;
  routes: RouteTable;
  upstreams: { 'openai-compatible': Upstream<OpenAICompatibleRoute>; bedrock?: Upstream<BedrockRoute> };
  usage: UsageSink;
  metrics: ProxyMetrics;
  /** Prices requests; without it they cost 0. */
  cost?: CostMeter;
  /** The usage store the reporting APIs read; without it they are not served. */
  store?: UsageStore;
  /** Routes mounted as they are (the Usage and Analytics pages). */
  extraRoutes?: Hono;
  /** Largest accepted request body; larger ones are refused before being read. Default 10 MiB. */
  maxBodyBytes?: number;
  /** Retry-After for a model that is still deploying. Default 30 s. */
  deployingRetryAfterSeconds?: number;
  /** Upstream retries before the caller got a byte. Default: 2 retries from 100 ms. */
  retry?: RetryPolicy;
  /** Per-key request budget; default none. */
  rateLimit?: RateLimit;
  /** Readiness: routes and keys loaded. */
  ready?: () => boolean;
  /** True once the process is shutting down: new chat requests are refused with 503. */
  draining?: () => boolean;
  onError?: (err: unknown, requestId: string) => void;
}

type Vars = { requestId: string };

export const MAX_BODY_BYTES = 10 * 1024 * 1024;
/** Longest model name kept in usage records and error messages. */
const MAX_MODEL_CHARS = 256;

const errorResponse = (err: ProxyError, requestId: string) =>
  new Response(JSON.stringify(err.toJSON()), {
    status: err.status,
    headers: { 'content-type': 'application/json', 'x-request-id': requestId, ...err.headers },
  });

export function createApp(deps: AppDeps): Hono<{ Variables: Vars }> {
  const app = new Hono<{ Variables: Vars }>();
  const maxBody = deps.maxBodyBytes ?? MAX_BODY_BYTES;
  const retry = deps.retry ?? DEFAULT_RETRY;
  const limiter = deps.rateLimit ? new KeyRateLimiter(deps.rateLimit) : undefined;
  const rateHeaders = (a: Admission): Record<string, string> =>
    limiter?.enabled
      ? {
          'x-ratelimit-limit-requests': String(limiter.limit.burst),
          'x-ratelimit-remaining-requests': String(a.ok ? a.remaining : 0),
        }
      : {};

  /** One route, with retries; throws the ProxyError the caller should see. */
  const callRoute = (target: RouteEntry, call: Omit<ChatCall, 'route'>): Promise<ChatResult> => {
    if (target.kind === 'unavailable') throw unavailable(target, deps.deployingRetryAfterSeconds ?? 30);
    const { bedrock, 'openai-compatible': openai } = deps.upstreams;
    if (target.kind === 'bedrock' && !bedrock) {
      throw new ProxyError(503, 'api_error', 'provider_unavailable', 'this gateway has no Bedrock upstream configured');
    }
    const attempt = () =>
      target.kind === 'bedrock' && bedrock
        ? bedrock.chat({ ...call, route: target })
        : openai.chat({ ...call, route: target as OpenAICompatibleRoute });
    return withRetries(attempt, retry, call.signal, {
      onRetry: (err) => deps.metrics.retries.inc({ model: target.model, provider: target.provider, code: err.code }),
    });
  };

  app.use('*', async (c, next) => {
    c.set('requestId', `req_${randomBytes(12).toString('hex')}`);
    await next();
  });

  app.onError((err, c) => {
    const requestId = c.get('requestId') ?? '';
    if (err instanceof ProxyError) return errorResponse(err, requestId);
    deps.onError?.(err, requestId);
    return errorResponse(
      new ProxyError(
        500,
        'server_error',
        'internal_error',
        `the gateway failed to handle the request (request id ${requestId})`,
      ),
      requestId,
    );
  });

  app.notFound((c) =>
    errorResponse(
      new ProxyError(
        404,
        'not_found_error',
        'unknown_route',
        `no route ${c.req.method} ${c.req.path}; the API is under /openai/v1`,
      ),
      c.get('requestId') ?? '',
    ),
  );

  app.get('/healthz', (c) => c.text('ok'));
  app.get('/readyz', (c) => {
    const ready = deps.ready?.() ?? true;
    return c.text(ready ? 'ok' : 'not ready', ready ? 200 : 503);
  });
  app.get('/metrics', async (c) =>
    c.text(await deps.metrics.registry.metrics(), 200, { 'content-type': deps.metrics.registry.contentType }),
  );

  const auth = (headers: { apiKey?: string | undefined; authorization?: string | undefined }): Caller => {
    const caller = authenticate(deps.keys, headers);
    if (caller instanceof ProxyError) throw caller;
    return caller;
  };

  if (deps.store) {
    usageRoutes(app, deps.store, (headers) =>
      auth({ apiKey: headers.get('x-api-key') ?? undefined, authorization: headers.get('authorization') ?? undefined }),
    );
  }
  if (deps.extraRoutes) app.route('/', deps.extraRoutes);

  app.get('/openai/v1/models', (c) => {
    auth({ apiKey: c.req.header('x-api-key'), authorization: c.req.header('authorization') });
    return c.json({ object: 'list', data: deps.routes.models() });
  });

  app.post(
    '/openai/v1/chat/completions',
    bodyLimit({
      maxSize: maxBody,
      onError: () => {
        throw new ProxyError(
          413,
          'invalid_request_error',
          'request_too_large',
          `the request body is larger than ${maxBody} bytes`,
        );
      },
    }),
    async (c) => {
      const started = performance.now();
      const requestId = c.get('requestId');
      const caller = auth({ apiKey: c.req.header('x-api-key'), authorization: c.req.header('authorization') });
      let admission: Admission = { ok: true, remaining: 0 };

      let model = '';
      let provider = '';
      let entry: RouteEntry | undefined;
      let tags: Tag[] = [];
      let stream = false;
      const account = (
        status: number,
        usage: Usage | undefined,
        extra: { firstTokenMs?: number; errorType?: string } = {},
      ) => {
        const latencyMs = performance.now() - started;
        const charge = deps.cost?.charge(entry, usage) ?? { costUsd: 0, savingsUsd: 0 };
        deps.usage.record({
          time: new Date().toISOString(),
          requestId,
          keyHashPrefix: caller.keyHashPrefix,
          model: model.slice(0, MAX_MODEL_CHARS),
          provider,
          tags,
          promptTokens: usage?.promptTokens ?? 0,
          completionTokens: usage?.completionTokens ?? 0,
          costUsd: charge.costUsd,
          savingsUsd: charge.savingsUsd,
          latencyMs,
          ...(extra.firstTokenMs !== undefined ? { firstTokenMs: extra.firstTokenMs } : {}),
          status,
          ...(extra.errorType ? { errorType: extra.errorType } : {}),
          stream,
        });
        const m = deps.metrics;
        // Only routable models become label values: a caller's made-up names must not add series.
        const labelModel = entry ? model : '';
        const labels = { model: labelModel, provider, ...m.tagLabels(tags) };
        m.requests.inc({ ...labels, status: String(status) });
        if (status >= 400)
          m.errors.inc({ model: labelModel, provider, status: String(status), code: extra.errorType ?? '' });
        m.latency.observe({ model: labelModel, provider }, latencyMs / 1000);
        if (usage) {
          m.tokens.inc({ ...labels, direction: 'prompt' }, usage.promptTokens);
          m.tokens.inc({ ...labels, direction: 'completion' }, usage.completionTokens);
        }
        if (charge.costUsd > 0) m.cost.inc(labels, charge.costUsd);
      };

      try {
        if (deps.draining?.()) {
          throw new ProxyError(
            503,
            'api_error',
            'shutting_down',
            'this gateway replica is shutting down; retry',
            null,
            {
              'Retry-After': '1',
              connection: 'close',
            },
          );
        }
        if (limiter) {
          admission = limiter.take(caller.keyHashPrefix);
          if (!admission.ok) {
            deps.metrics.rateLimited.inc({ key: caller.keyHashPrefix });
            throw new ProxyError(
              429,
              'rate_limit_error',
              'rate_limit_exceeded',
              `this API key sent more than ${limiter.limit.requestsPerSecond} requests per second (burst ${limiter.limit.burst}); retry in ${admission.retryAfterSeconds} s`,
              null,
              { 'Retry-After': String(admission.retryAfterSeconds), ...rateHeaders(admission) },
            );
          }
        }
        const type = c.req.header('content-type') ?? '';
        if (!/^application\/json\s*(;|$)/i.test(type)) {
          throw new ProxyError(
            415,
            'invalid_request_error',
            'unsupported_media_type',
            `the request body must be JSON with Content-Type: application/json (got ${JSON.stringify(type.slice(0, 100))})`,
          );
        }
        let body: unknown;
        try {
          body = JSON.parse(await c.req.text());
        } catch {
          throw invalidRequest('the request body is not valid JSON', null, 'invalid_json');
        }
        const req = parseChatRequest(body);
        if (req instanceof ProxyError) throw req;
        model = req.model;
        stream = req.stream;
        const parsedTags = parseTags({
          xTags: c.req.header('x-tags'),
          xGatewayTags: c.req.header('x-gateway-tags'),
          body: req.tags,
        });
        if (parsedTags instanceof ProxyError) throw parsedTags;
        tags = parsedTags;

        entry = deps.routes.lookup(req.model);
        if (!entry) {
          throw new ProxyError(
            404,
            'invalid_request_error',
            'model_not_found',
            `the model ${JSON.stringify(req.model.slice(0, 256))} does not exist or is not routable here; GET /openai/v1/models lists the models you can use`,
            'model',
          );
        }
        provider = entry.provider;

        const signal = c.req.raw.signal;
        const call = { body: req.forward, stream: req.stream, clientWantsUsage: req.includeUsage, signal };
        // The model itself, then its fallbacks (not theirs: no chains, no loops).
        const chain: RouteEntry[] = [entry];
        for (const name of entry.fallback ?? []) {
          const f = deps.routes.lookup(name);
          if (f && !chain.includes(f)) chain.push(f);
        }
        let result: ChatResult | undefined;
        let first: ProxyError | undefined;
        const failed: string[] = [];
        for (const [i, target] of chain.entries()) {
          try {
            result = await callRoute(target, i === 0 ? call : { ...call, body: { ...call.body, model: target.model } });
            if (i > 0) {
              model = target.model;
              provider = target.provider;
              entry = target;
            }
            break;
          } catch (err) {
            if (!(err instanceof ProxyError) || (i === 0 && !shouldFallBack(err)) || signal.aborted) throw err;
            first ??= err;
            if (i > 0) failed.push(`${target.model} (${err.code})`);
            const next = chain[i + 1];
            if (next) deps.metrics.fallbacks.inc({ model: req.model, fallback: next.model, code: err.code });
          }
        }
        if (!result) {
          const e = first as ProxyError;
          if (failed.length === 0) throw e;
          throw new ProxyError(
            e.status,
            e.type,
            e.code,
            `${e.message}; its fallbacks failed too: ${failed.join(', ')}`,
            e.param,
            e.headers,
          );
        }
        const served: Record<string, string> = {
          'x-request-id': requestId,
          ...rateHeaders(admission),
          ...(model !== req.model ? { 'x-gateway-fallback': model } : {}),
        };
        if (result.kind === 'json') {
          account(result.status, result.usage);
          return c.json(result.body as object, 200, served);
        }
        result.outcome.then(
          (o: StreamOutcome) =>
            account(o.error ? o.error.status : o.clientAborted ? 499 : 200, o.usage, {
              ...(o.firstTokenMs !== undefined ? { firstTokenMs: o.firstTokenMs } : {}),
              ...(o.error
                ? { errorType: o.error.code }
                : o.clientAborted
                  ? { errorType: 'client_closed_request' }
                  : {}),
            }),
          (err: unknown) => deps.onError?.(err, requestId),
        );
        return new Response(result.body, {
          status: 200,
          headers: {
            'content-type': 'text/event-stream; charset=utf-8',
            'cache-control': 'no-cache',
            connection: 'keep-alive',
            ...served,
          },
        });
      } catch (err) {
        if (err instanceof ProxyError) {
          account(err.status, undefined, { errorType: err.code });
          if (limiter?.enabled && err.status !== 429) Object.assign(err.headers, rateHeaders(admission));
        } else account(500, undefined, { errorType: 'internal_error' });
        throw err;
      }
    },
  );

  return app;
}

function unavailable(entry: Unavailable, deployingRetryAfterSeconds: number): ProxyError {
  if (entry.phase === 'Deploying') {
    return new ProxyError(
      503,
      'api_error',
      'model_deploying',
      `the model ${entry.model} is still being deployed (${entry.reason}); retry in ${deployingRetryAfterSeconds} s`,
      'model',
      { 'Retry-After': String(deployingRetryAfterSeconds) },
    );
  }
  return new ProxyError(
    503,
    'api_error',
    'model_failed',
    `the model ${entry.model} is not available: ${entry.reason}`,
    'model',
  );
}
