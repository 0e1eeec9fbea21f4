import { answerUnrelayed } from './client-requests.js';
import { type JsonObject, RPC, RpcError, type RpcNotification, type RpcRequest } from './json-rpc.js';
import type { McpTarget } from './servers.js';
import type { UpstreamSession } from './session.js';
import { type Listening, listen, respond, terminate } from './upstream.js';

/**
 * Sessions the gateway keeps on servers for callers of the stateless revision (2026-07-28), who
 * bring none of their own: one per key and server, opened on first use (initialize, in a session
 * revision: the servers behind the gateway need not speak the new one), shared by that key's
 * requests to that server on this replica (each request goes out under an id of the gateway's,
 * so that callers' ids never meet on it), dropped when the server ends it or after an idle while,
 * and bounded in number (the oldest goes first, ended at its server). A server that cannot be
 * reached is not tried again for a while, so that it does not slow every request of the key.
 */

export interface Opened {
  session: UpstreamSession;
  /** The server's initialize result: its capabilities, serverInfo and instructions. */
  result: JsonObject;
}

/** A listener of the server's stream: its notifications, and the end of the stream or session. */
export interface PoolListener {
  notification(n: RpcNotification): void;
  gone(): void;
}

interface Entry {
  target: McpTarget;
  used: number;
  opened: Promise<Opened>;
  /** Set once the opening failed: until then + FAILED_MS the failure is answered at once. */
  failedAt?: number;
  /** Who listens to the server's stream on this session (subscriptions/listen), and the stream while one does. */
  listeners: Set<PoolListener>;
  stream?: Promise<Listening | undefined>;
}

/** How long a failed opening is remembered. */
const FAILED_MS = 30_000;

export class UpstreamPool {
  private readonly entries = new Map<string, Entry>();

  constructor(
    private readonly open: (target: McpTarget) => Promise<Opened>,
    private readonly max = 10_000,
    private readonly idleMs = 10 * 60_000,
    private readonly now: () => number = Date.now,
  ) {}

  /** The key's session on the server, opened now if it has none (or had a failure long enough ago). */
  get(key: string, target: McpTarget): Promise<Opened> {
    const id = `${key}\u0000${target.name}`;
    const hit = this.entries.get(id);
    const now = this.now();
    if (hit && hit.target === target && this.fresh(hit, now)) {
      hit.used = now;
      // Most recently used last: the first entry is the one to evict.
      this.entries.delete(id);
      this.entries.set(id, hit);
      return hit.opened;
    }
    if (hit) this.drop(key, target.name);
    const opened = this.open(target);
    const entry: Entry = { target, used: now, opened, listeners: new Set() };
    this.entries.set(id, entry);
    opened.catch(() => {
      entry.failedAt = this.now();
    });
    while (this.entries.size > this.max) {
      const oldest = this.entries.keys().next().value as string;
      const [k = '', server = ''] = oldest.split('\u0000');
      this.drop(k, server);
    }
    return opened;
  }

  /** Still good: a failure not yet past FAILED_MS, or a session used lately or listened to now. */
  private fresh(e: Entry, now: number): boolean {
    if (e.failedAt !== undefined) return now - e.failedAt < FAILED_MS;
    return e.listeners.size > 0 || now - e.used < this.idleMs;
  }

  /** The server ended the session (or it is evicted): its listeners hear it, the next request opens another. */
  drop(key: string, server: string): void {
    const id = `${key}\u0000${server}`;
    const entry = this.entries.get(id);
    if (!entry) return;
    this.entries.delete(id);
    this.endStream(entry);
    if (entry.failedAt === undefined) entry.opened.then((o) => terminate(entry.target, o.session)).catch(() => {});
  }

  /** The stream closed, and each listener told it is gone (it ends its own answer). */
  private endStream(entry: Entry): void {
    const listeners = [...entry.listeners];
    entry.listeners.clear();
    void entry.stream?.then((l) => l?.close());
    entry.stream = undefined;
    for (const l of listeners) l.gone();
  }

  /**
   * The server's notifications on the key's session, to `listener` until the returned function
   * is called: one stream from the server (its GET), shared by every listener of that session,
   * open while one listens. A stream the server refuses or ends tells its listeners they are
   * gone. The server's requests for input are refused to it: a stateless caller gets none
   * (proxy/mcp/stateless-revision.ts).
   */
  async listen(key: string, target: McpTarget, listener: PoolListener): Promise<() => void> {
    const opened = await this.get(key, target);
    const entry = this.entries.get(`${key}\u0000${target.name}`);
    if (!entry) {
      listener.gone();
      return () => {};
    }
    entry.listeners.add(listener);
    entry.stream ??= this.openStream(entry, target, opened);
    return () => {
      entry.listeners.delete(listener);
      if (entry.listeners.size > 0) return;
      void entry.stream?.then((l) => l?.close());
      entry.stream = undefined;
    };
  }

  private openStream(entry: Entry, target: McpTarget, opened: Opened): Promise<Listening | undefined> {
    const stream = listen({
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
        for (const l of entry.listeners) l.notification(m);
      },
      onEventId: () => {},
      onEnd: () => {
        if (entry.stream === stream) this.endStream(entry);
      },
    }).then((r) => {
      if ('listening' in r) return r.listening;
      // Refused (no stream, or the session is gone): nothing will come; the listeners end, and may listen again.
      if (entry.stream === stream) this.endStream(entry);
      return undefined;
    });
    return stream;
  }

  get size(): number {
    return this.entries.size;
  }
}
