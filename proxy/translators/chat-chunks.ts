import { createParser } from 'eventsource-parser';
import { ProxyError } from '../endpoints/errors.js';
import { type ChunkSource, chunksOf, type StreamBody } from '../upstreams/chunk-source.js';

/**
 * The upstream side every translator to chat completions shares: chat's shapes, and its stream
 * read as chunks. The upstream's SSE is parsed into chat chunks (`onChunk`; [DONE] and anything
 * unparsable skipped, an error chunk ends the stream with a 502), what the translator queued in
 * `out` is handed on as bytes, pulled (a read waits for the upstream only while nothing is queued,
 * so backpressure holds), and `end()` is called once the upstream is done. A translator keeps only
 * its mapping of chunks to its own dialect's events.
 */

export interface ChatUsage {
  prompt_tokens?: number;
  completion_tokens?: number;
  prompt_tokens_details?: { cached_tokens?: number } | null;
}

/** One tool call's piece in a chunk: its id and name first, then its arguments as they arrive. */
export interface ChatToolCallDelta {
  index: number;
  id?: string;
  function?: { name?: string; arguments?: string };
}

export interface ChatChunk {
  id?: string;
  choices?: Array<{
    delta?: {
      content?: string | null;
      reasoning_content?: string;
      tool_calls?: ChatToolCallDelta[];
    };
    finish_reason?: string | null;
  }>;
  usage?: ChatUsage | null;
}

export function chatChunkStream(
  upstream: StreamBody,
  out: string[],
  onChunk: (chunk: ChatChunk) => void,
  end: (error?: ProxyError) => void,
  ended: () => boolean,
): ChunkSource {
  const source = chunksOf(upstream);
  const encoder = new TextEncoder();
  const decoder = new TextDecoder();
  const parser = createParser({
    onEvent: ({ data }) => {
      if (ended() || data === '[DONE]') return;
      let chunk: ChatChunk & { error?: { message?: string; code?: string } };
      try {
        chunk = JSON.parse(data) as typeof chunk;
      } catch {
        return;
      }
      if (chunk.error) {
        end(
          new ProxyError(
            502,
            'api_error',
            chunk.error.code ?? 'upstream_error',
            chunk.error.message ?? 'the upstream failed',
          ),
        );
        return;
      }
      onChunk(chunk);
    },
  });
  return {
    read: async () => {
      while (out.length === 0 && !ended()) {
        const chunk = await source.read();
        if (chunk === undefined) {
          parser.feed(decoder.decode());
          end();
          break;
        }
        parser.feed(decoder.decode(chunk, { stream: true }));
      }
      return out.length > 0 ? encoder.encode(out.splice(0).join('')) : undefined;
    },
    cancel: () => source.cancel(),
  };
}
