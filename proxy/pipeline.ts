import { randomBytes } from 'node:crypto';
import { HOSTED_PROVIDERS } from '../crds/providers/table.js';
import { type ApiKeys, authenticate, type Caller, mayCall } from './access/auth.js';
import type { BudgetGuard } from './access/budgets.js';
import { BODY_MEMORY_FACTOR, type MemoryBudget, MIN_RESERVATION } from './access/memory-budget.js';
import { MAX_MODEL_CHARS, routeFor } from './access/model-access.js';
import { type Admission, LocalRateLimiter, type RateLimit, type RateLimiter } from './access/rate-limit.js';
import { MAX_JSON_VALUES, MAX_NESTING } from './endpoints/chat-request.js';
import { DIALECTS, type Dialect, type DialectSpec } from './endpoints/dialects.js';
import { ENDPOINTS, type Endpoint, type EndpointName } from './endpoints/endpoints.js';
import { invalidRequest, ProxyError } from './endpoints/errors.js';
import { checkJsonShape } from './endpoints/json-shape.js';
import { applyEnforcedTags, parseTags, type Tag } from './endpoints/tags.js';
import type {
  BedrockRoute,
  HostedRoute,
  OpenAICompatibleRoute,
  Route,
  RouteEntry,
  RouteTable,
  Unavailable,
} from './routing/routes.js';
import type { InFlight, ProxyMetrics } from './telemetry/metrics.js';
import type { RequestSpan, RequestTracer } from './telemetry/tracing.js';
import { translatorFor } from './translators/table.js';
import type { Translator } from './translators/translator.js';
import type { StreamBody } from './upstreams/chunk-source.js';
import { DEFAULT_RETRY, type RetryPolicy, shouldFallBack, withRetries } from './upstreams/resilience.js';
import type { StreamOutcome, Upstream, UpstreamCall, UpstreamResult, Usage } from './upstreams/upstream.js';
import type { CostMeter } from './usage/cost.js';
import type { UsageRecord, UsageSink } from './usage/record.js';

/**
 * One upstream call in a CLIENT span, the span's trace context in the call's headers; the span
 * ends with the answer (a stream, when its last byte went out) or the error.
 */
async function traced(
  span: RequestSpan,
  target: RouteEntry,
  call: Omit<UpstreamCall, 'route'>,
  send: (call: Omit<UpstreamCall, 'route'>) => Promise<UpstreamResult>,
): Promise<UpstreamResult> {
  const up = span.upstream({
    model: target.model,
    kind: target.kind,
    provider: target.provider,
    ...(target.kind === 'openai-compatible' ? { address: target.baseUrl } : {}),
    ...(target.kind === 'hosted' ? { target: { type: target.target.type } } : {}),
  });
  let result: UpstreamResult;
  try {
    result = await send({ ...call, headers: up.headers });
  } catch (err) {
    up.end(
      err instanceof ProxyError ? { code: err.code, status: err.status } : { code: 'internal_error', status: 500 },
    );
    throw err;
  }
  if (result.kind === 'json') up.end();
  else
    result.outcome.then(
      (o) => up.end(o.error ? { code: o.error.code, status: o.error.status } : undefined),
      () => up.end({ code: 'internal_error', status: 500 }),
    );
  return result;
}

/**
 * The request pipeline of every POST endpoint (proxy/endpoints/endpoints.ts), in every dialect,
 * independent of the HTTP framework: auth, rate limits, body, the endpoint's parser, tags, model
 * allow-list, routing with budgets, retries and fallbacks, the translator where the upstream
 * does not speak the caller's dialect, and one usage record per request. Errors leave in the
 * caller's dialect. The Hono app
 * (app.request() in tests, every other route) and the node:http fast path (proxy/serve.ts,
 * what production serves) both call it, so there is one implementation of every endpoint.
 */

