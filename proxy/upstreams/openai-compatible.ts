import { Agent, type Dispatcher } from 'undici';
import type { EngineName } from '../../crds/engines/engine.js';
import { ENGINES, engineFor } from '../../crds/engines/table.js';
import { callerDialect, DIALECTS, type Dialect } from '../endpoints/dialects.js';
import { ProxyError } from '../endpoints/errors.js';
import { prefixKey } from '../serving/prefix-affinity.js';
import { type Lease, ReplicaPools } from '../serving/replica-pool.js';
import type { InClusterRoute } from '../serving/routes.js';
import {
  exchangeStreamed,
  exchangeWhole,
  type StreamedAnswer,
  type StreamedBody,
  type WholeAnswer,
} from './dispatch.js';
import { PASS_THROUGH } from './openai-compatible-dialects.js';
import { tellCallerRetryAfter } from './resilience.js';
import { SseRelay } from './sse-relay.js';
import { errorCode, transportError } from './transport-errors.js';
import type { UpstreamCall as AnyUpstreamCall, Timeouts, Upstream, UpstreamResult } from './upstream.js';

type UpstreamCall = AnyUpstreamCall<InClusterRoute>;

import { DEFAULT_TIMEOUTS } from './upstream.js';

/**
 * OpenAI-compatible upstreams (Ollama's /v1, which also speaks Responses and Anthropic's
 * Messages): the request passes through in the caller's dialect as it came (the gateway's own
 * fields removed), streams are relayed event by event with backpressure, and usage is taken
 * from the upstream's own counts (openai-compatible-dialects.ts says where, per dialect). For
 * chat streams the gateway always asks for the usage chunk and drops it again when the client
 * did not ask for it.
 *
 * Calls go through undici's pooled keep-alive agent: its connect, headers and body timeouts
 * are exactly the gateway's connect, first-byte and idle timeouts.
 */

function upstreamName(call: UpstreamCall): string {
  return `the model server of ${call.route.model} (${call.route.provider})`;
}

/** An upstream error status mapped to what the client gets; 429 and 504 pass through. */
function statusError(status: number, headers: WholeAnswer['headers'], text: string, call: UpstreamCall): ProxyError {
  const retry = headers['retry-after'];
  const retryAfter = Array.isArray(retry) ? retry[0] : retry;
  let detail = '';
  try {
    const parsed = JSON.parse(text) as { error?: { message?: string } | string };
    detail = typeof parsed.error === 'string' ? parsed.error : (parsed.error?.message ?? '');
  } catch {
    // not JSON: the status says enough
  }
  const what = `${upstreamName(call)} answered ${status}${detail ? `: ${detail.slice(0, 300)}` : ''}`;
  if (status === 429) {
    const err = new ProxyError(
      429,
      'rate_limit_error',
      'upstream_rate_limited',
      what,
      null,
      retryAfter ? { 'Retry-After': retryAfter } : {},
    );
    // Ollama's full queue (OLLAMA_MAX_QUEUE) names no time: its queue drains in seconds.
    return tellCallerRetryAfter(err, 1);
  }
  if (status === 404) {
    // The route exists on every Ollama: a 404 there means the server does not have the model.
    // The deployment is broken, not the server busy: never retried, but fallbacks may serve.
    return new ProxyError(
      404,
      'invalid_request_error',
      'model_not_found',
      `the model ${call.route.model} is routed to ${call.route.provider}, but its model server does not have it (${detail.slice(0, 200) || 'not found'}); the deployment's model server must pull it`,
      'model',
    );
  }
  if (status === 400 || status === 422) return new ProxyError(400, 'invalid_request_error', 'upstream_rejected', what);
  if (status === 504 || status === 408) return new ProxyError(504, 'timeout_error', 'upstream_timeout', what);
  return new ProxyError(502, 'api_error', 'upstream_error', what);
}

export interface OpenAICompatibleOptions {
  timeouts?: Timeouts;
  /** Maps a route's base URL to where to connect (tests stand a double behind a Service name). */
  resolve?: (baseUrl: string) => string;
  /** Balances over a model's replicas and holds what finds no free slot; one without waking by default. */
  pools?: ReplicaPools;
  /** Prefix-aware placement of long prompts (default on); off: least in flight only, as before it (benchmarks compare the two). */
  prefixAffinity?: boolean;
}

/** The dialects each engine serves natively, by engine: the rest are translated before the call. */
const NATIVE = new Map<EngineName, readonly Dialect[]>(
  Object.values(ENGINES).map((e) => [e.name, Object.keys(e.dialects) as Dialect[]]),
);

/**
 * Transport failures that say the replica is not there (connection refused, no route, no
 * answer to the connection), before anything was sent: its pool sends the retry and new calls
 * to other replicas for a while. Decided on the transport's own code, never on a call the
 * client abandoned (that is not the replica's doing).
 */
const CONNECT_FAILURES = new Set(['ECONNREFUSED', 'EHOSTUNREACH', 'ENETUNREACH', 'UND_ERR_CONNECT_TIMEOUT']);

export class OpenAICompatibleUpstream implements Upstream<InClusterRoute> {
  private readonly timeouts: Timeouts;
  private readonly resolve: (baseUrl: string) => string;
  private readonly agent: Dispatcher;
  readonly pools: ReplicaPools;
  private readonly prefixAffinity: boolean;

