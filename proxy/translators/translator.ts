import type { CallerDialect, Dialect } from '../endpoints/dialects.js';
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
  from: CallerDialect;
  to: Dialect;
  /**
   * One request: its body in the upstream's dialect and how its answer comes back; a 400 for
   * what cannot be said there. `served`: the model it is for, where the mapping depends on the
   * model (Converse's limits and reasoning differ by model family); absent: the body's model.
   */
  begin(body: Record<string, unknown>, stream: boolean, served?: ServedModel): Translation | ProxyError;
}

/** The model a call is translated for. */
interface ServedModel {
  /** The id the upstream is called with. */
  id: string;
  /** The model whose limits and family apply: an inference profile's foundation model; the id itself elsewhere. */
  base: string;
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
