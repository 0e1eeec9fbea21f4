import { ProxyError } from '../endpoints/errors.js';
import { outputOf, replayed } from './items.js';
import { type ResponseRows, rowBytes, type StoredRow } from './rows.js';

/**
 * The conversation before a response, from `previous_response_id`: the previous response's
 * input items and output items, and its own previous's before them, back to the first turn. The
 * gateway owns the state, so any upstream (translated ones too) gets the whole conversation in
 * `input`; `previous_response_id` itself is never sent on. The walk is bounded in turns, items
 * and bytes; a response the caller may not read is as missing as a deleted one.
 */

export interface HistoryBounds {
  /** Most responses along one chain. */
  maxTurns: number;
  /** Most items the history may add. */
  maxItems: number;
  /** Most bytes of stored rows the history may read. */
  maxBytes: number;
}

export const HISTORY_BOUNDS: HistoryBounds = { maxTurns: 1_000, maxItems: 10_000, maxBytes: 16 * 1024 * 1024 };

type Json = Record<string, unknown>;

/** OpenAI's answer to a previous_response_id it does not have (or the caller may not read). */
const previousNotFound = (id: string): ProxyError =>
  new ProxyError(
    404,
    'invalid_request_error',
    'previous_response_not_found',
    `Previous response with id '${id.slice(0, 100)}' not found.`,
    'previous_response_id',
  );

const tooLong = (what: string) =>
  new ProxyError(
    400,
    'invalid_request_error',
    'conversation_too_long',
    `the conversation along previous_response_id holds more than ${what}: start a new one, or send its input yourself`,
    'previous_response_id',
  );

/** The items before the request, oldest first, or why not. */
export async function historyOf(
  rows: ResponseRows,
  previousId: string,
  visible: (row: StoredRow) => boolean,
  bounds: HistoryBounds = HISTORY_BOUNDS,
): Promise<Json[] | ProxyError> {
  const turns: Json[][] = [];
  let items = 0;
  let bytes = 0;
  const seen = new Set<string>();
  for (let id: string | undefined = previousId; id !== undefined; ) {
    if (turns.length >= bounds.maxTurns || seen.has(id)) return tooLong(`${bounds.maxTurns} responses`);
    seen.add(id);
    const row = await rows.get(id);
    // The first id is the caller's; a missing one further back was deleted or expired: the chain is broken.
    if (!row || !visible(row) || row.expires < Date.now()) return previousNotFound(id);
    if (row.status === 'queued' || row.status === 'in_progress')
      return new ProxyError(
        400,
        'invalid_request_error',
        'previous_response_not_ready',
        `Previous response with id '${id}' is still ${row.status}: wait until it completed`,
        'previous_response_id',
      );
    bytes += rowBytes(row);
    if (bytes > bounds.maxBytes) return tooLong(`${bounds.maxBytes} bytes`);
    const response = JSON.parse(row.response) as Json;
    const turn = [...replayed(JSON.parse(row.input) as unknown[]), ...replayed(outputOf(response))];
    items += turn.length;
    if (items > bounds.maxItems) return tooLong(`${bounds.maxItems} items`);
    turns.push(turn);
    const before = response.previous_response_id;
    id = typeof before === 'string' && before !== '' ? before : undefined;
  }
  return turns.reverse().flat();
}
