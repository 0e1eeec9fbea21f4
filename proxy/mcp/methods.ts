import type { Caller } from '../access/auth.js';
import {
  isObject,
  type JsonObject,
  RPC,
  type RpcAnswer,
  RpcError,
  type RpcNotification,
  type RpcRequest,
} from './json-rpc.js';
import type { Naming } from './naming.js';
import { type McpTarget, mayUseTool } from './servers.js';
import type { McpSession } from './session.js';
import { exchange } from './upstream.js';

/**
 * What each MCP method does at the gateway, one entry per method: lists fanned out to the
 * session's servers and merged under the endpoint's names (proxy/mcp/naming.ts), calls routed
 * to the one server a name or URI belongs to with the server's own name put back. A tool the
 * key may not use is left out of tools/list and refused by tools/call (-32602, as the spec
 * answers an unknown tool). /mcp/<server> passes every other method through as it is; /mcp
 * answers -32601.
 */

export interface MethodContext {
  caller: Caller;
  session: McpSession;
  /** The servers of this session the key may still use, by name. */
  servers: ReadonlyMap<string, McpTarget>;
  naming: Naming;
  /** /mcp/<server>: unknown methods go to the server as they are. */
  single: boolean;
  signal: AbortSignal;
  /** Where the server's notifications on the way go (an SSE answer), if anywhere. */
  onNotification?: (n: RpcNotification, server: McpTarget) => void;
  /** Where the server's requests on the way go (relayed to the client, or refused at once). */
  onRequest?: (server: McpTarget, r: RpcRequest) => void;
  maxBytes: number;
}

/** A method's outcome: the answer to send, and what it came from (for tools/call's record). */
export interface Outcome {
  answer: RpcAnswer;
  server?: string;
  tool?: string;
  upstreamBytes?: number;
}

type Handler = (ctx: MethodContext, req: RpcRequest) => Promise<Outcome>;

/** List methods: the field holding the items, and which of their fields are renamed. */
const LISTS: Record<string, { items: string; names: string[]; uris: string[] }> = {
  'tools/list': { items: 'tools', names: ['name'], uris: [] },
  'prompts/list': { items: 'prompts', names: ['name'], uris: [] },
  'resources/list': { items: 'resources', names: ['name'], uris: ['uri'] },
  'resources/templates/list': { items: 'resourceTemplates', names: ['name'], uris: ['uriTemplate'] },
};

/** At most this many pages of one list from one server (a server paging forever is cut off). */
const MAX_PAGES = 50;

const ownPart = (p: { name: string } | { uri: string }): string => ('name' in p ? p.name : p.uri);

const paramsOf = (req: RpcRequest): JsonObject => req.params ?? {};

/** The request as the server sees it: its own name (or URI) at `field` of params (or of params.ref). */
function forward(ctx: MethodContext, req: RpcRequest, server: McpTarget, params: JsonObject): Promise<Outcome> {
  const session = ctx.session.upstream[server.name];
  return exchange({
    target: server,
    ...(session ? { session } : {}),
    message: { ...req, params },
    signal: ctx.signal,
    ...(ctx.onNotification ? { onNotification: (n: RpcNotification) => ctx.onNotification?.(n, server) } : {}),
    ...(ctx.onRequest ? { onRequest: (r: RpcRequest) => ctx.onRequest?.(server, r) } : {}),
    maxBytes: ctx.maxBytes,
  }).then((r) => ({ answer: r.answer, server: server.name, upstreamBytes: r.bytes }));
}

function serverOf(ctx: MethodContext, name: string | undefined): McpTarget {
  const server = name === undefined ? undefined : ctx.servers.get(name);
  if (!server) throw new RpcError(RPC.invalidParams, 'Unknown name: no server of this session serves it');
  return server;
}

