import type { AuthProvider, Tool } from '@modelcontextprotocol/client';
import { connectMcp, listMcpTools, type McpConnection, mcpFailureOf } from '../../crds/mcp/discovery.js';
import type { McpDiscoveryOutcome } from './mcp-server-status.js';

/**
 * One live MCP session per McpServer, kept open between discoveries so that the server's
 * notifications/tools/list_changed reach the operator (`onToolsChanged` requeues the server);
 * the next discovery lists on the same session. A session is opened anew when what it was opened
 * with changes (URL, auth, timeout: the `fingerprint`), when it closed, and once when a list on it
 * fails (a restarted server forgot its sessions: the retry on a new one tells a server that is
 * down from a session that is gone). Closed when its server is deleted and when the operator stops.
 */

export interface DiscoverRequest {
  url: string;
  /** What the session depends on: a different value opens a new one. */
  fingerprint: string;
  /** Made only when a session is opened (it holds the server's OAuth token for the session's life). */
  auth: () => AuthProvider | undefined;
  timeoutMs: number;
}

/** A session's state its callbacks share with the map: whether it ended. */
interface Flags {
  closed: boolean;
}

interface Live {
  conn: McpConnection;
  fingerprint: string;
  flags: Flags;
}

export class McpSessions {
  private readonly live = new Map<string, Live>();

  constructor(private readonly onToolsChanged: (key: string) => void) {}

  /** The session's tools, on the live session if one fits, else on a new one kept for next time. */
  async discover(key: string, req: DiscoverRequest): Promise<McpDiscoveryOutcome> {
    const current = this.live.get(key);
    if (current && (current.flags.closed || current.fingerprint !== req.fingerprint)) await this.close(key);
    const kept = this.live.get(key);
    if (kept) {
      try {
        return outcome(kept.conn, await listMcpTools(kept.conn, req.timeoutMs));
      } catch {
        await this.close(key);
      }
    }
    let conn: McpConnection | undefined;
    const flags: Flags = { closed: false };
    try {
      const auth = req.auth();
      conn = await connectMcp(req.url, {
        ...(auth ? { auth } : {}),
        timeoutMs: req.timeoutMs,
        // Only the session that is current speaks for its server: a late notice of a replaced one is dropped.
        onToolsChanged: () => {
          if (this.live.get(key)?.flags === flags) this.onToolsChanged(key);
        },
        onClosed: () => {
          flags.closed = true;
        },
      });
      const tools = await listMcpTools(conn, req.timeoutMs);
      this.live.set(key, { conn, fingerprint: req.fingerprint, flags });
      return outcome(conn, tools);
    } catch (err) {
      await conn?.close();
      return { ok: false, problem: mcpFailureOf(err) };
    }
  }

  has(key: string): boolean {
    return this.live.has(key);
  }

  async close(key: string): Promise<void> {
    const entry = this.live.get(key);
    if (!entry) return;
    this.live.delete(key);
    await entry.conn.close();
  }

  async closeAll(): Promise<void> {
    await Promise.all([...this.live.keys()].map((key) => this.close(key)));
  }
}

const outcome = (conn: McpConnection, tools: readonly Tool[]): McpDiscoveryOutcome => ({
  ok: true,
  protocolVersion: conn.protocolVersion,
  serverInfo: conn.serverInfo,
  tools,
});
