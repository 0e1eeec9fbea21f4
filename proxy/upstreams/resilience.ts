import { setTimeout as sleep } from 'node:timers/promises';
import { ProxyError } from '../endpoints/errors.js';

/**
 * What the gateway does when an upstream fails before the caller got a byte: try the same
 * upstream again a few times with backoff (only for failures a second try can fix), then the
 * model's fallbacks. Nothing here applies once a stream has started: by then the caller holds
 * part of an answer, and the failure travels as an error event.
 */

export interface RetryPolicy {
  /** Further attempts after the first (0 = no retries). */
  retries: number;
  /** Backoff before the first retry, doubled per retry, with jitter. */
  backoffMs: number;
  /** Cap on one backoff; a Retry-After longer than this is not waited for. */
  maxBackoffMs: number;
}

export const DEFAULT_RETRY: RetryPolicy = { retries: 2, backoffMs: 100, maxBackoffMs: 2_000 };

/**
 * Failures where the upstream did nothing with the request, or refused it for a moment: it
 * could not be reached, broke the connection before answering, answered 5xx or 429. Timeouts
 * are not retried: the model may still be generating, and a second wait doubles the latency.
 */
const RETRYABLE = new Set([
  'upstream_unreachable',
  'upstream_stream_broken',
  'upstream_error',
  'upstream_unavailable',
  'upstream_rate_limited',
]);

export const isRetryable = (err: ProxyError): boolean =>
  RETRYABLE.has(err.code) && (err.status >= 500 || err.status === 429);

/**
 * Failures of the model rather than of the request: another model may well answer. A request
 * the upstream rejected as invalid would be rejected by the fallback too; a Bedrock model the
 * account has not enabled is the provider's problem, not the request's.
 */
export const shouldFallBack = (err: ProxyError): boolean =>
  err.type !== 'invalid_request_error' || err.code === 'bedrock_model_not_enabled';

/** Seconds or an HTTP date, as in RFC 9110 Retry-After; undefined when absent or unreadable. */
export function retryAfterMs(value: string | undefined, now = Date.now()): number | undefined {
  if (!value) return undefined;
  if (/^\d+$/.test(value.trim())) return Number(value.trim()) * 1000;
  const at = Date.parse(value);
  return Number.isNaN(at) ? undefined : Math.max(0, at - now);
}

/** Errors whose Retry-After the gateway set for its caller, where the upstream named no time. */
const toldCaller = new WeakSet<ProxyError>();

/**
 * `err` with a Retry-After of `seconds` for the caller (a 429 or 503 says "retry": its caller is told
 * when). The gateway's own retries do not read it as the upstream's ask: they back off as for an
 * upstream that said nothing, instead of giving up on a wait longer than their cap.
 */
export function tellCallerRetryAfter(err: ProxyError, seconds: number): ProxyError {
  if (err.headers['Retry-After'] !== undefined) return err;
  const told = new ProxyError(err.status, err.type, err.code, err.message, err.param, {
    ...err.headers,
    'Retry-After': String(seconds),
  });
  toldCaller.add(told);
  return told;
}

/**
 * The wait before retry number `retry` (0-based): exponential with jitter (half fixed, half
 * random, so replicas that failed together do not come back together), at least what the
 * upstream's Retry-After asks for; undefined when that is longer than the policy allows.
 */
export function backoffMs(
  retry: number,
  policy: RetryPolicy,
  err: ProxyError,
  random = Math.random,
): number | undefined {
  const exp = Math.min(policy.maxBackoffMs, policy.backoffMs * 2 ** retry);
  const jittered = exp / 2 + (random() * exp) / 2;
  const asked = toldCaller.has(err) ? undefined : retryAfterMs(err.headers['Retry-After']);
  if (asked === undefined) return jittered;
  if (asked > policy.maxBackoffMs) return undefined;
  return Math.max(asked, jittered);
}

export interface RetryHooks {
  /** Called before each retry with the failure that caused it. */
  onRetry?: (err: ProxyError, retry: number, delayMs: number) => void;
  wait?: (ms: number, signal: AbortSignal) => Promise<void>;
  random?: () => number;
}

const abortableSleep = (ms: number, signal: AbortSignal) => sleep(ms, undefined, { signal });

/**
 * Runs `attempt` until it succeeds, fails in a way retries cannot fix, the retries are spent,
 * or the caller goes away (the last failure is then thrown as it is).
 */
export async function withRetries<T>(
  attempt: () => Promise<T>,
  policy: RetryPolicy,
  signal: AbortSignal,
  hooks: RetryHooks = {},
): Promise<T> {
  for (let retry = 0; ; retry++) {
    try {
      return await attempt();
    } catch (err) {
      if (!(err instanceof ProxyError) || !isRetryable(err) || retry >= policy.retries || signal.aborted) throw err;
      const delay = backoffMs(retry, policy, err, hooks.random);
      if (delay === undefined) throw err;
      hooks.onRetry?.(err, retry, delay);
      try {
        await (hooks.wait ?? abortableSleep)(delay, signal);
      } catch {
        // The caller left while we waited: report what failed, not the abort.
        throw err;
      }
    }
  }
}
