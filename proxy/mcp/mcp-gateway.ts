import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { PRODUCT_VERSION } from '../../crds/constants.js';
import type { Caller } from '../access/auth.js';
import { ProxyError } from '../endpoints/errors.js';
import { applyEnforcedTags, parseTags, type Tag } from '../endpoints/tags.js';
import type { DoorPass } from '../exchange.js';
import type { Finding } from '../guardrails/findings.js';
import type { GuardDeps } from '../guardrails/guard-deps.js';
import { type AuthorizationServer, challenge, originOf } from '../identity/protected-resource.js';
import { headerOf } from '../server/read-body.js';
import { AnswerWriter, acceptsEventStream } from './answer-writer.js';
import { CallStreams } from './call-stream.js';
import {
  answerForServer,
  answerUnrelayed,
  cancelledForClient,
  relayedCapabilities,
  relayedId,
  unrelayable,
  unrelayedId,
} from './client-requests.js';
import { type Ended, HeldCall, HeldCalls, inputRequired, isSealedState, type SealedState } from './input-rounds.js';
import {
  errorAnswer,
  isObject,
  type JsonObject,
  parseClientMessage,
  type RequestId,
  RPC,
  type RpcAnswer,
  RpcError,
  type RpcErrorAnswer,
  type RpcNotification,
  type RpcRequest,
} from './json-rpc.js';
import { honoured, requestedFilter, serveListen } from './listen.js';
import { dispatch, type MethodContext } from './methods.js';
import { federatedNaming, singleNaming } from './naming.js';
import { type OriginPolicy, originRefusal } from './origin.js';
import { negotiate, VERSIONS } from './protocol.js';
import { forwardToReplica, wasForwarded } from './replica-forward.js';
import { serveStream } from './server-stream.js';
import { type McpServerTable, type McpTarget, mayUseServer } from './servers.js';
import type { McpSession, SessionSealer, UpstreamSession } from './session.js';
import {
  claimedRevision,
  discoverResult,
  STATELESS_VERSION,
  statelessAnswer,
  statelessCapabilities,
  statelessRefusal,
  withoutEnvelope,
} from './stateless-revision.js';
import { admitToolCall, beginToolCall, type ToolCallDeps } from './tool-calls.js';
import { guardToolCall, guardToolResult, type ToolGuarding } from './tool-guardrails.js';
import { exchange, notify, respond, terminate, UpstreamError } from './upstream.js';
import { type Opened, UpstreamPool } from './upstream-pool.js';

/**
 * MCP at the gateway: /mcp federates every McpServer the caller's key may use, /mcp/<server>
 * serves one as it is. Streamable HTTP as the spec has it: a POST per message (requests
 * answered in JSON, or SSE once the server reports progress), 202 for notifications, DELETE
 * ending the session, GET opening the stream of the servers' notifications and requests
 * (proxy/mcp/server-stream.ts: list_changed, resource updates, resumable with Last-Event-ID).
 * The same keys as the model routes (X-API-Key or Authorization: Bearer), the same tags
 * (X-Tags, X-Gateway-Tags, X-LiteLLM-Tags, the key's enforced ones), the key's MCP allow-list, and a usage
 * record per tool call (proxy/mcp/tool-calls.ts). Sessions are sealed into their id
 * (proxy/mcp/session.ts): every replica serves every session.
 */

/** What the gateway needs past the door: the key, draining, rates and the body are the admit and body stages' (proxy/pipeline.ts doorAdmission). */
export interface McpGatewayDeps extends ToolCallDeps {
  servers: McpServerTable;
  sealer: SessionSealer;
  /** The largest answer a server may send the gateway for one request. */
  maxAnswerBytes: number;
  /** Which browser origins (and, on a loopback bind, hosts) may call: proxy/mcp/origin.ts. */
  origins: OriginPolicy;
  /**
   * Streams a key may hold open on a replica at once (GET streams and 2026-07-28 listens): each
   * holds connections to servers for as long as it lasts. Default MAX_STREAMS_PER_KEY.
   */
  maxStreamsPerKey?: number;
  /**
   * This replica's address for its peers (the pod's): a call's stream or held call is taken up
   * here when another replica receives its client's GET or retry (proxy/mcp/replica-forward.ts).
   */
  replica?: string;
  /** Where MCP clients sign in, which a 401 points them to (proxy/identity/protected-resource.ts). */
  authorizationServer?: () => AuthorizationServer | undefined;
  /** The Guardrails tool calls' arguments and results pass, their judges and services (proxy/mcp/tool-guardrails.ts). */
  guard?: GuardDeps;
  onError?: (err: unknown, requestId: string) => void;
}

const MCP_PATH = '/mcp';

