import type { CallerDialect } from '../../crds/constants.js';
import { isRecord } from '../../crds/is-record.js';

/**
 * Where each dialect's request carries text a person or a tool wrote: the prompt and system text,
 * the tool calls and results of the conversation, predictions, reasoning the caller sends back,
 * documents given as text. Each dialect's table entry maps every such text through `f` and
 * returns the body, the same object where nothing changed (copied along the path of what did):
 * what the guard stage checks, and what it forwards once redacted. `f` is told when a text is
 * JSON (a tool call's arguments), so that what it puts there keeps it JSON. Models, tool schemas,
 * ids and parameters are not text and are left alone.
 */

export type MapText = (s: string, json?: boolean) => string;

export const REQUEST_TEXTS: Readonly<
  Record<CallerDialect, (body: Record<string, unknown>, f: MapText) => Record<string, unknown>>
> = {
  'openai-chat': (body, f) =>
    field(
      field(body, 'messages', (ms) => each(ms, (m) => chatMessage(m, f))),
      'prediction',
      (p) => field(p, 'content', (c) => content(c, f)),
    ),
  'openai-responses': (body, f) =>
    field(
      field(
        field(body, 'instructions', (s) => str(s, f)),
        'input',
        (input) => (typeof input === 'string' ? f(input) : each(input, (item) => responsesItem(item, f))),
      ),
      'prompt',
      (p) => field(p, 'variables', (v) => deepStrings(v, f, 0)),
    ),
  'anthropic-messages': (body, f) =>
    field(
      field(body, 'system', (s) => content(s, f)),
      'messages',
      (ms) => each(ms, (m) => field(m, 'content', (c) => anthropicContent(c, f))),
    ),
  'openai-completions': (body, f) => field(body, 'prompt', (p) => strings(p, f)),
  'openai-embeddings': (body, f) => field(body, 'input', (i) => strings(i, f)),
};

/** A chat message: its content, refusal, tool calls (function and custom) and legacy function call. */
export function chatMessage(m: unknown, f: MapText): unknown {
  let out = field(
    field(m, 'content', (c) => content(c, f)),
    'refusal',
    (r) => str(r, f),
  );
  out = field(out, 'reasoning_content', (r) => str(r, f));
  out = field(out, 'function_call', (fc) => field(fc, 'arguments', (a) => json(a, f)));
  return field(out, 'tool_calls', (calls) =>
    each(calls, (call) =>
      field(
        field(call, 'function', (fn) => field(fn, 'arguments', (a) => json(a, f))),
        'custom',
        (c) => field(c, 'input', (i) => str(i, f)),
      ),
    ),
  );
}

/** A Responses item: a message's parts, a call's arguments or input, a call's output, a reasoning summary. */
export function responsesItem(item: unknown, f: MapText): unknown {
  let out = field(item, 'content', (c) => content(c, f));
  out = field(out, 'arguments', (a) => json(a, f));
  out = field(out, 'input', (i) => str(i, f));
  out = field(out, 'summary', (s) => content(s, f));
  return field(out, 'output', (o) => content(o, f));
}

/** Anthropic content: text, tool calls' inputs (any server's), tool results, thinking, documents and search results given as text. */
export function anthropicContent(c: unknown, f: MapText): unknown {
  if (typeof c === 'string') return f(c);
  return each(c, (block) => {
    if (!isRecord(block)) return block;
    if (typeof block.type === 'string' && block.type.endsWith('tool_use'))
      return field(block, 'input', (input) => deepStrings(input, f, 0));
    if (block.type === 'tool_result' || block.type === 'search_result')
      return field(block, 'content', (inner) => anthropicContent(inner, f));
    if (block.type === 'document')
      return field(block, 'source', (s) =>
        isRecord(s) && s.type === 'text'
          ? field(s, 'data', (d) => str(d, f))
          : field(s, 'content', (x) => anthropicContent(x, f)),
      );
    return field(
      field(block, 'text', (t) => str(t, f)),
      'thinking',
      (t) => str(t, f),
    );
  });
}

/** A content: a string, or parts whose `text` is text (text, input_text, output_text, summary_text, refusal). */
function content(c: unknown, f: MapText): unknown {
  if (typeof c === 'string') return f(c);
  return each(c, (part) =>
    field(
      field(part, 'text', (t) => str(t, f)),
      'refusal',
      (r) => str(r, f),
    ),
  );
}

/** A prompt or an input: a string or strings (token arrays are not text). */
const strings = (v: unknown, f: MapText): unknown => (typeof v === 'string' ? f(v) : each(v, (s) => str(s, f)));

export const str = (v: unknown, f: MapText): unknown => (typeof v === 'string' ? f(v) : v);

/** A JSON text (a tool call's arguments). */
const json = (v: unknown, f: MapText): unknown => (typeof v === 'string' ? f(v, true) : v);

/**
 * Every string of a JSON value (a tool call's arguments as an object, an MCP tool's result) but
 * those of the `skip` keys (a content part's type or URI is not text); nesting is bounded by the
 * body's parser, and here again.
 */
export function deepStrings(v: unknown, f: MapText, depth = 0, skip?: ReadonlySet<string>): unknown {
  if (typeof v === 'string') return f(v);
  if (depth > 64) return v;
  if (Array.isArray(v)) return each(v, (x) => deepStrings(x, f, depth + 1, skip));
  if (!isRecord(v)) return v;
  let out: Record<string, unknown> | undefined;
  for (const [k, x] of Object.entries(v)) {
    if (skip?.has(k)) continue;
    const y = deepStrings(x, f, depth + 1, skip);
    if (y !== x) {
      out ??= { ...v };
      out[k] = y;
    }
  }
  return out ?? v;
}

/** The object with `key` mapped, the same object when the value is the same (or the key absent). */
export function field<T>(obj: T, key: string, g: (v: unknown) => unknown): T {
  if (!isRecord(obj) || !(key in obj)) return obj;
  const v = obj[key];
  const w = g(v);
  return w === v ? obj : ({ ...obj, [key]: w } as T);
}

/** The array with each element mapped, the same array when no element changed. */
export function each(v: unknown, g: (x: unknown) => unknown): unknown {
  if (!Array.isArray(v)) return v;
  let out: unknown[] | undefined;
  for (const [i, x] of v.entries()) {
    const y = g(x);
    if (y !== x) {
      out ??= [...v];
      out[i] = y;
    }
  }
  return out ?? v;
}

/** Every text `map` visits in a body: what judges and services are asked about. */
export function textsOf<B>(map: (body: B, f: MapText) => unknown, body: B): string[] {
  const texts: string[] = [];
  map(body, (t) => {
    texts.push(t);
    return t;
  });
  return texts;
}