/** A list of every server of the session, merged under the endpoint's names. */
async function list(ctx: MethodContext, req: RpcRequest): Promise<Outcome> {
  const spec = LISTS[req.method] as (typeof LISTS)[string];
  // Federated, a server that fails is left out of the list rather than failing it; alone, it fails it.
  const per = await Promise.all(
    [...ctx.servers.values()].map((server) =>
      ctx.single ? listAll(ctx, req, server, spec) : listAll(ctx, req, server, spec).catch(() => [] as JsonObject[]),
    ),
  );
  return { answer: { jsonrpc: '2.0', id: req.id, result: { [spec.items]: per.flat() } } };
}

async function listAll(
  ctx: MethodContext,
  req: RpcRequest,
  server: McpTarget,
  spec: (typeof LISTS)[string],
): Promise<JsonObject[]> {
  const out: JsonObject[] = [];
  let cursor: string | undefined;
  for (let page = 0; page < MAX_PAGES; page++) {
    const { answer } = await forward(ctx, req, server, cursor ? { cursor } : {});
    if (!('result' in answer)) throw new RpcError(answer.error.code, answer.error.message);
    const items = answer.result[spec.items];
    if (req.method === 'tools/list' && Array.isArray(items)) {
      server.learn(items.flatMap((t) => (isObject(t) && typeof t.name === 'string' ? [t.name] : [])));
    }
    for (const item of Array.isArray(items) ? items : []) {
      if (!isObject(item)) continue;
      if (req.method === 'tools/list' && !mayUseTool(ctx.caller.policy, server, String(item.name))) continue;
      const renamed: JsonObject = { ...item };
      for (const f of spec.names) if (typeof item[f] === 'string') renamed[f] = ctx.naming.name(server.name, item[f]);
      for (const f of spec.uris) if (typeof item[f] === 'string') renamed[f] = ctx.naming.uri(server.name, item[f]);
      out.push(renamed);
    }
    cursor = typeof answer.result.nextCursor === 'string' ? answer.result.nextCursor : undefined;
    if (!cursor) break;
  }
  return out;
}

const callTool: Handler = async (ctx, req) => {
  const params = paramsOf(req);
  const given = typeof params.name === 'string' ? params.name : '';
  const parsed = ctx.naming.parseName(given);
  const server = parsed ? ctx.servers.get(parsed.server) : undefined;
  if (!parsed || !server || !mayUseTool(ctx.caller.policy, server, parsed.name)) {
    throw new RpcError(RPC.invalidParams, `Unknown tool: ${given.slice(0, 200)}`);
  }
  const out = await forward(ctx, req, server, { ...params, name: parsed.name });
  return { ...out, answer: linksRenamed(ctx, server.name, out.answer), tool: parsed.name };
};

/** A content block's resource URI (resource_link, embedded resource) as the endpoint names resources. */
function blockRenamed(ctx: MethodContext, server: string, block: unknown): unknown {
  if (!isObject(block)) return block;
  if (block.type === 'resource_link' && typeof block.uri === 'string') {
    return { ...block, uri: ctx.naming.uri(server, block.uri) };
  }
  if (block.type === 'resource' && isObject(block.resource) && typeof block.resource.uri === 'string') {
    return { ...block, resource: { ...block.resource, uri: ctx.naming.uri(server, block.resource.uri) } };
  }
  return block;
}

/**
 * The resources a tool result or a prompt points to, named so that the client can read them
 * through the same endpoint (tools/call content, prompts/get messages' content).
 */
function linksRenamed(ctx: MethodContext, server: string, answer: RpcAnswer): RpcAnswer {
  if (!('result' in answer)) return answer;
  const r = answer.result;
  if (Array.isArray(r.content)) {
    return { ...answer, result: { ...r, content: r.content.map((b: unknown) => blockRenamed(ctx, server, b)) } };
  }
  if (Array.isArray(r.messages)) {
    const messages = r.messages.map((m: unknown) =>
      isObject(m) ? { ...m, content: blockRenamed(ctx, server, m.content) } : m,
    );
    return { ...answer, result: { ...r, messages } };
  }
  return answer;
}

