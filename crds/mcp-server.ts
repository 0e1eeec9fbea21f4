import type { CommonStatus, Resource } from './meta.js';

/**
 * One MCP server the gateway federates at /mcp and serves alone at /mcp/<name>
 * (proxy/mcp/). It is reached over Streamable HTTP: at spec.url, or, for a stdio server
 * (spec.stdio), at the Service of the Deployment the operator runs it in behind a
 * stdio-to-HTTP bridge (operator/mcp-server/). Its name, a DNS label of at most 32 characters
 * (no '_'), prefixes its tools at /mcp: `<name>_<tool>`. The schema is
 * crds/ai.platform_mcpservers.yaml.
 */

/** How the gateway authenticates to the server. */
type McpAuthMethod = 'None' | 'Bearer' | 'OAuthClientCredentials';

export interface McpServerAuth {
  method: McpAuthMethod;
  /**
   * Bearer: the Secret holding the token (key `token`); OAuthClientCredentials: the client secret
   * (key `clientSecret`). Forbidden with None.
   */
  secretRef?: { name: string };
  /**
   * OAuthClientCredentials: the token endpoint of the authorization server. Required there, as
   * clientId; tokenUrl, clientId, scopes and resource are forbidden with the other methods.
   */
  tokenUrl?: string;
  clientId?: string;
  /** OAuthClientCredentials: scopes to ask for; none when absent. */
  scopes?: string[];
  /** OAuthClientCredentials: the resource indicator (RFC 8707) the token is asked for; default the server's URL. */
  resource?: string;
}

/** A stdio MCP server the operator runs as a Deployment, bridged to Streamable HTTP. */
interface McpStdioServer {
  /** An image holding the server and Node.js (the bridge runs with npx from the image's npm cache or registry). */
  image: string;
  /** The server's command and its arguments, as it runs on stdio. */
  command: string[];
  /** Plain values, visible to whoever reads the McpServer: no secrets. */
  env?: Array<{ name: string; value: string }>;
  /** Defaults to 1; 0..10, 0 stops the server. */
  replicas?: number;
}

export interface McpServerSpec {
  /** Streamable HTTP endpoint (http or https): an in-cluster Service or an external URL. Exactly one of url and stdio. */
  url?: string;
  /** Run by the operator; refused in standalone mode. Only with auth method None. */
  stdio?: McpStdioServer;
  /** Defaults to method None (the API server and the standalone validator fill it in). */
  auth?: McpServerAuth;
  /** Tools by the server's own names; deny wins over allow; absent allow: every tool. */
  tools?: { allow?: string[]; deny?: string[] };
  /** How long one request to the server may take (tools/call included), 1..3600. Defaults to 60. */
  timeoutSeconds?: number;
}

type McpServerPhase = 'Ready' | 'Degraded';

/**
 * A tool as the server lists it (name and description; its schema stays with the server). The
 * schema takes at most 1024 characters of description: the operator cuts longer ones.
 */
export interface McpServedTool {
  name: string;
  description?: string;
}

export interface McpServerStatus extends CommonStatus {
  phase?: McpServerPhase;
  /** Where the gateway reaches it (the bridge's Service for stdio). */
  endpoint?: string;
  /** The protocol revision it negotiated with the operator. */
  protocolVersion?: string;
  serverInfo?: { name: string; version: string };
  /** Tools it serves that the spec admits (at most 512), refreshed on notifications/tools/list_changed. */
  tools?: McpServedTool[];
  lastDiscoveryTime?: string;
}

export type McpServer = Resource<'McpServer', McpServerSpec, McpServerStatus>;

/** The port and path of the stdio bridge's Service (the Deployment the operator runs a stdio server in). */
export const MCP_BRIDGE_PORT = 8000;
export const MCP_BRIDGE_PATH = '/mcp';

/** The bridge's Deployment and Service of a stdio server. */
export const mcpBridgeName = (server: string): string => `mcp-${server}`;

/** Where the gateway and the operator reach a server: its URL, or its bridge's Service in the namespace it lives in. */
export function mcpServerUrl(server: McpServer): string | undefined {
  if (server.spec.url) return server.spec.url;
  if (!server.spec.stdio || !server.metadata.name || !server.metadata.namespace) return undefined;
  return `http://${mcpBridgeName(server.metadata.name)}.${server.metadata.namespace}.svc:${MCP_BRIDGE_PORT}${MCP_BRIDGE_PATH}`;
}
