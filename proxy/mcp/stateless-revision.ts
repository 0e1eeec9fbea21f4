import { isObject, type JsonObject, RPC, type RpcAnswer, RpcError, type RpcRequest } from './json-rpc.js';
import { VERSIONS } from './protocol.js';

/**
 * MCP's 2026-07-28 revision, as the gateway serves it beside the session revisions: no
 * initialize and no session; every request carries its revision, the client's capabilities and
 * identity in `params._meta` (the envelope), repeated in the MCP-Protocol-Version, Mcp-Method and
 * Mcp-Name headers; `server/discover` says what the server offers; every result says
 * `resultType`, and lists and reads say how long they may be cached. The SDKs probe with
 * `server/discover` and speak this revision where the answer lists it, the session revisions
 * (initialize) otherwise. The pure parts live here: which requests are of this revision, their
 * checks, and the shapes of their answers; proxy/mcp/mcp-gateway.ts serves them.
 */

export const STATELESS_VERSION = '2026-07-28';

const META = {
  version: 'io.modelcontextprotocol/protocolVersion',
  capabilities: 'io.modelcontextprotocol/clientCapabilities',
  serverInfo: 'io.modelcontextprotocol/serverInfo',
} as const;

/** The revision's own error codes. */
const HEADER_MISMATCH = -32020;
const UNSUPPORTED_VERSION = -32022;

/** Methods of the session revisions this one has no more: 404, method not found. */
const REMOVED = new Set(['initialize', 'ping', 'logging/setLevel', 'resources/subscribe', 'resources/unsubscribe']);

/** Results a client may cache: they say for how long (the gateway: not at all, each answer is per key). */
const CACHEABLE = new Set([
  'tools/list',
  'prompts/list',
  'resources/list',
  'resources/templates/list',
  'resources/read',
]);

/** A refusal of this revision: the JSON-RPC error, and the HTTP status it goes with. */
export class StatelessRefusal extends RpcError {
  constructor(
    code: number,
    message: string,
    readonly status: number,
    data?: unknown,
  ) {
    super(code, message, data);
  }
}

/** The revision a message's envelope claims; undefined for a message of the session revisions. */
export function claimedRevision(message: { params?: JsonObject }): string | undefined {
  const meta = message.params?._meta;
  if (!isObject(meta)) return undefined;
  const v = meta[META.version];
  return typeof v === 'string' ? v : undefined;
}

/** The client's capabilities its envelope declares (checked present by statelessRefusal). */
export function statelessCapabilities(message: { params?: JsonObject }): JsonObject {
  const meta = message.params?._meta;
  const caps = isObject(meta) ? meta[META.capabilities] : undefined;
  return isObject(caps) ? caps : {};
}

/** The value of a header the revision takes verbatim or as `=?base64?...?=`. */
function headerValue(raw: string | undefined): string | undefined {
  const m = raw === undefined ? undefined : /^=\?base64\?(.*)\?=$/.exec(raw);
  return m ? Buffer.from(m[1] ?? '', 'base64').toString('utf8') : raw;
}

/** The field whose value Mcp-Name carries, by method. */
const NAMED: Readonly<Record<string, string>> = {
  'tools/call': 'name',
  'prompts/get': 'name',
  'resources/read': 'uri',
};

/**
 * Why a request of this revision cannot be served as sent, or undefined: a revision the gateway
 * does not speak (-32022, with the ones it does), an envelope without the client's capabilities
 * (-32602), headers that say otherwise than the body (-32020), a method the revision removed
 * (-32601, 404).
 */
export function statelessRefusal(
  req: RpcRequest,
  header: (n: string) => string | undefined,
): StatelessRefusal | undefined {
  const version = claimedRevision(req) ?? '';
  if (version !== STATELESS_VERSION) {
    return new StatelessRefusal(UNSUPPORTED_VERSION, `Unsupported protocol version ${version.slice(0, 40)}`, 400, {
      supported: [STATELESS_VERSION, ...VERSIONS],
      requested: version.slice(0, 40),
    });
  }
  const meta = req.params?._meta as JsonObject;
  if (!isObject(meta[META.capabilities])) {
    return new StatelessRefusal(RPC.invalidParams, `params._meta lacks ${META.capabilities}`, 400);
  }
  const named = Object.hasOwn(NAMED, req.method) ? NAMED[req.method] : undefined;
  const expected: Array<[string, string | undefined]> = [
    ['MCP-Protocol-Version', version],
    ['Mcp-Method', req.method],
    ...(named ? [['Mcp-Name', String(req.params?.[named] ?? '')] as [string, string]] : []),
  ];
  for (const [name, body] of expected) {
    const sent = headerValue(header(name.toLowerCase()));
    if (sent !== body) {
      return new StatelessRefusal(
        HEADER_MISMATCH,
        `Header ${name} ${sent === undefined ? 'is missing' : 'does not match the body'}`,
        400,
        { mismatch: { header: name, body: body?.slice(0, 200) } },
      );
    }
  }
  if (REMOVED.has(req.method)) {
    return new StatelessRefusal(RPC.methodNotFound, `Method not found in ${STATELESS_VERSION}: ${req.method}`, 404);
  }
  return undefined;
}

/** The request as a server of the session revisions takes it: the envelope's keys out of `_meta`. */
export function withoutEnvelope(req: RpcRequest): RpcRequest {
  if (!req.params || !isObject(req.params._meta)) return req;
  const meta = Object.fromEntries(
    Object.entries(req.params._meta).filter(([k]) => !k.startsWith('io.modelcontextprotocol/')),
  );
  const { _meta: _drop, ...params } = req.params;
  return { ...req, params: Object.keys(meta).length > 0 ? { ...params, _meta: meta } : params };
}

/** An answer as this revision has it: a result says resultType, and cacheable ones for how long. */
export function statelessAnswer(method: string, answer: RpcAnswer): RpcAnswer {
  if (!('result' in answer)) {
    // Resource not found is -32602 in this revision.
    return answer.error.code === RPC.resourceNotFound
      ? { ...answer, error: { ...answer.error, code: RPC.invalidParams } }
      : answer;
  }
  const result: JsonObject = { ...answer.result, resultType: 'complete' };
  if (CACHEABLE.has(method)) Object.assign(result, { ttlMs: 0, cacheScope: 'private' });
  // Tasks are not of this revision.
  if (method === 'tools/list' && Array.isArray(result.tools)) {
    result.tools = result.tools.map((t) => {
      if (!isObject(t) || !('execution' in t)) return t;
      const { execution: _e, ...rest } = t;
      return rest;
    });
  }
  return { ...answer, result };
}

/** What server/discover answers: the revisions, what is offered, and who offers it. */
export function discoverResult(capabilities: JsonObject, serverInfo: JsonObject, instructions?: string): JsonObject {
  const { tasks: _t, ...offered } = capabilities;
  return {
    resultType: 'complete',
    supportedVersions: [STATELESS_VERSION],
    capabilities: offered,
    ...(instructions ? { instructions } : {}),
    ttlMs: 0,
    cacheScope: 'private',
    _meta: { [META.serverInfo]: serverInfo },
  };
}
