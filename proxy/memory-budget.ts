import { ProxyError } from './errors.js';

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
/** The least a request reserves, whatever its size. */
export const MIN_RESERVATION = 64 * 1024;