/** Whether a path is MCP's: /mcp, /mcp/<server> (a query string aside). */
export function mcpPath(url: string): { server?: string } | undefined {
  const q = url.indexOf('?');
  const path = q < 0 ? url : url.slice(0, q);
  if (path === MCP_PATH || path === `${MCP_PATH}/`) return {};
  const m = /^\/mcp\/([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)\/?$/.exec(path);
  return m?.[1] ? { server: m[1] } : path.startsWith(`${MCP_PATH}/`) ? { server: '' } : undefined;
}

/** The resource an MCP URL names: /mcp, or /mcp/<server> (what a 401's metadata URL ends in). */
function mcpPathOf(url: string): string {
  const where = mcpPath(url);
  return where?.server ? `${MCP_PATH}/${where.server}` : MCP_PATH;
}

/** An HTTP-level refusal: the status, and the JSON-RPC error body the spec's examples send. */
class HttpRefusal extends Error {
  constructor(
    readonly status: number,
    readonly answer: RpcErrorAnswer,
    readonly headers: Record<string, string> = {},
  ) {
    super(answer.error.message);
  }
}

const refuse = (status: number, code: number, message: string, headers?: Record<string, string>) =>
  new HttpRefusal(status, errorAnswer(null, new RpcError(code, message)), headers);

/** The gateway's own state beside its configuration: the servers' sessions of stateless callers, the open streams. */
interface Deps extends McpGatewayDeps {
  pool: UpstreamPool;
  streams: StreamCount;
  /** Stateless clients' calls waiting for their input, on this replica. */
  held: HeldCalls<Reply>;
  /** Calls' answer streams a client may resume after its connection broke, on this replica. */
  calls: CallStreams;
}

const MAX_STREAMS_PER_KEY = 64;

/** Open streams per key on this replica, bounded (a stream is counted from its request until its answer closes). */
class StreamCount {
  private readonly open = new Map<string, number>();

  constructor(readonly max: number) {}

  /** Counts a stream of the key for as long as `res` is open; false when the key holds its maximum already. */
  take(key: string, res: ServerResponse): boolean {
    const n = this.open.get(key) ?? 0;
    if (n >= this.max) return false;
    this.open.set(key, n + 1);
    res.once('close', () => {
      const left = (this.open.get(key) ?? 1) - 1;
      if (left > 0) this.open.set(key, left);
      else this.open.delete(key);
    });
    return true;
  }
}

const tooManyStreams = (max: number) =>
  refuse(429, RPC.gateway, `Too many open streams for this key on this replica (at most ${max}): close one first`);

/** The newest session revision: what the gateway speaks to servers on behalf of stateless callers. */
const LATEST_SESSION_VERSION = VERSIONS[0] ?? '2025-11-25';

/** In-flight requests on this replica, by session and JSON-RPC id: what notifications/cancelled stops. */
const inFlight = new Map<string, AbortController>();

/**
 * The MCP gateway as the front door's MCP door serves it: `serve` takes what passed the admit and
 * body stages (the caller, the message's JSON), `refuse` answers what did not, in MCP's form.
 */
export function createMcpGateway(config: McpGatewayDeps) {
  const deps: Deps = {
    ...config,
    pool: new UpstreamPool((t, client) =>
      openUpstream(config, t, LATEST_SESSION_VERSION, { name: 'MCP 2026-07-28 clients' }, client),
    ),
    held: new HeldCalls(),
    calls: new CallStreams(config.sealer, config.replica),
    streams: new StreamCount(config.maxStreamsPerKey ?? MAX_STREAMS_PER_KEY),
  };
  const serve = async (
    req: IncomingMessage,
    res: ServerResponse,
    where: { server?: string },
    pass: DoorPass,
  ): Promise<void> => {
    const { requestId, caller } = pass;
    const base = { ...pass.headers };
    try {
      if (where.server === '') throw refuse(404, RPC.gateway, 'no such MCP server: server names are DNS labels');
      if (req.method === 'POST') return await post(deps, req, res, { caller, where, requestId, base }, pass);
      if (req.method === 'GET') return await stream(deps, req, res, { caller, where, requestId, base });
      if (req.method === 'DELETE') return await end(deps, req, res, caller, base);
      throw refuse(
        405,
        RPC.gateway,
        `${req.method} is not served here: POST messages, GET the stream, DELETE a session`,
        {
          Allow: 'GET, POST, DELETE',
        },
      );
    } catch (err) {
      if (!(err instanceof HttpRefusal)) deps.onError?.(err, requestId);
      const r = err instanceof HttpRefusal ? err : refuse(500, RPC.internalError, 'Internal error of the gateway');
      writeRefusal(res, r, base);
    }
  };
  /** Before the admit stage: a page of another origin is refused before its key is looked at. */
  const guard = (req: IncomingMessage, res: ServerResponse, requestId: string): boolean => {
    const why = originRefusal(deps.origins, req.headers.origin, req.headers.host);
    if (why === undefined) return true;
    writeRefusal(res, refuse(403, RPC.gateway, why), { 'x-request-id': requestId });
    return false;
  };
  const refuseAt = (req: IncomingMessage, res: ServerResponse, err: ProxyError, requestId: string): void =>
    refuseAtDoor(res, err, requestId, (code) =>
      challenge(originOf(req.headers), mcpPathOf(req.url ?? MCP_PATH), deps.authorizationServer?.(), code),
    );
  return { serve, refuse: refuseAt, guard };
}

function writeRefusal(res: ServerResponse, r: HttpRefusal, base: Record<string, string>): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  res.writeHead(r.status, { ...base, ...r.headers, 'content-type': 'application/json' });
  res.end(JSON.stringify(r.answer));
}

/**
 * A refusal of the admit or body stages, in MCP's form: its status and headers (Retry-After,
 * the rate's), a JSON-RPC error with no id. A body that is not JSON is the spec's parse error,
 * a request the gateway cannot take as sent (its type, size or shape) an invalid request, and a
 * missing key asks for a bearer token.
 */