export interface PipelineDeps {
  keys: ApiKeys;
  routes: RouteTable;
  /** The upstream of each route kind. */
  upstreams: {
    'openai-compatible': Upstream<OpenAICompatibleRoute>;
    bedrock?: Upstream<BedrockRoute>;
    hosted?: Upstream<HostedRoute>;
  };
  usage: UsageSink;
  metrics: ProxyMetrics;
  cost?: CostMeter;
  maxBodyBytes?: number;
  deployingRetryAfterSeconds?: number;
  retry?: RetryPolicy;
  /** The gateway's default request rate per key (ApiKeys may have their own). */
  rateLimit?: RateLimit;
  /** Where the buckets live: this replica by default, Redis when shared. */
  limiter?: RateLimiter;
  draining?: () => boolean;
  onError?: (err: unknown, requestId: string) => void;
  /** Told once per model that it served tokens without a price. */
  onUnpriced?: (model: string, provider: string) => void;
  /** Memory all request bodies in flight may hold together; none when absent. */
  budget?: MemoryBudget;
  /** Spend budgets of keys and tags; none checked when absent. */
  budgets?: BudgetGuard;
  /** Told every authenticated caller (the ApiKey status writer notes the last use). */
  onCaller?: (caller: Caller) => void;
  /** OpenTelemetry spans per request and upstream call; none when absent (tracing off). */
  tracer?: RequestTracer;
}

/** What the handler needs from an HTTP request. */
interface PipelineInput {
  requestId: string;
  /** A request header by lower-case name. */
  header(name: string): string | undefined;
  /**
   * The body, refused with 413 past `limit` bytes (before reading when Content-Length says so).
   * `grow` is told the size read so far whenever it passes what was reserved, and may throw to stop.
   */
  body(limit: number, grow?: (size: number) => void): Promise<string>;
  /** Aborted when the caller goes away. */
  signal: AbortSignal;
}

export type PipelineOutput = (
  | { kind: 'json'; status: number; headers: Record<string, string>; body: string }
  | { kind: 'stream'; status: 200; headers: Record<string, string>; body: StreamBody }
) & {
  /** The request's usage record is written (the spool's group commit): the answer goes out after. */
  durable?: Promise<void>;
};

export const MAX_BODY_BYTES = 10 * 1024 * 1024;

/**
 * A request body's JSON, its shape judged from the text before JSON.parse builds anything of it
 * (nesting and value count bounded, so no body costs more than a small multiple of its size).
 */
export function parseJsonBody(text: string): unknown {
  const shape = checkJsonShape(text, { maxDepth: MAX_NESTING, maxValues: MAX_JSON_VALUES });
  if (shape) return shape;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return invalidRequest('the request body is not valid JSON', null, 'invalid_json');
  }
}
/** Longest model name kept in usage records and error messages. */

// Unique without a syscall per request: a random per-process prefix and a counter.
const idPrefix = `req_${randomBytes(8).toString('hex')}`;
let idCounter = 0;
export const newRequestId = (): string => `${idPrefix}${(idCounter++).toString(16).padStart(8, '0').slice(-8)}`;

export const errorOutput = (
  err: ProxyError,
  requestId: string,
  dialect: DialectSpec = DIALECTS['openai-chat'],
): Extract<PipelineOutput, { kind: 'json' }> => ({
  kind: 'json',
  status: err.status,
  headers: { 'content-type': 'application/json', 'x-request-id': requestId, ...err.headers },
  body: JSON.stringify(dialect.errorBody(err, requestId)),
});

/**
 * How a call reaches an upstream: in the caller's dialect where the upstream serves it, else
 * through the first translator to one it serves, else not at all (400 naming both).
 */
type Plan = { dialect: Dialect; translator?: Translator };

/** How the 400 for a pair no upstream serves names the upstream (a hosted provider by its module's label). */
const UPSTREAM_NAMES: Readonly<Record<Exclude<Route['kind'], 'hosted'>, string>> = {
  'openai-compatible': 'in-cluster',
  bedrock: 'Bedrock',
};

