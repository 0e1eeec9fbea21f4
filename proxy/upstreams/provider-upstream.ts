import { Agent, type Dispatcher } from 'undici';
import type { OutgoingRequest, ProviderCredentials } from '../../crds/providers/credentials.js';
import {
  CredentialError,
  headerOf,
  isFanOut,
  isRefusal,
  type ProblemContext,
  type ProviderFailure,
  type ProviderModule,
  type ProviderProblem,
  type WireAnswer,
  type WireFanOut,
  type WireRequest,
} from '../../crds/providers/provider.js';
import { PROVIDERS } from '../../crds/providers/table.js';
import { callerDialect, DIALECTS, type Dialect } from '../endpoints/dialects.js';
import { ProxyError } from '../endpoints/errors.js';
import type { ExternalRoute } from '../serving/routes.js';
import { exchangeStreamed, exchangeWhole, type StreamedAnswer, type WholeAnswer } from './dispatch.js';
import { type EventStreamErrors, EventStreamRelay } from './event-stream.js';
import { withUsage } from './openai-compatible-dialects.js';
import { PROVIDER_DIALECTS } from './provider-dialects.js';
import { tellCallerRetryAfter } from './resilience.js';
import { SseRelay } from './sse-relay.js';
import { transportError } from './transport-errors.js';
import { DEFAULT_TIMEOUTS, type Timeouts, type Upstream, type UpstreamCall, type UpstreamResult } from './upstream.js';

/**
 * Every registered provider's upstream, Bedrock's included: one HTTP client (undici, the
 * gateway's timeouts and transport errors, no pool that caps or queues: no-hidden-queue.test.ts),
 * each provider's module (crds/providers/) saying where a call goes, how its body is addressed,
 * how it is authorized (a key or token header, or a SigV4 signature) and what its errors mean.
 * The call is the caller's body in a dialect the model speaks natively (translated before it gets
 * here where it was not); the answer and its stream pass through event by event, usage read from
 * the provider's own counts (provider-dialects.ts). An SSE stream goes through the SSE relay, an
 * AWS event stream through the event-stream relay, whose events the caller's translator reads
 * (event-stream.ts). A module may address one request as several calls (a fan-out) and may call
 * a stream for a caller that wants the answer whole, or the reverse: the dialect's table adds the
 * stream up, or turns the answer into its events.
 */

type Call = UpstreamCall<ExternalRoute>;

const moduleOf = (route: ExternalRoute): ProviderModule => PROVIDERS[route.target.type];

function nameOf(route: ExternalRoute): string {
  return `${moduleOf(route).label} (${route.provider})`;
}

/** Response headers a provider's rate limiting sends, passed to the caller with its 429. */
const RATE_HEADERS = /^(retry-after|retry-after-ms|x-ratelimit-[a-z-]+|anthropic-ratelimit-[a-z-]+)$/;

/** When to retry a provider's 429 or 503 that named no time (Bedrock's throttling rows say 5). */
const PROVIDER_RETRY_AFTER_SECONDS = 5;
/** Providers' 429s for a spent quota or credit (OpenAI's insufficient_quota, Bedrock's service quota). */
const SPENT_QUOTA = new Set(['provider_quota_exceeded', 'upstream_quota_exceeded']);

