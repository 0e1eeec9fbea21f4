import { isRecord } from '../../crds/is-record.js';
import type { Dialect } from '../endpoints/dialects.js';
import { anthropicEvents } from './anthropic-stream.js';
import { type ConverseTokenUsage, ConverseWhole, converseUsage, eventsOfAnswer } from './bedrock-converse.js';
import type { StreamEvents } from './event-stream.js';
import { PASS_THROUGH } from './openai-compatible-dialects.js';
import type { StreamReader } from './stream-reader.js';
import type { Usage } from './upstream.js';

/**
 * What the provider upstream reads of each dialect a provider answers in: the usage of a whole
 * answer, its stream as SSE (the callers' dialects, read as the in-cluster servers' are) or as an
 * AWS event stream (Bedrock's), and, for the event-stream dialects, how a stream adds up to a
 * whole answer and a whole answer becomes a stream, where the provider's call and the caller's
 * differ (ConverseStream for a caller that wants the answer whole, Converse for one that streams).
 */

export interface ProviderDialect {
  usageOf(json: unknown): Usage | undefined;
  /** An SSE stream's reader; `clientWantsUsage`: the usage the gateway asked for goes on too. */
  reader?(clientWantsUsage: boolean): StreamReader;
  /** An AWS event stream of the dialect relayed as the caller's own (no translator between). */
  events?(): StreamEvents;
  /** A stream added up into one answer of the dialect, read once the stream ended. */
  whole?(): StreamEvents & { answer(): unknown };
  /** A whole answer as the events of its stream. */
  eventsOf?(json: unknown): Array<[string, Record<string, unknown>]>;
}

export const PROVIDER_DIALECTS: Readonly<Record<Dialect, ProviderDialect>> = {
  'openai-chat': PASS_THROUGH['openai-chat'],
  'openai-completions': PASS_THROUGH['openai-completions'],
  'openai-embeddings': PASS_THROUGH['openai-embeddings'],
  'openai-responses': PASS_THROUGH['openai-responses'],
  // Anthropic's Messages as SSE (Anthropic, Claude on Vertex) or as Bedrock's event stream.
  'anthropic-messages': { ...PASS_THROUGH['anthropic-messages'], events: anthropicEvents },
  'bedrock-converse': {
    usageOf: (json) => converseUsage(isRecord(json) ? (json.usage as ConverseTokenUsage | undefined) : undefined),
    whole: () => new ConverseWhole(),
    eventsOf: eventsOfAnswer,
  },
};
