import { anthropicBetas } from '../endpoints/anthropic-request.js';
import type { Answered, Routed } from '../exchange.js';
import type { ChunkSource } from '../upstreams/chunk-source.js';
import { chunksOf } from '../upstreams/chunk-source.js';
import type { StreamOutcome, UpstreamResult, Usage } from '../upstreams/upstream.js';
import type { CacheChoice, CacheMode } from './cache-choice.js';
import { type CacheEntry, decodeEntry, encodeEntry, MAX_ENTRY_CHARS, type ReadEntry } from './cache-entry.js';
import { exactKey, questionOf } from './cache-key.js';
import type { CacheStore } from './cache-store.js';
import { SemanticIndex } from './semantic-index.js';

/**
 * The response cache: a request's answer looked up before its call (exactly, by its key; or,
 * semantic, by the nearest text of its bucket), and its answer kept after (a whole answer at once,
 * a stream once its last byte went out whole). What is kept is what the caller was sent: after the
 * answer's guardrails. A store that fails is a miss, counted, never an error: the request is
 * called as if there were no cache.
 */

/** What a request's lookup found out, for keeping its answer after a miss. */
export interface CacheLookup {
  choice: CacheChoice;
  key: string;
  /** Semantic: the request's bucket and its text's embedding. */
  semantic?: { bucket: string; vector: Float32Array };
}

export interface CacheHit {
  kind: CacheMode;
  entry: ReadEntry;
}

export interface ResponseCacheDeps {
  store: CacheStore;
  /**
   * The text's unit-length embedding for a semantic lookup, in the space of the key's routing
   * policy (undefined: none now); `inClusterOnly`: a guardrail keeps the text in the cluster.
   */
  embed(
    policy: string | undefined,
    text: string,
    inClusterOnly: boolean,
    signal: AbortSignal,
  ): Promise<Float32Array | undefined>;
  /** Told of every lookup and keep: hit, miss, store failure (the metric). */
  onResult?(result: 'hit' | 'miss' | 'error' | 'kept', kind: CacheMode): void;
}

export class ResponseCache {
  private readonly index = new SemanticIndex();

  constructor(private readonly deps: ResponseCacheDeps) {}

  async lookup(routed: Routed, choice: CacheChoice): Promise<{ lookup: CacheLookup; hit?: CacheHit }> {
    const { endpoint } = routed.incoming;
    const body = routed.request.forward;
    const parts = {
      scope: choice.scope,
      endpoint: endpoint.name,
      dialect: endpoint.dialect,
      model: routed.route.model,
      betas: anthropicBetas(routed.incoming.header('anthropic-beta')),
    };
    const lookup: CacheLookup = { choice, key: exactKey(parts, body) };
    const exact = choice.read ? await this.read(lookup.key, 'exact') : undefined;
    if (exact) return { lookup, hit: { kind: 'exact', entry: exact } };
    const question = choice.mode === 'semantic' ? questionOf(parts, body) : undefined;
    if (!question) return { lookup };
    // The text leaves for a hosted embedding model only where the request goes to a hosted model itself.
    const keepIn = routed.guard?.inCluster !== undefined || routed.route.kind === 'in-cluster';
    const vector = await this.deps
      .embed(routed.caller.policy.routingPolicy, question.text, keepIn, routed.incoming.signal)
      .catch(() => undefined);
    if (!vector) return { lookup };
    lookup.semantic = { bucket: question.bucket, vector };
    if (!choice.read) return { lookup };
    const near = this.index.nearest(lookup.semantic.bucket, lookup.semantic.vector, choice.similarity);
    const entry = near && (await this.read(near.key, 'semantic'));
    if (near && !entry) this.index.forget(lookup.semantic.bucket, near.key);
    return entry ? { lookup, hit: { kind: 'semantic', entry } } : { lookup };
  }

  /** An entry by key; a corrupt one is deleted and missed. */
  private async read(key: string, kind: CacheMode): Promise<ReadEntry | undefined> {
    let text: string | undefined;
    try {
      text = await this.deps.store.get(key);
    } catch {
      this.deps.onResult?.('error', kind);
      return undefined;
    }
    const decoded = text === undefined ? undefined : decodeEntry(text);
    // Another version's entry (a replica of a rolling upgrade) is left to it; a broken one is dropped.
    if (decoded === 'broken') await this.deps.store.delete(key).catch(() => {});
    const entry = typeof decoded === 'object' ? decoded : undefined;
    this.deps.onResult?.(entry ? 'hit' : 'miss', kind);
    return entry;
  }