  constructor(opts: OpenAICompatibleOptions = {}) {
    this.timeouts = opts.timeouts ?? DEFAULT_TIMEOUTS;
    this.resolve = opts.resolve ?? ((u) => u);
    this.prefixAffinity = opts.prefixAffinity ?? true;
    this.pools =
      opts.pools ?? new ReplicaPools({ maxQueued: 1000, queueMs: this.timeouts.firstByteMs, lookup: () => undefined });
    // No cap on connections per origin: the pool above holds each replica's calls to its slots
    // and queues the rest where they are bounded, timed and metered. A cap here would queue them
    // a second time, unseen (it was 256 and held every stream past that in undici's own queue).
    this.agent = new Agent({
      connect: { timeout: this.timeouts.connectMs },
      keepAliveTimeout: 30_000,
    });
  }

  async close(): Promise<void> {
    await this.agent.close();
  }

  /** Replica addresses change as pods come and go: parsed once each, forgotten past a bound. */
  private readonly urls = new Map<string, URL>();

  private parsedUrl(text: string): URL {
    let url = this.urls.get(text);
    if (!url) {
      if (this.urls.size >= 1_000) this.urls.clear();
      url = new URL(text);
      this.urls.set(text, url);
    }
    return url;
  }

  /** What the route's engine serves natively (Ollama's and vLLM's OpenAI servers: every caller dialect). */
  dialects(route: InClusterRoute): readonly Dialect[] {
    return NATIVE.get(route.engine ?? 'Ollama') ?? [];
  }

  async send(call: UpstreamCall): Promise<UpstreamResult> {
    const started = performance.now();
    const lease = await this.pools.acquire(
      call.route,
      call.signal,
      // A prefix key only where there is a replica to choose (the one-replica path stays as it was)
      // and the engine exports its queue and cache (vLLM): without them (Ollama) least in flight.
      this.prefixAffinity && call.route.loadSignals && (call.route.replicas?.length ?? 0) > 1
        ? prefixKey(callerDialect(call.dialect), call.body)
        : undefined,
    );
    try {
      const result = await this.call(call, lease, started);
      if (result.kind === 'json') lease.release();
      else void result.outcome.finally(lease.release);
      return result;
    } catch (err) {
      lease.release();
      throw err;
    }
  }

  private async call(call: UpstreamCall, lease: Lease, started: number): Promise<UpstreamResult> {
    const baseUrl = lease.url;
    // The engine serves the callers' dialects it lists (dialects() above), the only ones the pipeline sends it.
    const name = callerDialect(call.dialect);
    const dialect = PASS_THROUGH[name];
    const native = engineFor(call.route).dialects[name];
    if (!native)
      throw new ProxyError(502, 'api_error', 'upstream_error', `${upstreamName(call)} does not serve ${name}`);
    const body = dialect.prepare(native.prepare ? native.prepare(call.body, call.route) : call.body, call.stream);
    const firstByteMs = call.route.timeouts?.firstByteMs ?? this.timeouts.firstByteMs;
    const idleMs = call.route.timeouts?.idleMs ?? this.timeouts.idleMs;
    const limit = call.stream ? firstByteMs : Math.max(firstByteMs, this.timeouts.responseMs);
    const failed = (err: unknown): ProxyError => {
      if (!call.signal.aborted && CONNECT_FAILURES.has(errorCode(err) ?? '')) lease.unreachable();
      return transportError(err, upstreamName(call), idleMs);
    };
    // Serialized outside the try: a failure here is the gateway's, not a transport error.
    const payload = JSON.stringify(body);
    const url = this.parsedUrl(`${this.resolve(baseUrl)}${native.path}`);
    const headers = {
      'content-type': 'application/json',
      accept: call.stream ? 'text/event-stream' : 'application/json',
      ...call.headers,
    };
    const exchange = {
      origin: url.origin,
      path: `${url.pathname}${url.search}`,
      method: 'POST' as const,
      headers,
      body: payload,
      headersTimeout: limit,
    };
    if (!call.stream) {
      let answer: WholeAnswer;
      try {
        answer = await exchangeWhole(this.agent, { ...exchange, bodyTimeout: limit }, call.signal);
      } catch (err) {
        throw failed(err);
      }
      if (answer.status >= 400) throw statusError(answer.status, answer.headers, answer.text, call);
      let json: unknown;
      try {
        json = JSON.parse(answer.text);
      } catch {
        throw new ProxyError(502, 'api_error', 'upstream_error', `${upstreamName(call)} sent a body that is not JSON`);
      }
      const usage = dialect.usageOf(json);
      return { kind: 'json', status: 200, body: json, raw: answer.text, ...(usage ? { usage } : {}) };
    }
    let res: StreamedAnswer;
    try {
      // bodyTimeout: the longest silence between chunks.
      res = await exchangeStreamed(this.agent, { ...exchange, bodyTimeout: idleMs }, call.signal);
    } catch (err) {
      throw failed(err);
    }

    if (res.status >= 400) throw statusError(res.status, res.headers, await res.body.text().catch(() => ''), call);

    return this.relay(res.body, call, started, idleMs);
  }

  private relay(upstream: StreamedBody, call: UpstreamCall, started: number, idleMs: number): UpstreamResult {
    const name = callerDialect(call.dialect);
    const spec = DIALECTS[name];
    const relay = new SseRelay(
      upstream,
      {
        reader: PASS_THROUGH[name].reader(call.clientWantsUsage),
        streamError: (err) => spec.streamError(err),
        ...(spec.streamEnd ? { streamEnd: spec.streamEnd } : {}),
      },
      {
        transport: (err) => transportError(err, upstreamName(call), idleMs),
        broken: () =>
          new ProxyError(502, 'api_error', 'upstream_stream_broken', `${upstreamName(call)} ended the stream early`),
        unreadable: () =>
          new ProxyError(502, 'api_error', 'upstream_error', `${upstreamName(call)} sent an event that is not JSON`),
      },
      started,
      call.signal,
    );
    return { kind: 'stream', body: relay, outcome: relay.settled };
  }
}