function refuseAtDoor(
  res: ServerResponse,
  err: ProxyError,
  requestId: string,
  bearerChallenge: (code: string) => string,
): void {
  const notJson = err.code === 'invalid_json';
  const code = notJson
    ? RPC.parseError
    : err.status === 400 || err.status === 413 || err.status === 415
      ? RPC.invalidRequest
      : RPC.gateway;
  const message = notJson ? 'Parse error: the body is not JSON' : err.message;
  const headers: Record<string, string> = { ...err.headers };
  if (err.status === 401) headers['WWW-Authenticate'] = bearerChallenge(err.code);
  writeRefusal(res, new HttpRefusal(err.status, errorAnswer(null, new RpcError(code, message)), headers), {
    'x-request-id': requestId,
  });
}

interface Post {
  caller: Caller;
  where: { server?: string };
  requestId: string;
  base: Record<string, string>;
}

async function post(deps: Deps, req: IncomingMessage, res: ServerResponse, p: Post, pass: DoorPass): Promise<void> {
  const header = headerOf(req);
  const tags = tagsOf(header, p.caller);
  const parsed = parseClientMessage(pass.body);
  if ('jsonrpc' in parsed) throw new HttpRefusal(400, parsed);
  // The stateless revision says so in every message: no session, no initialize (proxy/mcp/stateless-revision.ts).
  if (parsed.kind !== 'response' && claimedRevision(parsed.message) !== undefined) {
    return stateless(deps, req, res, p, parsed, pass);
  }
  const version = header('mcp-protocol-version');
  if (version !== undefined && !VERSIONS.includes(version)) {
    throw refuse(
      400,
      RPC.invalidRequest,
      `Unsupported MCP-Protocol-Version ${version.slice(0, 40)}; supported: ${VERSIONS.join(', ')}`,
    );
  }
  if (parsed.kind === 'request' && parsed.message.method === 'initialize') {
    return initialize(deps, res, p, parsed.message);
  }
  const { session, sessionId } = openSession(deps, header, p);
  const headers = { ...p.base, 'mcp-session-id': sessionId };
  const servers = sessionServers(deps, session, p);
  if (parsed.kind === 'notification') {
    onNotification(parsed.message, session, sessionId, servers);
    new AnswerWriter(res, headers, false).accepted();
    return;
  }
  if (parsed.kind === 'response') {
    // The client's answer to a server's request the gateway relayed: to that server, under its own id.
    const back = unrelayedId(parsed.message.id);
    const target = back && servers.get(back.server);
    const up = back && session.upstream[back.server];
    if (back && target && up) await respond(target, up, answerForServer(parsed.message, back.id));
    new AnswerWriter(res, headers, false).accepted();
    return;
  }
  const message = parsed.message;
  const writer = new AnswerWriter(res, headers, acceptsEventStream(header('accept')), (r) =>
    deps.calls.open(r, sessionId, message.id, p.caller.keyHashPrefix),
  );
  await request(deps, { req, res, writer, session, sessionId, servers, tags, bytesIn: pass.bytes, p }, message);
}

/** The session a request names, opened: the caller's own, neither ended nor expired. */
function openSession(
  deps: McpGatewayDeps,
  header: (n: string) => string | undefined,
  p: Post,
): { session: McpSession; sessionId: string } {
  const sessionId = header('mcp-session-id');
  if (!sessionId)
    throw refuse(400, RPC.invalidRequest, 'Bad Request: Mcp-Session-Id header is required (initialize first)');
  const session = deps.sealer.open(sessionId);
  if (!session || session.key !== p.caller.keyHashPrefix) {
    throw refuse(404, RPC.gateway, 'Session not found: it ended or expired; initialize a new one');
  }
  return { session, sessionId };
}

/** GET: the session's stream from its servers (proxy/mcp/server-stream.ts), resumed after Last-Event-ID. */
async function stream(deps: Deps, req: IncomingMessage, res: ServerResponse, p: Post): Promise<void> {
  const header = headerOf(req);
  if (!acceptsEventStream(header('accept'))) {
    throw refuse(406, RPC.invalidRequest, 'Not Acceptable: GET opens an event stream; accept text/event-stream');
  }
  const { session, sessionId } = openSession(deps, header, p);
  if (!deps.streams.take(p.caller.keyHashPrefix, res)) throw tooManyStreams(deps.streams.max);
  const lastEventId = header('last-event-id');
  // The Last-Event-ID of a call's answer stream: that stream goes on (proxy/mcp/call-stream.ts),
  // here or at the replica that serves the call.
  const own = { ...p.base, 'mcp-session-id': sessionId };
  const resumed = deps.calls.resume(lastEventId, sessionId, res, own, wasForwarded(req));
  if (resumed === true) return;
  if (resumed !== false) {
    if (!(await forwardToReplica(resumed.replica, req, res, undefined))) {
      deps.calls.refuse(res, own, resumed.requestId);
    }
    return;
  }
  const served = await serveStream({
    res,
    session,
    sessionId,
    servers: sessionServers(deps, session, p),
    naming: p.where.server === undefined ? federatedNaming : singleNaming(p.where.server),
    sealer: deps.sealer,
    headers: { ...p.base, 'mcp-session-id': sessionId },
    ...(lastEventId ? { lastEventId } : {}),
  });
  if (served.opened) return;
  const refusals: Record<number, [string, Record<string, string>?]> = {
    404: ['Session not found: a server of it ended it; initialize a new one'],
    409: ['Conflict: a stream of this session is open already'],
    405: ['Method Not Allowed: no server of this session offers a stream', { Allow: 'POST, DELETE' }],
    502: ['The servers of this session could not be reached for a stream: try again'],
  };
  const [message, headers] = refusals[served.status] ?? refusals[502] ?? [''];
  throw refuse(served.status, RPC.gateway, message, headers);
}

