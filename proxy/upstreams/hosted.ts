import { Agent, type Dispatcher } from 'undici';
import { CredentialError, type HostedCredentials } from '../../crds/providers/credentials.js';
import type { HostedTarget, ProviderTarget } from '../../crds/providers/provider.js';
import { classify, type ProviderProblem } from '../../crds/providers/provider.js';
import { HOSTED_PROVIDERS } from '../../crds/providers/table.js';
import { DIALECTS, type Dialect } from '../endpoints/dialects.js';
import { ProxyError } from '../endpoints/errors.js';
import { type ExternalRoute, type ExternalRouteOf, narrowTarget } from '../routing/routes.js';
import { exchangeStreamed, exchangeWhole, type StreamedAnswer, type WholeAnswer } from './dispatch.js';
import { PASS_THROUGH, withUsage } from './openai-compatible-dialects.js';
import { SseRelay } from './sse-relay.js';
import { transportError } from './transport-errors.js';
import {
  type UpstreamCall as AnyUpstreamCall,
  DEFAULT_TIMEOUTS,
  type Timeouts,
  type Upstream,
  type UpstreamResult,
} from './upstream.js';

type HostedRoute = ExternalRouteOf<HostedTarget>;
type UpstreamCall = AnyUpstreamCall<HostedRoute>;
const isHostedTarget = (t: ProviderTarget): t is HostedTarget => t.type !== 'bedrock';
const hostedRoute = (route: ExternalRoute): HostedRoute => narrowTarget(route, isHostedTarget);

/**
 * Hosted providers other than Bedrock (crds/providers/): one upstream for all of them, each
 * provider's module saying where a call goes, how its body is addressed and what its errors
 * mean. The call is the caller's body in a dialect the model speaks natively (translated before
 * it gets here where it was not), with the provider's credentials; the answer and its stream
 * pass through event by event, usage read from the provider's own counts as for in-cluster
 * servers (openai-compatible-dialects.ts reads each dialect's). Chat and completions streams
 * always ask for the usage chunk and drop it again when the client did not.
 */

function nameOf(call: Pick<UpstreamCall, 'route'>): string {
  return `${HOSTED_PROVIDERS[call.route.target.type].label} (${call.route.provider})`;
}

/** Response headers a provider's rate limiting sends, passed to the caller with its 429. */
const RATE_HEADERS = /^(retry-after|retry-after-ms|x-ratelimit-[a-z-]+|anthropic-ratelimit-[a-z-]+)$/;

function problemError(
  p: Pick<ProviderProblem, 'status' | 'type' | 'code' | 'message'>,
  headers: Record<string, string>,
) {
  return new ProxyError(
    p.status as 400,
    p.type,
    p.code,
    p.message,
    p.code === 'model_not_found' ? 'model' : null,
    headers,
  );
}

function statusError(
  answer: Pick<WholeAnswer, 'status' | 'headers' | 'text'>,
  call: Pick<UpstreamCall, 'route'>,
): ProxyError {
  let body: unknown;
  try {
    body = JSON.parse(answer.text);
  } catch {
    body = undefined;
  }
  const header = (name: string) => {
    const v = answer.headers[name];
    return Array.isArray(v) ? v[0] : v;
  };
  const provider = HOSTED_PROVIDERS[call.route.target.type];
  const problem = classify(
    provider,
    answer.status,
    body,
    { provider: nameOf(call), model: call.route.model },
    retryAfterOf(header),
  );
  const headers: Record<string, string> = {};
  if (problem.status === 429) {
    for (const [k, v] of Object.entries(answer.headers)) {
      const value = Array.isArray(v) ? v[0] : v;
      if (value !== undefined && RATE_HEADERS.test(k)) headers[k === 'retry-after' ? 'Retry-After' : k] = value;
    }
    if (problem.retryAfterSeconds !== undefined) headers['Retry-After'] = String(problem.retryAfterSeconds);
  }
  return problemError(problem, headers);
}

/** Seconds to wait: retry-after, or Azure's retry-after-ms rounded up. */
function retryAfterOf(header: (name: string) => string | undefined): string | null {
  const ms = Number(header('retry-after-ms'));
  if (Number.isFinite(ms) && ms > 0) return String(Math.ceil(ms / 1000));
  return header('retry-after') ?? null;
}

/** Chat and completions streams carry usage only when asked (where the provider's API version can). */
function prepare(
  dialect: Dialect,
  body: Record<string, unknown>,
  stream: boolean,
  usage: boolean,
): Record<string, unknown> {
  if (!stream || (dialect !== 'openai-chat' && dialect !== 'openai-completions')) return body;
  if (!usage) {
    // An API version without stream_options refuses it, the caller's included.
    const { stream_options: _, ...rest } = body;
    return rest;
  }
  return withUsage(body, true);
}

export interface HostedUpstreamOptions {
  credentials: HostedCredentials;
  timeouts?: Timeouts;
}

export class HostedUpstream implements Upstream<ExternalRoute> {
  private readonly timeouts: Timeouts;
  private readonly agent: Dispatcher;

  constructor(private readonly opts: HostedUpstreamOptions) {
    this.timeouts = opts.timeouts ?? DEFAULT_TIMEOUTS;
    this.agent = new Agent({ connect: { timeout: this.timeouts.connectMs }, keepAliveTimeout: 30_000 });
  }

  async close(): Promise<void> {
    await this.agent.close();
  }

  dialects(external: ExternalRoute): readonly Dialect[] {
    const route = hostedRoute(external);
    return HOSTED_PROVIDERS[route.target.type].dialects(route.target);
  }

