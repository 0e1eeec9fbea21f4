import { createServer, type IncomingMessage, type Server, type ServerResponse, STATUS_CODES } from 'node:http';
import type { Duplex } from 'node:stream';
import { getRequestListener } from '@hono/node-server';
import type { Hono } from 'hono';
import { ENDPOINTS, type Endpoint } from './endpoints/endpoints.js';
import { ProxyError } from './endpoints/errors.js';
import type { DoorIncoming, DoorPass } from './exchange.js';
import { mcpPath } from './mcp/mcp-gateway.js';
import type { Pipeline } from './pipeline.js';
import { headerOf, readBody } from './server/read-body.js';
import { newRequestId } from './server/request-id.js';
import { writeAnswer } from './server/write-answer.js';

/**
 * The proxy's one HTTP front door. Every endpoint (proxy/endpoints/endpoints.ts, count_tokens
 * included) is served here on node:http: the body read by the front door, the request run
 * through the pipeline (proxy/pipeline.ts), the answer written by the front door, with no
 * Fetch API objects between (turning every request and response into them and back was the
 * largest cost the gateway added to a call, e2e/bench/RESULTS.md). Every other route (health,
 * model lists, usage APIs, pages) goes to the Hono app of proxy/server/routes.ts, but MCP's
 * (/mcp, /mcp/<server>), which its own gateway serves (proxy/mcp/).
 */

/** How long callers may take, and how many connections they may hold. */
export interface ConnectionLimits {
  /** Until a request's headers are complete (Node answers 408 and closes). */
  headersTimeoutMs: number;
  /** Until a request's body is complete: 408 request_timeout, connection closed. */
  bodyTimeoutMs: number;
  /** An idle kept-alive connection is closed after this. */
  keepAliveTimeoutMs: number;
  /** Open connections at most; more are closed as they arrive. */
  maxConnections: number;
}

/**
 * Connections the kernel holds for the proxy before it accepts them (capped by net.core.somaxconn).
 * Node's default, 511, overflows when thousands of agents reconnect at once (a rollout, a node
 * drained): the SYNs past it are dropped and retried after 1 s, 3 s, 7 s, or reset, which callers
 * see as seconds to their first token and as ECONNRESET (e2e/bench/streams.ts at 5,000 streams).
 */
export const LISTEN_BACKLOG = 4096;

export const DEFAULT_CONNECTION_LIMITS: ConnectionLimits = {
  headersTimeoutMs: 10_000,
  bodyTimeoutMs: 30_000,
  keepAliveTimeoutMs: 30_000,
  maxConnections: 10_000,
};

const BY_PATH = new Map<string, Endpoint>(Object.values(ENDPOINTS).map((e) => [e.path, e]));

/**
 * MCP's door (/mcp, /mcp/<server>): its requests pass the pipeline's admit and body stages
 * (`admission`); the MCP gateway (proxy/mcp/mcp-gateway.ts) serves what passed and writes its
 * answers itself, and `refuse` answers what did not, in MCP's form.
 */
export interface McpDoor {
  /** The Origin (and Host) check MCP's spec asks for: false when it answered the refusal itself. */
  guard(req: IncomingMessage, res: ServerResponse, requestId: string): boolean;
  admission(door: DoorIncoming): Promise<DoorPass | ProxyError>;
  serve(req: IncomingMessage, res: ServerResponse, where: { server?: string }, pass: DoorPass): Promise<void>;
  refuse(req: IncomingMessage, res: ServerResponse, err: ProxyError, requestId: string): void;
}

