import { Counter } from 'prom-client';
import type { ModelLoadReport, ProxyLoadReport } from '../../crds/observability/proxy-load.js';
import { ProxyError } from '../endpoints/errors.js';
import type { ProxyMetrics } from '../telemetry/metrics.js';
import type { SignalSource } from './replica-signals.js';
import type { InClusterRoute, RouteEntry, RouteScaling, RouteTable } from './routes.js';

/**
 * The replicas of each in-cluster model, balanced by the proxy: a request goes to the ready
 * replica with the fewest requests in flight, and only while that replica has a free slot
 * (its OLLAMA_NUM_PARALLEL). Beyond that, requests wait here, in a bounded queue per model with
 * a bounded wait, rather than in Ollama's queue where nobody sees them: the time they wait is
 * measured, and the count is the load the operator's autoscaler scales on. A model with no
 * ready replica because it hibernates is woken by the first request that finds it so.
 *
 * A request with a prefix key (prefix-affinity.ts: a long prompt) goes instead to the replica
 * whose engine likely holds that prefix in its KV cache: the first replica in the key's
 * rendezvous-hashing order (HRW) that has a free slot and stays within LOAD_BOUND times the mean
 * in flight (consistent hashing with bounded loads, Mirrokni, Thorup and Zadimoghaddam 2018),
 * skipping a replica whose engine says its queue or KV cache is full while others' are not
 * (replica-signals.ts). HRW moves only the keys of a replica that leaves or joins; the bound
 * spreads a hot prefix over more replicas instead of queueing it on one.
 */

export interface Lease {
  /** Base URL of the replica to call. */
  url: string;
  /** Once, when the call is over (answer read, stream ended, or failed). */
  release(): void;
  /**
   * The replica could not be reached (refused or never answered the connection): new calls,
   * the retry of this one first, go to the other replicas for a while (outlier ejection).
   */
  unreachable(): void;
}

export interface ReplicaPoolOptions {
  /** Requests one model may hold waiting, per proxy replica. */
  maxQueued: number;
  /** Longest wait for a slot unless the route sets its own. */
  queueMs: number;
  /** Asks for a hibernated model to be woken (scale from zero); may reject, the wait goes on. */
  wake?: (scaling: RouteScaling) => Promise<void>;
  /** The route of a model now, to see replicas that became ready while requests wait. */
  lookup: (model: string) => RouteEntry | undefined;
  /** Seconds a request waited for a slot, by model (only those that waited). */
  onQueued?: (model: string, seconds: number) => void;
  onWakeError?: (model: string, err: unknown) => void;
  now?: () => number;
  /** The engines' own queue and KV-cache readings where they export them (replica-signals.ts). */
  signals?: SignalSource;
  /** How each call was placed, where a model had more than one replica to choose from. */
  onRoute?: (model: string, decision: RoutingDecision) => void;
}

/**
 * affinity: the prefix key's first replica in HRW order; overflow: a later one, or the least
 * loaded, because the first was past the load bound, full, ejected or its engine crowded;
 * least_loaded: a call without a prefix key.
 */
export type RoutingDecision = 'affinity' | 'overflow' | 'least_loaded';

interface Waiter {
  resolve: (lease: Lease) => void;
  reject: (err: ProxyError) => void;
  since: number;
  done: boolean;
  cleanup: () => void;
  /** Its prefix key, for the slot it gets when one frees. */
  affinity: string | undefined;
}

interface Pool {
  model: string;
  /** The replica list last seen, by identity: routes are rebuilt, never mutated. */
  source: readonly string[] | undefined;
  inFlight: Map<string, number>;
  /** The replicas' URL hashes, for rendezvous hashing: computed once per replica list. */
  hashes: { url: string; h: number }[];
  slots: number;
  queue: Waiter[];
  requests: number;
  /** When a wake was last asked for; cleared once a replica is ready. */
  wokeAt?: number;
  /** Rotates among equally loaded replicas so ties do not all land on the first. */
  next: number;
  /**
   * Replicas that refused a connection, until when. Their pod may still be listed as ready (a
   * container restarting is unready only after its probe fails): calls go elsewhere meanwhile,
   * and to them only when no other replica has a slot.
   */
  ejected: Map<string, number>;
}

/** How long a replica that refused a connection gets no new calls while others can take them. */
export const EJECT_MS = 5_000;

/**
 * A prefix's replica takes a call only while it then holds at most this times the mean in flight
 * (rounded up, as in the paper, so that a lightly loaded model keeps its affinity): past it, the
 * next replica in the key's order takes it. 1.25 keeps the busiest replica near the others
 * (queueing costs more than a re-prefill) while most calls still find their cache.
 */
