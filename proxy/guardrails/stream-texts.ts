import type { CallerDialect } from '../../crds/constants.js';
import { isRecord } from '../../crds/is-record.js';

/**
 * Where each dialect's stream events carry the answer's text, for the stream guard
 * (proxy/guardrails/stream-guard.ts): message text, refusals, reasoning and the arguments of tool
 * calls (JSON). An event's text deltas are keyed by what they add to (a choice's content, one of
 * its tool calls, a content block, a Responses output part); an event may end keys (what is held
 * of them goes out before it: a key ends with every key under it, `c0` with `c0:t1`); Responses'
 * done events repeat a key's whole text, which must then be what the caller was sent. A key's
 * held text goes out in an event of its own made from nothing but that text (`skeleton`), never
 * a copy of an upstream event (which carries other keys' text as it was). Log probabilities,
 * which spell the answer out token by token, are withheld (`withhold`).
 */

export interface TextAt {
  key: string;
  text: string;
  /** Puts another text where this one was, in the event. */
  put(text: string): void;
  /** An event carrying `text` for this key and nothing else. */
  skeleton(text: string): { name?: string; data: Record<string, unknown> };
  /** The text is JSON (a tool call's arguments). */
  json?: boolean;
}

export interface StreamTexts {
  deltas(event: Record<string, unknown>): TextAt[];
  /** Keys the event ends (with the keys under them). */
  ends(event: Record<string, unknown>): string[];
  /** Keys' whole texts the event repeats (Responses' done events). */
  wholes(event: Record<string, unknown>): TextAt[];
  /** Drops the event's log probabilities, in place. */
  withhold(event: Record<string, unknown>): void;
}

const records = (v: unknown): Record<string, unknown>[] => (Array.isArray(v) ? v.filter(isRecord) : []);

function textAt(
  key: string,
  holder: Record<string, unknown>,
  field: string,
  skeleton: TextAt['skeleton'],
  json = false,
): TextAt[] {
  const text = holder[field];
  if (typeof text !== 'string') return [];
  const put = (t: string) => {
    holder[field] = t;
  };
  return [{ key, text, put, skeleton, ...(json ? { json } : {}) }];
}

/** OpenAI's chat chunks: each choice's content, refusal, reasoning and tool calls' arguments. */
function chatDeltas(e: Record<string, unknown>): TextAt[] {
  const top = { id: e.id, object: e.object, created: e.created, model: e.model };
  return records(e.choices).flatMap((c) => {
    const i = Number(c.index ?? 0);
    const delta = isRecord(c.delta) ? c.delta : undefined;
    if (!delta) return [];
    const chunk = (d: Record<string, unknown>) => ({
      data: { ...top, choices: [{ index: i, delta: d, logprobs: null, finish_reason: null }] },
    });
    return [
      ...textAt(`c${i}`, delta, 'content', (t) => chunk({ content: t })),
      ...textAt(`c${i}:f`, delta, 'refusal', (t) => chunk({ refusal: t })),
      ...textAt(`c${i}:r`, delta, 'reasoning_content', (t) => chunk({ reasoning_content: t })),
      ...records(delta.tool_calls).flatMap((call) => {
        const fn = isRecord(call.function) ? call.function : undefined;
        const j = Number(call.index ?? 0);
        return fn
          ? textAt(
              `c${i}:t${j}`,
              fn,
              'arguments',
              (t) => chunk({ tool_calls: [{ index: j, function: { arguments: t } }] }),
              true,
            )
          : [];
      }),
    ];
  });
}

/** Choices that finished: their keys end. */
const finished = (prefix: string) => (e: Record<string, unknown>) =>
  records(e.choices)
    .filter((c) => c.finish_reason !== null && c.finish_reason !== undefined)
    .map((c) => `${prefix}${Number(c.index ?? 0)}`);

const withoutLogprobs = (e: Record<string, unknown>) => {
  for (const c of records(e.choices)) if (c.logprobs !== undefined && c.logprobs !== null) c.logprobs = null;
};

const ANTHROPIC_DELTAS: Readonly<Record<string, { field: string; json?: boolean }>> = {
  text_delta: { field: 'text' },
  input_json_delta: { field: 'partial_json', json: true },
  thinking_delta: { field: 'thinking' },
};

const RESPONSES_DELTAS: Readonly<Record<string, { key: (e: Record<string, unknown>) => string; json?: boolean }>> = {
  'response.output_text.delta': { key: (e) => `o:${String(e.item_id)}:${Number(e.content_index ?? 0)}` },
  'response.refusal.delta': { key: (e) => `f:${String(e.item_id)}:${Number(e.content_index ?? 0)}` },
  'response.function_call_arguments.delta': { key: (e) => `a:${String(e.item_id)}`, json: true },
  'response.reasoning_summary_text.delta': { key: (e) => `s:${String(e.item_id)}:${Number(e.summary_index ?? 0)}` },
};

/** The done event of each delta kind: it ends the key and repeats its whole text in `field`. */
const RESPONSES_DONE: Readonly<Record<string, { delta: string; field: string }>> = {
  'response.output_text.done': { delta: 'response.output_text.delta', field: 'text' },
  'response.refusal.done': { delta: 'response.refusal.delta', field: 'refusal' },
  'response.function_call_arguments.done': { delta: 'response.function_call_arguments.delta', field: 'arguments' },
  'response.reasoning_summary_text.done': { delta: 'response.reasoning_summary_text.delta', field: 'text' },
};

