import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { getRequestListener } from '@hono/node-server';
import type { Hono } from 'hono';
import { ProxyError } from './endpoints/errors.js';
import {
  declaredTooLarge,
  type EndpointHandler,
  newRequestId,
  type PipelineOutput,
  tooLarge,
  unreadable,
} from './pipeline.js';
import { type ChunkSource, chunksOf } from './upstreams/chunk-source.js';

/**
 * The proxy's HTTP server. The OpenAI POST endpoints (chat completions, the hot path, and
 * completions and embeddings) are served straight on node:http:
 * the handler is the same as the Hono route's (proxy/pipeline.ts), but without turning every
 * request and response into Fetch API objects and back, which the profile showed to be the
 * largest cost the gateway added to a call (e2e/bench/RESULTS.md). Every other route goes to the
 * Hono app.
 */

const headerOf =
  (req: IncomingMessage) =>
  (name: string): string | undefined => {
    const v = req.headers[name];
    return Array.isArray(v) ? v.join(', ') : v;
  };

/**
 * The request body by 'data' events (an async iterator per request showed in the profile),
 * refused with 413 from Content-Length before reading, or at the first chunk past the limit.
 */
function readBody(
  req: IncomingMessage,
  limit: number,
  timeoutMs: number,
  grow?: (size: number) => void,
): Promise<string> {
  const declared = declaredTooLarge(req.headers['content-length'], limit);
  if (declared) return Promise.reject(declared);
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    let size = 0;
    // A caller that trickles its body holds a connection and memory: it gets the upload time, not more.
    const timer = setTimeout(() => {
      req.pause();
      fail(uploadTimeout(timeoutMs));
    }, timeoutMs);
    const fail = (err: Error) => {
      clearTimeout(timer);
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', onError);
      req.off('aborted', onAborted);
      reject(err);
    };
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        // Stop reading; the rest is discarded when the response ends.
        req.pause();
        fail(tooLarge(limit));
        return;
      }
      if (grow) {
        try {
          grow(size);
        } catch (err) {
          req.pause();
          fail(err as Error);
          return;
        }
      }
      parts.push(chunk);
    };
    const onEnd = () => {
      clearTimeout(timer);
      req.off('error', onError);
      req.off('aborted', onAborted);
      resolve(parts.length === 1 ? (parts[0] as Buffer).toString('utf8') : Buffer.concat(parts, size).toString('utf8'));
    };
    const onError = () => fail(unreadable());
    const onAborted = () => fail(unreadable());
    req.on('data', onData);
    req.once('end', onEnd);
    req.once('error', onError);
    req.once('aborted', onAborted);
  });
}

const uploadTimeout = (ms: number) =>
  new ProxyError(
    408,
    'invalid_request_error',
    'request_timeout',
    `the request body did not arrive within ${ms / 1000} s; send it at once`,
    null,
    { connection: 'close' },
  );

/** Calls `resume` once the socket drained, or closed: a caller that left never drains. */
function onceDrained(res: ServerResponse, resume: () => void): void {
  const go = () => {
    res.off('drain', go);
    res.off('close', go);
    resume();
  };
  res.on('drain', go);
  res.on('close', go);
}

async function writeOutput(out: PipelineOutput, res: ServerResponse, signal: AbortSignal): Promise<void> {
  if (out.kind === 'json') {
    // With the length known, no chunked framing: what OpenAI and Ollama send for whole answers.
    res.writeHead(out.status, { ...out.headers, 'content-length': Buffer.byteLength(out.body) }).end(out.body);
    return;
  }
  res.writeHead(out.status, out.headers);
  if (!(out.body instanceof ReadableStream) && out.body.pipe) return pipeOutput(out.body, res, signal);
  const source = chunksOf(out.body);
  // The caller left: cancelling the body stops the upstream and settles the usage record.
  const cancel = () => source.cancel();
  if (signal.aborted) return cancel();
  signal.addEventListener('abort', cancel, { once: true });
  try {
    for (;;) {
      const value = await source.read();
      if (value === undefined) break;
      // Backpressure: read the next chunk only once the socket took this one.
      if (!res.write(value)) {
        await new Promise<void>((resolve) => onceDrained(res, resolve));
        if (signal.aborted) return;
      }
    }
    res.end();
  } finally {
    signal.removeEventListener('abort', cancel);
  }
}

/**
 * A source in push mode writes straight to the socket: no promise per chunk. Resolves once the
 * stream ended or the caller left (the source is cancelled then, which settles its usage).
 */
function pipeOutput(source: ChunkSource, res: ServerResponse, signal: AbortSignal): Promise<void> {
  return new Promise<void>((resolve) => {
    const cancel = () => {
      source.cancel();
      resolve();
    };
    if (signal.aborted) return cancel();
    signal.addEventListener('abort', cancel, { once: true });
    source.pipe?.({
      write: (chunk) => res.write(chunk),
      onceDrained: (resume) => onceDrained(res, resume),
      end: () => {
        signal.removeEventListener('abort', cancel);
        if (!res.writableEnded) res.end();
        resolve();
      },
    });
  });
}

/** Only what the server calls: the app's fetch and the POST endpoints' handlers by path. */
export interface Servable {
  app: Pick<Hono, 'fetch'>;
  endpoints: Map<string, EndpointHandler>;
}

/** How long callers may take, and how many connections they may hold. */
export interface ConnectionLimits {
  /** Until a request's headers are complete (Node answers 408 and closes). */
  headersTimeoutMs: number;
  /** Until a chat request's body is complete: 408 request_timeout, connection closed. */
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

export function createProxyServer(
  { app, endpoints }: Servable,
  limits: ConnectionLimits = DEFAULT_CONNECTION_LIMITS,
): Server {
  const hono = getRequestListener(app.fetch);
  const serveEndpoint = async (handler: EndpointHandler, req: IncomingMessage, res: ServerResponse) => {
    const gone = new AbortController();
    res.once('close', () => {
      if (!res.writableFinished) gone.abort();
    });
    const out = await handler({
      requestId: newRequestId(),
      header: headerOf(req),
      body: (limit, grow) => readBody(req, limit, limits.bodyTimeoutMs, grow),
      signal: gone.signal,
    });
    if (out.durable) await out.durable;
    await writeOutput(out, res, gone.signal);
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
      const handler = req.method === 'POST' ? endpoints.get(query < 0 ? url : url.slice(0, query)) : undefined;
      if (handler) {
        serveEndpoint(handler, req, res).catch(() => {
          // The handler answers every error itself; this is a socket that failed under us.
          if (!res.headersSent) res.writeHead(500).end();
          else res.destroy();
        });
        return;
      }
      void hono(req, res);
    },
  );
  server.maxConnections = limits.maxConnections;
  return server;
}
