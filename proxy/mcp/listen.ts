import { randomUUID } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import { isObject, type JsonObject, type RpcNotification, type RpcRequest } from './json-rpc.js';
import type { Naming } from './naming.js';
import type { McpTarget } from './servers.js';
import { exchange } from './upstream.js';
import type { UpstreamPool } from './upstream-pool.js';

/**
 * subscriptions/listen, the 2026-07-28 revision's way to hear of changes: an SSE answer that
 * acknowledges what it will carry (what was asked and the servers offer), then carries it, each
 * notification stamped with the subscription (the listen request's id), until the client
 * closes it. Fed by the servers' own streams on the gateway's sessions there (shared by every
 * listener of a key: proxy/mcp/upstream-pool.ts); a resource to watch is subscribed to at its
 * server on that session, and only its updates reach this listener, named as the endpoint
 * names resources.
 */

const SUBSCRIPTION_ID = 'io.modelcontextprotocol/subscriptionId';
const KEEPALIVE_MS = 15_000;
/** At most this many resources watched by one listener. */
const MAX_RESOURCES = 1000;

type ChangeFlag = 'toolsListChanged' | 'promptsListChanged' | 'resourcesListChanged';

/** What a listener asks for (SubscriptionFilter), and what it is given. */
export interface Filter extends Partial<Record<ChangeFlag, true>> {
  resourceSubscriptions?: string[];
}

/** Each list's flag in a filter, its capability, and its notification. */
const CHANGES: ReadonlyArray<[ChangeFlag, string, string]> = [
  ['toolsListChanged', 'tools', 'notifications/tools/list_changed'],
  ['promptsListChanged', 'prompts', 'notifications/prompts/list_changed'],
  ['resourcesListChanged', 'resources', 'notifications/resources/list_changed'],
];

/** The filter a listen request asks for; undefined when it has none (the revision requires one). */
export function requestedFilter(req: RpcRequest): Filter | undefined {
  const n = req.params?.notifications;
  if (!isObject(n)) return undefined;
  const out: Filter = {};
  for (const [flag] of CHANGES) if (n[flag] === true) out[flag] = true;
  if (Array.isArray(n.resourceSubscriptions)) {
    const uris = n.resourceSubscriptions.filter((u): u is string => typeof u === 'string').slice(0, MAX_RESOURCES);
    if (uris.length > 0) out.resourceSubscriptions = uris;
  }
  return out;
}

/** What of `asked` is honoured: what the offered capabilities (server/discover's) include. */
export function honoured(asked: Filter, offered: JsonObject): Filter {
  const has = (kind: string, flag: string) => isObject(offered[kind]) && (offered[kind] as JsonObject)[flag] === true;
  const out: Filter = {};
  for (const [flag, kind] of CHANGES) if (asked[flag] && has(kind, 'listChanged')) out[flag] = true;
  if (asked.resourceSubscriptions && has('resources', 'subscribe')) {
    out.resourceSubscriptions = [...asked.resourceSubscriptions];
  }
  return out;
}

/** Whether a server's notification is one the filter lets through, as the client names it. */
export function passes(filter: Filter, n: RpcNotification): boolean {
  for (const [flag, , method] of CHANGES) if (n.method === method) return filter[flag] === true;
  if (n.method === 'notifications/resources/updated') {
    return typeof n.params?.uri === 'string' && (filter.resourceSubscriptions ?? []).includes(n.params.uri);
  }
  return false;
}

export interface ListenScope {
  res: ServerResponse;
  req: RpcRequest;
  key: string;
  /** The capabilities the listener declared: its sessions at the servers are those of its calls. */
  client: JsonObject;
  servers: ReadonlyMap<string, McpTarget>;
  naming: Naming;
  pool: UpstreamPool;
  filter: Filter;
  headers: Record<string, string>;
  maxBytes: number;
}

/** Serves one listen until its client closes it. */
export async function serveListen(x: ListenScope): Promise<void> {
  const stamp = (method: string, params: JsonObject = {}): string => {
    const meta = isObject(params._meta) ? params._meta : {};
    const message = { jsonrpc: '2.0', method, params: { ...params, _meta: { ...meta, [SUBSCRIPTION_ID]: x.req.id } } };
    return `event: message\ndata: ${JSON.stringify(message)}\n\n`;
  };
  x.res.writeHead(200, {
    ...x.headers,
    'content-type': 'text/event-stream',
    'cache-control': 'no-cache, no-transform',
    connection: 'keep-alive',
    'x-accel-buffering': 'no',
  });
  x.res.write(stamp('notifications/subscriptions/acknowledged', { notifications: { ...x.filter } }));
  if (Object.keys(x.filter).length === 0) {
    x.res.end(`event: message\ndata: ${JSON.stringify(ended(x.req))}\n\n`);
    return;
  }
  const stops: Array<() => void> = [];
  let closed = false;
  const keepalive = setInterval(() => x.res.write(': keepalive\n\n'), KEEPALIVE_MS);
  keepalive.unref();
  const close = () => {
    if (closed) return;
    closed = true;
    clearInterval(keepalive);
    for (const stop of stops.splice(0)) stop();
  };
  x.res.once('close', close);
  // A server's stream gone (its session ended, it went away): the listen ends as the revision ends
  // one, and the client listens again, on a session opened anew.
  const gone = () => {
    if (closed) return;
    close();
    x.res.end(`event: message\ndata: ${JSON.stringify(ended(x.req))}\n\n`);
  };
  await Promise.all(
    [...x.servers.values()].map(async (server) => {
      const stop = await x.pool
        .listen(
          x.key,
          server,
          {
            notification: (n) => {
              const named = rename(n, server.name, x.naming);
              if (!closed && passes(x.filter, named)) x.res.write(stamp(named.method, named.params));
            },
            gone,
          },
          x.client,
        )
        .catch(() => undefined);
      if (!stop) return;
      if (closed) stop();
      else stops.push(stop);
      if (!closed) await watch(x, server);
    }),
  );
}

/** A server's notification as this endpoint names resources. */
const rename = (n: RpcNotification, server: string, naming: Naming): RpcNotification =>
  n.method === 'notifications/resources/updated' && typeof n.params?.uri === 'string'
    ? { ...n, params: { ...n.params, uri: naming.uri(server, n.params.uri) } }
    : n;

/** The listener's resources of this server, subscribed to at it on the gateway's session (best effort). */
async function watch(x: ListenScope, server: McpTarget): Promise<void> {
  const own = (x.filter.resourceSubscriptions ?? []).flatMap((uri) => {
    const parsed = x.naming.parseUri(uri);
    return parsed && parsed.server === server.name ? [parsed.uri] : [];
  });
  if (own.length === 0) return;
  const { session } = await x.pool.get(x.key, server, x.client);
  await Promise.all(
    own.map((uri) =>
      exchange({
        target: server,
        session,
        // An id of the gateway's own: the session is shared by the key's callers.
        message: { jsonrpc: '2.0', id: `gateway-${randomUUID()}`, method: 'resources/subscribe', params: { uri } },
        maxBytes: x.maxBytes,
      }).catch(() => undefined),
    ),
  );
}

/** The listen's end, as the revision has the server end one. */
const ended = (req: RpcRequest) => ({
  jsonrpc: '2.0',
  id: req.id,
  result: { resultType: 'complete', _meta: { [SUBSCRIPTION_ID]: req.id } },
});