/** The caller's tags: the headers' merged with the key's enforced ones (no body: MCP has no tags field). */
function tagsOf(header: (n: string) => string | undefined, caller: Caller): Tag[] {
  const parsed = parseTags({
    xTags: header('x-tags'),
    xGatewayTags: header('x-gateway-tags'),
    xLitellmTags: header('x-litellm-tags'),
  });
  if (parsed instanceof ProxyError) throw refuse(400, RPC.invalidRequest, parsed.message);
  const merged = applyEnforcedTags(parsed, caller.policy.tags);
  if (merged instanceof ProxyError) throw refuse(403, RPC.invalidRequest, merged.message);
  return merged;
}

/** The servers of a session the key may still use (an allow-list may have shrunk since it began). */
function sessionServers(deps: McpGatewayDeps, session: McpSession, p: Post): Map<string, McpTarget> {
  const out = new Map<string, McpTarget>();
  for (const name of Object.keys(session.upstream)) {
    if (p.where.server !== undefined && name !== p.where.server) continue;
    const target = deps.servers.get(name);
    if (target && mayUseServer(p.caller.policy, name)) out.set(name, target);
  }
  return out;
}

/**
 * A client's notification: a cancel (of its own request, or of a server's request it was relayed),
 * or its roots changed (told to every server of the session, which were told it has roots).
 */
function onNotification(
  n: RpcNotification,
  session: McpSession,
  sessionId: string,
  servers: Map<string, McpTarget>,
): void {
  const tell = (name: string, message: RpcNotification) => {
    const target = servers.get(name);
    const up = session.upstream[name];
    if (target && up) void notify(target, up, message);
  };
  if (n.method === 'notifications/roots/list_changed') {
    if (session.client?.roots) for (const name of servers.keys()) tell(name, n);
    return;
  }
  if (n.method !== 'notifications/cancelled') return;
  const requestId = n.params?.requestId;
  if (typeof requestId !== 'string' && typeof requestId !== 'number') return;
  // The client cancels a server's request it was relayed: that server alone, under its own id.
  const relayed = unrelayedId(requestId);
  if (relayed) {
    tell(relayed.server, { ...n, params: { ...n.params, requestId: relayed.id } });
    return;
  }
  inFlight.get(`${sessionId}#${requestId}`)?.abort(new RpcError(RPC.gateway, 'cancelled by the client'));
  // The request may be running on another replica: every server of the session hears it.
  for (const name of servers.keys()) tell(name, n);
}

/**
 * Capabilities /mcp offers: the lists and calls it federates, and list_changed and resource
 * subscriptions where a server of the session offers them (its GET stream relays them).
 */
function federatedCapabilities(servers: readonly JsonObject[]): JsonObject {
  const any = (kind: string, flag: string) =>
    servers.some((c) => isObject(c[kind]) && (c[kind] as JsonObject)[flag] === true);
  const flags = (kind: string, names: string[]) =>
    Object.fromEntries(names.filter((f) => any(kind, f)).map((f) => [f, true]));
  return {
    tools: flags('tools', ['listChanged']),
    prompts: flags('prompts', ['listChanged']),
    resources: flags('resources', ['subscribe', 'listChanged']),
    completions: {},
    logging: {},
  };
}

/**
 * initialize: a session on every server the key may use (at once, each within its timeout), the
 * client's revision negotiated, all of it sealed into the session id. A server that does not
 * answer is left out of this session (its tools absent) rather than failing it; /mcp/<server>
 * fails with its server.
 */
async function initialize(deps: McpGatewayDeps, res: ServerResponse, p: Post, req: RpcRequest): Promise<void> {
  const params = req.params ?? {};
  const version = negotiate(params.protocolVersion);
  const targets = targetsOf(deps, p);
  const clientInfo = isObject(params.clientInfo) ? params.clientInfo : {};
  const client = relayedCapabilities(params.capabilities);
  const opened = await Promise.all(
    targets.map((t) => openUpstream(deps, t, version, clientInfo, client).catch((err: unknown) => err)),
  );
  const upstream: Record<string, UpstreamSession> = {};
  const capabilities: JsonObject[] = [];
  let single: JsonObject | undefined;
  for (const [i, t] of targets.entries()) {
    const o = opened[i];
    if (o instanceof Error || o === undefined) continue;
    const r = o as { session: UpstreamSession; result: JsonObject };
    upstream[t.name] = r.session;
    single = r.result;
    if (isObject(r.result.capabilities)) capabilities.push(r.result.capabilities);
  }
  if (p.where.server !== undefined && !single) {
    const err =
      opened[0] instanceof RpcError
        ? opened[0]
        : new RpcError(RPC.gateway, `MCP server ${p.where.server} is not reachable`);
    throw new HttpRefusal(502, errorAnswer(req.id, err));
  }
  const session: McpSession = {
    key: p.caller.keyHashPrefix,
    version,
    upstream,
    began: Math.floor(Date.now() / 1000),
    ...(Object.keys(client).length > 0 ? { client } : {}),
  };
  const result: JsonObject =
    p.where.server !== undefined && single
      ? {
          protocolVersion: version,
          // As the server declares them: the gateway relays its lists, calls, subscriptions and stream.
          capabilities: isObject(single.capabilities) ? single.capabilities : {},
          serverInfo: single.serverInfo ?? { name: p.where.server, version: '' },
          ...(typeof single.instructions === 'string' ? { instructions: single.instructions } : {}),
        }
      : {
          protocolVersion: version,
          capabilities: federatedCapabilities(capabilities),
          serverInfo: {
            name: 'platform-ai-optimizer',
            title: 'Platform AI Optimizer MCP gateway',
            version: PRODUCT_VERSION,
          },
          instructions: `Tools of ${Object.keys(upstream).length} MCP servers (${Object.keys(upstream).join(', ')}), each named <server>_<tool>.`,
        };
  const writer = new AnswerWriter(res, { ...p.base, 'mcp-session-id': deps.sealer.seal(session) }, false);
  writer.answer({ jsonrpc: '2.0', id: req.id, result });
}

