import { randomFillSync } from 'node:crypto';
import { isRecord } from '../../crds/is-record.js';

/**
 * Responses' items as the gateway stores and replays them: a request's input as the list of
 * items the spec's input_items answers (a string is one user message; a message's string
 * content one text part), each with an id; a stored response's output as input for the next
 * turn.
 */

type Json = Record<string, unknown>;

const RANDOM_BYTES = 16;
// Random bytes drawn 4 KiB at a time: drawn per id (a call into OpenSSL and a buffer each), they
// were 4 % of a Responses request's main thread.
const pool = Buffer.alloc(RANDOM_BYTES * 256);
let used = pool.length;
let sequence = 0;

/**
 * An id in OpenAI's shape, a prefix and 48 hex digits, in the order ids are made: the Unix
 * seconds (as OpenAI's own ids begin), this process's sequence, then 128 random bits. Ordered ids
 * put each new stored row at the right edge of its B-trees (the response's key, the item index),
 * where random ones dirtied a page anywhere in them on every commit: the writer thread spent
 * 92 µs of CPU a row with random ids, 50 with ordered (e2e/bench/RESULTS.md, section 22).
 */
export function newId(prefix: string): string {
  if (used + RANDOM_BYTES > pool.length) {
    randomFillSync(pool);
    used = 0;
  }
  used += RANDOM_BYTES;
  sequence = (sequence + 1) >>> 0;
  const seconds = Math.floor(Date.now() / 1000);
  return `${prefix}_${hex8(seconds)}${hex8(sequence)}${pool.toString('hex', used - RANDOM_BYTES, used)}`;
}

const hex8 = (n: number): string => n.toString(16).padStart(8, '0');

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
