import { SdkHttpError, StreamableHTTPClientTransport, UnauthorizedError } from '@modelcontextprotocol/client';
import { McpCredentialError } from '../../crds/mcp/auth.js';
import { answerUnrelayed } from './client-requests.js';
import {
  isObject,
  type JsonObject,
  RPC,
  type RpcAnswer,
  RpcError,
  type RpcNotification,
  type RpcRequest,
} from './json-rpc.js';
import type { McpTarget } from './servers.js';
import type { UpstreamSession } from './session.js';

/**
 * One exchange with an upstream MCP server over Streamable HTTP, through the official SDK's
 * client transport (its SSE parsing, auth providers, session and version headers): a request
 * in, its answer out, the notifications the server sends on the way (progress) handed over as
 * they come. A transport per exchange, opened on the session the gateway's session carries, so
 * any replica can make it; connections are pooled by fetch underneath. Bounded: an answer
 * larger than maxBytes, or slower than the server's timeout, fails the exchange, and a server
 * that closes its stream before answering fails it too.
 */

export interface Exchange {
  target: McpTarget;
  /** Absent for initialize (the answer opens one). */
  session?: UpstreamSession;
  message: RpcRequest;
  /** The caller gave up (or cancelled): the exchange stops and the server is told. */
  signal?: AbortSignal;
  onNotification?: (n: RpcNotification) => void;
  /**
   * A request of the server's on the way (sampling, elicitation, roots: proxy/mcp/client-requests.ts).
   * None: it is answered with an error at once, so that the server's call does not wait for ever.
   */
  onRequest?: (r: RpcRequest) => void;
  maxBytes: number;
}

export interface ExchangeResult {
  answer: RpcAnswer;
  /** The session the server opened (initialize). */
  sessionId?: string;
  /** Bytes of the server's answer as it sent them. */
  bytes: number;
}

/** Why an exchange failed, as the caller hears it (never the server's credentials or URL). */
export class UpstreamError extends RpcError {
  constructor(
    code: number,
    message: string,
    readonly reason: 'timeout' | 'too_large' | 'unreachable' | 'session_gone' | 'refused' | 'closed' | 'cancelled',
    readonly httpStatus?: number,
  ) {
    super(code, message);
  }
}

