import type { Dialect } from '../endpoints/dialects.js';
import type { ProxyError } from '../endpoints/errors.js';
import type { StreamBody } from '../upstreams/chunk-source.js';
import type { StreamOutcome } from '../upstreams/upstream.js';

/**
 * A translator between the dialect a caller speaks and one an upstream serves natively, for the
 * upstreams that do not speak the caller's: the request one way, the answer (whole or streamed)
 * the other. One per pair, in a file named for the pair (`<caller>_<upstream>.ts`), listed in
 * proxy/translators/table.ts; the pipeline picks it, never an upstream.
 */
export interface Translator {
  from: Dialect;
  to: Dialect;
  /** One request: its body in the upstream's dialect and how its answer comes back; a 400 for what cannot be said there. */
  begin(body: Record<string, unknown>, stream: boolean): Translation | ProxyError;
}

export interface Translation {
  body: Record<string, unknown>;
  /** The upstream's stream must carry usage (OpenAI chat's stream_options.include_usage). */
  wantsUsage: boolean;
  /** A whole answer of the upstream's dialect in the caller's. */
  json(body: unknown): unknown;
  /** The upstream's stream in the caller's dialect; `outcome` is the upstream's. */
  stream(body: StreamBody, outcome: Promise<StreamOutcome>): StreamBody;
}
