import { type ApiKeys, authenticate, type Caller, rateBucketOf } from './access/auth.js';
import {
  BODY_MEMORY_FACTOR,
  bodyNeverFits,
  type MemoryBudget,
  MIN_RESERVATION,
  Reservation,
} from './access/memory-budget.js';
import type { Admission, RateLimit, RateLimiter } from './access/rate-limit.js';
import { ProxyError } from './endpoints/errors.js';
import type { Admitted, DoorIncoming, Failed, Incoming } from './exchange.js';
import type { ProxyMetrics } from './telemetry/metrics.js';
import type { RequestTracer } from './telemetry/tracing.js';

/**
 * The first stage: who is calling, and whether this replica takes the request now. A request
 * without a valid key is refused here with nobody to bill (no usage record); past the key,
 * every refusal is recorded. In order: the key, the replica draining, the key's request and
 * token rates (one admission, tokens debited after the answer), a JSON body, and the memory its
 * body will cost (Content-Length's worth before a byte is read; proxy/body.ts grows it).
 */

export interface AdmitDeps {
  keys: ApiKeys;
  /** The rate of keys that have none of their own; 0 requests per second: unlimited. */
  rateLimit: RateLimit;
  limiter: RateLimiter;
  metrics: ProxyMetrics;
  maxBodyBytes: number;
  /** Memory all request bodies in flight may hold together; none when absent. */
  memory?: MemoryBudget;
  tracer?: RequestTracer;
  draining?: () => boolean;
  /** Told every authenticated caller (the ApiKey status writer notes the last use). */
  onCaller?: (caller: Caller) => void;
  /** Told every caller refused its credentials (the audit trail, proxy/audit/gateway-audit.ts). */
  onRefused?: (refusal: ProxyError, remote: string | undefined) => void;
}

const JSON_TYPE = /^application\/json\s*(;|$)/i;

/** What admission found at any door: the caller and what its answers carry, or why it is refused. */
interface DoorAdmission {
  caller: Caller;
  headers: Record<string, string>;
  tokens?: { bucket: string; rate: RateLimit };
  reservation: Reservation;
  /** Past the key, the refusal (a refused request is recorded where its door records). */
  refused?: ProxyError;
}

/**
 * The checks of every door, model endpoints and MCP alike: the key, the replica draining, the
 * key's request and token rates, a JSON body, and memory for it. An unauthenticated request is
 * the ProxyError itself (nobody to bill).
 */
export async function admitAtDoor(deps: AdmitDeps, door: DoorIncoming): Promise<DoorAdmission | ProxyError> {
  const caller = await authenticate(deps.keys, {
    apiKey: door.header('x-api-key'),
    authorization: door.header('authorization'),
  });
  if (caller instanceof ProxyError) {
    deps.onRefused?.(caller, door.remote);
    return caller;
  }
  deps.onCaller?.(caller);
  const { policy } = caller;
  const bucket = rateBucketOf(caller);
  const rate = policy.rate ?? deps.rateLimit;
  const tokenRate = policy.tokensPerMinute
    ? { requestsPerSecond: policy.tokensPerMinute / 60, burst: policy.tokensPerMinute }
    : undefined;
  const admission: DoorAdmission = {
    caller,
    headers: { 'x-request-id': door.requestId },
    ...(tokenRate ? { tokens: { bucket, rate: tokenRate } } : {}),
    reservation: new Reservation(deps.memory),
  };
  const refuse = (refused: ProxyError, at: DoorAdmission = admission): DoorAdmission => ({ ...at, refused });

  if (deps.draining?.()) {
    return refuse(
      new ProxyError(503, 'api_error', 'shutting_down', 'this gateway replica is shutting down; retry', null, {
        'Retry-After': '1',
        connection: 'close',
      }),
    );
  }
  const limited = rate.requestsPerSecond > 0 || tokenRate !== undefined;
  const verdict = limited
    ? await deps.limiter.admit(bucket, {
        ...(rate.requestsPerSecond > 0 ? { requests: rate } : {}),
        ...(tokenRate ? { tokens: tokenRate } : {}),
      })
    : undefined;
  if (verdict && !verdict.ok) {
    deps.metrics.rateLimited.inc();
    return refuse(
      new ProxyError(
        429,
        'rate_limit_error',
        'rate_limit_exceeded',
        verdict.which === 'tokens'
          ? `this API key used its ${policy.tokensPerMinute} tokens per minute; retry in ${verdict.retryAfterSeconds} s`
          : `this API key sent more than ${rate.requestsPerSecond} requests per second (burst ${rate.burst}); retry in ${verdict.retryAfterSeconds} s`,
        null,
        { 'Retry-After': String(verdict.retryAfterSeconds), ...rateHeaders(rate, verdict) },
      ),
    );
  }
  const within: DoorAdmission = verdict
    ? { ...admission, headers: { ...admission.headers, ...rateHeaders(rate, verdict) } }
    : admission;
  if (door.bodyless) return within;
  const type = door.header('content-type') ?? '';
  if (!JSON_TYPE.test(type)) {
    return refuse(
      new ProxyError(
        415,
        'invalid_request_error',
        'unsupported_media_type',
        `the request body must be JSON with Content-Type: application/json (got ${JSON.stringify(type.slice(0, 100))})`,
      ),
      within,
    );
  }
  // Reserve what the body will cost before reading it (Content-Length, else grown as it arrives).
  const declared = Number(door.header('content-length'));
  const expect = Number.isFinite(declared) && declared > 0 ? Math.min(declared, deps.maxBodyBytes) : 0;
  try {
    within.reservation.atLeast(Math.max(MIN_RESERVATION, expect * BODY_MEMORY_FACTOR), bodyNeverFits);
  } catch (err) {
    if (err instanceof ProxyError) return refuse(err, within);
    throw err;
  }
  return within;
}

/** The first stage of a model endpoint's request: its door's admission, with its span. */
export async function admit(deps: AdmitDeps, incoming: Incoming): Promise<Admitted | Failed | ProxyError> {
  const started = performance.now();
  const door = await admitAtDoor(deps, incoming);
  if (door instanceof ProxyError) return door;
  const span = deps.tracer?.start({
    operation: incoming.endpoint.operation,
    header: incoming.header,
    requestId: incoming.requestId,
  });
  const admitted: Admitted = {
    incoming,
    started,
    caller: door.caller,
    ...(span ? { span } : {}),
    headers: door.headers,
    ...(door.tokens ? { tokens: door.tokens } : {}),
    reservation: door.reservation,
    known: { model: '', provider: '', tags: [], stream: false },
  };
  return door.refused ? { failed: door.refused, at: admitted } : admitted;
}

/** The key's request rate as OpenAI's headers say it, where it has one. */
function rateHeaders(limit: RateLimit, a: Admission): Record<string, string> {
  return limit.requestsPerSecond > 0
    ? {
        'x-ratelimit-limit-requests': String(limit.burst),
        'x-ratelimit-remaining-requests': String(a.ok ? a.remaining : 0),
      }
    : {};
}
