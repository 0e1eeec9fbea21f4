import { isRecord } from '../../crds/is-record.js';
import { type ChunkSource, chunksOf, type StreamBody } from '../upstreams/chunk-source.js';
import type { EventEdit } from '../upstreams/stream-reader.js';

/**
 * A stored response's answer as the caller sees it: the Response object carries the gateway's
 * id (never the upstream's: an upstream's id names nothing the caller can retrieve, and two
 * upstreams' ids could meet), the caller's previous_response_id and store (the upstream was
 * sent neither). A stream is rewritten event by event, and its final Response (the
 * response.completed, response.incomplete or response.failed event's) is handed to `save`
 * before that event goes out, so a caller that chains at once finds it stored. Where the relay
 * reads the upstream's events, that is an edit of its own (stampEvents, on the value it parsed);
 * any other stream (a translator's, a cached answer's) is read here again (tapStream).
 */

type Json = Record<string, unknown>;

/** What the caller asked for and the upstream never saw. */
export interface Stamp {
  id: string;
  previousResponseId: string | null;
  store: boolean;
  background: boolean;
}

/** The gateway's own fields of the Response object. */
const stampOf = (stamp: Stamp): Json => ({
  id: stamp.id,
  previous_response_id: stamp.previousResponseId,
  store: stamp.store,
  background: stamp.background,
});

/** The Response object with the gateway's own fields. */
export function stamped(response: unknown, stamp: Stamp): Json {
  return { ...(isRecord(response) ? response : {}), ...stampOf(stamp) };
}

/** The events whose Response is the final one. */
const FINAL = new Set(['response.completed', 'response.incomplete', 'response.failed']);

/** One SSE event's block stamped by `edit` where its data carries a Response; what its going out waits for. */
function rewriteEvent(block: string, edit: EventEdit): { text: string; before?: Promise<unknown> } {
  // Deltas (most events) carry no Response: not parsed.
  if (!block.includes('"response"')) return { text: block };
  const lines = block.split(/\r?\n/);
  const at = lines.findIndex((l) => l.startsWith('data:'));
  if (at < 0) return { text: block };
  let data: unknown;
  try {
    data = JSON.parse(lines[at]?.slice(5).trim() ?? '');
  } catch {
    return { text: block };
  }
  if (!isRecord(data)) return { text: block };
  const e = edit.edit(undefined, data);
  if (e.data === data) return { text: block };
  lines[at] = `data: ${JSON.stringify(e.data)}`;
  return e.before ? { text: lines.join('\n'), before: e.before } : { text: lines.join('\n') };
}

/** The events that carry the Response, by their SSE names. */
const CARRY_RESPONSE = new Set(['response.created', 'response.queued', 'response.in_progress', ...FINAL]);

/**
 * The stream's stamp as an edit where its events are read (a relay's editEvents): the events that
 * carry the Response (and any unnamed one, as the tap reads them all) are stamped on the value
 * the relay's reader parsed anyway, and the final one goes out once `save` settled.
 */
export function stampEvents(stamp: Stamp, save: (response: Json) => Promise<void>): EventEdit {
  return {
    wants: (name) => name === undefined || CARRY_RESPONSE.has(name),
    edit(_name, data) {
      const response = data.response;
      if (!isRecord(response)) return { data };
      // The reader's own value (the relay's, or the tap's), parsed for this event alone and held
      // by nobody else: stamped in place (a copy of a Response's ~30 fields was a visible share of a stream's CPU).
      Object.assign(response, stampOf(stamp));
      // A new event object says it changed (the edit's convention), so it is written again.
      const edited = { ...data };
      return FINAL.has(String(data.type)) ? { data: edited, before: save(response) } : { data: edited };
    },
  };
}

const RESPONSE_KEY = Buffer.from('"response"');
const LF = 10;

/** A chunk of whole events with no Response in them (the deltas, most of a stream): it goes out as it came. */
function passesAsItIs(chunk: Uint8Array): boolean {
  const n = chunk.length;
  if (n < 2 || chunk[n - 1] !== LF || chunk[n - 2] !== LF) return false;
  return Buffer.from(chunk.buffer, chunk.byteOffset, n).indexOf(RESPONSE_KEY) === -1;
}

/** The stream rewritten, its final Response saved before the event carrying it goes out. */
export function tapStream(body: StreamBody, edit: EventEdit): ChunkSource {
  const source = chunksOf(body);
  const decoder = new TextDecoder();
  const encoder = new TextEncoder();
  let pending = '';
  let ended = false;
  return {
    async read() {
      for (;;) {
        if (ended) return undefined;
        const chunk = await source.read();
        // Not decoded, split and encoded again (nothing is held back: the decoder holds nothing either).
        if (chunk !== undefined && pending === '' && passesAsItIs(chunk)) return chunk;
        if (chunk === undefined) {
          ended = true;
          const rest = pending + decoder.decode();
          pending = '';
          return rest === '' ? undefined : encoder.encode(rest);
        }
        pending += decoder.decode(chunk, { stream: true });
        const blocks = pending.split(/\r?\n\r?\n/);
        pending = blocks.pop() ?? '';
        if (blocks.length === 0) continue;
        let out = '';
        for (const block of blocks) {
          const { text, before } = rewriteEvent(block, edit);
          if (before) await before;
          out += `${text}\n\n`;
        }
        return encoder.encode(out);
      }
    },
    cancel: () => source.cancel(),
  };
}

/** A whole answer as a stream body of one chunk (a background response's first answer). */
export function oneChunk(text: string): ChunkSource {
  let sent = false;
  return {
    read: async () => {
      if (sent) return undefined;
      sent = true;
      return new TextEncoder().encode(text);
    },
    cancel: () => {},
  };
}
