import { answerUnrelayed } from './client-requests.js';
import { type JsonObject, RPC, RpcError, type RpcNotification, type RpcRequest } from './json-rpc.js';
import type { McpTarget } from './servers.js';
import type { UpstreamSession } from './session.js';
import { type Listening, listen, respond, terminate } from './upstream.js';

/**
 * Sessions the gateway keeps on servers for callers of the stateless revision (2026-07-28), who
 * bring none of their own: one per key and server, opened on first use (initialize, in a session
 * revision: the servers behind the gateway need not speak the new one), shared by that key's
 * requests to that server on this replica, dropped when the server ends it or after an idle
 * while, and bounded in number (the oldest goes first, ended at its server).
 */

export interface Opened {
  session: UpstreamSession;
  /** The server's initialize result: its capabilities, serverInfo and instructions. */
  result: JsonObject;
}

type Listener = (n: RpcNotification) => void;

interface Entry {
  target: McpTarget;
  used: number;
  opened: Promise<Opened>;
  /** Who listens to the server's stream on this session (subscriptions/listen), and the stream while one does. */
  listeners: Set<Listener>;
  stream?: Promise<Listening | undefined>;
}

export class UpstreamPool {
  private readonly entries = new Map<string, Entry>();

  constructor(
    private readonly open: (target: McpTarget) => Promise<Opened>,
    private readonly max = 10_000,
    private readonly idleMs = 10 * 60_000,
    private readonly now: () => number = Date.now,
  ) {}

  /** The key's session on the server, opened now if it has none (a failed opening is not kept). */
  get(key: string, target: McpTarget): Promise<Opened> {
    const id = `${key}\u0000${target.name}`;
    const hit = this.entries.get(id);
    const now = this.now();
    if (hit && hit.target === target && now - hit.used < this.idleMs) {
      hit.used = now;
      // Most recently used last: the first entry is the one to evict.
      this.entries.delete(id);
      this.entries.set(id, hit);
      return hit.opened;
    }
    if (hit) this.drop(key, target.name);
    const opened = this.open(target);
    this.entries.set(id, { target, used: now, opened, listeners: new Set() });
    opened.catch(() => {
      if (this.entries.get(id)?.opened === opened) this.entries.delete(id);
    });
    while (this.entries.size > this.max) {
      const oldest = this.entries.keys().next().value as string;
      const [k = '', server = ''] = oldest.split('\u0000');
      this.drop(k, server);
    }
    return opened;
  }

  /** The server ended the session (or it is evicted): the next request opens another. */
  drop(key: string, server: string): void {
    const id = `${key}\u0000${server}`;
    const entry = this.entries.get(id);
    if (!entry) return;
    this.entries.delete(id);
    entry.listeners.clear();
    void entry.stream?.then((l) => l?.close());
    entry.opened.then((o) => terminate(entry.target, o.session)).catch(() => {});
  }

  /**
   * The server's notifications on the key's session, to `listener` until the returned function
   * is called: one stream from the server (its GET), shared by every listener of that session,
   * open while one listens. Its requests for input are refused to it: a stateless caller gets
   * none (proxy/mcp/stateless-revision.ts).
   */
  async listen(key: string, target: McpTarget, listener: Listener): Promise<() => void> {
    const opened = await this.get(key, target);
    const entry = this.entries.get(`${key}\u0000${target.name}`);
    if (!entry) return () => {};
    entry.listeners.add(listener);
    entry.stream ??= listen({
      target,
      session: opened.session,
      onMessage: (m) => {
        if ('id' in m) {
          const why = new RpcError(
            RPC.methodNotFound,
            'the gateway relays no requests for input to 2026-07-28 clients',
          );
          void respond(target, opened.session, answerUnrelayed(m as RpcRequest, why));
          return;
        }
        for (const l of entry.listeners) l(m);
      },
      onEventId: () => {},
      // Gone for good: the next listener opens it again.
      onEnd: () => {
        entry.stream = undefined;
      },
    }).then((r) => ('listening' in r ? r.listening : undefined));
    return () => {
      entry.listeners.delete(listener);
      if (entry.listeners.size > 0) return;
      void entry.stream?.then((l) => l?.close());
      entry.stream = undefined;
    };
  }

  get size(): number {
    return this.entries.size;
  }
}