  /** The provider's credentials as headers; a credential problem is the caller's 502, in the same words as the condition. */
  private async auth(call: Pick<UpstreamCall, 'route'>): Promise<Record<string, string>> {
    try {
      return await this.opts.credentials.headers(call.route.identity, HOSTED_PROVIDERS[call.route.target.type]);
    } catch (err) {
      if (err instanceof CredentialError) {
        throw new ProxyError(502, 'api_error', 'provider_credentials', `${nameOf(call)}: ${err.problem.message}`);
      }
      throw err;
    }
  }

  /** One whole exchange: the provider's JSON answer, or the caller's error for a failed call, an error status or a body that is not JSON. */
  private async whole(
    call: Pick<UpstreamCall, 'route'>,
    exchange: Dispatcher.DispatchOptions,
    signal: AbortSignal,
  ): Promise<{ json: unknown; text: string }> {
    let answer: WholeAnswer;
    try {
      answer = await exchangeWhole(this.agent, exchange, signal);
    } catch (err) {
      throw transportError(err, nameOf(call), this.timeouts.idleMs);
    }
    if (answer.status >= 400) throw statusError(answer, call);
    try {
      return { json: JSON.parse(answer.text) as unknown, text: answer.text };
    } catch {
      throw new ProxyError(502, 'api_error', 'upstream_error', `${nameOf(call)} sent a body that is not JSON`);
    }
  }

  /** Anthropic's count_tokens where the provider counts (Anthropic, Claude on Vertex); undefined elsewhere. */
  async countTokens(
    external: ExternalRoute,
    withMax: Record<string, unknown>,
    signal: AbortSignal,
  ): Promise<number | undefined> {
    const route = hostedRoute(external);
    // count_tokens refuses max_tokens.
    const { max_tokens: _max, ...body } = withMax;
    const provider = HOSTED_PROVIDERS[route.target.type];
    const wire = provider.countTokens?.(route.target, body);
    if (!wire || route.target.family !== 'anthropic') return undefined;
    const call = { route };
    const auth = await this.auth(call);
    const url = new URL(wire.url);
    const { json } = await this.whole(
      call,
      {
        origin: url.origin,
        path: `${url.pathname}${url.search}`,
        method: 'POST',
        headers: { 'content-type': 'application/json', ...provider.fixedHeaders, ...wire.headers, ...auth },
        body: JSON.stringify(wire.body),
        headersTimeout: this.timeouts.firstByteMs,
        bodyTimeout: this.timeouts.firstByteMs,
      },
      signal,
    );
    const counted = (json as { input_tokens?: unknown } | null)?.input_tokens;
    if (typeof counted !== 'number') {
      throw new ProxyError(
        502,
        'api_error',
        'upstream_error',
        `${nameOf(call)} answered count_tokens without input_tokens`,
      );
    }
    return counted;
  }

  async send(external: AnyUpstreamCall<ExternalRoute>): Promise<UpstreamResult> {
    const call: UpstreamCall = { ...external, route: hostedRoute(external.route) };
    const started = performance.now();
    const provider = HOSTED_PROVIDERS[call.route.target.type];
    const refused = provider.refuse?.(call.route.target, call.dialect, call.body);
    if (refused) throw new ProxyError(400, 'invalid_request_error', 'unsupported_content', refused, 'messages');
    const auth = await this.auth(call);
    const usage = provider.streamUsage?.(call.route.target) ?? true;
    const wire = provider.request(
      call.route.target,
      call.dialect,
      prepare(call.dialect, call.body, call.stream, usage),
      call.stream,
    );
    const url = new URL(wire.url);
    const { idleMs, firstByteMs, responseMs } = this.timeouts;
    const limit = call.stream ? firstByteMs : Math.max(firstByteMs, responseMs);
    const exchange = {
      origin: url.origin,
      path: `${url.pathname}${url.search}`,
      method: 'POST' as const,
      headers: {
        'content-type': 'application/json',
        accept: call.stream ? 'text/event-stream' : 'application/json',
        ...provider.fixedHeaders,
        ...(call.betas?.length && call.dialect === 'anthropic-messages'
          ? { 'anthropic-beta': call.betas.join(',') }
          : {}),
        ...wire.headers,
        ...call.headers,
        ...auth,
      },
      body: JSON.stringify(wire.body),
      headersTimeout: limit,
    };
    const reader = PASS_THROUGH[call.dialect];
    if (!call.stream) {
      const { json, text } = await this.whole(call, { ...exchange, bodyTimeout: limit }, call.signal);
      const usage = reader.usageOf(json);
      return { kind: 'json', status: 200, body: json, raw: text, ...(usage ? { usage } : {}) };
    }
    let res: StreamedAnswer;
    try {
      res = await exchangeStreamed(this.agent, { ...exchange, bodyTimeout: idleMs }, call.signal);
    } catch (err) {
      throw transportError(err, nameOf(call), idleMs);
    }
    if (res.status >= 400) {
      const text = await res.body.text().catch(() => '');
      throw statusError({ status: res.status, headers: res.headers, text }, call);
    }
    const spec = DIALECTS[call.dialect];
    const relay = new SseRelay(
      res.body,
      {
        reader: reader.reader(call.clientWantsUsage),
        streamError: (err) => spec.streamError(err),
        ...(spec.streamEnd ? { streamEnd: spec.streamEnd } : {}),
      },
      {
        transport: (err) => transportError(err, nameOf(call), idleMs),
        broken: () =>
          new ProxyError(502, 'api_error', 'upstream_stream_broken', `${nameOf(call)} ended the stream early`),
        unreadable: () =>
          new ProxyError(502, 'api_error', 'upstream_error', `${nameOf(call)} sent an event that is not JSON`),
      },
      started,
      call.signal,
    );
    return { kind: 'stream', body: relay, outcome: relay.settled };
  }
}