async function openUpstream(
  deps: McpGatewayDeps,
  target: McpTarget,
  version: string,
  clientInfo: JsonObject,
  client: JsonObject,
): Promise<{ session: UpstreamSession; result: JsonObject }> {
  const name = typeof clientInfo.name === 'string' ? clientInfo.name.slice(0, 100) : 'client';
  const r = await exchange({
    target,
    message: {
      jsonrpc: '2.0',
      id: 0,
      method: 'initialize',
      params: {
        protocolVersion: version,
        // The client's own sampling, elicitation and roots: the gateway relays those requests.
        capabilities: client,
        clientInfo: { name: `${name} via platform-ai-optimizer`, version: PRODUCT_VERSION },
      },
    },
    maxBytes: deps.maxAnswerBytes,
  });
  if (!('result' in r.answer)) throw new RpcError(r.answer.error.code, r.answer.error.message);
  const result = r.answer.result;
  const session: UpstreamSession = {
    version: typeof result.protocolVersion === 'string' ? result.protocolVersion : version,
    ...(r.sessionId ? { id: r.sessionId } : {}),
  };
  await notify(target, session, { jsonrpc: '2.0', method: 'notifications/initialized' });
  return { session, result };
}

interface RequestScope {
  req: IncomingMessage;
  res: ServerResponse;
  writer: AnswerWriter;
  session: McpSession;
  sessionId: string;
  servers: Map<string, McpTarget>;
  tags: Tag[];
  bytesIn: number;
  p: Post;
  /**
   * A request of the stateless revision: it goes out under an id of the gateway's (the servers'
   * sessions are shared by the key's callers), its answer shaped for it under the caller's id, a
   * server's ended session dropped.
   */
  stateless?: { callerId: RequestId; sessionGone(): void };
}

/** Where an answer goes: a POST's writer, and the id its caller gave (stateless callers' own, not the gateway's). */
interface Reply {
  writer: AnswerWriter;
  callerId: RequestId;
}

/** Where a request's own POST is answered: its writer, under the caller's id. */
const firstReply = (s: RequestScope, req: RpcRequest): Reply => ({
  writer: s.writer,
  callerId: s.stateless?.callerId ?? req.id,
});

/** A call that may wait for its stateless client's input (proxy/mcp/input-rounds.ts). */
type Held = HeldCall<Reply>;

/** A request of the session: dispatched (proxy/mcp/methods.ts), a tools/call accounted, answered. */
async function request(deps: Deps, s: RequestScope, asked: RpcRequest): Promise<void> {
  let req = asked;
  let guarding: ToolGuarding | undefined;
  const abort = new AbortController();
  const key = `${s.sessionId}#${req.id}`;
  // Stateless callers cancel by closing the request's stream: there is no session to name it by.
  if (!s.stateless) inFlight.set(key, abort);
  // Nobody left to answer (at once, or after a while for a stream the client may resume): the
  // servers stop too (the exchange tells them).
  s.writer.whenGone(() => abort.abort(new RpcError(RPC.gateway, 'the client went away')));
  // A stateless client that takes servers' requests for input gets them as results asking for it.
  const client = s.session.client ?? {};
  const held: Held | undefined =
    s.stateless && Object.keys(client).length > 0
      ? new HeldCall(s.session.key, req.method, nameOf(req), client, (why) => abort.abort(why))
      : undefined;
  const ctx: MethodContext = {
    caller: s.p.caller,
    session: s.session,
    servers: s.servers,
    naming: s.p.where.server === undefined ? federatedNaming : singleNaming(s.p.where.server),
    single: s.p.where.server !== undefined,
    signal: abort.signal,
    onNotification: (n, server) => {
      const named = cancelledForClient(n, server.name);
      if (held) held.sink?.(named);
      else s.writer.notification(named);
    },
    onRequest: (server, r) =>
      held ? held.ask(server, s.session.upstream[server.name], r) : relayToClient(s, server, r),
    maxBytes: deps.maxAnswerBytes,
  };
  const header = headerOf(s.req);
  let finish: ((answer: RpcAnswer, reason?: string) => void) | undefined;
  const conclude = (round: Ended, to?: Reply) => concludeCall(deps, s, req, round, finish, to);
  const first = firstReply(s, req);
  try {
    if (req.method === 'tools/call') {
      const findings = () => guarding?.findings.list() ?? [];
      finish = await governToolCall(deps, s, req, ctx, header, findings).catch((error: unknown) => {
        conclude({ kind: 'failed', error }, first);
        return undefined;
      });
      // Refused (and answered) before it went out.
      if (!finish) return;
      const guarded = await guardToolCall(deps.guard, s.p.caller, s.tags, req);
      guarding = guarded.guarding;
      if ('blocked' in guarded) {
        finish(guarded.blocked, 'guardrail_blocked');
        reply(s, first, req.method, guarded.blocked);
        return;
      }
      req = guarded.req;
    }
    // Requests its server sends outside the call while it runs (roots/list) are the call's too.
    const stopAsking = held ? await askOutsideCall(deps, s, held, req, ctx.naming) : () => {};
    // A method that throws at once (a malformed request) fails the call as one that fails later does.
    const call = Promise.resolve()
      .then(() => dispatch(ctx, req))
      .then(
        async (o): Promise<Ended> => ({ kind: 'done', answer: await guardToolResult(deps.guard, guarding, o.answer) }),
        (error: unknown): Ended => ({ kind: 'failed', error }),
      );
    // A session's 404 (its server ended it) is thrown from here: the POST is answered so.
    if (!held) return conclude(await call, first);
    held.conclude = conclude;
    held.sink = (n) => s.writer.notification(n);
    void call.then((round) => {
      stopAsking();
      held.settle(round);
    });
    await nextRound(deps, held, first);
  } catch (err) {
    // Once the answer streams, a failure ends the stream in band: the status is sent, and a client
    // that resumes the stream must find its end.
    if (!s.writer.isStream) throw err;
    deps.onError?.(err, s.p.requestId);
    s.writer.answer(errorAnswer(first.callerId, new RpcError(RPC.internalError, 'Internal error of the gateway')));
  } finally {
    if (!s.stateless) inFlight.delete(key);
  }
}

