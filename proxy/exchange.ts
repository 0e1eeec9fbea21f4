import type { Caller } from './access/auth.js';
import type { Reservation } from './access/memory-budget.js';
import type { RateLimit } from './access/rate-limit.js';
import type { CacheLookup } from './cache/response-cache.js';
import type { Cached } from './cache.js';
import type { ParsedRequest } from './endpoints/chat-request.js';
import type { Dialect } from './endpoints/dialects.js';
import type { Endpoint } from './endpoints/endpoints.js';
import type { ProxyError } from './endpoints/errors.js';
import type { Tag } from './endpoints/tags.js';
import type { Guarding } from './guard.js';
import type { Routing } from './routing-policy/decide.js';
import type { RouteEntry } from './serving/routes.js';
import type { InFlight } from './telemetry/metrics.js';
import type { RequestSpan } from './telemetry/tracing.js';
import type { Translator } from './translators/translator.js';
import type { StreamBody } from './upstreams/chunk-source.js';
import type { UpstreamResult, Usage } from './upstreams/upstream.js';

/**
 * The values the request path's stages hand each other (proxy/pipeline.ts): each stage takes
 * what the one before it knew and returns it with its own part added, or a Failed that keeps
 * what was known when it failed (the usage record of a refused request names what it could).
 */

/** One request at any door of the gateway, as the front door hands it in. */
export interface DoorIncoming {
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
  /** A request that carries no body (MCP's DELETE and GET): admitted without a JSON type or memory for one. */
  bodyless?: boolean;
  /** The caller's address, as the socket has it (what an audit record of a refusal says it came from). */
  remote?: string | undefined;
}

/** A model endpoint's request (proxy/endpoints/endpoints.ts). */
export interface Incoming extends DoorIncoming {
  endpoint: Endpoint;
}

/**
 * A request of a door that is not a model endpoint (MCP's) once the admit and body stages passed
 * it: who calls, the headers its answers carry, and its body's JSON and size where it has one.
 * `release` gives back the memory its body held, once the door answered it.
 */
export interface DoorPass {
  requestId: string;
  caller: Caller;
  headers: Readonly<Record<string, string>>;
  body?: unknown;
  bytes: number;
  release(): void;
}

/** What the usage record, the metrics and the span say of a request, as far as it is known. */
export interface Known {
  /** The model: as the body asked for it, then as routed (the served model, not an alias). */
  model: string;
  /** The resource (namespace/name) that serves it; '' until routed. */
  provider: string;
  tags: Tag[];
  stream: boolean;
}

/** Authenticated, within its rates, memory reserved for its body: the rest of the path may run. */
export interface Admitted {
  incoming: Incoming;
  /** performance.now() when the request came in. */
  started: number;
  caller: Caller;
  span?: RequestSpan;
  /** Headers every answer to it carries: its request id, its key's rate state. */
  headers: Readonly<Record<string, string>>;
  /** The key's token bucket, debited by what the request used once it is answered. */
  tokens?: { bucket: string; rate: RateLimit };
  reservation: Reservation;
  known: Known;
}

/** The body's JSON, its text read and bounded. */
export interface Read extends Admitted {
  body: unknown;
  /** The body's size as it arrived, in bytes. */
  bytes: number;
}

/** The endpoint's request, checked, with its tags (the key's enforced ones applied). */
export interface Parsed extends Admitted {
  request: ParsedRequest;
  /** The guardrails that select it (proxy/guard.ts): what they found, what still checks its answer. */
  guard?: Guarding;
}

/**
 * How a call reaches a backend: in the caller's dialect where the backend serves it, else
 * through the first translator (or pair of translators) to one it serves; or why it cannot.
 */
export type Plan = { dialect: Dialect; translator?: Translator } | ProxyError;

/** One route to try, with its plan. */
export interface Attempt {
  route: RouteEntry;
  plan: Plan;
}

/** Routed: the model's route, allowed to this key and within budget, and what to try in order. */
export interface Routed extends Parsed {
  route: RouteEntry;
  /** The route, then its fallbacks the key may call (theirs not: no chains, no loops). */
  chain: readonly Attempt[];
  /** Where the in-flight gauge counted it. */
  flying: InFlight;
  /** Routed by a RoutingPolicy: what it chose and why. */
  routing?: Routing;
  /** The cascade's next models, each with its chain, tried in order when an answer fails its judge. */
  cascade?: readonly (readonly Attempt[])[];
  /** Looked for in the response cache and missed: where its answer is kept (proxy/cache.ts). */
  cacheLookup?: CacheLookup;
}

/** An answer the cascade moved past: which model gave it, why it failed, what it used. */
export interface Escalation {
  route: RouteEntry;
  trigger: string;
  usage?: Usage;
}

/** Answered by one route of the chain. */
export interface Answered extends Routed {
  served: RouteEntry;
  result: UpstreamResult;
  /** Answers the cascade moved past, in order (their cost is the request's too). */
  escalations?: readonly Escalation[];
  /** Answered from the response cache. */
  cached?: Cached;
}

/** Ended in an error, with what was known then. */
export interface Failed {
  failed: ProxyError;
  at: Admitted & {
    route?: RouteEntry;
    flying?: InFlight;
    routing?: Routing;
    escalations?: readonly Escalation[];
    guard?: Guarding;
  };
  /** Where the gateway itself failed (a 500): what went wrong, for its log. */
  cause?: unknown;
  /** What a model answered before the answer was refused (a guardrail's Block): its cost is the request's. */
  usage?: Usage;
}

/** What the front door writes. */
export type Answer = (
  | { kind: 'json'; status: number; headers: Record<string, string>; body: string }
  | { kind: 'stream'; status: 200; headers: Record<string, string>; body: StreamBody }
) & {
  /** The request's usage record is written (the spool's group commit): the answer goes out after. */
  durable?: Promise<void>;
  /** A whole answer: the front door says whether its last byte reached the socket (usage's UsageSink.delivered). */
  delivered?: (ok: boolean) => void;
};