function planFor(endpoint: Endpoint, serves: readonly Dialect[], target: Route): Plan | ProxyError {
  if (serves.includes(endpoint.dialect)) return { dialect: endpoint.dialect };
  for (const to of serves) {
    const translator = translatorFor(endpoint.dialect, to);
    if (translator) return { dialect: to, translator };
  }
  const paths = Object.values(ENDPOINTS)
    .filter((e) => serves.includes(e.dialect) || serves.some((to) => translatorFor(e.dialect, to)))
    .map((e) => e.path);
  return new ProxyError(
    400,
    'invalid_request_error',
    'unsupported_endpoint',
    `${endpoint.path} is not served for ${target.model} (${target.kind === 'hosted' ? HOSTED_PROVIDERS[target.target.type].label : UPSTREAM_NAMES[target.kind]}): ${paths.length ? `it answers ${paths.join(', ')}` : 'it answers no endpoint of the gateway'}`,
    'model',
  );
}

export const internalError = (requestId: string) =>
  new ProxyError(
    500,
    'server_error',
    'internal_error',
    `the gateway failed to handle the request (request id ${requestId})`,
  );

const JSON_TYPE = /^application\/json\s*(;|$)/i;

export type EndpointHandler = (input: PipelineInput) => Promise<PipelineOutput>;

/**
 * The handler of every endpoint of proxy/endpoints/endpoints.ts: one pipeline, one set of rate buckets,
 * each endpoint contributing its parser and upstream path.
 */
