import type { Env, Hono } from 'hono';
import type { Caller } from '../access/auth.js';
import { invalidRequest, ProxyError } from '../endpoints/errors.js';
import { mayRead } from './owner.js';
import { RUNNING, type StoredRow } from './rows.js';
import { type StoredResponses, storeUnavailable } from './stored-responses.js';

/**
 * The stored Responses' resource routes, with the API keys of the model routes; a key reads only
 * its own team's responses (an admin's any), and another team's id is a 404 as a missing one is:
 *   GET    /openai/v1/responses/{id}              the Response object as the caller saw it
 *                                                 (`include` and `stream` are not applied)
 *   DELETE /openai/v1/responses/{id}              {id, object: "response", deleted: true}
 *   GET    /openai/v1/responses/{id}/input_items  its own input items: after, limit (1-100, 20),
 *                                                 order (desc default, asc)
 *   POST   /openai/v1/responses/{id}/cancel       a background response, cancelled where still running
 * Another method on these paths is a 405 naming the one served.
 */

const BASE = '/openai/v1/responses/:id';
const ID = /^[A-Za-z0-9_-]{1,128}$/;

const notFound = (id: string) =>
  new ProxyError(
    404,
    'invalid_request_error',
    'not_found',
    `Response with id '${ID.test(id) ? id : '(invalid)'}' not found.`,
    'response_id',
  );

const wrongMethod = (path: string, allowed: string) =>
  new ProxyError(405, 'invalid_request_error', 'method_not_allowed', `${path} takes ${allowed}`, null, {
    Allow: allowed,
  });

const json = (body: string, status = 200) =>
  new Response(body, { status, headers: { 'content-type': 'application/json' } });

export function storedResponseRoutes<E extends Env>(
  app: Hono<E>,
  stored: StoredResponses,
  callerOf: (headers: Headers) => Promise<Caller>,
): void {
  /** A call of the store; its failure a 503 (its own text, which may quote a row, never goes out). */
  const db = <T>(work: Promise<T>): Promise<T> =>
    work.catch(() => {
      throw storeUnavailable('the stored responses cannot be read now; try again');
    });
  /** The row the caller may read, or the 404 for any other. */
  const readable = async (headers: Headers, id: string): Promise<{ caller: Caller; row: StoredRow }> => {
    const caller = await callerOf(headers);
    const row = ID.test(id) ? await db(stored.rows.get(id)) : undefined;
    if (!row || !mayRead(caller, row) || row.expires < Date.now()) throw notFound(id);
    return { caller, row };
  };

  app.get(BASE, async (c) => json((await readable(c.req.raw.headers, c.req.param('id'))).row.response));
  app.delete(BASE, async (c) => {
    const id = c.req.param('id');
    await readable(c.req.raw.headers, id);
    stored.running.get(id)?.abort(new Error('deleted'));
    if (!(await db(stored.rows.delete(id)))) throw notFound(id);
    return json(JSON.stringify({ id, object: 'response', deleted: true }));
  });
  app.all(BASE, (c) => {
    throw wrongMethod(c.req.path, 'GET, DELETE');
  });

  app.get(`${BASE}/input_items`, async (c) => {
    const { row } = await readable(c.req.raw.headers, c.req.param('id'));
    const page = pageOf(JSON.parse(row.input) as Array<{ id: string }>, new URL(c.req.url).searchParams);
    return json(JSON.stringify(page));
  });
  app.all(`${BASE}/input_items`, (c) => {
    throw wrongMethod(c.req.path, 'GET');
  });

  app.post(`${BASE}/cancel`, async (c) => {
    const id = c.req.param('id');
    const { row } = await readable(c.req.raw.headers, id);
    if (!row.background)
      throw invalidRequest('Only responses created with background: true can be cancelled.', 'response_id');
    if (!(RUNNING as readonly string[]).includes(row.status)) return json(row.response);
    const response = JSON.stringify({ ...(JSON.parse(row.response) as object), status: 'cancelled' });
    // Settled only while still running: a call that finished meanwhile keeps its answer.
    if (await db(stored.rows.settle(id, 'cancelled', response))) {
      stored.running.get(id)?.abort(new Error('cancelled'));
      return json(response);
    }
    return json((await readable(c.req.raw.headers, id)).row.response);
  });
  app.all(`${BASE}/cancel`, (c) => {
    throw wrongMethod(c.req.path, 'POST');
  });
}

interface Page<T> {
  object: 'list';
  data: T[];
  first_id: string | null;
  last_id: string | null;
  has_more: boolean;
}

/** One page of items as the spec's list: `after` an item id, `limit` 1-100 (20), `order` asc or desc (desc). */
export function pageOf<T extends { id: string }>(items: readonly T[], params: URLSearchParams): Page<T> {
  const order = params.get('order') ?? 'desc';
  if (order !== 'asc' && order !== 'desc') throw invalidRequest("order must be 'asc' or 'desc'", 'order');
  const rawLimit = params.get('limit');
  const limit = rawLimit === null ? 20 : Number(rawLimit);
  if (!Number.isInteger(limit) || limit < 1 || limit > 100)
    throw invalidRequest('limit must be an integer from 1 to 100', 'limit');
  const ordered = order === 'asc' ? [...items] : [...items].reverse();
  const after = params.get('after');
  let start = 0;
  if (after !== null) {
    const at = ordered.findIndex((i) => i.id === after);
    if (at < 0) throw invalidRequest(`after names no item of this response`, 'after');
    start = at + 1;
  }
  const data = ordered.slice(start, start + limit);
  return {
    object: 'list',
    data,
    first_id: data[0]?.id ?? null,
    last_id: data.at(-1)?.id ?? null,
    has_more: start + limit < ordered.length,
  };
}
