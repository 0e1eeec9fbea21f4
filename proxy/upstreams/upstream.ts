import type { Dialect } from '../endpoints/dialects.js';
import type { ProxyError } from '../endpoints/errors.js';
import type { RouteEntry } from '../serving/routes.js';
import type { StreamBody } from './chunk-source.js';

/**
 * What every upstream takes and gives back. An upstream serves some dialects natively for a
 * route (Upstream.dialects); the pipeline sends it a body in one of them, translated first
 * where the caller spoke another (proxy/translators/), and does auth, tags, routing and usage
 * the same way for all of them.
 */

export interface Usage {
  /** Every prompt token, those read from or written to a prompt cache included. */
  promptTokens: number;
  completionTokens: number;
  /** Of promptTokens, those read from the prompt cache. */
  cachedTokens?: number;
  /** Of promptTokens, those written to the prompt cache (priced apart). */
  cacheWriteTokens?: number;
  /** Of cacheWriteTokens, those written with Anthropic's 1-hour lifetime (priced higher). */
  cacheWrite1hTokens?: number;
  /**
   * The upstream never reported usage (a stream cut by the client, a timeout or a broken
   * connection): the tokens were counted from what the caller received, prompt tokens unknown (0).
   */
  counted?: true;
}

export interface UpstreamCall<R extends RouteEntry = RouteEntry> {
  route: R;
  /** The dialect of `body`: one the upstream serves for the route. */
  dialect: Dialect;
  /** The request body in that dialect, validated, without the gateway's own fields (tags). */
  body: Record<string, unknown>;
  stream: boolean;
  /** The client asked for stream_options.include_usage: the usage chunk is passed on. */
  clientWantsUsage: boolean;
  /** Aborted when the client goes away: the upstream call is cancelled with it. */
  signal: AbortSignal;
  /** Headers for the upstream request: the trace context of its span, when tracing is on. */
  headers?: Record<string, string>;
  /** anthropic-beta flags the caller sent, for upstreams that take Anthropic's body natively. */
  betas?: readonly string[];
}

/** How a stream ended, known once the last byte went to the client (or the client left). */
export interface StreamOutcome {
  usage?: Usage;
  /** ms since the call began until the first content token. */
  firstTokenMs?: number;
  error?: ProxyError;
  clientAborted?: boolean;
}

export type UpstreamResult =
  | {
      kind: 'json';
      status: number;
      body: unknown;
      usage?: Usage;
      /** The body as the upstream sent it, when it goes to the client unchanged (no re-serializing). */
      raw?: string;
      /** Headers of the gateway's own for the caller (count_tokens says whether its count is exact). */
      headers?: Record<string, string>;
    }
  | { kind: 'stream'; body: StreamBody; outcome: Promise<StreamOutcome> };

export interface Upstream<R extends RouteEntry = RouteEntry> {
  /** The dialects it serves natively for the route, preferred first. */
  dialects(route: R): readonly Dialect[];
  /** Resolves with the answer or a stream; rejects with a ProxyError. */
  send(call: UpstreamCall<R>): Promise<UpstreamResult>;
  /**
   * Input tokens of an Anthropic Messages body (no max_tokens, the served model's own id), where
   * the provider counts them exactly; undefined where it does not (the gateway estimates).
   */
  countTokens?(route: R, body: Record<string, unknown>, signal: AbortSignal): Promise<number | undefined>;
}

export interface Timeouts {
  /** To open the TCP connection. */
  connectMs: number;
  /**
   * Until the first byte of a streamed answer. Ollama queues requests beyond its parallelism
   * and sends nothing while they wait, so this must outlast the queue: minutes, not seconds.
   */
  firstByteMs: number;
  /** Until the whole answer, for non-streaming calls (never shorter than firstByteMs). */
  responseMs: number;
  /** Longest silence between two chunks of a stream. */
  idleMs: number;
}

export const DEFAULT_TIMEOUTS: Timeouts = {
  connectMs: 5_000,
  firstByteMs: 300_000,
  responseMs: 600_000,
  idleMs: 120_000,
};
