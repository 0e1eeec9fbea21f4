import {
  type AuthProvider,
  Client,
  type FetchLike,
  ProtocolError,
  SdkError,
  SdkErrorCode,
  SdkHttpError,
  StreamableHTTPClientTransport,
  type Tool,
  UnauthorizedError,
} from '@modelcontextprotocol/client';
import { PRODUCT_VERSION } from '../constants.js';
import type { McpServerSpec } from '../mcp-server.js';
import { McpCredentialError, type McpCredentialReason } from './auth.js';

/**
 * The client side of an MCP server, as the operator discovers it and the proxy reaches it: a
 * connection through the official SDK (Streamable HTTP, sessions, version negotiation up to the
 * newest revision both sides speak, notifications), its tools across pages, the spec's tool
 * filter, and what a failure means (one table, so the operator's conditions and the proxy's
 * callers' errors use the same reasons). Nothing here names a token or a Secret.
 */

/** Who the platform says it is in `initialize`. */
const CLIENT_INFO = { name: 'platform-ai-optimizer', version: PRODUCT_VERSION };
/** More pages than this is a server whose cursor never ends (the SDK's walk throws). */
const MAX_TOOL_PAGES = 100;
/** How long closing waits for the server to end the session. */
const CLOSE_WAIT_MS = 2000;

/** Resolves after `ms`, without keeping the process alive. */
const delay = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms).unref());

export interface McpConnectOptions {
  auth?: AuthProvider;
  /** Bound of initialize and of each request (spec.timeoutSeconds). */
  timeoutMs: number;
  /** The server's tool list changed (notifications/tools/list_changed, on either protocol era). */
  onToolsChanged?: () => void;
  /** The connection ended (the server closed the session or went away): connect anew to use it. */
  onClosed?: () => void;
  /** The transport's fetch (tests); the platform's by default. */
  fetch?: FetchLike;
}

/** One live session with a server. */
export interface McpConnection {
  readonly client: Client;
  /** The revision negotiated (2025-11-25, 2026-07-28, ...). */
  readonly protocolVersion: string | undefined;
  readonly serverInfo: { name: string; version: string } | undefined;
  close(): Promise<void>;
}

/**
 * Connects and initializes. Negotiation is the SDK's `auto`: a 2026-07-28 server is spoken to in
 * its revision, any other with the 2025 handshake, so the status says what the server really
 * speaks. A failed connect leaves nothing open.
 */
export async function connectMcp(url: string, opts: McpConnectOptions): Promise<McpConnection> {
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    ...(opts.auth ? { authProvider: opts.auth } : {}),
    ...(opts.fetch ? { fetch: opts.fetch } : {}),
    // A refused scope cannot be widened by a machine client: fail, do not start an interactive flow.
    onInsufficientScope: 'throw',
  });
  const onToolsChanged = opts.onToolsChanged;
  const client = new Client(CLIENT_INFO, {
    versionNegotiation: { mode: 'auto' },
    listMaxPages: MAX_TOOL_PAGES,
    ...(onToolsChanged
      ? { listChanged: { tools: { autoRefresh: false, debounceMs: 300, onChanged: () => onToolsChanged() } } }
      : {}),
  });
  client.onclose = () => opts.onClosed?.();
  try {
    await client.connect(transport, { timeout: opts.timeoutMs });
  } catch (err) {
    await client.close().catch(() => {});
    throw err;
  }
  const info = client.getServerVersion();
  return {
    client,
    protocolVersion: client.getNegotiatedProtocolVersion(),
    serverInfo: info ? { name: info.name, version: info.version } : undefined,
    close: async () => {
      // Ends the session on the server too (DELETE), where it keeps one, waiting a bounded time
      // for a server that no longer answers; then the transport.
      await Promise.race([transport.terminateSession().catch(() => {}), delay(CLOSE_WAIT_MS)]);
      await client.close().catch(() => {});
    },
  };
}

/** Every tool the server lists, all pages (never from the SDK's response cache). */
export async function listMcpTools(conn: McpConnection, timeoutMs: number): Promise<Tool[]> {
  const { tools } = await conn.client.listTools(undefined, { timeout: timeoutMs, cacheMode: 'bypass' });
  return tools;
}

/** Whether spec.tools admits a tool by its server name: deny wins over allow; no allow list admits all. */
export function admitsTool(filter: McpServerSpec['tools'], name: string): boolean {
  if (filter?.deny?.includes(name)) return false;
  return filter?.allow === undefined || filter.allow.includes(name);
}

export const admittedTools = <T extends { name: string }>(tools: readonly T[], filter: McpServerSpec['tools']): T[] =>
  tools.filter((t) => admitsTool(filter, t.name));

/** Why a server could not be used, in the words of the McpServer's Ready condition. */
export type McpFailureReason =
  | 'Unreachable'
  | 'Unauthorized'
  | 'NotMcp'
  | 'Timeout'
  | 'ServerError'
  | 'SecretMissing'
  | 'SecretNotReadable'
  | 'AuthMisconfigured'
  | 'TokenEndpointUnreachable';

export interface McpFailure {
  reason: McpFailureReason;
  /** What happened, for a condition or a log line: codes and statuses, never a body, token or Secret name. */
  detail: string;
}

const CREDENTIAL_REASONS: Record<McpCredentialReason, McpFailureReason> = {
  SecretMissing: 'SecretMissing',
  SecretNotReadable: 'SecretNotReadable',
  TokenRefused: 'Unauthorized',
  TokenEndpointUnreachable: 'TokenEndpointUnreachable',
  AuthMisconfigured: 'AuthMisconfigured',
};