export async function exchange(x: Exchange): Promise<ExchangeResult> {
  const read = { bytes: 0, tooLarge: false };
  // One controller, one timer cleared at the end: AbortSignal.timeout would hold a timer per call
  // for the whole timeout, and AbortSignal.any a listener on the caller's signal.
  const ctl = new AbortController();
  const stop = ctl.signal;
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    ctl.abort();
  }, x.target.timeoutMs);
  const callerGone = () => ctl.abort();
  x.signal?.addEventListener('abort', callerGone, { once: true });
  let settled = false;
  const transport = transportTo(x.target, x.session, boundedFetch(x.maxBytes, read), CALL_RECONNECTION);
  // Started, so that a stream the server closes before answering is picked up again (SEP-1699:
  // its Last-Event-ID, after its `retry:`); closed at the end, which stops any reconnection.
  await transport.start();
  try {
    const answer = await new Promise<RpcAnswer>((resolve, reject) => {
      // A dropped stream is the SDK's to pick up again; whether the answer still comes is told by
      // onRequestStreamEnd (or the timeout), not by the drop.
      const fail = (err: unknown) => {
        if (!RECONNECTING.test(String(err))) reject(err);
      };
      stop.addEventListener('abort', () => reject(stop.reason), { once: true });
      if (x.signal?.aborted) ctl.abort();
      transport.onerror = fail;
      transport.onmessage = (m) => {
        const msg = m as JsonObject;
        if ('id' in msg && msg.id === x.message.id && ('result' in msg || 'error' in msg)) {
          settled = true;
          resolve(msg as unknown as RpcAnswer);
        } else if (typeof msg.method === 'string' && !('id' in msg)) {
          x.onNotification?.(msg as unknown as RpcNotification);
        } else if (typeof msg.method === 'string') {
          const r = msg as unknown as RpcRequest;
          if (x.onRequest) x.onRequest(r);
          else if (x.session)
            void respond(
              x.target,
              x.session,
              answerUnrelayed(r, new RpcError(RPC.methodNotFound, `Method not found: ${r.method.slice(0, 100)}`)),
            );
        }
      };
      transport
        .send(x.message as Parameters<StreamableHTTPClientTransport['send']>[0], {
          requestSignal: stop,
          // Also called when a stream that did answer ends: only a stream without the answer is an error.
          onRequestStreamEnd: () => {
            if (settled) return;
            reject(
              new UpstreamError(
                RPC.gateway,
                `MCP server ${x.target.name} closed its stream before answering`,
                'closed',
              ),
            );
          },
        })
        .catch(fail);
    });
    return { answer, bytes: read.bytes, ...(transport.sessionId ? { sessionId: transport.sessionId } : {}) };
  } catch (err) {
    // The gateway stopped waiting (timeout, or its caller gone): the server may stop working.
    if (stop.aborted) void notifyCancelled(x);
    if (x.signal?.aborted) {
      // The caller cancelled (notifications/cancelled) or went away: nobody waits for an answer.
      throw new UpstreamError(RPC.gateway, 'Request cancelled', 'cancelled');
    }
    throw read.tooLarge
      ? new UpstreamError(
          RPC.gateway,
          `MCP server ${x.target.name} answered with more than ${x.maxBytes} bytes`,
          'too_large',
        )
      : upstreamError(x.target, err, timedOut);
  } finally {
    clearTimeout(timer);
    x.signal?.removeEventListener('abort', callerGone);
    void transport.close().catch(() => {});
  }
}

/** What the SDK reports of a stream it is picking up again, or has given up on (onRequestStreamEnd follows). */
const RECONNECTING = /SSE stream disconnected|Failed to reconnect SSE stream|Maximum reconnection attempts/;

/** Short exchanges (a notification, an answer) are not retried behind their sender's back. */
const NO_RECONNECTION = {
  maxRetries: 0,
  initialReconnectionDelay: 1000,
  maxReconnectionDelay: 1000,
  reconnectionDelayGrowFactor: 1,
};

/**
 * A call's stream that the server closed after an event id (SEP-1699) is picked up again, twice
 * at most, after the server's `retry:`; one closed without an id ends the call at once.
 */
const CALL_RECONNECTION = {
  maxRetries: 2,
  initialReconnectionDelay: 500,
  maxReconnectionDelay: 2000,
  reconnectionDelayGrowFactor: 2,
};

/**
 * The server's GET stream is picked up again where it broke (its Last-Event-ID), a few times, a
 * second or its `retry:` apart; past that the client's own stream ends, and the client resumes.
 */
const STREAM_RECONNECTION = {
  maxRetries: 3,
  initialReconnectionDelay: 1000,
  maxReconnectionDelay: 5000,
  reconnectionDelayGrowFactor: 2,
};

/** A transport to the server, on the gateway's session there (none for initialize). */
function transportTo(
  target: McpTarget,
  session?: UpstreamSession,
  fetch?: typeof globalThis.fetch,
  reconnection = NO_RECONNECTION,
) {
  return new StreamableHTTPClientTransport(new URL(target.url), {
    ...(target.auth ? { authProvider: target.auth } : {}),
    ...(session?.id ? { sessionId: session.id } : {}),
    ...(session ? { protocolVersion: session.version } : {}),
    reconnectionOptions: reconnection,
    ...(fetch ? { fetch } : {}),
  });
}

/** The server's GET stream, open. */
export interface Listening {
  close(): Promise<void>;
}