const noSkeleton = (): { data: Record<string, unknown> } => ({ data: {} });

/** An output item's texts, each its key's whole text: message parts, a call's arguments, a reasoning summary. */
function itemWholes(item: Record<string, unknown>): TextAt[] {
  const id = String(item.id);
  return [
    ...records(item.content).flatMap((part, i) => [
      ...textAt(`o:${id}:${i}`, part, 'text', noSkeleton),
      ...textAt(`f:${id}:${i}`, part, 'refusal', noSkeleton),
    ]),
    ...textAt(`a:${id}`, item, 'arguments', noSkeleton, true),
    ...records(item.summary).flatMap((s, i) => textAt(`s:${id}:${i}`, s, 'text', noSkeleton)),
  ];
}

export const STREAM_TEXTS: Readonly<Record<CallerDialect, StreamTexts | undefined>> = {
  'openai-chat': { deltas: chatDeltas, ends: finished('c'), wholes: () => [], withhold: withoutLogprobs },
  'openai-completions': {
    deltas: (e) => {
      const top = { id: e.id, object: e.object, created: e.created, model: e.model };
      return records(e.choices).flatMap((c) => {
        const i = Number(c.index ?? 0);
        return textAt(`t${i}`, c, 'text', (t) => ({
          data: { ...top, choices: [{ index: i, text: t, logprobs: null, finish_reason: null }] },
        }));
      });
    },
    ends: finished('t'),
    wholes: () => [],
    withhold: withoutLogprobs,
  },
  'openai-embeddings': undefined,
  'anthropic-messages': {
    deltas: (e) => {
      if (e.type !== 'content_block_delta' || !isRecord(e.delta)) return [];
      const kind = ANTHROPIC_DELTAS[String(e.delta.type)];
      if (!kind) return [];
      const { index } = e;
      const type = e.delta.type;
      return textAt(
        `b${Number(index ?? 0)}`,
        e.delta,
        kind.field,
        (t) => ({
          name: 'content_block_delta',
          data: { type: 'content_block_delta', index, delta: { type, [kind.field]: t } },
        }),
        kind.json,
      );
    },
    ends: (e) => (e.type === 'content_block_stop' ? [`b${Number(e.index ?? 0)}`] : []),
    wholes: () => [],
    withhold: () => {},
  },
  'openai-responses': {
    deltas: (e) => {
      const type = String(e.type);
      const kind = RESPONSES_DELTAS[type];
      if (!kind) return [];
      const { item_id, output_index, content_index, summary_index } = e;
      const skeleton = (t: string) => ({
        name: type,
        data: {
          type,
          item_id,
          output_index,
          ...(content_index !== undefined ? { content_index } : {}),
          ...(summary_index !== undefined ? { summary_index } : {}),
          delta: t,
          ...(type === 'response.output_text.delta' ? { logprobs: [] } : {}),
          sequence_number: 0,
        },
      });
      return textAt(kind.key(e), e, 'delta', skeleton, kind.json);
    },
    ends: (e) => {
      const done = RESPONSES_DONE[String(e.type)];
      const kind = done && RESPONSES_DELTAS[done.delta];
      return kind ? [kind.key(e)] : [];
    },
    wholes: (e) => {
      const done = RESPONSES_DONE[String(e.type)];
      const kind = done && RESPONSES_DELTAS[done.delta];
      if (done && kind) return textAt(kind.key(e), e, done.field, noSkeleton, kind.json);
      if (e.type === 'response.content_part.done' && isRecord(e.part)) {
        const at = `${String(e.item_id)}:${Number(e.content_index ?? 0)}`;
        return [...textAt(`o:${at}`, e.part, 'text', noSkeleton), ...textAt(`f:${at}`, e.part, 'refusal', noSkeleton)];
      }
      if (e.type === 'response.output_item.done' && isRecord(e.item)) return itemWholes(e.item);
      if ((e.type === 'response.completed' || e.type === 'response.incomplete') && isRecord(e.response))
        return records(e.response.output).flatMap(itemWholes);
      return [];
    },
    withhold: (e) => {
      if (Array.isArray(e.logprobs) && e.logprobs.length > 0) e.logprobs = [];
      const parts = [
        ...(isRecord(e.part) ? [e.part] : []),
        ...(isRecord(e.item) ? records(e.item.content) : []),
        ...(isRecord(e.response) ? records(e.response.output).flatMap((i) => records(i.content)) : []),
      ];
      for (const p of parts) if (Array.isArray(p.logprobs) && p.logprobs.length > 0) p.logprobs = [];
    },
  },
};

/** Types of the events that end a stream: chat's and completions' [DONE] aside (proxy/guardrails/stream-guard.ts holds them). */
const FINAL_TYPES = new Set(['message_stop', 'response.completed', 'response.incomplete', 'response.failed']);

/** The event ends the stream: chat's and completions' [DONE], Messages' message_stop, Responses' completion. */
export const isFinal = (data: string | Record<string, unknown>): boolean =>
  typeof data === 'string' ? data.trim() === '[DONE]' : FINAL_TYPES.has(String(data.type));