export const LOAD_BOUND = 1.25;
/** KV-cache use from which an engine preempts or queues rather than admits (vLLM's gauge, 0..1). */
export const KV_FULL = 0.95;
/**
 * Requests waiting in an engine beyond twice the least any other replica's engine has, plus this
 * many: a couple are the noise of a gauge read up to a second ago; more are a queue the others lack.
 */
export const QUEUE_SLACK = 2;

const WAKE_AGAIN_MS = 15_000;
const WAKE_RETRY_MS = 1_000;

export class ReplicaPools {
  private readonly pools = new Map<string, Pool>();
  private readonly now: () => number;
  /** Its request counters count from here (the autoscaler sees a restart by a new value). */
  private readonly startedAt = Date.now();

  constructor(private readonly opts: ReplicaPoolOptions) {
    this.now = opts.now ?? (() => performance.now());
  }

  private pool(route: InClusterRoute): Pool {
    let p = this.pools.get(route.model);
    if (!p) {
      p = {
        model: route.model,
        source: undefined,
        inFlight: new Map(),
        hashes: [],
        slots: Infinity,
        queue: [],
        requests: 0,
        next: 0,
        ejected: new Map(),
      };
      this.pools.set(route.model, p);
    }
    // The caller's route may predate the last rebuild: the table's is the newest.
    const current = this.opts.lookup(route.model);
    this.sync(p, current?.kind === 'in-cluster' && current.provider === route.provider ? current : route);
    return p;
  }

  /** Takes the route's replicas and slots; replicas that left keep their calls but get no new ones. */
  private sync(p: Pool, route: InClusterRoute): void {
    p.slots = route.slots ?? Infinity;
    const list = route.replicas ?? [route.baseUrl];
    if (list === p.source) return;
    p.source = list;
    const next = new Map<string, number>();
    for (const url of list) next.set(url, p.inFlight.get(url) ?? 0);
    p.inFlight = next;
    p.hashes = [...next.keys()].map((url) => ({ url, h: mix(fnv1a(url)) }));
    for (const url of p.ejected.keys()) if (!next.has(url)) p.ejected.delete(url);
    if (next.size > 0) p.wokeAt = undefined;
  }

  private pick(p: Pool, affinity?: string): string | undefined {
    if (p.ejected.size > 0) {
      const now = this.now();
      for (const [url, until] of p.ejected) if (until <= now) p.ejected.delete(url);
    }
    if (affinity !== undefined && p.inFlight.size > 1) {
      const hit = this.affine(p, affinity);
      if (hit !== undefined) {
        this.opts.onRoute?.(p.model, hit.first ? 'affinity' : 'overflow');
        return hit.url;
      }
    }
    const urls = [...p.inFlight.keys()];
    let best: string | undefined;
    // The replicas that answer first; an ejected one only when none of them has a slot.
    if (p.ejected.size > 0) best = this.leastLoaded(p, urls, (url) => !p.ejected.has(url));
    best ??= this.leastLoaded(p, urls, () => true);
    if (best !== undefined) {
      p.next = (p.next + 1) % Math.max(1, urls.length);
      if (urls.length > 1) this.opts.onRoute?.(p.model, affinity === undefined ? 'least_loaded' : 'overflow');
    }
    return best;
  }

  /**
   * The first replica in the key's HRW order that has a free slot, stays within the load bound,
   * answers connections and whose engine is not crowded; undefined when none (least loaded then).
   */
  private affine(p: Pool, key: string): { url: string; first: boolean } | undefined {
    const k = mix(fnv1a(key));
    const order = p.hashes.map(({ url, h }) => ({ url, score: mix(k ^ h) }));
    order.sort((a, b) => b.score - a.score || (a.url < b.url ? -1 : 1));
    let total = 0;
    for (const n of p.inFlight.values()) total += n;
    // In flight with this call, over the replicas: the most the chosen one may then hold.
    const bound = Math.ceil((LOAD_BOUND * (total + 1)) / p.inFlight.size);
    const skip = this.opts.signals ? crowded(this.opts.signals, p.hashes) : undefined;
    for (let i = 0; i < order.length; i++) {
      const url = (order[i] as { url: string }).url;
      const load = p.inFlight.get(url) ?? 0;
      if (load >= p.slots || load + 1 > bound || p.ejected.has(url) || skip?.has(url)) continue;
      return { url, first: i === 0 };
    }
    return undefined;
  }

  private leastLoaded(p: Pool, urls: string[], eligible: (url: string) => boolean): string | undefined {
    let best: string | undefined;
    let bestLoad = Infinity;
    for (let i = 0; i < urls.length; i++) {
      const url = urls[(p.next + i) % urls.length] as string;
      const load = p.inFlight.get(url) ?? 0;
      if (load < p.slots && load < bestLoad && eligible(url)) {
        best = url;
        bestLoad = load;
      }
    }
    return best;
  }