export interface Listen {
  target: McpTarget;
  session: UpstreamSession;
  /** The server's event id to resume after (its Last-Event-ID); none: from now. */
  after?: string;
  /** Each message the server sends on it (notifications, and its requests outside any call). */
  onMessage(m: RpcNotification | RpcRequest): void;
  /** Each event id the server gives: where to resume after the message that follows it. */
  onEventId(id: string): void;
  /** The stream ended for good (the server went away past its reconnections). */
  onEnd(err: unknown): void;
}

/**
 * Opens the server's GET stream on the gateway's session there (Streamable HTTP's server-to-client
 * stream), resumed after `after` where given; its messages go to onMessage until close(). Not
 * opened: the status the server refused it with (405: it offers none; 409: it streams this
 * session elsewhere already), 502 when it could not be reached.
 */
export async function listen(l: Listen): Promise<{ listening: Listening } | { refused: number }> {
  // A client that reconnects at once finds its old stream still closing at the server (409): a moment later it is gone.
  for (let attempt = 0; ; attempt++) {
    const got = await listenOnce(l);
    if (!('refused' in got) || got.refused !== 409 || attempt >= 4) return got;
    await new Promise((r) => setTimeout(r, 250));
  }
}

async function listenOnce(l: Listen): Promise<{ listening: Listening } | { refused: number }> {
  const opened = { status: 0 };
  const watching: typeof globalThis.fetch = async (input, init) => {
    const res = await fetch(input, init);
    if ((init?.method ?? 'GET') === 'GET') opened.status = res.status;
    return res;
  };
  const transport = transportTo(l.target, l.session, watching, STREAM_RECONNECTION);
  let closing = false;
  transport.onmessage = (m) => {
    const msg = m as JsonObject;
    if (typeof msg.method === 'string') l.onMessage(msg as unknown as RpcNotification | RpcRequest);
  };
  transport.onerror = (err) => {
    // The SDK reports a dropped stream and then picks it up again; only its giving up ends ours.
    if (!closing && /Maximum reconnection attempts/.test(String(err))) l.onEnd(err);
  };
  await transport.start();
  // A server that never answers the GET: closing the transport aborts it, and the stream is refused.
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    closing = true;
    void transport.close().catch(() => {});
  }, l.target.timeoutMs);
  try {
    await transport.resumeStream(l.after ?? '', { onresumptiontoken: (id) => l.onEventId(id) });
  } catch {
    closing = true;
    await transport.close().catch(() => {});
    return { refused: timedOut ? 504 : opened.status || 502 };
  } finally {
    clearTimeout(timer);
  }
  if (timedOut) return { refused: 504 };
  if (opened.status < 200 || opened.status >= 300) {
    closing = true;
    await transport.close().catch(() => {});
    return { refused: opened.status || 502 };
  }
  const listening = {
    close: async () => {
      closing = true;
      await transport.close().catch(() => {});
    },
  };
  return { listening };
}

/** One message the server only has to take (a notification, an answer): sent within 10 s at most. */
const sendBriefly = (
  transport: StreamableHTTPClientTransport,
  target: McpTarget,
  message: RpcNotification | RpcAnswer,
): Promise<void> =>
  transport.send(message as Parameters<StreamableHTTPClientTransport['send']>[0], {
    requestSignal: AbortSignal.timeout(Math.min(target.timeoutMs, 10_000)),
  });

/** A notification to the server (initialized, cancelled); errors are the server's to keep. */
export async function notify(target: McpTarget, session: UpstreamSession, message: RpcNotification): Promise<void> {
  const transport = transportTo(target, session);
  // A server's request arriving on this short-lived exchange (roots/list after initialized):
  // nobody is there to relay it to, so it is refused at once rather than left to time out.
  transport.onmessage = (m) => {
    const msg = m as JsonObject;
    if (typeof msg.method !== 'string' || !('id' in msg)) return;
    const refusal = new RpcError(RPC.gateway, 'the gateway relays requests of servers only during a call');
    void respond(target, session, answerUnrelayed(msg as unknown as RpcRequest, refusal));
  };
  await transport.start();
  try {
    await sendBriefly(transport, target, message);
  } catch {
    // best effort
  } finally {
    // Closing also stops the GET stream the transport opens after notifications/initialized.
    await transport.close().catch(() => {});
  }
}

