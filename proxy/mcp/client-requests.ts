import {
  errorAnswer,
  isObject,
  type JsonObject,
  RPC,
  type RpcAnswer,
  RpcError,
  type RpcNotification,
  type RpcRequest,
} from './json-rpc.js';

/**
 * Requests of servers to the client (sampling, elicitation, roots), relayed: the client's own
 * capabilities for them are declared to each server at initialize (and sealed into the session,
 * so any replica knows them); a server's request during a call goes to the client on that call's
 * SSE stream, under an id naming its server; the client's answer (a POST of a response) goes back
 * to that server under the id it gave. A request the client cannot take (it declared no such
 * capability, or reads no stream) is answered to the server at once with an error: a call never
 * waits for an answer that cannot come.
 */

/** The client capability each server-to-client method needs. */
const CAPABILITY: Record<string, string> = {
  'sampling/createMessage': 'sampling',
  'elicitation/create': 'elicitation',
  'roots/list': 'roots',
};

const MAX_SEALED_CHARS = 1024;

/** The client's capabilities the gateway relays, as it declares them to servers. */
export function relayedCapabilities(capabilities: unknown): JsonObject {
  const out: JsonObject = {};
  if (!isObject(capabilities)) return out;
  for (const name of new Set(Object.values(CAPABILITY))) {
    const c = capabilities[name];
    if (isObject(c)) out[name] = c;
  }
  // Sealed into every session id (bounded): past a small size, only the capabilities' names.
  if (JSON.stringify(out).length > MAX_SEALED_CHARS) for (const name of Object.keys(out)) out[name] = {};
  return out;
}

/** Why a server's request cannot reach the client, or undefined when it can. */
export function unrelayable(method: string, client: JsonObject | undefined, canStream: boolean): RpcError | undefined {
  const capability = Object.hasOwn(CAPABILITY, method) ? CAPABILITY[method] : undefined;
  if (!capability) return new RpcError(RPC.methodNotFound, `Method not found: ${method.slice(0, 100)}`);
  if (!client?.[capability]) return new RpcError(RPC.methodNotFound, `the client declared no ${capability} capability`);
  if (!canStream)
    return new RpcError(RPC.gateway, 'the client reads no event stream on this call: the request cannot reach it');
  return undefined;
}

/** The id a relayed request carries to the client: its server's name and the server's own id. */
const PREFIX = 'mcp-gateway:';
export const relayedId = (server: string, id: RpcRequest['id']): string => `${PREFIX}${JSON.stringify([server, id])}`;

/** The server and its own id behind a relayed id; undefined for ids the gateway never gave. */
export function unrelayedId(id: unknown): { server: string; id: string | number } | undefined {
  if (typeof id !== 'string' || !id.startsWith(PREFIX)) return undefined;
  try {
    const parsed: unknown = JSON.parse(id.slice(PREFIX.length));
    if (!Array.isArray(parsed) || typeof parsed[0] !== 'string') return undefined;
    const own = parsed[1];
    return typeof own === 'string' || typeof own === 'number' ? { server: parsed[0], id: own } : undefined;
  } catch {
    return undefined;
  }
}

/** A server's notifications/cancelled of a relayed request, as the client knows that request. */
export function cancelledForClient(n: RpcNotification, server: string): RpcNotification {
  const id = n.params?.requestId;
  if (n.method !== 'notifications/cancelled' || (typeof id !== 'string' && typeof id !== 'number')) return n;
  return { ...n, params: { ...n.params, requestId: relayedId(server, id) } };
}

/**
 * The gateway's own answer to a server's request it does not relay: a ping is answered (the
 * gateway is there, no need to ask the client), anything else refused with `err`.
 */
export const answerUnrelayed = (req: RpcRequest, err: RpcError): RpcAnswer =>
  req.method === 'ping' ? { jsonrpc: '2.0', id: req.id, result: {} } : errorAnswer(req.id, err);

/** The client's answer as its server hears it: under the server's own id. */
export const answerForServer = (answer: RpcAnswer, id: string | number): RpcAnswer => ({ ...answer, id });
