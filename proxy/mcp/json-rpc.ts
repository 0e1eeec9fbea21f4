import { parseJSONRPCMessage } from '@modelcontextprotocol/client';

/**
 * JSON-RPC 2.0 as MCP carries it: the messages a client may POST, the gateway's error answers
 * with the specification's codes, and a parse that tells which error a body deserves (not JSON:
 * -32700; JSON but no JSON-RPC message: -32600). Messages stay plain JSON values: the gateway
 * passes what it does not change through as it came.
 */

export type JsonObject = { [key: string]: unknown };
export type RequestId = string | number;

export interface RpcRequest {
  jsonrpc: '2.0';
  id: RequestId;
  method: string;
  params?: JsonObject;
}

export interface RpcNotification {
  jsonrpc: '2.0';
  method: string;
  params?: JsonObject;
}

interface RpcResult {
  jsonrpc: '2.0';
  id: RequestId;
  result: JsonObject;
}

export interface RpcErrorAnswer {
  jsonrpc: '2.0';
  /**
   * Absent when the request's id could not be read: MCP's schema (2025-11-25) makes it optional
   * and takes no null, where JSON-RPC 2.0 alone would say null.
   */
  id?: RequestId;
  error: { code: number; message: string; data?: unknown };
}

export type RpcAnswer = RpcResult | RpcErrorAnswer;
export type ClientMessage =
  | { kind: 'request'; message: RpcRequest }
  | { kind: 'notification'; message: RpcNotification }
  | { kind: 'response'; message: RpcAnswer };

/** The codes of JSON-RPC 2.0 and those MCP adds. */
export const RPC = {
  parseError: -32700,
  invalidRequest: -32600,
  methodNotFound: -32601,
  invalidParams: -32602,
  internalError: -32603,
  /** MCP: a resource that does not exist. */
  resourceNotFound: -32002,
  /** Implementation-defined server errors (-32000 to -32099): the gateway's own refusals. */
  requestTimeout: -32001,
  gateway: -32000,
} as const;

export class RpcError extends Error {
  constructor(
    readonly code: number,
    message: string,
    readonly data?: unknown,
  ) {
    super(message);
  }
}

export const errorAnswer = (id: RequestId | null, err: RpcError): RpcErrorAnswer => ({
  jsonrpc: '2.0',
  ...(id !== null ? { id } : {}),
  error: { code: err.code, message: err.message, ...(err.data !== undefined ? { data: err.data } : {}) },
});

export const isObject = (v: unknown): v is JsonObject => typeof v === 'object' && v !== null && !Array.isArray(v);

/** One message of a POST body, or the error it deserves. Batches (2025-03-26 only) are refused. */
export function parseClientMessage(json: unknown): ClientMessage | RpcErrorAnswer {
  if (Array.isArray(json)) {
    return errorAnswer(
      null,
      new RpcError(
        RPC.invalidRequest,
        'Invalid Request: send one JSON-RPC message per POST (this gateway takes no batches)',
      ),
    );
  }
  const id = isObject(json) && (typeof json.id === 'string' || typeof json.id === 'number') ? json.id : null;
  try {
    parseJSONRPCMessage(json);
  } catch {
    return errorAnswer(
      id,
      new RpcError(RPC.invalidRequest, 'Invalid Request: not a JSON-RPC 2.0 request, notification or response'),
    );
  }
  const m = json as JsonObject;
  if (typeof m.method === 'string') {
    if (m.params !== undefined && !isObject(m.params)) {
      return errorAnswer(id, new RpcError(RPC.invalidRequest, 'Invalid Request: params must be an object'));
    }
    return id === null
      ? { kind: 'notification', message: m as unknown as RpcNotification }
      : { kind: 'request', message: m as unknown as RpcRequest };
  }
  return { kind: 'response', message: m as unknown as RpcAnswer };
}