/** An answer to a request of the server's (a client's, relayed; or the gateway's refusal), best effort. */
export async function respond(target: McpTarget, session: UpstreamSession, message: RpcAnswer): Promise<void> {
  try {
    await sendBriefly(transportTo(target, session), target, message);
  } catch {
    // The server's call ends on its own timeout.
  }
}

/** Ends the gateway's session on the server (DELETE), best effort. */
export async function terminate(target: McpTarget, session: UpstreamSession): Promise<void> {
  if (!session.id) return;
  await transportTo(target, session)
    .terminateSession()
    .catch(() => {});
}

function notifyCancelled(x: Exchange): Promise<void> {
  if (!x.session) return Promise.resolve();
  return notify(x.target, x.session, {
    jsonrpc: '2.0',
    method: 'notifications/cancelled',
    params: { requestId: x.message.id, reason: 'the gateway stopped waiting' },
  });
}

/** fetch whose answer bodies count their bytes and fail past the limit. */
function boundedFetch(maxBytes: number, read: { bytes: number; tooLarge: boolean }): typeof fetch {
  return async (input, init) => {
    const res = await fetch(input, init);
    if (!res.body) return res;
    // A declared length is checked as it is (no stream in between): only SSE and chunked answers are counted.
    const declared = Number(res.headers.get('content-length') ?? Number.NaN);
    if (Number.isFinite(declared)) {
      read.bytes += declared;
      if (declared <= maxBytes) return res;
      read.tooLarge = true;
      await res.body.cancel().catch(() => {});
      throw new Error('answer too large');
    }
    const limited = res.body.pipeThrough(
      new TransformStream<Uint8Array, Uint8Array>({
        transform(chunk, ctl) {
          read.bytes += chunk.byteLength;
          if (read.bytes > maxBytes) {
            read.tooLarge = true;
            ctl.error(new Error('answer too large'));
            return;
          }
          ctl.enqueue(chunk);
        },
      }),
    );
    return new Response(limited, { status: res.status, statusText: res.statusText, headers: res.headers });
  };
}

function upstreamError(target: McpTarget, err: unknown, timedOut: boolean): UpstreamError {
  if (err instanceof UpstreamError) return err;
  if (timedOut) {
    return new UpstreamError(
      RPC.requestTimeout,
      `MCP server ${target.name} did not answer within ${target.timeoutMs / 1000}s`,
      'timeout',
    );
  }
  const cause = isObject(err) && err.cause instanceof UpstreamError ? err.cause : undefined;
  if (cause) return cause;
  if (err instanceof UnauthorizedError || (err instanceof SdkHttpError && [401, 403].includes(statusOf(err) ?? 0))) {
    return new UpstreamError(
      RPC.gateway,
      `MCP server ${target.name} refused the gateway's credentials: the platform team checks its McpServer's auth`,
      'refused',
      401,
    );
  }
  if (err instanceof McpCredentialError) {
    // Its message names the Secret's key, never the Secret: still, callers hear only that it is the gateway's.
    return new UpstreamError(
      RPC.gateway,
      `the gateway has no credentials for MCP server ${target.name} (${err.reason})`,
      'refused',
    );
  }
  if (err instanceof SdkHttpError) {
    const status = statusOf(err);
    if (status === 404) {
      return new UpstreamError(RPC.gateway, `MCP server ${target.name} ended this session`, 'session_gone', 404);
    }
    return new UpstreamError(
      RPC.gateway,
      `MCP server ${target.name} refused the request (HTTP ${status ?? 'error'})`,
      'refused',
      status,
    );
  }
  return new UpstreamError(RPC.gateway, `MCP server ${target.name} is not reachable`, 'unreachable');
}

const statusOf = (err: SdkHttpError): number | undefined => (err.data as { status?: number } | undefined)?.status;
