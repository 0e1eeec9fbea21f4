import { randomFillSync } from 'node:crypto';
import { isRecord } from '../../crds/is-record.js';

/**
 * Responses' items as the gateway stores and replays them: a request's input as the list of
 * items the spec's input_items answers (a string is one user message; a message's string
 * content one text part), each with an id; a stored response's output as input for the next
 * turn.
 */

type Json = Record<string, unknown>;

const ID_BYTES = 24;
// Random bytes drawn 4 KiB at a time: drawn per id (a call into OpenSSL and a buffer each), they
// were 4 % of a Responses request's main thread.
const pool = Buffer.alloc(ID_BYTES * 170);
let used = pool.length;

/** An id in OpenAI's shape: a prefix and 48 hex digits. */
export function newId(prefix: string): string {
  if (used + ID_BYTES > pool.length) {
    randomFillSync(pool);
    used = 0;
  }
  used += ID_BYTES;
  return `${prefix}_${pool.toString('hex', used - ID_BYTES, used)}`;
}

/** A message's content as a list of parts (a string is one text part of the role's kind). */
function partsOf(role: unknown, content: unknown): unknown {
  if (typeof content !== 'string') return content;
  return [{ type: role === 'assistant' ? 'output_text' : 'input_text', text: content }];
}

/** A request's `input` as the items input_items lists, each with an id (the caller's, where it sent one). */
export function inputItems(input: unknown): Json[] {
  if (input === undefined || input === null) return [];
  if (typeof input === 'string')
    return [{ id: newId('msg'), type: 'message', role: 'user', content: partsOf('user', input) }];
  if (!Array.isArray(input)) return [];
  return input.filter(isRecord).map((item) => {
    const type = item.type ?? 'message';
    const content = type === 'message' ? { content: partsOf(item.role, item.content) } : {};
    const id = typeof item.id === 'string' && item.id !== '' ? item.id : newId(type === 'message' ? 'msg' : 'item');
    return { ...item, id, type, ...content };
  });
}

/**
 * Items sent again to an upstream: without their ids (the upstream never stored them: an
 * OpenAI upstream asked with `store: false` would look an id up and fail) and without reasoning
 * items (another model cannot read them; OpenAI's need their encrypted content, never stored).
 */
export function replayed(items: readonly unknown[]): Json[] {
  const out: Json[] = [];
  for (const item of items) {
    if (!isRecord(item) || item.type === 'reasoning') continue;
    const { id: _id, status: _status, ...rest } = item;
    out.push(rest);
  }
  return out;
}

/** A stored response's output items, as the next turn's input. */
export const outputOf = (response: Json): unknown[] => (Array.isArray(response.output) ? response.output : []);