/** A request naming one item (prompts/get) or URI (resources/read, subscribe, unsubscribe). */
const byName =
  (field: 'name' | 'uri'): Handler =>
  async (ctx, req) => {
    const params = paramsOf(req);
    const given = typeof params[field] === 'string' ? params[field] : '';
    const parsed = field === 'name' ? ctx.naming.parseName(given) : ctx.naming.parseUri(given);
    if (!parsed) {
      throw new RpcError(
        field === 'uri' ? RPC.resourceNotFound : RPC.invalidParams,
        `Unknown ${field === 'uri' ? 'resource' : 'prompt'}: ${given.slice(0, 200)}`,
      );
    }
    const server = serverOf(ctx, parsed.server);
    const out = await forward(ctx, req, server, { ...params, [field]: ownPart(parsed) });
    if (req.method === 'resources/read') return { ...out, answer: contentsRenamed(ctx, server.name, out.answer) };
    return req.method === 'prompts/get' ? { ...out, answer: linksRenamed(ctx, server.name, out.answer) } : out;
  };

/** resources/read: each content's URI named as the endpoint named the resource (a client matches them). */
function contentsRenamed(ctx: MethodContext, server: string, answer: RpcAnswer): RpcAnswer {
  if (!('result' in answer) || !Array.isArray(answer.result.contents)) return answer;
  const contents = answer.result.contents.map((c: unknown) =>
    isObject(c) && typeof c.uri === 'string' ? { ...c, uri: ctx.naming.uri(server, c.uri) } : c,
  );
  return { ...answer, result: { ...answer.result, contents } };
}

/** completion/complete names a prompt or a resource template in params.ref. */
const complete: Handler = async (ctx, req) => {
  const params = paramsOf(req);
  const ref = isObject(params.ref) ? params.ref : {};
  const field = ref.type === 'ref/resource' ? 'uri' : 'name';
  const given = typeof ref[field] === 'string' ? ref[field] : '';
  const parsed = field === 'name' ? ctx.naming.parseName(given) : ctx.naming.parseUri(given);
  const server = serverOf(ctx, parsed?.server);
  return forward(ctx, req, server, { ...params, ref: { ...ref, [field]: parsed && ownPart(parsed) } });
};

/** logging/setLevel: every server of the session. */
const setLevel: Handler = async (ctx, req) => {
  await Promise.all([...ctx.servers.values()].map((s) => forward(ctx, req, s, paramsOf(req)).catch(() => undefined)));
  return { answer: { jsonrpc: '2.0', id: req.id, result: {} } };
};

const ping: Handler = async (_ctx, req) => ({ answer: { jsonrpc: '2.0', id: req.id, result: {} } });

const METHODS: Readonly<Record<string, Handler>> = {
  ping,
  'tools/list': list,
  'prompts/list': list,
  'resources/list': list,
  'resources/templates/list': list,
  'tools/call': callTool,
  'prompts/get': byName('name'),
  'resources/read': byName('uri'),
  'resources/subscribe': byName('uri'),
  'resources/unsubscribe': byName('uri'),
  'completion/complete': complete,
  'logging/setLevel': setLevel,
};

/** A method this table does not know: /mcp/<server> passes it on, /mcp has none such. */
export function dispatch(ctx: MethodContext, req: RpcRequest): Promise<Outcome> {
  // Own entries only: a method named after an Object property (constructor, toString) is no handler.
  const handler = Object.hasOwn(METHODS, req.method) ? METHODS[req.method] : undefined;
  if (handler) return handler(ctx, req);
  const only = ctx.single ? [...ctx.servers.values()][0] : undefined;
  if (only) return forward(ctx, req, only, paramsOf(req));
  return Promise.reject(new RpcError(RPC.methodNotFound, `Method not found: ${req.method.slice(0, 100)}`));
}