/**
 * Servers send some requests for input outside the call that needs them, on their stream (roots/list,
 * as the SDKs' servers do): while a held call runs, its server's requests there are its own. The
 * stream is opened before the call goes out, so that the server finds it.
 */
async function askOutsideCall(
  deps: Deps,
  s: RequestScope,
  held: Held,
  req: RpcRequest,
  naming: MethodContext['naming'],
): Promise<() => void> {
  if (!NAMED_METHODS.has(req.method)) return () => {};
  const name = nameOf(req);
  const parsed = req.method === 'resources/read' ? naming.parseUri(name) : naming.parseName(name);
  const server = parsed ? s.servers.get(parsed.server) : undefined;
  const session = server ? s.session.upstream[server.name] : undefined;
  if (!server || !session) return () => {};
  return deps.pool
    .ask(s.session.key, server, s.session.client ?? {}, (r) => {
      if (!held.running) return false;
      held.ask(server, session, r);
      return true;
    })
    .catch(() => () => {});
}

/** The requests that name what they call (and so the server that serves them). */
const NAMED_METHODS = new Set(['tools/call', 'prompts/get', 'resources/read']);

/** What Mcp-Name carries of a request: the tool's or prompt's name, the resource's URI. */
const nameOf = (req: RpcRequest): string => String(req.params?.name ?? req.params?.uri ?? '');

/**
 * A call's end, answered to `to` (none: only recorded) and recorded. A session whose server ended
 * it is the spec's 404 to a session caller (thrown: the POST is answered so); a stateless caller
 * has none to start over, so the gateway's session on that server goes and the error is in band.
 */
function concludeCall(
  deps: Deps,
  s: RequestScope,
  req: RpcRequest,
  round: Ended,
  finish: ((answer: RpcAnswer, reason?: string) => void) | undefined,
  to?: Reply,
): void {
  if (round.kind === 'done') {
    finish?.(round.answer);
    if (to) reply(s, to, req.method, round.answer);
    return;
  }
  const err = round.error;
  // Not once the answer streams: its status is sent, the error goes in band.
  if (err instanceof UpstreamError && err.reason === 'session_gone' && !s.stateless && !to?.writer.isStream) {
    finish?.(errorAnswer(req.id, err), err.reason);
    throw refuse(404, RPC.gateway, err.message);
  }
  if (err instanceof UpstreamError && err.reason === 'session_gone') s.stateless?.sessionGone();
  const rpc = err instanceof RpcError ? err : new RpcError(RPC.internalError, 'Internal error of the gateway');
  if (!(err instanceof RpcError)) deps.onError?.(err, s.p.requestId);
  const answer = errorAnswer(req.id, rpc);
  finish?.(answer, err instanceof UpstreamError ? err.reason : (err as { reason?: string }).reason);
  if (to) reply(s, to, req.method, answer);
}

/**
 * The held call's next round, answered to `to`: its end, or the server's requests as a result
 * asking for input, with the sealed state that takes the call up again (on this replica).
 */
async function nextRound(deps: Deps, held: Held, to: Reply): Promise<void> {
  const round = await held.next();
  held.sink = undefined;
  if (round.kind !== 'input') return held.conclude?.(round, to);
  if (deps.held.full(held.key)) {
    held.abandon(new RpcError(RPC.gateway, 'too many calls of this key wait for input'));
    const why = new RpcError(RPC.gateway, 'Too many calls of this key wait for input on this replica: try again later');
    return held.conclude?.({ kind: 'failed', error: why }, to);
  }
  deps.held.hold(held);
  const state: SealedState = { held: held.id, key: held.key, ...(deps.replica ? { replica: deps.replica } : {}) };
  const requestState = deps.sealer.sealValue(state);
  to.writer.answer({ jsonrpc: '2.0', id: to.callerId, result: inputRequired(round.asked, requestState) });
}

/**
 * A stateless client's retry with the input asked for: the held call it names takes the answers
 * to its servers and goes on, answered on this POST. A state this replica does not hold for the
 * key (ended, expired, held elsewhere, forged) is -32602.
 */
