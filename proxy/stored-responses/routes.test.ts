import { Hono } from 'hono';
import { describe, expect, it } from 'vitest';
import type { Caller } from '../access/auth.js';
import { ProxyError } from '../endpoints/errors.js';
import { storedResponseRoutes } from './routes.js';
import type { ResponseRows } from './rows.js';
import { StoredResponses, storeUnavailable } from './stored-responses.js';

/** A store that fails: the routes answer 503 without its text, saving says so, and the log holds no content. */

const SECRET = 'the row holds this';
const failing: ResponseRows = {
  ready: async () => {},
  put: () => Promise.reject(new Error(`INSERT failed near '${SECRET}'`)),
  get: () => Promise.reject(new Error(`SELECT failed near '${SECRET}'`)),
  findItem: () => Promise.reject(new Error(SECRET)),
  delete: () => Promise.reject(new Error(SECRET)),
  settle: () => Promise.reject(new Error(SECRET)),
  sweep: () => Promise.reject(new Error(SECRET)),
  bytes: () => Promise.reject(new Error(SECRET)),
};
const caller: Caller = { keyHashPrefix: 'abc', policy: { name: 'a', team: 'a', role: 'User', tags: [] } };

describe('a failing store', () => {
  it('is a 503 on every route and a stored: false on an answer, never its own error text', async () => {
    const logged: string[] = [];
    const stored = new StoredResponses(failing, {}, { warn: (m, f) => logged.push(m + JSON.stringify(f)) });
    const app = new Hono();
    app.onError((err) =>
      err instanceof ProxyError
        ? new Response(JSON.stringify(err.toJSON()), { status: err.status })
        : new Response('', { status: 500 }),
    );
    storedResponseRoutes(app, stored, async () => caller);
    for (const [method, path] of [
      ['GET', '/openai/v1/responses/resp_1'],
      ['DELETE', '/openai/v1/responses/resp_1'],
      ['GET', '/openai/v1/responses/resp_1/input_items'],
      ['POST', '/openai/v1/responses/resp_1/cancel'],
    ] as const) {
      const res = await app.request(path, { method });
      expect(res.status, `${method} ${path}`).toBe(503);
      const text = await res.text();
      expect(text).toContain('store_unavailable');
      expect(text).not.toContain(SECRET);
    }
    // A 503 says when to retry.
    expect(storeUnavailable('down').headers['Retry-After']).toBe('5');
    const turn = {
      stamp: { id: 'resp_x', previousResponseId: null, store: true, background: false },
      owner: 'team:a',
      input: [],
    };
    expect(await stored.save(turn, { id: 'resp_x', output: [{ text: SECRET }] })).toBe('the store failed');
    expect(logged.join('\n')).not.toContain(SECRET);
    expect(logged.length).toBeGreaterThan(0);
  });
});
