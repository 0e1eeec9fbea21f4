import { isRecord } from '../../crds/is-record.js';
import type { Caller } from '../access/auth.js';
import { ProxyError } from '../endpoints/errors.js';
import { outputOf, replayed } from './items.js';
import { mayRead, ownerOf } from './owner.js';
import type { ResponseRows, StoredRow } from './rows.js';

/**
 * `item_reference` input items (what the Vercel AI SDK sends for an earlier answer's items while
 * `store` is on) resolved to the items themselves, from the caller's team's stored responses: the
 * newest response holding an item of that id. The upstream gets the item whole (without its id,
 * reasoning left out, as in a replayed conversation); the stored input keeps it with its id.
 */

type Json = Record<string, unknown>;

/** OpenAI's answer to a reference it cannot resolve. */
const itemNotFound = (id: string, at: string) =>
  new ProxyError(404, 'invalid_request_error', 'item_not_found', `Item with id '${id.slice(0, 100)}' not found.`, at);

/** The input as stored (`own`) and as sent (`sent`); the same value where it references nothing. */
export async function resolveReferences(
  rows: ResponseRows,
  input: unknown,
  caller: Caller,
): Promise<{ own: unknown; sent: unknown } | ProxyError> {
  if (!Array.isArray(input) || !input.some((i) => isRecord(i) && i.type === 'item_reference'))
    return { own: input, sent: input };
  const owner = caller.policy.role === 'Admin' ? undefined : ownerOf(caller);
  const fetched = new Map<string, StoredRow | undefined>();
  const own: unknown[] = [];
  const sent: unknown[] = [];
  for (const [i, item] of input.entries()) {
    if (!isRecord(item) || item.type !== 'item_reference') {
      own.push(item);
      sent.push(item);
      continue;
    }
    const id = String(item.id);
    const responseId = await rows.findItem(id, owner);
    if (responseId !== undefined && !fetched.has(responseId)) fetched.set(responseId, await rows.get(responseId));
    const row = responseId === undefined ? undefined : fetched.get(responseId);
    if (!row || !mayRead(caller, row) || row.expires < Date.now()) return itemNotFound(id, `input[${i}]`);
    const items = [...(JSON.parse(row.input) as unknown[]), ...outputOf(JSON.parse(row.response) as Json)];
    const found = items.find((x) => isRecord(x) && x.id === id);
    if (!found) return itemNotFound(id, `input[${i}]`);
    own.push(found);
    sent.push(...replayed([found]));
  }
  return { own, sent };
}