async function resumeCall(
  deps: Deps,
  req: IncomingMessage,
  writer: AnswerWriter,
  message: RpcRequest,
  key: string,
): Promise<void> {
  const sealed = deps.sealer.openValue(String(message.params?.requestState ?? ''));
  const mine = isSealedState(sealed) && sealed.key === key ? sealed : undefined;
  const held = mine ? deps.held.take(mine.held, key) : undefined;
  const refuse = (why: string) => writer.answer(errorAnswer(message.id, new RpcError(RPC.invalidParams, why)));
  // Held by another replica: the retry goes there, as it came.
  const elsewhere = !held && mine?.replica && mine.replica !== deps.replica && !wasForwarded(req);
  if (elsewhere && (await forwardToReplica(mine.replica ?? '', req, writer.response, JSON.stringify(message)))) return;
  if (!held) {
    return refuse(
      'requestState names no call held for this key: it ended, waited too long for the input, or its replica is gone',
    );
  }
  if (held.method !== message.method || held.name !== nameOf(message)) {
    deps.held.hold(held);
    return refuse(`requestState belongs to another request (${held.method} ${held.name.slice(0, 100)})`);
  }
  const bad = held.answer(message.params?.inputResponses);
  if (bad) {
    deps.held.hold(held);
    return void writer.answer(errorAnswer(message.id, bad));
  }
  held.sink = (n) => writer.notification(n);
  await nextRound(deps, held, { writer, callerId: message.id });
}

/**
 * The answer written: as the stateless revision shapes it, under the caller's own id (errors in
 * band, HTTP 200, as its SDKs answer them), else as it is.
 */
function reply(s: RequestScope, to: Reply, method: string, answer: RpcAnswer): void {
  if (!s.stateless) {
    to.writer.answer(answer);
    return;
  }
  to.writer.answer({ ...statelessAnswer(method, answer), id: to.callerId });
}

/** A server's request during a call: to the client on the call's stream, or refused to the server at once. */
function relayToClient(s: RequestScope, server: McpTarget, r: RpcRequest): void {
  const why = unrelayable(r.method, s.session.client, s.writer.canStream);
  if (!why) {
    s.writer.request({ ...r, id: relayedId(server.name, r.id) });
    return;
  }
  const up = s.session.upstream[server.name];
  if (up) void respond(server, up, answerUnrelayed(r, why));
}

/**
 * The record a tools/call leaves, begun, and the key's rate for the tool: undefined when the
 * call was refused for it (answered and recorded here). Whether the key may use the tool is the
 * method's to decide (-32602, recorded too: a refused call is a call).
 */
async function governToolCall(
  deps: McpGatewayDeps,
  s: RequestScope,
  req: RpcRequest,
  ctx: MethodContext,
  header: (n: string) => string | undefined,
  findings: () => Finding[],
): Promise<((answer: RpcAnswer, reason?: string) => void) | undefined> {
  const params = req.params ?? {};
  const parsed = typeof params.name === 'string' ? ctx.naming.parseName(params.name) : undefined;
  const known = parsed && s.servers.has(parsed.server) ? parsed : undefined;
  const end = beginToolCall(deps, {
    requestId: s.p.requestId,
    caller: s.p.caller,
    tags: s.tags,
    // A name the caller made up is not a label: unknown tools are recorded under "unknown".
    server: known?.server ?? '',
    tool: known?.name ?? 'unknown',
    listed: known !== undefined && (s.servers.get(known.server)?.lists(known.name) ?? false),
    callId: firstReply(s, req).callerId,
    protocolVersion: s.session.version,
    header,
    bytesIn: s.bytesIn,
    arguments: params.arguments,
  });
  const finish = (answer: RpcAnswer, reason?: string) =>
    end({
      answer,
      bytesOut: s.writer.bytes + Buffer.byteLength(JSON.stringify(answer)),
      stream: s.writer.isStream,
      ...(reason ? { reason } : {}),
      findings: findings(),
    });
  if (known) {
    const wait = await admitToolCall(deps, s.p.caller, known.server, known.name);
    if (wait > 0) {
      const err = new RpcError(RPC.gateway, `Rate limit of this key for tool ${params.name}: retry in ${wait}s`, {
        retryAfterSeconds: wait,
      });
      finish(errorAnswer(req.id, err), 'rate_limited');
      reply(s, firstReply(s, req), req.method, errorAnswer(req.id, err));
      return undefined;
    }
  }
  return finish;
}

/**
 * A message of the stateless revision (2026-07-28): checked as the revision asks, served on the
 * gateway's own sessions at the servers (one per key and server: proxy/mcp/upstream-pool.ts),
 * answered as the revision shapes answers. server/discover says what the servers offer;
 * subscriptions/listen carries their changes (proxy/mcp/listen.ts). The servers' requests to the
 * client become results that ask for input, the call held until the client's retry brings the
 * answers (proxy/mcp/input-rounds.ts).
 */