/** The HTTP statuses a server answers that say what is wrong, by status. */
const HTTP_STATUSES: Record<number, McpFailureReason> = {
  401: 'Unauthorized',
  403: 'Unauthorized',
  404: 'NotMcp',
  405: 'NotMcp',
  406: 'NotMcp',
  415: 'NotMcp',
  // A load balancer or ingress in front with nothing healthy behind it.
  502: 'Unreachable',
  503: 'Unreachable',
  504: 'Timeout',
};

/** SDK errors that are not an HTTP status. */
const SDK_CODES: Partial<Record<string, McpFailureReason>> = {
  [SdkErrorCode.RequestTimeout]: 'Timeout',
  [SdkErrorCode.ClientHttpAuthentication]: 'Unauthorized',
  [SdkErrorCode.ClientHttpForbidden]: 'Unauthorized',
  [SdkErrorCode.ClientHttpUnexpectedContent]: 'NotMcp',
  [SdkErrorCode.InvalidResult]: 'NotMcp',
  [SdkErrorCode.ListPaginationExceeded]: 'ServerError',
  [SdkErrorCode.ConnectionClosed]: 'Unreachable',
  [SdkErrorCode.SendFailed]: 'Unreachable',
};

/** Socket and DNS failures (Node's and undici's codes). */
const NETWORK_CODES: Record<string, McpFailureReason> = {
  ECONNREFUSED: 'Unreachable',
  ENOTFOUND: 'Unreachable',
  EAI_AGAIN: 'Unreachable',
  ECONNRESET: 'Unreachable',
  EHOSTUNREACH: 'Unreachable',
  ENETUNREACH: 'Unreachable',
  EPIPE: 'Unreachable',
  UND_ERR_SOCKET: 'Unreachable',
  UND_ERR_CONNECT_TIMEOUT: 'Timeout',
  UND_ERR_HEADERS_TIMEOUT: 'Timeout',
  ETIMEDOUT: 'Timeout',
};

/** The errors an error was caused by, outermost first (fetch wraps the socket's in `cause`). */
function chain(err: unknown): unknown[] {
  const out: unknown[] = [];
  for (let e = err; e !== undefined && e !== null && out.length < 8; e = (e as { cause?: unknown }).cause) out.push(e);
  return out;
}

const codeOf = (e: unknown): string | undefined => {
  const code = (e as { code?: unknown } | undefined)?.code;
  return typeof code === 'string' ? code : undefined;
};

/** One rule of the table: the first that recognizes an error in the chain says what it means. */
type Rule = (e: unknown) => McpFailure | undefined;

const RULES: Rule[] = [
  (e) => (e instanceof McpCredentialError ? { reason: CREDENTIAL_REASONS[e.reason], detail: e.message } : undefined),
  (e) => {
    if (!(e instanceof SdkHttpError)) return undefined;
    const reason = HTTP_STATUSES[e.status] ?? 'ServerError';
    return { reason, detail: `the server answered HTTP ${e.status}` };
  },
  (e) =>
    e instanceof UnauthorizedError ? { reason: 'Unauthorized', detail: 'the server answered HTTP 401' } : undefined,
  (e) => {
    const code = codeOf(e);
    if (!code) return undefined;
    const reason = NETWORK_CODES[code] ?? (/CERT|SSL|TLS|SELF_SIGNED/.test(code) ? 'Unreachable' : undefined);
    return reason ? { reason, detail: `the connection failed: ${code}` } : undefined;
  },
  (e) => {
    const reason = e instanceof SdkError ? SDK_CODES[e.code] : undefined;
    return reason ? { reason, detail: `the MCP client failed: ${(e as SdkError).code}` } : undefined;
  },
  (e) => {
    if (!(e instanceof ProtocolError)) return undefined;
    // An initialize the server does not know, or a version it refuses: not an MCP server we can speak to.
    const notMcp = e.code === -32601 || e.code === -32022;
    return {
      reason: notMcp ? 'NotMcp' : 'ServerError',
      detail: `the server answered with JSON-RPC error ${e.code}`,
    };
  },
  (e) => {
    const name = (e as { name?: unknown } | undefined)?.name;
    if (name === 'TimeoutError') return { reason: 'Timeout', detail: 'the request timed out' };
    // The answer was not JSON-RPC at all (parsed and refused by the SDK's schemas, or not JSON).
    if (name === 'ZodError' || name === 'SyntaxError') {
      return { reason: 'NotMcp', detail: 'the answer is not an MCP (JSON-RPC) message' };
    }
    return undefined;
  },
  // Last: the version probe wraps what went wrong, which the rules above read from its cause.
  (e) =>
    e instanceof SdkError && e.code === SdkErrorCode.EraNegotiationFailed
      ? { reason: 'NotMcp', detail: 'the server did not answer version negotiation as MCP servers do' }
      : undefined,
];

/** What an error from connecting, listing or calling means; the first rule that knows it wins. */
export function mcpFailureOf(err: unknown): McpFailure {
  const errors = chain(err);
  for (const rule of RULES) {
    for (const e of errors) {
      const failure = rule(e);
      if (failure) return failure;
    }
  }
  const last = errors.at(-1) as { name?: unknown } | undefined;
  return { reason: 'Unreachable', detail: `the connection failed: ${String(last?.name ?? 'error')}` };
}
