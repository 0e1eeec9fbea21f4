import { randomUUID } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { serve } from '@hono/node-server';
import type { Tool } from '@modelcontextprotocol/client';
import { Server, WebStandardStreamableHTTPServerTransport } from '@modelcontextprotocol/server';
import { afterEach, describe, expect, it } from 'vitest';
import { McpSessions } from './mcp-sessions.js';

/**
 * The operator's live sessions against a real MCP server of the official SDK, in process over
 * real HTTP (Streamable HTTP with sessions): tools across pages, one session reused between
 * discoveries, notifications/tools/list_changed reaching the controller, a restarted server's
 * lost session replaced, a session closed with its server.
 */

interface TestServer {
  url: string;
  tools: Tool[];
  /** Sessions the server opened (initialize requests that created one). */
  opened: () => number;
  /** Tells every connected session its tools changed. */
  changed: () => Promise<void>;
  /** Forgets every session, as a restarted server would. */
  forget: () => void;
  close: () => Promise<void>;
}

const tool = (name: string): Tool => ({ name, description: `the ${name} tool`, inputSchema: { type: 'object' } });

async function startServer(tools: Tool[], pageSize = 2): Promise<TestServer> {
  const sessions = new Map<string, { server: Server; transport: WebStandardStreamableHTTPServerTransport }>();
  const servers = new Set<Server>();
  let opened = 0;
  const handle = async (req: Request): Promise<Response> => {
    const id = req.headers.get('mcp-session-id');
    const found = id ? sessions.get(id) : undefined;
    if (found) return found.transport.handleRequest(req);
    if (id) return new Response('no such session', { status: 404 });
    const server = new Server(
      { name: 'test-server', version: '1.2.3' },
      { capabilities: { tools: { listChanged: true } } },
    );
    server.setRequestHandler('tools/list', (request) => {
      const from = Number(request.params?.cursor ?? 0);
      const next = from + pageSize;
      return { tools: tools.slice(from, next), ...(next < tools.length ? { nextCursor: String(next) } : {}) };
    });
    const transport: WebStandardStreamableHTTPServerTransport = new WebStandardStreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (sid) => {
        opened += 1;
        sessions.set(sid, { server, transport });
      },
    });
    servers.add(server);
    await server.connect(transport);
    return transport.handleRequest(req);
  };
  const http = await new Promise<ReturnType<typeof serve>>((resolve) => {
    const s = serve({ fetch: handle, port: 0, hostname: '127.0.0.1' }, () => resolve(s));
  });
  const port = (http.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    tools,
    opened: () => opened,
    changed: async () => {
      await Promise.all([...servers].map((s) => s.sendToolListChanged().catch(() => {})));
    },
    forget: () => sessions.clear(),
    close: async () => {
      await Promise.all([...servers].map((s) => s.close().catch(() => {})));
      await new Promise<void>((resolve) => {
        http.close(() => resolve());
        if ('closeAllConnections' in http) http.closeAllConnections();
      });
    },
  };
}

const started: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  await Promise.all(started.splice(0).map((s) => s.close()));
});

const request = (url: string, fingerprint = 'a') => ({ url, fingerprint, auth: () => undefined, timeoutMs: 5000 });

async function until<T>(what: string, fn: () => T | undefined, ms = 5000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = fn();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('McpSessions', () => {
  it('lists every page of tools and reports the server and the negotiated revision', async () => {
    const server = await startServer(['a', 'b', 'c', 'd', 'e'].map(tool));
    const sessions = new McpSessions(() => {});
    started.push(server, { close: () => sessions.closeAll() });
    const out = await sessions.discover('ns/s', request(server.url));
    expect(out).toMatchObject({ ok: true, serverInfo: { name: 'test-server', version: '1.2.3' } });
    if (!out.ok) throw new Error('not ok');
    expect(out.tools.map((t) => t.name)).toEqual(['a', 'b', 'c', 'd', 'e']);
    expect(out.protocolVersion).toMatch(/^\d{4}-\d{2}-\d{2}$/);
  });

  it('keeps one session between discoveries, and hears list_changed on it', async () => {
    const server = await startServer([tool('a')]);
    const changed: string[] = [];
    const sessions = new McpSessions((key) => changed.push(key));
    started.push(server, { close: () => sessions.closeAll() });
    await sessions.discover('ns/s', request(server.url));
    const opened = server.opened();
    server.tools.push(tool('b'));
    await server.changed();
    await until('list_changed', () => (changed.length > 0 ? changed : undefined));
    expect(changed[0]).toBe('ns/s');
    const again = await sessions.discover('ns/s', request(server.url));
    expect(again.ok && again.tools.map((t) => t.name)).toEqual(['a', 'b']);
    expect(server.opened()).toBe(opened);
  });

  it('opens a new session when the old one is gone (a restarted server) or its settings changed', async () => {
    const server = await startServer([tool('a')]);
    const sessions = new McpSessions(() => {});
    started.push(server, { close: () => sessions.closeAll() });
    await sessions.discover('ns/s', request(server.url));
    const opened = server.opened();
    server.forget();
    const out = await sessions.discover('ns/s', request(server.url));
    expect(out.ok).toBe(true);
    expect(server.opened()).toBe(opened + 1);
    await sessions.discover('ns/s', request(server.url, 'b'));
    expect(server.opened()).toBe(opened + 2);
  });

  it('reports a failure with its reason and keeps nothing open', async () => {
    const server = await startServer([tool('a')]);
    const url = server.url;
    await server.close();
    const sessions = new McpSessions(() => {});
    const out = await sessions.discover('ns/s', request(url));
    expect(out).toMatchObject({ ok: false, problem: { reason: 'Unreachable' } });
    expect(sessions.has('ns/s')).toBe(false);
  });

  it('closes the session of a deleted server, and drops a late notice of a replaced one', async () => {
    const server = await startServer([tool('a')]);
    const changed: string[] = [];
    const sessions = new McpSessions((key) => changed.push(key));
    started.push(server, { close: () => sessions.closeAll() });
    await sessions.discover('ns/s', request(server.url));
    await sessions.close('ns/s');
    expect(sessions.has('ns/s')).toBe(false);
    await server.changed();
    await new Promise((r) => setTimeout(r, 500));
    expect(changed).toEqual([]);
  });
});
