import { createParser } from 'eventsource-parser';
import { type ChunkSource, chunksOf, type StreamBody } from '../chunk-source.js';

/**
 * The reading side every stream translator shares: the upstream's SSE bytes parsed into events
 * (`onData` gets each event's data), what the translator queued in `out` handed on as bytes,
 * pulled (each read waits for the upstream only while nothing is queued, so backpressure holds),
 * and `end()` called once the upstream is done. A translator keeps only its event mapping.
 */
export function ssePump(
  upstream: StreamBody,
  out: string[],
  onData: (data: string) => void,
  end: () => void,
  ended: () => boolean,
): ChunkSource {
  const source = chunksOf(upstream);
  const encoder = new TextEncoder();
  const decoder = new TextDecoder();
  const parser = createParser({ onEvent: (event) => onData(event.data) });
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