async function stateless(
  deps: Deps,
  req: IncomingMessage,
  res: ServerResponse,
  p: Post,
  parsed: Extract<ReturnType<typeof parseClientMessage>, { kind: 'request' | 'notification' }>,
  pass: DoorPass,
): Promise<void> {
  const header = headerOf(req);
  const writer = new AnswerWriter(res, p.base, acceptsEventStream(header('accept')));
  if (parsed.kind === 'notification') {
    writer.accepted();
    return;
  }
  const message = parsed.message;
  const refusal = statelessRefusal(message, header);
  if (refusal) {
    writer.answer(errorAnswer(message.id, refusal), refusal.status);
    return;
  }
  const key = p.caller.keyHashPrefix;
  // A retry with the input a held call asked for (proxy/mcp/input-rounds.ts): that call goes on.
  if (message.params?.requestState !== undefined) return resumeCall(deps, req, writer, message, key);
  const targets = targetsOf(deps, p);
  // The client's sampling, elicitation and roots, declared to the servers (its sessions there are of those).
  const client = relayedCapabilities(statelessCapabilities(message));
  const opened = await Promise.all(targets.map((t) => deps.pool.get(key, t, client).catch((err: unknown) => err)));
  const upstream: Record<string, UpstreamSession> = {};
  const results: JsonObject[] = [];
  const servers = new Map<string, McpTarget>();
  for (const [i, t] of targets.entries()) {
    const o = opened[i];
    if (!isOpened(o)) continue;
    upstream[t.name] = o.session;
    results.push(o.result);
    servers.set(t.name, t);
  }
  if (p.where.server !== undefined && servers.size === 0) {
    const err = new RpcError(RPC.gateway, `MCP server ${p.where.server} is not reachable`);
    writer.answer(errorAnswer(message.id, err));
    return;
  }
  if (message.method === 'server/discover') {
    writer.answer({ jsonrpc: '2.0', id: message.id, result: discovered(p, results) });
    return;
  }
  if (message.method === 'subscriptions/listen') {
    if (!deps.streams.take(key, res)) {
      const err = new RpcError(
        RPC.gateway,
        `Too many open streams for this key on this replica (at most ${deps.streams.max})`,
      );
      writer.answer(errorAnswer(message.id, err));
      return;
    }
    const asked = requestedFilter(message);
    if (!asked) {
      writer.answer(errorAnswer(message.id, new RpcError(RPC.invalidParams, 'params.notifications is required')));
      return;
    }
    const offered = discovered(p, results).capabilities as JsonObject;
    await serveListen({
      res,
      req: message,
      key,
      client,
      servers,
      naming: p.where.server === undefined ? federatedNaming : singleNaming(p.where.server),
      pool: deps.pool,
      filter: honoured(asked, offered),
      headers: p.base,
      maxBytes: deps.maxAnswerBytes,
    });
    return;
  }
  const session: McpSession = {
    key,
    version: STATELESS_VERSION,
    upstream,
    began: Math.floor(Date.now() / 1000),
    ...(Object.keys(client).length > 0 ? { client } : {}),
  };
  const scope: RequestScope = {
    req,
    res,
    writer,
    session,
    sessionId: '',
    servers,
    tags: tagsOf(header, p.caller),
    bytesIn: pass.bytes,
    p,
    // Which server ended it the error does not say: the key's sessions on these servers are opened again.
    stateless: {
      callerId: message.id,
      sessionGone: () => {
        for (const name of servers.keys()) deps.pool.drop(key, name);
      },
    },
  };
  await request(deps, scope, { ...withoutEnvelope(message), id: `gateway-${randomUUID()}` });
}

const isOpened = (o: unknown): o is Opened => isObject(o) && isObject(o.session) && isObject(o.result);

/** The servers a request may reach: every one the key may use at /mcp, the one named at /mcp/<server>. */
function targetsOf(deps: McpGatewayDeps, p: Post): McpTarget[] {
  if (p.where.server === undefined) return deps.servers.forKey(p.caller.policy);
  const target = deps.servers.get(p.where.server);
  if (!target || !mayUseServer(p.caller.policy, target.name)) {
    throw refuse(404, RPC.gateway, `no MCP server ${p.where.server} for this key`);
  }
  return [target];
}

/**
 * server/discover's answer: one server's offer at /mcp/<server>, the federation's at /mcp (list
 * changes and resource subscriptions where a server offers them: subscriptions/listen carries them).
 */
function discovered(p: Post, results: JsonObject[]): JsonObject {
  const only = p.where.server !== undefined ? results[0] : undefined;
  if (only) {
    const info = isObject(only.serverInfo) ? only.serverInfo : { name: p.where.server ?? '', version: '' };
    const instructions = typeof only.instructions === 'string' ? only.instructions : undefined;
    return discoverResult(isObject(only.capabilities) ? only.capabilities : {}, info, instructions);
  }
  return discoverResult(
    federatedCapabilities(results.flatMap((r) => (isObject(r.capabilities) ? [r.capabilities] : []))),
    { name: 'platform-ai-optimizer', title: 'Platform AI Optimizer MCP gateway', version: PRODUCT_VERSION },
    `Tools of ${results.length} MCP servers, each named <server>_<tool>.`,
  );
}

/** DELETE: the session ends here and on its servers; its id is refused from now on (404). */
async function end(
  deps: McpGatewayDeps,
  req: IncomingMessage,
  res: ServerResponse,
  caller: Caller,
  base: Record<string, string>,
): Promise<void> {
  const sessionId = headerOf(req)('mcp-session-id');
  if (!sessionId) throw refuse(400, RPC.invalidRequest, 'Bad Request: Mcp-Session-Id header is required');
  const session = deps.sealer.open(sessionId);
  if (!session || session.key !== caller.keyHashPrefix) throw refuse(404, RPC.gateway, 'Session not found');
  deps.sealer.terminate(sessionId);
  await Promise.all(
    Object.entries(session.upstream).map(([name, up]) => {
      const target = deps.servers.get(name);
      return target ? terminate(target, up) : undefined;
    }),
  );
  res.writeHead(200, base).end();
}
