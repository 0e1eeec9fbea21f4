import type { AuthProvider } from '@modelcontextprotocol/client';
import { type McpServer, mcpServerUrl } from '../../crds/mcp-server.js';
import type { KeyPolicy } from '../access/auth.js';

/**
 * The MCP servers the gateway reaches (McpServer resources, from the cluster or the standalone
 * config), as plain targets: where, with which credentials, which tools their spec admits, how
 * long a call may take; and what a key may use of them (ApiKey spec.mcp).
 */

export interface McpTarget {
  name: string;
  url: string;
  timeoutMs: number;
  /** The credentials the gateway presents (none: the server takes anonymous calls). */
  auth?: AuthProvider;
  /** Whether the McpServer's spec admits a tool (deny wins over allow; no allow: all). */
  admits(tool: string): boolean;
}

const DEFAULT_TIMEOUT_SECONDS = 60;

export function targetOf(
  server: McpServer,
  authOf: (server: McpServer) => AuthProvider | undefined,
  resolve: (url: string) => string = (u) => u,
): McpTarget | undefined {
  const url = mcpServerUrl(server);
  const name = server.metadata.name;
  if (!url || !name) return undefined;
  const allow = server.spec.tools?.allow ? new Set(server.spec.tools.allow) : undefined;
  const deny = new Set(server.spec.tools?.deny ?? []);
  const auth = authOf(server);
  return {
    name,
    url: resolve(url),
    timeoutMs: (server.spec.timeoutSeconds ?? DEFAULT_TIMEOUT_SECONDS) * 1000,
    ...(auth ? { auth } : {}),
    admits: (tool) => !deny.has(tool) && (!allow || allow.has(tool)),
  };
}

/** The servers by name; replaced whole on every change of the source. */
export class McpServerTable {
  private byName = new Map<string, McpTarget>();

  constructor(
    private readonly authOf: (server: McpServer) => AuthProvider | undefined = () => undefined,
    private readonly resolve?: (url: string) => string,
  ) {}

  set(servers: readonly McpServer[]): void {
    const next = new Map<string, McpTarget>();
    for (const s of servers) {
      const t = targetOf(s, this.authOf, this.resolve);
      if (t) next.set(t.name, t);
    }
    this.byName = next;
  }

  get(name: string): McpTarget | undefined {
    return this.byName.get(name);
  }

  /** The servers a key may use, by name order (a stable federated list). */
  forKey(policy: KeyPolicy): McpTarget[] {
    return [...this.byName.values()]
      .filter((t) => mayUseServer(policy, t.name))
      .sort((a, b) => (a.name < b.name ? -1 : 1));
  }
}

export function mayUseServer(policy: KeyPolicy, server: string): boolean {
  const servers = policy.mcp?.servers;
  return !servers || servers.some((s) => s.name === server);
}

/** The key's allow-list and the server's spec both admit the tool. */
export function mayUseTool(policy: KeyPolicy, target: McpTarget, tool: string): boolean {
  if (!target.admits(tool)) return false;
  const servers = policy.mcp?.servers;
  if (!servers) return true;
  const entry = servers.find((s) => s.name === target.name);
  return entry !== undefined && (!entry.tools || entry.tools.includes(tool));
}
