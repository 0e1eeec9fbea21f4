import { randomUUID } from 'node:crypto';
import { answerUnrelayed, relayedId, unrelayable } from './client-requests.js';
import {
  isObject,
  type JsonObject,
  RPC,
  type RpcAnswer,
  RpcError,
  type RpcNotification,
  type RpcRequest,
} from './json-rpc.js';
import type { McpTarget } from './servers.js';
import type { UpstreamSession } from './session.js';
import { respond } from './upstream.js';

/**
 * Servers' requests for input (sampling, elicitation, roots) to callers of the 2026-07-28
 * revision, which has no stream to carry them: the revision answers such a request with a result
 * `input_required` that lists them (`inputRequests`) and a `requestState`, and the client sends
 * the same request again with its answers (`inputResponses`) and that state. The servers behind
 * the gateway speak a session revision and ask during the call, on its stream; so the gateway
 * holds the call open on this replica while the client answers: the first answer the client gets
 * lists what the server asked, each retry hands the client's answers to the server and waits
 * again, for the call's result or the server's next requests. A call is held for a bounded while
 * after each round (then it is cancelled at its server), and only its own key may take it up.
 */

/** One request of a server's, as the client was asked it. */
interface Asked {
  server: McpTarget;
  session: UpstreamSession;
  request: RpcRequest;
}

/** What the call did next: asked for input, or ended (its answer, or why it failed). */
export type Round =
  | { kind: 'input'; asked: Map<string, Asked> }
  | { kind: 'done'; answer: RpcAnswer }
  | { kind: 'failed'; error: unknown };

/**
 * How long a call waits for its client to come back with the answers (its server's timeout for
 * the call bounds it too), and how long an ended one waits for its client to collect the end.
 */
export const HOLD_MS = 5 * 60_000;
const ENDED_HOLD_MS = 60_000;
/** Calls held on one replica at once, and of one key: past either, the call fails (its client may try again). */
const MAX_HELD = 10_000;
const MAX_HELD_PER_KEY = 64;

/** A round that ends the call. */
export type Ended = Extract<Round, { kind: 'done' | 'failed' }>;

/** `To`: where an answer goes (the gateway's writer of the round, and the caller's id there). */
export class HeldCall<To> {
  readonly id = randomUUID();
  /**
   * How the call's end is answered and recorded: to the round's client, or, with none (the call
   * expired while held), only recorded.
   */
  conclude: ((round: Ended, to?: To) => void) | undefined;
  /** Requests given to the client and not answered yet, by the name the client was given. */
  private readonly pending = new Map<string, Asked>();
  private queue: Asked[] = [];
  private ended: Round | undefined;
  private wake: (() => void) | undefined;
  private expiry: NodeJS.Timeout | undefined;
  private onExpiry: (() => void) | undefined;
  /** Where the call's notifications go: the client's answer stream of the current round, if any. */
  sink: ((n: RpcNotification) => void) | undefined;

  constructor(
    /** The caller's key: only it may take the call up. */
    readonly key: string,
    /** What the call asked, so that a retry of another request is refused. */
    readonly method: string,
    readonly name: string,
    /** The client's capabilities: a request it cannot take is refused to its server. */
    private client: JsonObject,
    /** Stops the call (its exchange tells the server it was cancelled). */
    private readonly cancel: (why: RpcError) => void,
  ) {}

  /** A server's request during the call: for the client's next round, or refused to the server. */
  ask(server: McpTarget, session: UpstreamSession | undefined, request: RpcRequest): void {
    const why = unrelayable(request.method, this.client, true);
    if (why || !session) {
      if (session)
        void respond(server, session, answerUnrelayed(request, why ?? new RpcError(RPC.gateway, 'no session')));
      return;
    }
    this.queue.push({ server, session, request });
    this.wake?.();
  }

  /** Whether the call is still going (its server may still ask). */
  get running(): boolean {
    return this.ended === undefined;
  }

  /** The call's end, whichever way. */
  settle(round: Ended): void {
    this.ended = round;
    this.wake?.();
    // Ended while its client is away (its server's timeout, say): kept only a short while for the client to collect.
    if (this.expiry) this.expireIn(ENDED_HOLD_MS);
  }