/** The caller's error for a classified problem, Retry-After where the problem gives one. */
function problemError(p: ProviderProblem, answerHeaders: WholeAnswer['headers'] = {}): ProxyError {
  const headers: Record<string, string> = {};
  if (p.status === 429) {
    for (const [k, v] of Object.entries(answerHeaders)) {
      const value = Array.isArray(v) ? v[0] : v;
      if (value !== undefined && RATE_HEADERS.test(k)) headers[k === 'retry-after' ? 'Retry-After' : k] = value;
    }
  }
  if (p.retryAfterSeconds !== undefined) headers['Retry-After'] = String(p.retryAfterSeconds);
  // A 429 or 503 says "retry": the caller is told when, where the provider said nothing. Not for
  // a spent quota: waiting does not help, and a Retry-After would hold the SDKs' retries on it.
  const retryable = p.status === 503 || (p.status === 429 && !SPENT_QUOTA.has(p.code));
  const err = new ProxyError(
    p.status as 400,
    p.type,
    p.code,
    p.message,
    p.code === 'model_not_found' ? 'model' : null,
    headers,
  );
  return retryable ? tellCallerRetryAfter(err, PROVIDER_RETRY_AFTER_SECONDS) : err;
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

const notJson = (route: ExternalRoute) =>
  new ProxyError(502, 'api_error', 'upstream_error', `${nameOf(route)} sent a body that is not JSON`);

export interface ProviderUpstreamOptions {
  credentials: ProviderCredentials;
  timeouts?: Timeouts;
}

export class ProviderUpstream implements Upstream<ExternalRoute> {
  private readonly timeouts: Timeouts;
  private readonly agent: Dispatcher;

  constructor(private readonly opts: ProviderUpstreamOptions) {
    this.timeouts = opts.timeouts ?? DEFAULT_TIMEOUTS;
    this.agent = new Agent({ connect: { timeout: this.timeouts.connectMs }, keepAliveTimeout: 30_000 });
  }

  async close(): Promise<void> {
    await this.agent.close();
  }

  dialects(route: ExternalRoute): readonly Dialect[] {
    return moduleOf(route).dialects(route.target);
  }

  /** Where a failure of this call happened, for the module's error table. */
  private context(route: ExternalRoute, streaming: boolean): ProblemContext {
    return { identity: route.identity, stage: 'call', provider: route.provider, model: route.model, streaming };
  }

  private problem(route: ExternalRoute, failure: ProviderFailure, streaming: boolean): ProxyError {
    return problemError(moduleOf(route).problem(failure, this.context(route, streaming)));
  }

  /**
   * The dispatch of one wire request, authorized with the provider's credentials (a credential
   * problem is the caller's error, in the same words as the provider's condition).
   */
  private async dispatchOf(
    call: Pick<Call, 'route' | 'headers'>,
    wire: WireRequest,
    streams: boolean,
    limit: number,
  ): Promise<Dispatcher.DispatchOptions> {
    const module = moduleOf(call.route);
    const url = new URL(wire.url);
    const body = JSON.stringify(wire.body);
    const request: OutgoingRequest = {
      method: 'POST',
      url: wire.url,
      headers: {
        'content-type': 'application/json',
        accept: streams ? 'text/event-stream' : 'application/json',
        ...module.fixedHeaders,
        ...wire.headers,
      },
      body,
    };
    let headers: Record<string, string>;
    try {
      headers = await this.opts.credentials.authorize(call.route.identity, module, request);
    } catch (err) {
      if (err instanceof CredentialError) {
        throw this.problem(call.route, { kind: 'credentials', problem: err.problem }, streams);
      }
      throw err;
    }
    return {
      origin: url.origin,
      path: `${url.pathname}${url.search}`,
      method: 'POST',
      // The trace context travels unsigned beside what the credentials cover.
      headers: { ...headers, ...call.headers },
      body,
      headersTimeout: limit,
    };
  }

  /** One whole exchange: the provider's JSON answer, or the caller's error for a failed call, an error status or a body that is not JSON. */
  private async whole(
    call: Pick<Call, 'route' | 'headers'>,
    wire: WireRequest,
    signal: AbortSignal,
    limit: number,
    streaming = false,
  ): Promise<WireAnswer & { text: string }> {
    const exchange = await this.dispatchOf(call, wire, false, limit);
    let answer: WholeAnswer;
    try {
      answer = await exchangeWhole(this.agent, { ...exchange, bodyTimeout: limit }, signal);
    } catch (err) {
      throw transportError(err, nameOf(call.route), this.timeouts.idleMs);
    }
    if (answer.status >= 400) throw this.statusError(call.route, answer, streaming);
    try {
      return { json: JSON.parse(answer.text) as unknown, text: answer.text, headers: answer.headers };
    } catch {
      throw notJson(call.route);
    }
  }

  private statusError(route: ExternalRoute, answer: WholeAnswer, streaming: boolean): ProxyError {
    let body: unknown;
    try {
      body = JSON.parse(answer.text);
    } catch {
      body = undefined;
    }
    const failure: ProviderFailure = { kind: 'answer', status: answer.status, headers: answer.headers, body };
    return problemError(moduleOf(route).problem(failure, this.context(route, streaming)), answer.headers);
  }

  /** Anthropic's count_tokens where the provider counts (Anthropic, Claude on Vertex and on Bedrock); undefined elsewhere. */
  async countTokens(
    route: ExternalRoute,
    withMax: Record<string, unknown>,
    signal: AbortSignal,
  ): Promise<number | undefined> {
    // count_tokens refuses max_tokens.
    const { max_tokens: _max, ...body } = withMax;
    const module = moduleOf(route);
    const wire = module.countTokens?.(route.target, body, route.baseModel);
    if (!wire || route.target.family !== 'anthropic') return undefined;
    const { json } = await this.whole({ route }, wire, signal, this.timeouts.firstByteMs);
    const counted = (json as Record<string, unknown> | null)?.[module.countedIn ?? 'input_tokens'];
    if (typeof counted !== 'number') {
      throw new ProxyError(
        502,
        'api_error',
        'upstream_error',
        `${nameOf(route)} answered count_tokens without a count`,
      );
    }
    return counted;
  }

  async send(call: Call): Promise<UpstreamResult> {
    const started = performance.now();
    const { route } = call;
    const module = moduleOf(route);
    const usage = module.streamUsage?.(route.target) ?? true;
    const wire = module.request(
      route.target,
      call.dialect,
      prepare(call.dialect, call.body, call.stream, usage),
      call.stream,
      call.betas,
    );
    if (isRefusal(wire)) {
      throw new ProxyError(
        400,
        'invalid_request_error',
        wire.code ?? 'unsupported_content',
        wire.refused,
        wire.param ?? 'messages',
      );
    }
    if (isFanOut(wire)) return this.fanOut(call, wire);
    const streams = wire.stream ?? call.stream;
    const { idleMs, firstByteMs, responseMs } = this.timeouts;
    if (!streams) {
      const { json, text } = await this.whole(call, wire, call.signal, Math.max(firstByteMs, responseMs));
      const dialect = PROVIDER_DIALECTS[call.dialect];
      const usage = dialect.usageOf(json);
      if (call.stream && dialect.eventsOf) {
        // A streaming caller of a model called whole (it does not stream): the answer as one stream.
        const relay = EventStreamRelay.of(dialect.eventsOf(json), this.eventErrors(call, false), started);
        return { kind: 'stream', body: relay, outcome: relay.settledOutcome };
      }
      return { kind: 'json', status: 200, body: json, raw: text, ...(usage ? { usage } : {}) };
    }
    let res: StreamedAnswer;
    try {
      const exchange = await this.dispatchOf(call, wire, true, firstByteMs);
      res = await exchangeStreamed(this.agent, { ...exchange, bodyTimeout: idleMs }, call.signal);
    } catch (err) {
      if (err instanceof ProxyError) throw err;
      throw transportError(err, nameOf(route), idleMs);
    }
    if (res.status >= 400) {
      const text = await res.body.text().catch(() => '');
      throw this.statusError(route, { status: res.status, headers: res.headers, text }, true);
    }
    const type = headerOf(res.headers, 'content-type') ?? '';
    if (type.includes('vnd.amazon.eventstream')) return this.events(call, res, started);
    return this.sse(call, res, started);
  }

  /** The errors of an AWS event stream of this call, in the module's words where they are the provider's. */
  private eventErrors(call: Call, streaming: boolean): EventStreamErrors {
    const { route } = call;
    const name = nameOf(route);
    return {
      exception: (type, message) => this.problem(route, { kind: 'exception', type, message }, streaming),
      transport: (err) => transportError(err, name, this.timeouts.idleMs),
      cut: (why) =>
        new ProxyError(
          502,
          'api_error',
          'upstream_stream_broken',
          `${moduleOf(route).label} ended the stream of ${route.model} (${route.provider}) before ${why}; the answer may be incomplete, retry`,
        ),
      malformed: () => new ProxyError(502, 'api_error', 'upstream_error', `${name} sent an event that is not JSON`),
      unread: () =>
        new ProxyError(502, 'api_error', 'upstream_error', `${name} answered ${call.dialect}, which no caller reads`),
    };
  }

  /**
   * An AWS event stream: relayed with the dialect's own pass-through, or left to the caller's
   * translator (Converse), or added up into one answer for a caller that wants it whole.
   */
  private async events(call: Call, res: StreamedAnswer, started: number): Promise<UpstreamResult> {
    const relay = new EventStreamRelay(res.body, this.eventErrors(call, true), started);
    const dialect = PROVIDER_DIALECTS[call.dialect];
    if (call.stream) {
      const passThrough = dialect.events?.();
      if (passThrough) relay.through(passThrough);
      return { kind: 'stream', body: relay, outcome: relay.settledOutcome };
    }
    const whole = dialect.whole?.();
    if (!whole)
      throw new ProxyError(
        502,
        'api_error',
        'upstream_error',
        `${nameOf(call.route)} streamed an answer asked for whole`,
      );
    relay.through(whole);
    while ((await relay.read()) !== undefined) {
      // The events go to `whole`; nothing is written.
    }
    const outcome = await relay.settledOutcome;
    if (outcome.error) throw outcome.error;
    const answer = whole.answer();
    return { kind: 'json', status: 200, body: answer, ...(outcome.usage ? { usage: outcome.usage } : {}) };
  }

  private sse(call: Call, res: StreamedAnswer, started: number): UpstreamResult {
    const { route } = call;
    const { idleMs } = this.timeouts;
    const name = callerDialect(call.dialect);
    const spec = DIALECTS[name];
    const reader = PROVIDER_DIALECTS[name].reader;
    if (!reader) throw new ProxyError(502, 'api_error', 'upstream_error', `${nameOf(route)} streamed ${name} as SSE`);
    const relay = new SseRelay(
      res.body,
      {
        reader: reader(call.clientWantsUsage),
        streamError: (err) => spec.streamError(err),
        ...(spec.streamEnd ? { streamEnd: spec.streamEnd } : {}),
      },
      {
        transport: (err) => transportError(err, nameOf(route), idleMs),
        broken: () =>
          new ProxyError(502, 'api_error', 'upstream_stream_broken', `${nameOf(route)} ended the stream early`),
        unreadable: () =>
          new ProxyError(502, 'api_error', 'upstream_error', `${nameOf(route)} sent an event that is not JSON`),
      },
      started,
      call.signal,
    );
    return { kind: 'stream', body: relay, outcome: relay.settled };
  }

  /**
   * One request as several calls of the provider (Bedrock's embeddings), at most `concurrency`
   * at once; the first failure stops the others from starting more, and the request fails whole.
   */
  private async fanOut(call: Call, wire: WireFanOut): Promise<UpstreamResult> {
    const limit = Math.max(this.timeouts.firstByteMs, this.timeouts.responseMs);
    const answers: WireAnswer[] = new Array(wire.calls.length);
    let next = 0;
    let failed = false;
    const worker = async () => {
      while (!failed && next < wire.calls.length) {
        const i = next++;
        const one = wire.calls[i] as WireRequest;
        try {
          answers[i] = await this.whole(call, one, call.signal, limit);
        } catch (err) {
          failed = true;
          throw err;
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(wire.concurrency, wire.calls.length) }, worker));
    const joined = wire.join(answers);
    if ('unreadable' in joined) throw new ProxyError(502, 'api_error', 'upstream_error', joined.unreadable);
    const usage = PROVIDER_DIALECTS[call.dialect].usageOf(joined.body);
    return { kind: 'json', status: 200, body: joined.body, ...(usage ? { usage } : {}) };
  }
}
