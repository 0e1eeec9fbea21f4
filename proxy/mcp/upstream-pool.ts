import { answerUnrelayed } from './client-requests.js';
import { type JsonObject, RPC, RpcError, type RpcNotification, type RpcRequest } from './json-rpc.js';
import type { McpTarget } from './servers.js';
import type { UpstreamSession } from './session.js';
import { type Listening, listen, respond, terminate } from './upstream.js';

/**
 * Sessions the gateway keeps on servers for callers of the stateless revision (2026-07-28), who
 * bring none of their own: one per key, server and the client capabilities declared to it
 * (sampling, elicitation, roots: a server offers what its client can take), opened on first use (initialize, in a session
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
  key: string;
  target: McpTarget;
  used: number;
  opened: Promise<Opened>;
  /** Set once the opening failed: until then + FAILED_MS the failure is answered at once. */
  failedAt?: number;
  /** Who listens to the server's stream on this session (subscriptions/listen), and the stream while one does. */
  listeners: Set<PoolListener>;
  /**
   * Calls in flight that take the server's requests for input sent outside any call (roots/list, as
   * servers send it): offered each in turn, the first that takes it has it.
   */
  askers: Set<Asker>;
  stream?: Promise<Listening | undefined>;
  /** Set while nobody listens or asks: the stream closes when it fires. */
  linger?: NodeJS.Timeout;
}

/** Takes a server's request sent on its stream (true), or leaves it to the next. */
export type Asker = (r: RpcRequest) => boolean;

/** How long a stream nobody listens to stays open for the next call (calls come in bursts). */
const LINGER_MS = 30_000;

/** How long a failed opening is remembered. */
const FAILED_MS = 30_000;

export class UpstreamPool {
  private readonly entries = new Map<string, Entry>();

  constructor(
    private readonly open: (target: McpTarget, client: JsonObject) => Promise<Opened>,
    private readonly max = 10_000,
    private readonly idleMs = 10 * 60_000,
    private readonly now: () => number = Date.now,
  ) {}

  /**
   * The key's session on the server for a client of these capabilities (relayedCapabilities), opened
   * now if it has none (or had a failure long enough ago).
   */
  get(key: string, target: McpTarget, client: JsonObject = {}): Promise<Opened> {
    const id = entryId(key, target.name, client);
    const hit = this.entries.get(id);
    const now = this.now();
    if (hit && hit.target === target && this.fresh(hit, now)) {
      hit.used = now;
      // Most recently used last: the first entry is the one to evict.
      this.entries.delete(id);
      this.entries.set(id, hit);
      return hit.opened;
    }
    if (hit) this.dropEntry(id, hit);
    const opened = this.open(target, client);
    const entry: Entry = { key, target, used: now, opened, listeners: new Set(), askers: new Set() };
    this.entries.set(id, entry);
    opened.catch(() => {
      entry.failedAt = this.now();
    });
    while (this.entries.size > this.max) {
      const [oldest, e] = this.entries.entries().next().value as [string, Entry];
      this.dropEntry(oldest, e);
    }
    return opened;
  }

  /** Still good: a failure not yet past FAILED_MS, or a session used lately, listened to or asked on now. */
  private fresh(e: Entry, now: number): boolean {
    if (e.failedAt !== undefined) return now - e.failedAt < FAILED_MS;
    return e.listeners.size > 0 || e.askers.size > 0 || now - e.used < this.idleMs;
  }

  /**
   * The server ended a session of the key (which one an error does not say: every one the key has
   * there goes): its listeners hear it, the next request opens another.
   */
  drop(key: string, server: string): void {
    for (const [id, e] of this.entries) if (e.key === key && e.target.name === server) this.dropEntry(id, e);
  }

  private dropEntry(id: string, entry: Entry): void {
    this.entries.delete(id);
    this.endStream(entry);
    if (entry.failedAt === undefined) entry.opened.then((o) => terminate(entry.target, o.session)).catch(() => {});
  }

  /** The stream closed, and each listener told it is gone (it ends its own answer). */
  private endStream(entry: Entry): void {
    const listeners = [...entry.listeners];
    entry.listeners.clear();
    clearTimeout(entry.linger);
    closeStream(entry);
    for (const l of listeners) l.gone();
  }

  /**
   * The server's notifications on the key's session, to `listener` until the returned function
   * is called: one stream from the server (its GET), shared by every listener of that session,
   * open while one listens. A stream the server refuses or ends tells its listeners they are
   * gone. The server's requests on it go to a call that asks for them (ask()), else are refused to it.
   */
  async listen(key: string, target: McpTarget, listener: PoolListener, client: JsonObject = {}): Promise<() => void> {
    const joined = await this.join(key, target, client, (e) => e.listeners, listener);
    if (joined) return joined.leave;
    listener.gone();
    return () => {};
  }

  /**
   * The server's requests sent on its stream of the key's session, offered to `asker` until the
   * returned function is called; resolves once the stream is open (a server sends such a request
   * only to a stream that is there: the call goes out after).
   */
  async ask(key: string, target: McpTarget, client: JsonObject, asker: Asker): Promise<() => void> {
    const joined = await this.join(key, target, client, (e) => e.askers, asker);
    if (!joined) return () => {};
    await joined.stream;
    return joined.leave;
  }

  /** `member` among the session's listeners or askers, its stream kept open until it leaves. */
  private async join<T>(
    key: string,
    target: McpTarget,
    client: JsonObject,
    members: (e: Entry) => Set<T>,
    member: T,
  ): Promise<{ stream: Promise<Listening | undefined>; leave: () => void } | undefined> {
    const opened = await this.get(key, target, client);
    const entry = this.entries.get(entryId(key, target.name, client));
    if (!entry) return undefined;
    members(entry).add(member);
    clearTimeout(entry.linger);
    entry.linger = undefined;
    entry.stream ??= this.openStream(entry, target, opened);
    return {
      stream: entry.stream,
      leave: () => {
        members(entry).delete(member);
        this.releaseStream(entry);
      },
    };
  }

  /** Nobody listens or asks any more: the stream lingers a while for the next, then closes. */
  private releaseStream(entry: Entry): void {
    if (entry.listeners.size > 0 || entry.askers.size > 0 || !entry.stream) return;
    clearTimeout(entry.linger);
    entry.linger = setTimeout(() => {
      if (entry.listeners.size === 0 && entry.askers.size === 0) closeStream(entry);
    }, LINGER_MS);
    entry.linger.unref();
  }

  private openStream(entry: Entry, target: McpTarget, opened: Opened): Promise<Listening | undefined> {
    const stream = listen({
      target,
      session: opened.session,
      onMessage: (m) => {
        if ('id' in m) {
          for (const asker of entry.askers) if (asker(m as RpcRequest)) return;
          const why = new RpcError(RPC.methodNotFound, 'no call of a client that takes this request is in flight');
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

function closeStream(entry: Entry): void {
  void entry.stream?.then((l) => l?.close());
  entry.stream = undefined;
}

/** An entry's place: the key, the server, and the capabilities its session declared (bounded by relayedCapabilities). */
const entryId = (key: string, server: string, client: JsonObject): string =>
  `${key}\u0000${server}\u0000${JSON.stringify(client)}`;