  /** What comes next: the call's end (which makes any requests still queued moot), else the server's requests. */
  async next(): Promise<Round> {
    for (;;) {
      if (this.ended) return this.ended;
      if (this.queue.length > 0) {
        // Requests a server sends together go out in one round.
        await new Promise((r) => setImmediate(r));
        if (this.ended) return this.ended;
        const asked = new Map(this.queue.splice(0).map((a) => [relayedId(a.server.name, a.request.id), a]));
        for (const [k, a] of asked) this.pending.set(k, a);
        return { kind: 'input', asked };
      }
      await new Promise<void>((r) => {
        this.wake = r;
      });
      this.wake = undefined;
    }
  }

  /**
   * The client's answers, each to the server that asked; a request it left unanswered is refused
   * to its server, so that nothing waits for an answer that will not come. Undefined, or why the
   * answers cannot be taken.
   */
  answer(responses: unknown): RpcError | undefined {
    if (responses !== undefined && !isObject(responses))
      return new RpcError(RPC.invalidParams, 'inputResponses must be an object');
    const given = responses ?? {};
    for (const [k, a] of this.pending) {
      const result = given[k];
      void respond(
        a.server,
        a.session,
        isObject(result)
          ? { jsonrpc: '2.0', id: a.request.id, result }
          : answerUnrelayed(a.request, new RpcError(RPC.invalidParams, 'the client gave no answer to this request')),
      );
    }
    this.pending.clear();
    return undefined;
  }

  /** Held until the client comes back, at most HOLD_MS (ENDED_HOLD_MS once the call has ended): then cancelled and forgotten. */
  hold(onExpiry: () => void): void {
    this.onExpiry = onExpiry;
    this.expireIn(this.ended ? ENDED_HOLD_MS : HOLD_MS);
  }

  private expireIn(ms: number): void {
    clearTimeout(this.expiry);
    this.expiry = setTimeout(() => {
      this.expiry = undefined;
      this.cancel(new RpcError(RPC.gateway, 'the client did not come back with the input asked for'));
      this.onExpiry?.();
    }, ms);
    this.expiry.unref();
  }

  /** Given up on: the call is cancelled at its server, and what its server asks is refused to it. */
  abandon(why: RpcError): void {
    this.cancel(why);
    this.answer(undefined);
    this.client = {};
  }

  /** Taken up by a retry: no longer expiring. */
  resume(): void {
    clearTimeout(this.expiry);
    this.expiry = undefined;
  }
}

/** The calls held on this replica, by id. */
export class HeldCalls<To> {
  private readonly calls = new Map<string, HeldCall<To>>();
  private readonly perKey = new Map<string, number>();

  /** Whether another call of the key may be held. */
  full(key: string): boolean {
    return this.calls.size >= MAX_HELD || (this.perKey.get(key) ?? 0) >= MAX_HELD_PER_KEY;
  }

  get size(): number {
    return this.calls.size;
  }

  /** Held until taken up, or until it expires: then cancelled, and recorded once it has ended. */
  hold(call: HeldCall<To>): void {
    this.calls.set(call.id, call);
    this.perKey.set(call.key, (this.perKey.get(call.key) ?? 0) + 1);
    call.hold(() => {
      this.forget(call);
      // Cancelled: requests its server still sends are refused to it, until the call has ended.
      const drain = (): Promise<void> =>
        call.next().then((round) => {
          if (round.kind !== 'input') return call.conclude?.(round);
          call.answer(undefined);
          return drain();
        });
      void drain();
    });
  }

  /** The call a retry names, if this replica holds it for this key; taken out until it is held again. */
  take(id: string, key: string): HeldCall<To> | undefined {
    const call = this.calls.get(id);
    if (!call || call.key !== key) return undefined;
    this.forget(call);
    call.resume();
    return call;
  }

  private forget(call: HeldCall<To>): void {
    if (!this.calls.delete(call.id)) return;
    const n = (this.perKey.get(call.key) ?? 1) - 1;
    if (n > 0) this.perKey.set(call.key, n);
    else this.perKey.delete(call.key);
  }
}

/**
 * What a requestState seals: the held call, its key, and the replica that holds it (its address for
 * its peers, where known): the sealer makes it opaque and unforgeable.
 */
export interface SealedState {
  held: string;
  key: string;
  replica?: string;
}

export const isSealedState = (v: unknown): v is SealedState =>
  isObject(v) && typeof v.held === 'string' && typeof v.key === 'string';

/** The result that asks the client for input, as the revision has it. */
export function inputRequired(asked: Map<string, Asked>, requestState: string): JsonObject {
  const inputRequests: JsonObject = {};
  for (const [k, a] of asked) {
    inputRequests[k] = { method: a.request.method, ...(a.request.params ? { params: a.request.params } : {}) };
  }
  return { resultType: 'input_required', inputRequests, requestState };
}
