import type { CallerDialect } from '../../crds/constants.js';
import { isRecord } from '../../crds/is-record.js';

/**
 * Where each dialect's stream events carry the answer's text, for the stream guard
 * (proxy/guardrails/stream-guard.ts). An event's text deltas are keyed by what they add to (a
 * choice, a content block, a Responses output part); some events end a key (what is held of it
 * must go out before them); Responses' done events repeat a key's whole text, which must then be
 * what the caller was sent. Events are the JSON of the event's data, changed in place: the guard
 * re-serializes what it changed.
 */

interface TextAt {
  key: string;
  text: string;
  /** Puts another text where this one was, in the event. */
  put(text: string): void;
}

export interface StreamTexts {
  deltas(event: Record<string, unknown>): TextAt[];
  /** Keys the event ends. */
  ends(event: Record<string, unknown>): string[];
  /** A key's whole text the event repeats (Responses' done events). */
  wholes(event: Record<string, unknown>): TextAt[];
}

const at = (key: string, holder: Record<string, unknown>, field: string): TextAt[] => {
  const text = holder[field];
  const put = (t: string) => {
    holder[field] = t;
  };
  return typeof text === 'string' ? [{ key, text, put }] : [];
};

const records = (v: unknown): Record<string, unknown>[] => (Array.isArray(v) ? v.filter(isRecord) : []);

/** OpenAI's chat and completions chunks: each choice's text, ended by its finish_reason. */
const choices = (
  prefix: string,
  textOf: (c: Record<string, unknown>) => [Record<string, unknown>, string] | undefined,
): StreamTexts => ({
  deltas: (e) =>
    records(e.choices).flatMap((c) => {
      const holder = textOf(c);
      return holder ? at(`${prefix}${String(c.index ?? 0)}`, holder[0], holder[1]) : [];
    }),
  ends: (e) =>
    records(e.choices)
      .filter((c) => c.finish_reason !== null && c.finish_reason !== undefined)
      .map((c) => `${prefix}${String(c.index ?? 0)}`),
  wholes: () => [],
});

const partKey = (item: unknown, index: unknown) => `${String(item)}/${String(index ?? 0)}`;

/** An output item's message parts, each its key's whole text. */
const itemWholes = (item: Record<string, unknown>): TextAt[] =>
  records(item.content).flatMap((part, i) => at(partKey(item.id, i), part, 'text'));

export const STREAM_TEXTS: Readonly<Record<CallerDialect, StreamTexts | undefined>> = {
  'openai-chat': choices('c', (c) => (isRecord(c.delta) ? [c.delta, 'content'] : undefined)),
  'openai-completions': choices('t', (c) => [c, 'text']),
  'openai-embeddings': undefined,
  'anthropic-messages': {
    deltas: (e) =>
      e.type === 'content_block_delta' && isRecord(e.delta) && e.delta.type === 'text_delta'
        ? at(`b${String(e.index ?? 0)}`, e.delta, 'text')
        : [],
    ends: (e) => (e.type === 'content_block_stop' ? [`b${String(e.index ?? 0)}`] : []),
    wholes: () => [],
  },
  'openai-responses': {
    deltas: (e) => (e.type === 'response.output_text.delta' ? at(partKey(e.item_id, e.content_index), e, 'delta') : []),
    ends: (e) => (e.type === 'response.output_text.done' ? [partKey(e.item_id, e.content_index)] : []),
    wholes: (e) => {
      if (e.type === 'response.output_text.done') return at(partKey(e.item_id, e.content_index), e, 'text');
      if (e.type === 'response.content_part.done' && isRecord(e.part))
        return at(partKey(e.item_id, e.content_index), e.part, 'text');
      if (e.type === 'response.output_item.done' && isRecord(e.item)) return itemWholes(e.item);
      if ((e.type === 'response.completed' || e.type === 'response.incomplete') && isRecord(e.response))
        return records(e.response.output).flatMap(itemWholes);
      return [];
    },
  },
};
