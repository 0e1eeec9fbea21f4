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
  /** Whether the server listed the tool: to the operator (McpServer status.tools), or in a tools/list through this replica. */
  lists(tool: string): boolean;
  /** The tools a tools/list through the gateway found (kept per server, bounded). */
  learn(tools: readonly string[]): void;
}

const DEFAULT_TIMEOUT_SECONDS = 60;

/** Tools remembered per server from the lists that went through (a server lists at most this many). */
const LEARNED_MAX = 1024;

function targetOf(
  server: McpServer,
  authOf: (server: McpServer) => AuthProvider | undefined,
  resolve: (url: string) => string = (u) => u,
  learned: Set<string> = new Set(),
): McpTarget | undefined {
  const url = mcpServerUrl(server);
  const name = server.metadata.name;
  if (!url || !name) return undefined;
  const allow = server.spec.tools?.allow ? new Set(server.spec.tools.allow) : undefined;
  const deny = new Set(server.spec.tools?.deny ?? []);
  const auth = authOf(server);
  const listed = new Set((server.status?.tools ?? []).map((t) => t.name));
  return {
    name,
    url: resolve(url),
    timeoutMs: (server.spec.timeoutSeconds ?? DEFAULT_TIMEOUT_SECONDS) * 1000,
    ...(auth ? { auth } : {}),
    admits: (tool) => !deny.has(tool) && (!allow || allow.has(tool)),
    lists: (tool) => listed.has(tool) || learned.has(tool),
    learn: (tools) => {
      for (const t of tools) if (learned.size < LEARNED_MAX) learned.add(t);
    },
  };
}

/** The servers by name; replaced whole on every change of the source. */
export class McpServerTable {
  private byName = new Map<string, McpTarget>();
  /** What tools/list found, by server: it outlives a change of the server's spec. */
  private readonly learned = new Map<string, Set<string>>();

  constructor(
    private readonly authOf: (server: McpServer) => AuthProvider | undefined = () => undefined,
    private readonly resolve?: (url: string) => string,
  ) {}

  set(servers: readonly McpServer[]): void {
    const next = new Map<string, McpTarget>();
    for (const s of servers) {
      const name = s.metadata.name ?? '';
      const learned = this.learned.get(name) ?? new Set<string>();
      const t = targetOf(s, this.authOf, this.resolve, learned);
      if (!t) continue;
      next.set(t.name, t);
      this.learned.set(name, learned);
    }
    for (const name of this.learned.keys()) if (!next.has(name)) this.learned.delete(name);
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
