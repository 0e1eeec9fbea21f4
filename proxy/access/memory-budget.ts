import { ProxyError } from '../endpoints/errors.js';

/**
 * The memory request bodies (and the answers they ask for) may hold at once, across all requests.
 * A body costs several times its size while it is read, decoded, parsed and serialized again for
 * the upstream; without a bound, a few concurrent 10 MiB bodies outgrow the container and take
 * every tenant's streams down with the process. A request that fits the budget but not what is
 * free now is refused at once with 503 and Retry-After: others finish, the caller's retry fits,
 * the process lives. One that could never fit, not even alone, is the caller's error (a 4xx its
 * reserver words: 413 for a body, 400 naming the field for an answer), never a 503 to retry.
 */
export class MemoryBudget {
  private used = 0;

  constructor(
    /** Bytes all requests in flight may reserve together. */
    readonly limit: number,
  ) {}

  get inUse(): number {
    return this.used;
  }

  /**
   * Reserves `bytes` more for a request that will then hold `total`, or throws the 503 to answer.
   * `total` is at most the limit (Reservation refuses larger ones first), so a request alone always
   * fits and a retry can succeed. Every successful take needs its give.
   */
  take(bytes: number): void {
    if (this.used + bytes > this.limit) throw serverBusy();
    this.used += bytes;
  }

  give(bytes: number): void {
    this.used = Math.max(0, this.used - bytes);
  }
}

/** Over what is free now; fits once others finish. */
const serverBusy = () =>
  new ProxyError(
    503,
    'api_error',
    'server_busy',
    'this gateway replica is handling too many large requests at once; retry in a second',
    null,
    // The connection stays open: Node discards the unread body (no memory) so that the client,
    // still uploading, can read this answer instead of failing with EPIPE.
    { 'Retry-After': '1' },
  );

/**
 * The caller's error for a reservation larger than the whole budget, given the most bytes one
 * request may hold: the reserver knows which field asked for it and what the caller may send.
 */
export type NeverFits = (mostBytes: number) => ProxyError;

/** A body whose cost alone is more than the whole budget: 413, with the largest body that fits. */
export const bodyNeverFits: NeverFits = (mostBytes) =>
  new ProxyError(
    413,
    'invalid_request_error',
    'request_too_large',
    `the request body is larger than this gateway replica's memory for requests allows: at most ${Math.floor(mostBytes / BODY_MEMORY_FACTOR)} bytes`,
  );

/** What a body of `size` bytes may cost while handled: buffer, string, parsed value, upstream payload. */
export const BODY_MEMORY_FACTOR = 4;
/**
 * The least a request reserves, whatever its size: what a small request holds besides its body
 * (parsed form, upstream call) until its upstream answers. Small enough that small requests are
 * bounded by the connection limit (10,000 x 8 KiB = 80 MiB, under the default 128 MiB), not by
 * this: at 64 KiB, 2,048 streams waiting at once for their first byte (a busy or waking model)
 * were refused with server_busy, a concurrency cap nobody set.
 */
export const MIN_RESERVATION = 8 * 1024;

/**
 * One request's share of the budget: grown as its body proves larger, given back whole once its
 * upstream has the body. Without a budget it holds nothing.
 */
export class Reservation {
  private held = 0;

  constructor(private readonly budget: MemoryBudget | undefined) {}

  /**
   * Holds at least `bytes`; throws `neverFits`' error where that is more than the whole budget
   * (no retry could succeed), the 503 to answer where it is more than is free now.
   */
  atLeast(bytes: number, neverFits: NeverFits): void {
    if (!this.budget || bytes <= this.held) return;
    if (bytes > this.budget.limit) throw neverFits(this.budget.limit);
    this.budget.take(bytes - this.held);
    this.held = bytes;
  }

  release(): void {
    if (this.held > 0) this.budget?.give(this.held);
    this.held = 0;
  }
}
