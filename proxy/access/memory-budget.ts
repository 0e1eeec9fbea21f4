import { ProxyError } from '../endpoints/errors.js';

/**
 * The memory request bodies may hold at once, across all requests. A body costs several times its
 * size while it is read, decoded, parsed and serialized again for the upstream; without a bound,
 * a few concurrent 10 MiB bodies outgrow the container and take every tenant's streams down with
 * the process. Over the budget a request is refused at once with 503 and Retry-After: the caller
 * retries, the process lives.
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

  /** Reserves `bytes`, or throws the 503 to answer. Every successful take needs its give. */
  take(bytes: number): void {
    if (this.used + bytes > this.limit && this.used > 0) {
      throw new ProxyError(
        503,
        'api_error',
        'server_busy',
        'this gateway replica is handling too many large requests at once; retry in a second',
        null,
        // The connection stays open: Node discards the unread body (no memory) so that the client,
        // still uploading, can read this answer instead of failing with EPIPE.
        { 'Retry-After': '1' },
      );
    }
    this.used += bytes;
  }

  give(bytes: number): void {
    this.used = Math.max(0, this.used - bytes);
  }
}

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

  /** Holds at least `bytes`; throws the 503 to answer where the budget cannot take the rest. */
  atLeast(bytes: number): void {
    if (!this.budget || bytes <= this.held) return;
    this.budget.take(bytes - this.held);
    this.held = bytes;
  }

  release(): void {
    if (this.held > 0) this.budget?.give(this.held);
    this.held = 0;
  }
}