  private lease(p: Pool, url: string): Lease {
    p.inFlight.set(url, (p.inFlight.get(url) ?? 0) + 1);
    let released = false;
    return {
      url,
      release: () => {
        if (released) return;
        released = true;
        const n = p.inFlight.get(url);
        // A replica that left the list while the call ran is not in the map any more.
        if (n !== undefined) p.inFlight.set(url, Math.max(0, n - 1));
        this.dispatch(p);
      },
      unreachable: () => {
        if (p.inFlight.has(url)) p.ejected.set(url, this.now() + EJECT_MS);
      },
    };
  }

  private dispatch(p: Pool): void {
    while (p.queue.length > 0) {
      const url = this.pick(p, (p.queue[0] as Waiter).affinity);
      if (url === undefined) return;
      const w = p.queue.shift() as Waiter;
      w.done = true;
      w.cleanup();
      this.opts.onQueued?.(p.model, (this.now() - w.since) / 1000);
      w.resolve(this.lease(p, url));
    }
  }

  private wake(p: Pool, scaling: RouteScaling): void {
    const now = this.now();
    if (!this.opts.wake || (p.wokeAt !== undefined && now - p.wokeAt < WAKE_AGAIN_MS)) return;
    p.wokeAt = now;
    this.opts.wake(scaling).catch((err) => {
      this.opts.onWakeError?.(p.model, err);
      // The API server was busy or unreachable: try again while requests still wait for it.
      p.wokeAt = undefined;
      setTimeout(() => {
        if (p.queue.length > 0 && p.inFlight.size === 0) this.wake(p, scaling);
      }, WAKE_RETRY_MS).unref();
    });
  }

  /**
   * A replica slot for one call: at once, after waiting, or a 503 saying why not. `affinity`: its
   * prefix key (prefix-affinity.ts), for the replica that likely caches its prompt; absent, the
   * least loaded.
   */
  acquire(route: InClusterRoute, signal: AbortSignal, affinity?: string): Promise<Lease> | Lease {
    const p = this.pool(route);
    p.requests++;
    const url = p.queue.length === 0 ? this.pick(p, affinity) : undefined;
    if (url !== undefined) return this.lease(p, url);

    const scaling = route.scaling;
    const asleep = p.inFlight.size === 0;
    if (asleep && scaling && scaling.replicas === 0 && !scaling.autoscaled) {
      throw new ProxyError(
        503,
        'api_error',
        'model_scaled_to_zero',
        `the model ${route.model} is scaled to zero replicas and has no autoscaling to wake it; scale its ModelDeployment up`,
        'model',
        // Retrying succeeds once someone scales it up: minutes, not seconds.
        { 'Retry-After': '60' },
      );
    }
    if (asleep && scaling?.autoscaled) {
      this.wake(p, scaling);
      if (scaling.whileWaking === 'Fallback' && route.fallback?.length) {
        throw new ProxyError(
          503,
          'api_error',
          'model_waking',
          `the model ${route.model} is waking from zero; its fallback serves meanwhile`,
          'model',
          { 'Retry-After': '30' },
        );
      }
    }
    if (p.queue.length >= this.opts.maxQueued) {
      throw new ProxyError(
        503,
        'api_error',
        'model_queue_full',
        `${p.queue.length} requests already wait for a replica of ${route.model}; retry shortly`,
        'model',
        { 'Retry-After': '2' },
      );
    }
    const waitMs = route.timeouts?.queueMs ?? this.opts.queueMs;
    return new Promise<Lease>((resolve, reject) => {
      const w: Waiter = { resolve, reject, since: this.now(), done: false, cleanup: () => {}, affinity };
      const leave = (err: ProxyError) => {
        if (w.done) return;
        w.done = true;
        w.cleanup();
        p.queue.splice(p.queue.indexOf(w), 1);
        reject(err);
      };
      const timer = setTimeout(() => {
        const why = p.inFlight.size === 0 ? 'no replica became ready' : 'every replica stayed busy';
        leave(
          new ProxyError(
            503,
            'api_error',
            'model_queue_timeout',
            `waited ${Math.round(waitMs / 1000)} s for a replica of ${route.model}: ${why}; retry later`,
            'model',
            { 'Retry-After': p.inFlight.size === 0 ? '30' : '5' },
          ),
        );
      }, waitMs);
      const onAbort = () =>
        leave(
          new ProxyError(503, 'api_error', 'client_closed', 'the client went away while waiting for a replica', null, {
            'Retry-After': '1',
          }),
        );
      signal.addEventListener('abort', onAbort, { once: true });
      w.cleanup = () => {
        clearTimeout(timer);
        signal.removeEventListener('abort', onAbort);
      };
      p.queue.push(w);
    });
  }