export function endpointHandlers(deps: PipelineDeps): Record<EndpointName, EndpointHandler> {
  const maxBody = deps.maxBodyBytes ?? MAX_BODY_BYTES;
  const retry = deps.retry ?? DEFAULT_RETRY;
  // The gateway's default request rate per key, and each ApiKey's own rates where it has them.
  const defaultRate = deps.rateLimit ?? { requestsPerSecond: 0, burst: 1 };
  const limiter = deps.limiter ?? new LocalRateLimiter();
  const rateHeaders = (limit: RateLimit, a: Admission): Record<string, string> =>
    limit.requestsPerSecond > 0
      ? {
          'x-ratelimit-limit-requests': String(limit.burst),
          'x-ratelimit-remaining-requests': String(a.ok ? a.remaining : 0),
        }
      : {};

  const unpricedSeen = new Set<string>();

  /** One route, with retries; throws the ProxyError the caller should see. */
  const callRoute = (
    endpoint: Endpoint,
    target: RouteEntry,
    call: Omit<UpstreamCall, 'route' | 'dialect'>,
    span: RequestSpan | undefined,
  ): Promise<UpstreamResult> => {
    if (target.kind === 'unavailable') throw unavailable(target, deps.deployingRetryAfterSeconds ?? 30);
    const upstream = deps.upstreams[target.kind] as Upstream<Route> | undefined;
    if (!upstream) {
      throw new ProxyError(
        503,
        'api_error',
        'provider_unavailable',
        `this gateway has no ${target.kind === 'bedrock' ? 'Bedrock' : 'hosted-provider'} upstream configured`,
      );
    }
    const plan = planFor(endpoint, upstream.dialects(target), target);
    if (plan instanceof ProxyError) throw plan;
    const translation = plan.translator?.begin(call.body, call.stream);
    if (translation instanceof ProxyError) throw translation;
    const routed: Omit<UpstreamCall, 'route'> = {
      ...call,
      dialect: plan.dialect,
      ...(translation ? { body: translation.body } : {}),
      ...(translation?.wantsUsage ? { clientWantsUsage: true } : {}),
    };
    const send = async (c: Omit<UpstreamCall, 'route'>): Promise<UpstreamResult> => {
      const result = await upstream.send({ ...c, route: target });
      if (!translation) return result;
      if (result.kind === 'json') {
        const { raw: _raw, ...rest } = result;
        return { ...rest, body: translation.json(result.body) };
      }
      return { ...result, body: translation.stream(result.body, result.outcome) };
    };
    const attempt = span ? () => traced(span, target, routed, send) : () => send(routed);
    return withRetries(attempt, retry, call.signal, {
      onRetry: (err) => deps.metrics.retries.inc({ model: target.model, provider: target.provider, code: err.code }),
    });
  };

  const handle =
    (endpoint: Endpoint): EndpointHandler =>
    async (input) => {
      const started = performance.now();
      const { requestId } = input;
      const caller = authenticate(deps.keys, {
        apiKey: input.header('x-api-key'),
        authorization: input.header('authorization'),
      });
      // Unauthenticated requests are answered without a usage record: nobody to bill.
      const dialect = DIALECTS[endpoint.dialect];
      if (caller instanceof ProxyError) return errorOutput(caller, requestId, dialect);
      const span = deps.tracer?.start({ operation: endpoint.operation, header: input.header, requestId });
      // Where the in-flight gauge counted this request (a fallback changes model/provider).
      let flying: InFlight | undefined;
      const { policy } = caller;
      deps.onCaller?.(caller);
      // An ApiKey's buckets go by its name: a rotated key keeps its rates.
      const bucket = policy.name ? `key:${policy.name}` : caller.keyHashPrefix;
      const rate = policy.rate ?? defaultRate;
      const tokenRate = policy.tokensPerMinute
        ? { requestsPerSecond: policy.tokensPerMinute / 60, burst: policy.tokensPerMinute }
        : undefined;
      let admission: Admission = { ok: true, remaining: 0 };
      let model = '';
      let provider = '';
      let entry: RouteEntry | undefined;
      let tags: Tag[] = [];
      let stream = false;
      let reserved = 0;

      /** The record's fields known before the answer is: who, what, where, when. */
      const recordOf = (now: number, status: number, latencyMs: number): UsageRecord => ({
        time: new Date(now).toISOString(),
        requestId,
        keyHashPrefix: caller.keyHashPrefix,
        ...(policy.team ? { team: policy.team } : {}),
        ...(policy.name ? { apiKey: policy.name } : {}),
        model: model.slice(0, MAX_MODEL_CHARS),
        endpoint: endpoint.name,
        provider,
        tags,
        promptTokens: 0,
        completionTokens: 0,
        costUsd: 0,
        savingsUsd: 0,
        latencyMs,
        status,
        stream,
      });

      const account = (
        status: number,
        usage: Usage | undefined,
        extra: { firstTokenMs?: number; errorType?: string } = {},
      ) => {
        const latencyMs = performance.now() - started;
        if (flying) deps.metrics.finished(flying);
        span?.end({
          status,
          ...(entry ? { route: entry } : {}),
          stream,
          ...(usage ? { usage } : {}),
          ...(extra.errorType ? { errorType: extra.errorType } : {}),
          ...(extra.firstTokenMs !== undefined ? { firstTokenMs: extra.firstTokenMs } : {}),
        });
        const charge = deps.cost?.charge(entry, usage) ?? { costUsd: 0 };
        if (charge.unpriced) {
          deps.metrics.unpriced.inc({ model, provider });
          if (!unpricedSeen.has(model) && unpricedSeen.size < 1000) {
            unpricedSeen.add(model);
            deps.onUnpriced?.(model, provider);
          }
        }
        if (usage?.counted) deps.metrics.countedTokens.inc({ model, provider });
        const tokens = (usage?.promptTokens ?? 0) + (usage?.completionTokens ?? 0);
        if (tokenRate) limiter.debit(bucket, tokenRate, tokens);
        const now = Date.now();
        // The record's own time: the budgets match the two when the recorder writes it.
        deps.budgets?.add(policy, tags, charge.costUsd, now);
        deps.usage.record({
          ...recordOf(now, status, latencyMs),
          promptTokens: usage?.promptTokens ?? 0,
          completionTokens: usage?.completionTokens ?? 0,
          costUsd: charge.costUsd,
          ...(charge.creditsUsd ? { creditsUsd: charge.creditsUsd } : {}),
          ...(extra.firstTokenMs !== undefined ? { firstTokenMs: extra.firstTokenMs } : {}),
          ...(extra.errorType ? { errorType: extra.errorType } : {}),
          ...(usage?.counted ? { tokensCounted: true } : {}),
          ...(charge.unpriced ? { unpriced: true } : {}),
        });
        deps.metrics.observeRequest({
          // Only routable models become label values: a caller's made-up names must not add series.
          model: entry ? model : '',
          provider,
          tags,
          status,
          code: extra.errorType ?? '',
          seconds: latencyMs / 1000,
          ...(extra.firstTokenMs !== undefined ? { firstTokenSeconds: extra.firstTokenMs / 1000 } : {}),
          ...(usage ? { usage } : {}),
          costUsd: charge.costUsd,
        });
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
        if (rate.requestsPerSecond > 0 || tokenRate) {
          const verdict = await limiter.admit(bucket, {
            ...(rate.requestsPerSecond > 0 ? { requests: rate } : {}),
            ...(tokenRate ? { tokens: tokenRate } : {}),
          });
          if (!verdict.ok) {
            deps.metrics.rateLimited.inc();
            throw new ProxyError(
              429,
              'rate_limit_error',
              'rate_limit_exceeded',
              verdict.which === 'tokens'
                ? `this API key used its ${policy.tokensPerMinute} tokens per minute; retry in ${verdict.retryAfterSeconds} s`
                : `this API key sent more than ${rate.requestsPerSecond} requests per second (burst ${rate.burst}); retry in ${verdict.retryAfterSeconds} s`,
              null,
              { 'Retry-After': String(verdict.retryAfterSeconds), ...rateHeaders(rate, verdict) },
            );
          }
          admission = verdict;
        }
        const type = input.header('content-type') ?? '';
        if (!JSON_TYPE.test(type)) {
          throw new ProxyError(
            415,
            'invalid_request_error',
            'unsupported_media_type',
            `the request body must be JSON with Content-Type: application/json (got ${JSON.stringify(type.slice(0, 100))})`,
          );
        }
        // Reserve what the body will cost before reading it (Content-Length, else grown as it arrives).
        const budget = deps.budget;
        const reserve = (need: number) => {
          if (!budget || need <= reserved) return;
          budget.take(need - reserved);
          reserved = need;
        };
        const declared = Number(input.header('content-length'));
        const expect = Number.isFinite(declared) && declared > 0 ? Math.min(declared, maxBody) : 0;
        reserve(Math.max(MIN_RESERVATION, expect * BODY_MEMORY_FACTOR));
        const text = await input.body(maxBody, budget ? (size) => reserve(size * BODY_MEMORY_FACTOR) : undefined);
        const body = parseJsonBody(text);
        if (body instanceof ProxyError) throw body;
        // Refused requests are recorded under the model they asked for, whatever else is wrong with them.
        const asked = (body as { model?: unknown } | null)?.model;
        if (typeof asked === 'string') model = asked;
        const req = endpoint.parse(body);
        if (req instanceof ProxyError) throw req;
        model = req.model;
        if (endpoint.answerBytes) reserve(Math.max(reserved, endpoint.answerBytes(req)));
        stream = req.stream;
        const parsedTags = parseTags({
          xTags: input.header('x-tags'),
          xGatewayTags: input.header('x-gateway-tags'),
          body: req.tags,
        });
        if (parsedTags instanceof ProxyError) throw parsedTags;
        const enforced = applyEnforcedTags(parsedTags, policy.tags);
        if (enforced instanceof ProxyError) throw enforced;
        tags = enforced;

        const routed = routeFor(deps.routes, policy, req.model);
        if (routed instanceof ProxyError) throw routed;
        entry = routed;
        provider = entry.provider;
        // Usage, metrics and traces name the model that serves, not the alias the caller sent.
        model = entry.model;
        span?.routed(model, entry, req.forward);
        flying = deps.metrics.started(model, provider);
        const refused = deps.budgets?.check(policy, tags);
        if (refused) {
          deps.metrics.budgetRefused.inc({ scope: refused.scope });
          throw refused.error;
        }

        const { signal } = input;
        const betas = input.header('anthropic-beta');
        const call = {
          body: req.forward,
          stream: req.stream,
          clientWantsUsage: req.includeUsage,
          signal,
          ...(betas
            ? {
                betas: betas
                  .split(',')
                  .map((b) => b.trim())
                  .filter((b) => b !== ''),
              }
            : {}),
        };
        // The model itself, then its fallbacks (not theirs: no chains, no loops).
        const chain: RouteEntry[] = [entry];
        for (const name of entry.fallback ?? []) {
          const f = deps.routes.lookup(name);
          if (f && !chain.includes(f) && mayCall(policy, f.model)) chain.push(f);
        }
        let result: UpstreamResult | undefined;
        let first: ProxyError | undefined;
        const failed: string[] = [];
        for (const [i, target] of chain.entries()) {
          try {
            result = await callRoute(
              endpoint,
              target,
              call.body.model === target.model ? call : { ...call, body: { ...call.body, model: target.model } },
              span,
            );
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
        const headers: Record<string, string> = {
          'x-request-id': requestId,
          ...rateHeaders(rate, admission),
          ...(model !== req.model ? { 'x-gateway-fallback': model } : {}),
        };
        if (result.kind === 'json') {
          account(result.status, result.usage);
          return {
            kind: 'json',
            status: 200,
            headers: { 'content-type': 'application/json', ...headers },
            body: result.raw ?? JSON.stringify(result.body),
          };
        }
        deps.usage.begin?.(recordOf(Date.now(), 200, performance.now() - started));
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
        return {
          kind: 'stream',
          status: 200,
          headers: {
            'content-type': 'text/event-stream; charset=utf-8',
            'cache-control': 'no-cache',
            connection: 'keep-alive',
            ...headers,
          },
          body: result.body,
        };
      } catch (err) {
        if (err instanceof ProxyError) {
          account(err.status, undefined, { errorType: err.code });
          return errorOutput(
            rate.requestsPerSecond > 0 && err.status !== 429
              ? new ProxyError(err.status, err.type, err.code, err.message, err.param, {
                  ...err.headers,
                  ...rateHeaders(rate, admission),
                })
              : err,
            requestId,
            dialect,
          );
        }
        account(500, undefined, { errorType: 'internal_error' });
        deps.onError?.(err, requestId);
        return errorOutput(internalError(requestId), requestId, dialect);
      } finally {
        // By now the body went to the upstream (or was refused): its memory is no longer held.
        if (reserved > 0) deps.budget?.give(reserved);
      }
    };
  const handlers = {} as Record<EndpointName, EndpointHandler>;
  // Requests being handled (not streams being relayed): the usage spool groups the writes of
  // concurrent ones into one per event-loop turn, and writes a lone one at once.
  let handling = 0;
  for (const endpoint of Object.values(ENDPOINTS)) {
    const handler = handle(endpoint);
    handlers[endpoint.name] = async (input) => {
      handling += 1;
      let out: PipelineOutput;
      try {
        out = await handler(input);
      } finally {
        handling -= 1;
      }
      const durable = deps.usage.durable?.(handling === 0);
      if (durable) out.durable = durable;
      return out;
    };
  }
  return handlers;
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

export const tooLarge = (limit: number) =>
  new ProxyError(413, 'invalid_request_error', 'request_too_large', `the request body is larger than ${limit} bytes`);

export const unreadable = () =>
  new ProxyError(
    400,
    'invalid_request_error',
    'body_unreadable',
    'the request body could not be read to its end (the connection broke off)',
  );

/** Content-Length over the limit: refused before a byte of the body is read. */
export function declaredTooLarge(contentLength: string | undefined, limit: number): ProxyError | undefined {
  if (contentLength === undefined) return undefined;
  const n = Number(contentLength);
  return Number.isFinite(n) && n > limit ? tooLarge(limit) : undefined;
}

/** Reads a body stream as UTF-8, stopping (413) as soon as it passes `limit` bytes. */
export async function readLimited(
  chunks: AsyncIterable<Uint8Array>,
  limit: number,
  contentLength: string | undefined,
  grow?: (size: number) => void,
): Promise<string> {
  const declared = declaredTooLarge(contentLength, limit);
  if (declared) throw declared;
  const parts: Uint8Array[] = [];
  let size = 0;
  try {
    for await (const chunk of chunks) {
      size += chunk.byteLength;
      if (size > limit) throw tooLarge(limit);
      grow?.(size);
      parts.push(chunk);
    }
  } catch (err) {
    if (err instanceof ProxyError) throw err;
    throw unreadable();
  }
  return Buffer.concat(parts, size).toString('utf8');
}