  /**
   * The answer kept, when it is whole and a success: a whole answer now, a stream once it went
   * out whole (its events kept as they went). Returns the answer to send (a stream read through).
   */
  keep(answered: Answered, lookup: CacheLookup, costUsd: (usage: Usage | undefined) => number): Answered {
    const { result } = answered;
    // A fallback's (or the cascade's) answer is not the model's: the next request may find the model well.
    if (answered.served !== answered.route) return answered;
    const base = { model: answered.served.model, provider: answered.served.provider };
    if (result.kind === 'json') {
      if (result.status !== 200) return answered;
      const body = result.raw ?? JSON.stringify(result.body);
      const usage = result.usage;
      void this.write(lookup, {
        v: 1,
        kind: 'json',
        body,
        ...base,
        ...(usage ? { usage: { promptTokens: usage.promptTokens, completionTokens: usage.completionTokens } } : {}),
        costUsd: costUsd(usage),
        at: Date.now(),
      });
      return answered;
    }
    const tee = teed(chunksOf(result.body));
    // A relay settles its outcome before it hands over its last chunk: the stream is whole once both are done.
    Promise.all([result.outcome, tee.done]).then(
      ([o]) => {
        const text = tee.text();
        if (o.error || o.clientAborted || text === undefined) return;
        const usage = o.usage;
        void this.write(lookup, {
          v: 1,
          kind: 'stream',
          body: text,
          ...base,
          ...(usage ? { usage: { promptTokens: usage.promptTokens, completionTokens: usage.completionTokens } } : {}),
          costUsd: costUsd(usage),
          at: Date.now(),
        });
      },
      () => {},
    );
    return { ...answered, result: { ...result, body: tee.source } };
  }

  private async write(lookup: CacheLookup, entry: CacheEntry): Promise<void> {
    const text = encodeEntry(entry);
    if (text.length > MAX_ENTRY_CHARS) return;
    try {
      await this.deps.store.set(lookup.key, text, lookup.choice.ttlMs);
      if (lookup.semantic) this.index.add(lookup.semantic.bucket, lookup.semantic.vector, lookup.key);
      this.deps.onResult?.('kept', lookup.choice.mode);
    } catch {
      this.deps.onResult?.('error', lookup.choice.mode);
    }
  }
}

/** A stream read through, its text kept as it goes (none once it passed MAX_ENTRY_CHARS, or ended early). */
function teed(source: ChunkSource): { source: ChunkSource; text(): string | undefined; done: Promise<void> } {
  const decoder = new TextDecoder();
  let text: string | undefined = '';
  let ended = false;
  let finish: () => void = () => {};
  const done = new Promise<void>((resolve) => {
    finish = resolve;
  });
  return {
    done,
    source: {
      read: async () => {
        const chunk = await source.read().catch((err: unknown) => {
          text = undefined;
          finish();
          throw err;
        });
        if (chunk === undefined) {
          ended = true;
          if (text !== undefined) text += decoder.decode();
          finish();
        } else if (text !== undefined) {
          text += decoder.decode(chunk, { stream: true });
          if (text.length > MAX_ENTRY_CHARS) text = undefined;
        }
        return chunk;
      },
      cancel: () => {
        text = undefined;
        finish();
        source.cancel();
      },
    },
    text: () => (ended ? text : undefined),
  };
}

/** A hit as the call's result: the whole answer, or its stream replayed with the dialect's events as they went. */
export function hitResult(entry: ReadEntry): UpstreamResult {
  if (entry.kind === 'json') return { kind: 'json', status: 200, body: entry.parsed, raw: entry.body };
  const bytes = new TextEncoder().encode(entry.body);
  let settle: (o: StreamOutcome) => void = () => {};
  const outcome = new Promise<StreamOutcome>((resolve) => {
    settle = resolve;
  });
  // The replay in pieces a client reads as a stream; settled once read to the end, or left.
  const PIECE = 16 * 1024;
  let at = 0;
  const source: ChunkSource = {
    read: async () => {
      if (at >= bytes.length) {
        settle({ firstTokenMs: 0 });
        return undefined;
      }
      const piece = bytes.subarray(at, at + PIECE);
      at += PIECE;
      return piece;
    },
    cancel: () => {
      at = bytes.length;
      settle({ clientAborted: true });
    },
  };
  return { kind: 'stream', body: source, outcome };
}
