import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from '../../e2e/support/gateway.js';
import { ApiKeys } from '../access/auth.js';
import { MemoryUsage } from '../usage/record.js';
import { McpServerTable } from './servers.js';

/**
 * Property tests of /mcp against hostile input: random JSON and bytes, JSON-RPC of any shape,
 * made-up methods, tools and sessions, odd headers. Whatever comes in, the gateway answers a
 * status the spec gives that case with a JSON-RPC body (or 202 without one), never a 5xx, never
 * the caller's key, and stays up. One McpServer is registered at a port nothing listens on: a
 * call that gets that far meets an unreachable server, which is an answer too.
 */

const KEY = 'sk-mcp-property-0123456789';
let gateway: TestGateway;
let session = '';

const STATUSES = new Set([200, 202, 400, 401, 404, 405, 413, 415, 502]);

beforeAll(async () => {
  const servers = new McpServerTable();
  servers.set([
    {
      apiVersion: 'ai.platform/v1beta1',
      kind: 'McpServer',
      metadata: { name: 'nowhere', namespace: 'platform-agent' },
      spec: { url: 'http://127.0.0.1:9/mcp', timeoutSeconds: 2 },
    },
  ]);
  gateway = await startGateway({}, { keys: ApiKeys.fromKeys([KEY]), usage: new MemoryUsage(), mcpServers: servers });
  const init = await post(
    JSON.stringify({
      jsonrpc: '2.0',
      id: 1,
      method: 'initialize',
      params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'p', version: '1' } },
    }),
  );
  session = init.headers.get('mcp-session-id') ?? '';
  await init.text();
}, 60_000);

afterAll(async () => {
  await gateway?.stop();
});

function post(body: string | Uint8Array, headers: Record<string, string> = {}): Promise<Response> {
  return gateway.request('/mcp', {
    method: 'POST',
    headers: {
      'x-api-key': KEY,
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      ...headers,
    },
    body,
  });
}

async function checked(res: Response): Promise<void> {
  expect(STATUSES.has(res.status), `status ${res.status}`).toBe(true);
  const text = await res.text();
  expect(text).not.toContain(KEY);
  if (res.status === 202) {
    expect(text).toBe('');
    return;
  }
  const body = JSON.parse(text) as { jsonrpc?: string; error?: { code?: unknown }; result?: unknown };
  expect(body.jsonrpc).toBe('2.0');
  expect('error' in body || 'result' in body).toBe(true);
  if (body.error) expect(typeof body.error.code).toBe('number');
}

const METHODS = ['tools/call', 'tools/list', 'resources/read', 'prompts/get', 'completion/complete', 'ping'];
const message = fc.record(
  {
    jsonrpc: fc.oneof(fc.constant('2.0'), fc.string()),
    id: fc.oneof(fc.integer(), fc.string({ maxLength: 40 }), fc.constant(null)),
    method: fc.oneof(fc.constantFrom(...METHODS), fc.string({ maxLength: 60 })),
    params: fc.oneof(
      fc.record(
        { name: fc.string({ maxLength: 80 }), uri: fc.string({ maxLength: 80 }), arguments: fc.jsonValue() },
        { requiredKeys: [] },
      ),
      fc.jsonValue(),
    ),
  },
  { requiredKeys: [] },
);

describe('/mcp against hostile input', () => {
  it('answers any JSON-RPC-shaped message in a session with a JSON-RPC body and a 2xx/4xx', async () => {
    await fc.assert(
      fc.asyncProperty(message, async (m) => {
        await checked(
          await post(JSON.stringify(m), { 'mcp-session-id': session, 'mcp-protocol-version': '2025-11-25' }),
        );
      }),
      { numRuns: 150 },
    );
  }, 120_000);

  it('answers random bytes, JSON and headers without a session', async () => {
    const header = fc.string({ maxLength: 60 }).filter((v) => /^[\t\x20-\x7e]*$/.test(v));
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(fc.string({ maxLength: 400 }), fc.json(), fc.uint8Array({ maxLength: 400 })),
        header,
        header,
        async (body, sessionId, version) => {
          await checked(
            await post(body, { 'mcp-session-id': sessionId || 'x', 'mcp-protocol-version': version || 'x' }),
          );
        },
      ),
      { numRuns: 150 },
    );
  }, 120_000);

  it('answers methods named after Object’s own properties as the unknown methods they are', async () => {
    for (const method of ['constructor', 'toString', '__proto__', 'hasOwnProperty', 'valueOf']) {
      const res = await post(JSON.stringify({ jsonrpc: '2.0', id: 3, method, params: {} }), {
        'mcp-session-id': session,
        'mcp-protocol-version': '2025-11-25',
      });
      const body = (await res.clone().json()) as { error?: { code: number } };
      expect(body.error?.code, method).toBe(-32601);
      await checked(res);
    }
  });

  it('is still serving afterwards', async () => {
    await checked(await post(JSON.stringify({ jsonrpc: '2.0', id: 9, method: 'ping' }), { 'mcp-session-id': session }));
  });
});
