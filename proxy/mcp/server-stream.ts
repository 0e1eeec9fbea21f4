import type { ServerResponse } from 'node:http';
import { answerUnrelayed, cancelledForClient, relayedId, unrelayable } from './client-requests.js';
import { isObject, type RpcNotification, type RpcRequest } from './json-rpc.js';
import type { Naming } from './naming.js';
import type { McpTarget } from './servers.js';
import { type McpSession, type SessionSealer, sessionDigest } from './session.js';
import { type Listening, listen, respond } from './upstream.js';

/**
 * GET /mcp and /mcp/<server>: the session's stream from its servers to the client (Streamable
 * HTTP's GET). The gateway opens each server's own GET stream on its session there and relays
 * what comes: notifications (tools, prompts and resources list_changed; resources/updated, its
 * URI as this endpoint names resources; log messages), and the servers' requests outside any
 * call (sampling, elicitation, roots), which the client answers by POST as it answers those
 * during a call. Each event's id seals where every server's stream stood (the servers' own event
 * ids) and which session it belongs to: a client that reconnects with Last-Event-ID, to this
 * replica or another, picks each server's stream up from there, as far back as that server keeps
 * its events; a server that gives no event ids starts from the moment of the reconnection.
 */

export interface StreamScope {
  res: ServerResponse;
  session: McpSession;
  sessionId: string;
  servers: Map<string, McpTarget>;
  naming: Naming;
  sealer: SessionSealer;
  /** The response's headers (the request id, the session id). */
  headers: Record<string, string>;
  /** The client's Last-Event-ID, if it resumes. */
  lastEventId?: string;
}

/** Where the servers' streams stood at an event: sealed into its id. */
interface Position {
  /** A digest of the session id: a position resumes only the session it came from. */
  s: string;
  /** Each server's last event id. */
  at: Record<string, string>;
}

const KEEPALIVE_MS = 15_000;
/** An event id past this (many servers, long ids) is left off: the client then resumes from its reconnection. */
const MAX_EVENT_ID_CHARS = 4096;

/** An event id: where each server's stream stands, for this session only, sealed. */
export const sealPosition = (sealer: SessionSealer, sessionId: string, at: Record<string, string>): string =>
  sealer.sealValue({ s: sessionDigest(sessionId), at } satisfies Position);

/** The servers' positions a Last-Event-ID of this session carries; none for anything else. */
export function positionsOf(sealer: SessionSealer, sessionId: string, lastEventId: string | undefined) {
  if (!lastEventId) return {};
  const p = sealer.openValue(lastEventId);
  if (!isObject(p) || p.s !== sessionDigest(sessionId) || !isObject(p.at)) return {};
  const at: Record<string, string> = {};
  for (const [server, id] of Object.entries(p.at)) if (typeof id === 'string') at[server] = id;
  return at;
}

/** A server's notification as the client hears it from this endpoint. */
export function notificationForClient(n: RpcNotification, server: string, naming: Naming): RpcNotification {
  if (n.method === 'notifications/resources/updated' && typeof n.params?.uri === 'string') {
    return { ...n, params: { ...n.params, uri: naming.uri(server, n.params.uri) } };
  }
  return cancelledForClient(n, server);
}

/** Events kept while the servers' streams are still opening; past this the client reconnects and resumes. */
const MAX_PENDING = 1000;

/**
 * The status for a GET no server's stream opened for: 404 when a server ended the session (the
 * client initializes again), 409 when one streams it to another GET already, 405 when none offers
 * a stream at all, 502 when they could not be reached (the client tries again).
 */
export function refusalStatus(statuses: readonly number[]): number {
  for (const s of [404, 409]) if (statuses.includes(s)) return s;
  return statuses.length > 0 && statuses.every((s) => s === 405) ? 405 : 502;
}

/**
 * Opens the stream: true once it is open (the servers' streams behind it); false when none
 * opened, with the status to refuse with (refusalStatus).
 */
export async function serveStream(x: StreamScope): Promise<{ opened: true } | { opened: false; status: number }> {
  const at = positionsOf(x.sealer, x.sessionId, x.lastEventId);
  const pending: string[] = [];
  let open = false;
  let ended = false;
  const listening: Listening[] = [];
  const write = (chunk: string) => {
    if (ended) return;
    if (open) x.res.write(chunk);
    else if (pending.length < MAX_PENDING) pending.push(chunk);
  };
  const end = () => {
    if (ended) return;
    ended = true;
    clearInterval(keepalive);
    for (const l of listening) void l.close();
    if (open && !x.res.writableEnded) x.res.end();
  };
  const event = (message: RpcNotification | RpcRequest) => {
    const id = sealPosition(x.sealer, x.sessionId, at);
    const idLine = id.length <= MAX_EVENT_ID_CHARS ? `id: ${id}\n` : '';
    write(`${idLine}event: message\ndata: ${JSON.stringify(message)}\n\n`);
  };
  const relay = (server: McpTarget, m: RpcNotification | RpcRequest) => {
    if (!('id' in m)) {
      event(notificationForClient(m, server.name, x.naming));
      return;
    }
    const why = unrelayable(m.method, x.session.client, true);
    const up = x.session.upstream[server.name];
    if (!why) event({ ...m, id: relayedId(server.name, m.id) });
    else if (up) void respond(server, up, answerUnrelayed(m, why));
  };
  const keepalive = setInterval(() => write(': keepalive\n\n'), KEEPALIVE_MS);
  keepalive.unref();
  x.res.once('close', end);
  const statuses = await Promise.all(
    [...x.servers.values()].map(async (server) => {
      const up = x.session.upstream[server.name];
      if (!up) return 405;
      const after = at[server.name];
      const got = await listen({
        target: server,
        session: up,
        ...(after ? { after } : {}),
        onMessage: (m) => relay(server, m),
        onEventId: (id) => {
          at[server.name] = id;
        },
        // A server's stream gone for good: the client's ends, and its reconnection resumes.
        onEnd: end,
      });
      if ('refused' in got) return got.refused;
      if (ended) void got.listening.close();
      else listening.push(got.listening);
      return 200;
    }),
  );
  if (ended) return { opened: true };
  if (listening.length === 0) {
    end();
    return { opened: false, status: refusalStatus(statuses) };
  }
  x.res.writeHead(200, {
    ...x.headers,
    'content-type': 'text/event-stream',
    'cache-control': 'no-cache',
    connection: 'keep-alive',
  });
  open = true;
  // A comment first: the client sees the stream open before any server has spoken.
  x.res.write(': stream open\n\n');
  for (const chunk of pending.splice(0)) x.res.write(chunk);
  return { opened: true };
}