export function createFrontDoor(
  pipeline: Pipeline,
  others: Pick<Hono, 'fetch'>,
  limits: ConnectionLimits = DEFAULT_CONNECTION_LIMITS,
  mcp?: McpDoor,
): Server {
  const hono = getRequestListener(others.fetch);
  const serveEndpoint = async (endpoint: Endpoint, req: IncomingMessage, res: ServerResponse) => {
    const gone = new AbortController();
    let delivered: ((ok: boolean) => void) | undefined;
    // 'close' follows 'finish' (the last byte handed to the socket) on a kept-alive connection too.
    res.once('close', () => {
      if (!res.writableFinished) gone.abort();
      delivered?.(res.writableFinished);
    });
    const answer = await pipeline({
      requestId: newRequestId(),
      endpoint,
      header: headerOf(req),
      body: (limit, grow) => readBody(req, limit, limits.bodyTimeoutMs, grow),
      signal: gone.signal,
      remote: req.socket.remoteAddress,
    });
    if (answer.durable) await answer.durable;
    // The caller left while the answer was made: it never reached them.
    if (gone.signal.aborted) answer.delivered?.(false);
    else delivered = answer.delivered;
    await writeAnswer(answer, res, gone.signal);
  };
  const serveMcp = async (door: McpDoor, where: { server?: string }, req: IncomingMessage, res: ServerResponse) => {
    const gone = new AbortController();
    res.once('close', () => {
      if (!res.writableFinished) gone.abort();
    });
    const requestId = newRequestId();
    if (!door.guard(req, res, requestId)) return;
    const pass = await door.admission({
      requestId,
      header: headerOf(req),
      body: (limit, grow) => readBody(req, limit, limits.bodyTimeoutMs, grow),
      signal: gone.signal,
      remote: req.socket.remoteAddress,
      // Only a POST carries a message; DELETE ends a session, and anything else is refused by MCP.
      bodyless: req.method !== 'POST',
    });
    if (pass instanceof ProxyError) return door.refuse(req, res, pass, requestId);
    try {
      await door.serve(req, res, where, pass);
    } finally {
      pass.release();
    }
  };
  const server = createServer(
    {
      headersTimeout: limits.headersTimeoutMs,
      // Node's own backstop for the whole request (headers and body), past our upload timeout.
      requestTimeout: limits.headersTimeoutMs + limits.bodyTimeoutMs + 5_000,
      keepAliveTimeout: limits.keepAliveTimeoutMs,
      // Node checks the two timeouts above on this period (30 s by default, which would let a
      // slow-headers caller hold its connection up to 30 s past the limit).
      connectionsCheckingInterval: Math.max(100, Math.min(1_000, limits.headersTimeoutMs / 4)),
    },
    (req, res) => {
      const url = req.url ?? '';
      const query = url.indexOf('?');
      const endpoint = req.method === 'POST' ? BY_PATH.get(query < 0 ? url : url.slice(0, query)) : undefined;
      if (endpoint) {
        serveEndpoint(endpoint, req, res).catch(() => {
          // The pipeline answers every error itself; this is a socket that failed under us.
          if (!res.headersSent) res.writeHead(500).end();
          else res.destroy();
        });
        return;
      }
      const where = mcp && url.startsWith('/mcp') ? mcpPath(url) : undefined;
      if (mcp && where) {
        serveMcp(mcp, where, req, res).catch(() => {
          if (!res.headersSent) res.writeHead(500).end();
          else res.destroy();
        });
        return;
      }
      void hono(req, res);
    },
  );
  server.maxConnections = limits.maxConnections;
  server.on('clientError', answerUnparsable);
  return server;
}

/**
 * What Node's HTTP parser refused before any route saw the request (a header line too long, a
 * control byte in a header, headers that never completed): answered in OpenAI's envelope with
 * a request id like every other error, instead of Node's bare status line, then closed.
 */
const UNPARSABLE: Readonly<Record<string, readonly [number, string, string]>> = {
  HPE_HEADER_OVERFLOW: [
    431,
    'request_header_too_large',
    'the request headers are larger than this gateway takes (16 KiB)',
  ],
  ERR_HTTP_REQUEST_TIMEOUT: [408, 'request_timeout', 'the request headers did not arrive in time; send them at once'],
};

function answerUnparsable(err: Error & { code?: string }, socket: Duplex): void {
  if (err.code === 'ECONNRESET' || !socket.writable) {
    socket.destroy();
    return;
  }
  const [status, code, message] = UNPARSABLE[err.code ?? ''] ?? [
    400,
    'malformed_request',
    'the request is not valid HTTP/1.1 (a header holds a byte HTTP does not allow there, or the framing is broken)',
  ];
  const requestId = newRequestId();
  const body = JSON.stringify({ error: { message, type: 'invalid_request_error', param: null, code } });
  socket.end(
    `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? ''}\r\ncontent-type: application/json\r\nx-request-id: ${requestId}\r\nconnection: close\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
  );
}