  /** After a routing change: replicas that became ready take the waiting requests. */
  refresh(): void {
    for (const [model, p] of this.pools) {
      const route = this.opts.lookup(model);
      if (route?.kind === 'in-cluster') this.sync(p, route);
      if (p.queue.length > 0) this.dispatch(p);
      else if (!route && [...p.inFlight.values()].every((n) => n === 0)) this.pools.delete(model);
    }
  }

  /** Per model: in flight, waiting, and the request counter (what the autoscaler reads). */
  load(): Record<string, ModelLoadReport> {
    const out: Record<string, ModelLoadReport> = {};
    for (const [model, p] of this.pools) {
      let inFlight = 0;
      for (const n of p.inFlight.values()) inFlight += n;
      out[model] = { inFlight, queued: p.queue.length, requests: p.requests };
    }
    return out;
  }

  /** What GET /load on the metrics port answers (crds/observability/proxy-load.ts). */
  report(): ProxyLoadReport {
    return { startedAt: this.startedAt, models: this.load() };
  }

  /** In flight per replica of a model (tests, and the spread they check). */
  replicaLoad(model: string): Record<string, number> {
    return Object.fromEntries(this.pools.get(model)?.inFlight ?? []);
  }
}

/** FNV-1a, 32 bits: replica URLs and prefix keys are short strings. */
function fnv1a(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193);
  return h >>> 0;
}

/**
 * murmur3's 32-bit finalizer: every input bit flips about half the output bits, so a key's scores
 * over replicas (mix of key ^ replica) order the replicas as if at random, and independently per key.
 */
function mix(x: number): number {
  let h = x;
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
  return (h ^ (h >>> 16)) >>> 0;
}

/**
 * Replicas whose engine is crowded while another's is not: its KV cache all but full (a new
 * prompt there evicts cached prefixes or waits) or its queue clearly longer than the least of the
 * others'. Only fresh readings count, on either side; a replica without one is never skipped.
 */
function crowded(source: SignalSource, replicas: readonly { url: string }[]): Set<string> {
  const read = replicas.map(({ url }) => ({ url, s: source.of(url) }));
  let roomy = 0;
  // The two least queues: each replica is compared with the least among the others.
  let least = Infinity;
  let second = Infinity;
  for (const { s } of read) {
    if (!s) continue;
    if (s.kvCacheUsage < KV_FULL) roomy++;
    if (s.waiting < least) [least, second] = [s.waiting, least];
    else if (s.waiting < second) second = s.waiting;
  }
  const out = new Set<string>();
  for (const { url, s } of read) {
    if (!s) continue;
    const othersLeast = s.waiting === least ? second : least;
    const full = s.kvCacheUsage >= KV_FULL && roomy > 0;
    if (full || s.waiting > 2 * othersLeast + QUEUE_SLACK) out.add(url);
  }
  return out;
}

/**
 * A gateway's pools as proxy/main.ts runs them: over its routing table (waiting requests look
 * again on every change), their waits, load and routing decisions on its metrics. `opts.signals`:
 * the engines' readings (replicaSignals() of replica-signals.ts over the same table).
 */
export function routedPools(
  routes: RouteTable,
  metrics: ProxyMetrics,
  opts: Omit<ReplicaPoolOptions, 'lookup' | 'onQueued'>,
): ReplicaPools {
  const decisions = routingDecisions(metrics);
  const pools = new ReplicaPools({
    ...opts,
    lookup: (model) => routes.lookup(model),
    onQueued: (model, seconds) => metrics.queueWait.observe({ model }, seconds),
    onRoute: (model, decision) => decisions(model, decision),
  });
  routes.onChange(() => pools.refresh());
  metrics.modelLoad = () => pools.load();
  return pools;
}

const ROUTING_METRIC = 'pao_gateway_replica_routing_total';

/**
 * Counts each placement on a model with several replicas: how often a prefix found its replica
 * (affinity), was sent elsewhere by load or a crowded engine (overflow), or had no key. Children
 * are kept per label pair: prom-client hashes a label object on every inc otherwise.
 */
function routingDecisions(metrics: ProxyMetrics): (model: string, decision: RoutingDecision) => void {
  const counter =
    (metrics.registry.getSingleMetric(ROUTING_METRIC) as Counter<'model' | 'decision'> | undefined) ??
    new Counter({
      name: ROUTING_METRIC,
      help: 'Calls placed on a replica of an in-cluster model with several: decision affinity (the prompt prefix’s replica), overflow (another, by load or engine signals), least_loaded (no prefix key).',
      labelNames: ['model', 'decision'],
      registers: [metrics.registry],
    });
  const children = new Map<string, Counter.Internal>();
  return (model, decision) => {
    const key = `${model}\u0000${decision}`;
    let c = children.get(key);
    if (!c) {
      // Models are the deployed ones (bounded by the cluster), never what callers send.
      if (children.size >= 10_000) children.clear();
      c = counter.labels({ model, decision });
      children.set(key, c);
    }
    c.inc();
  };
}
