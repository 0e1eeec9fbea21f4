import { describe, expect, it } from 'vitest';
import { ProxyError } from '../endpoints/errors.js';
import {
  backoffMs,
  isRetryable,
  type RetryPolicy,
  retryAfterMs,
  shouldFallBack,
  tellCallerRetryAfter,
  withRetries,
} from './resilience.js';

/** The rules of retries and fallbacks, as pure functions: what is retried, how long is waited, what falls back. */

const err = (status: 400 | 429 | 502 | 503 | 504, code: string, headers: Record<string, string> = {}) =>
  new ProxyError(status, status === 400 ? 'invalid_request_error' : 'api_error', code, 'x', null, headers);
const policy: RetryPolicy = { retries: 2, backoffMs: 100, maxBackoffMs: 2000 };

describe('retry rules', () => {
  it('retries what a second try can fix, and nothing the request or a timeout caused', () => {
    expect(isRetryable(err(502, 'upstream_unreachable'))).toBe(true);
    expect(isRetryable(err(502, 'upstream_stream_broken'))).toBe(true);
    expect(isRetryable(err(502, 'upstream_error'))).toBe(true);
    expect(isRetryable(err(503, 'upstream_unavailable'))).toBe(true);
    expect(isRetryable(err(429, 'upstream_rate_limited'))).toBe(true);
    expect(isRetryable(err(504, 'upstream_timeout'))).toBe(false);
    expect(isRetryable(err(400, 'upstream_rejected'))).toBe(false);
    expect(isRetryable(err(503, 'model_deploying'))).toBe(false);
  });

  it('falls back on failures of the model, not of the request', () => {
    expect(shouldFallBack(err(504, 'upstream_timeout'))).toBe(true);
    expect(shouldFallBack(err(503, 'model_deploying'))).toBe(true);
    expect(shouldFallBack(err(400, 'upstream_rejected'))).toBe(false);
    expect(shouldFallBack(err(400, 'bedrock_model_not_enabled'))).toBe(true);
  });

  it('backs off exponentially with jitter, capped, honouring a short Retry-After and refusing a long one', () => {
    const e = err(502, 'upstream_error');
    expect(backoffMs(0, policy, e, () => 0)).toBe(50);
    expect(backoffMs(0, policy, e, () => 1)).toBe(100);
    expect(backoffMs(3, policy, e, () => 1)).toBe(800);
    expect(backoffMs(10, policy, e, () => 1)).toBe(2000);
    expect(backoffMs(0, policy, err(429, 'upstream_rate_limited', { 'Retry-After': '1' }), () => 0)).toBe(1000);
    expect(backoffMs(0, policy, err(429, 'upstream_rate_limited', { 'Retry-After': '30' }))).toBeUndefined();
    expect(retryAfterMs('Wed, 21 Oct 2015 07:28:05 GMT', Date.parse('Wed, 21 Oct 2015 07:28:00 GMT'))).toBe(5000);
    expect(retryAfterMs('soon')).toBeUndefined();
  });

  it("a Retry-After the gateway set for its caller is not read as the upstream's ask: its retries back off as usual", () => {
    const told = tellCallerRetryAfter(err(429, 'upstream_rate_limited'), 5);
    expect(told.headers['Retry-After']).toBe('5');
    expect(backoffMs(0, policy, told, () => 1)).toBe(100);
    // The upstream's own time stands, for the caller and for the retries.
    const asked = tellCallerRetryAfter(err(429, 'upstream_rate_limited', { 'Retry-After': '30' }), 5);
    expect(asked.headers['Retry-After']).toBe('30');
    expect(backoffMs(0, policy, asked)).toBeUndefined();
  });

  it('stops at the first success, at a failure retries cannot fix, or when the caller leaves', async () => {
    const waits: number[] = [];
    const hooks = { wait: async (ms: number) => void waits.push(ms), random: () => 1 };
    let calls = 0;
    const flaky = async () => {
      calls++;
      if (calls < 3) throw err(503, 'upstream_unavailable');
      return 'ok';
    };
    expect(await withRetries(flaky, policy, new AbortController().signal, hooks)).toBe('ok');
    expect([calls, waits]).toEqual([3, [100, 200]]);

    calls = 0;
    const bad = async () => {
      calls++;
      throw err(400, 'upstream_rejected');
    };
    await expect(withRetries(bad, policy, new AbortController().signal, hooks)).rejects.toMatchObject({
      code: 'upstream_rejected',
    });
    expect(calls).toBe(1);

    calls = 0;
    const gone = new AbortController();
    const leaving = async () => {
      calls++;
      gone.abort();
      throw err(502, 'upstream_unreachable');
    };
    await expect(withRetries(leaving, policy, gone.signal, hooks)).rejects.toMatchObject({
      code: 'upstream_unreachable',
    });
    expect(calls).toBe(1);
  });
});
