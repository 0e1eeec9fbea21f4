import { errorMessage, type Logger } from '../../crds/observability/log.js';
import type { InClusterRoute, RouteTable } from '../serving/routes.js';
import type { PriceBook } from './cost.js';
import { GPU_WRITE_WINDOW_MS } from './gpu-cost.js';
import type { UsageRecord, UsageSink } from './record.js';
import type { GpuTimeRow, UsageStore } from './store.js';

/**
 * What in-cluster deployments really cost: GPU time. Each proxy replica keeps a ledger of every
 * in-cluster deployment's replica-seconds per minute (replicas up x time, from the ready
 * replicas its route table holds), priced at the model's GPU USD per replica-hour, and which
 * minutes had a request of that deployment in flight. It writes the minutes to the usage store
 * every 15 s; the store keeps, per (deployment, minute), the largest figures any replica sent:
 * every proxy sees the same replicas, so the largest is the minute's GPU time counted once, and a
 * replica that restarted mid-minute (its ledger starts from zero) takes nothing away. Reports
 * share each hour's GPU cost out over the tokens served in it (gpu-cost.ts, gpuCostCtes).
 *
 * Replicas are a piecewise constant: the ledger closes the stretch since its last look whenever
 * the route table changes (a replica became ready or went) and on every tick, so a change is
 * counted from when the proxy learnt of it, not from the next sample.
 */

const MINUTE = 60_000;
const HOUR = 3_600_000;
/** How often the ledger looks at the replicas and writes its minutes. */
const GPU_SAMPLE_MS = 15_000;
/**
 * Longest stretch one look accounts for. Ticks come every 15 s; a longer gap means this process
 * was not running (suspended, starved), and what it did not see is left to the other replicas
 * rather than guessed.
 */
const MAX_STEP_MS = 60_000;
/** Minutes kept in memory after they end: a request marks its minutes busy when it ends (a long stream, much later). */
const KEEP_MS = 2 * HOUR;
/** Minutes held at most while the store fails; the oldest go first (memory stays bounded). */
const MAX_BUCKETS = 20_000;

interface Seen {
  model: string;
  replicas: number;
  usdPerHour: number;
}

interface Bucket extends GpuTimeRow {
  /** Changed since it was last written. */
  dirty: boolean;
}

export interface GpuTimeLedgerOptions {
  /** The in-cluster routes now (aliases may repeat one: a deployment counts once). */
  routes: () => Iterable<InClusterRoute>;
  /** GPU USD per replica-hour of a route's model; undefined where the catalog has no price (its time is counted at 0 USD). */
  usdPerHour: (route: InClusterRoute) => number | undefined;
  store: Pick<UsageStore, 'recordGpuTime'>;
  now?: () => number;
}

export class GpuTimeLedger {
  private readonly buckets = new Map<string, Bucket>();
  private seen = new Map<string, Seen>();
  private lookedAt: number | undefined;
  private writing: Promise<void> | undefined;
  private readonly now: () => number;
  /** Minutes dropped unwritten because the store failed for longer than memory holds them. */
  dropped = 0;

  constructor(private readonly opts: GpuTimeLedgerOptions) {
    this.now = opts.now ?? Date.now;
  }

  /** Accounts for the time since the last look at the replicas seen then, and looks again. */
  observe(): void {
    const now = this.now();
    if (this.lookedAt !== undefined) {
      const from = Math.max(this.lookedAt, now - MAX_STEP_MS);
      for (const [deployment, s] of this.seen) this.accrue(deployment, s, from, now);
    }
    this.lookedAt = now;
    this.seen = this.look();
  }

  private look(): Map<string, Seen> {
    const seen = new Map<string, Seen>();
    for (const route of this.opts.routes()) {
      // No replica list: the proxy cannot see them (standalone servers, or no EndpointSlice yet).
      // Unknown is not zero: such time is not measured, and reports keep the list price for it.
      if (!route.replicas || seen.has(route.provider)) continue;
      seen.set(route.provider, {
        model: route.model,
        replicas: route.replicas.length,
        usdPerHour: this.opts.usdPerHour(route) ?? 0,
      });
    }
    return seen;
  }

  /** Replica-seconds of [from, to) into the minutes they fall in. Scaled to zero: nothing. */
  private accrue(deployment: string, s: Seen, from: number, to: number): void {
    if (s.replicas === 0) return;
    for (let minute = Math.floor(from / MINUTE) * MINUTE; minute < to; minute += MINUTE) {
      const seconds = ((Math.min(to, minute + MINUTE) - Math.max(from, minute)) / 1000) * s.replicas;
      if (seconds <= 0) continue;
      const b = this.bucket(deployment, s.model, minute);
      b.gpuSeconds += seconds;
      b.usd += (seconds * s.usdPerHour) / 3600;
      b.dirty = true;
    }
  }

  private bucket(deployment: string, model: string, minute: number): Bucket {
    const key = `${deployment}\u0000${minute}`;
    let b = this.buckets.get(key);
    if (!b) {
      b = { deployment, model, minute, gpuSeconds: 0, usd: 0, busy: false, dirty: false };
      this.buckets.set(key, b);
    }
    return b;
  }

  /**
   * A request ended: the minutes it was in flight are busy for its deployment, so that GPU time
   * while requests run is shared by them and time with none is idle. Only requests that used
   * tokens (the cost is shared by tokens), of deployments whose replicas the ledger counts.
   */
  served(rec: UsageRecord): void {
    const s = this.seen.get(rec.provider);
    if (!s || rec.promptTokens + rec.completionTokens === 0) return;
    const end = Date.parse(rec.time);
    if (!Number.isFinite(end)) return;
    const start = Math.max(end - Math.max(0, rec.latencyMs), end - KEEP_MS);
    for (let minute = Math.floor(start / MINUTE) * MINUTE; minute <= end; minute += MINUTE) {
      const b = this.bucket(rec.provider, s.model, minute);
      if (!b.busy) {
        b.busy = true;
        b.dirty = true;
      }
    }
  }

  /** The usage sink with the ledger told of every request (records flow on unchanged). */
  sink(inner: UsageSink): UsageSink {
    return {
      record: (rec, awaitsDelivery) => {
        this.served(rec);
        inner.record(rec, awaitsDelivery);
      },
      ...(inner.begin ? { begin: (rec: UsageRecord) => inner.begin?.(rec) } : {}),
      ...(inner.delivered ? { delivered: (id: string, ok: boolean) => inner.delivered?.(id, ok) } : {}),
      ...(inner.durable ? { durable: (alone?: boolean) => inner.durable?.(alone) } : {}),
    };
  }

  /**
   * Writes the minutes changed since the last write, after any write still under way (one at a
   * time: a minute's dirty flag is cleared by the write that sent it). Rejects when the store does.
   */
  flush(): Promise<void> {
    const next = (this.writing ?? Promise.resolve()).catch(() => {}).then(() => this.write());
    this.writing = next;
    return next;
  }

  private async write(): Promise<void> {
    const dirty = [...this.buckets.values()].filter((b) => b.dirty);
    if (dirty.length > 0) {
      for (const b of dirty) b.dirty = false;
      try {
        await this.opts.store.recordGpuTime(
          dirty.map(({ deployment, model, minute, gpuSeconds, usd, busy }) => ({
            deployment,
            model,
            minute,
            gpuSeconds,
            usd,
            busy,
          })),
        );
      } catch (err) {
        // Written again next time (the store keeps the largest figures: a repeat is harmless).
        for (const b of dirty) b.dirty = true;
        throw err;
      } finally {
        this.forget();
      }
    } else {
      this.forget();
    }
  }

  /**
   * Drops minutes that are written and old; unwritten ones past the store's write window (it may
   * have folded them into hours: writing them again would count them twice) and the oldest beyond
   * MAX_BUCKETS are dropped and counted.
   */
  private forget(): void {
    const now = this.now();
    for (const [key, b] of this.buckets) {
      if (b.minute + MINUTE >= now - KEEP_MS) continue;
      if (b.dirty && b.minute + MINUTE >= now - GPU_WRITE_WINDOW_MS) continue;
      if (b.dirty) this.dropped++;
      this.buckets.delete(key);
    }
    if (this.buckets.size <= MAX_BUCKETS) return;
    const oldest = [...this.buckets.entries()].sort(([, a], [, b]) => a.minute - b.minute);
    for (const [key, b] of oldest.slice(0, this.buckets.size - MAX_BUCKETS)) {
      if (b.dirty) this.dropped++;
      this.buckets.delete(key);
    }
  }
}

/** The in-cluster routes of a route table, each deployment once (a listing per alias points at the same route). */
function inClusterRoutes(routes: RouteTable): InClusterRoute[] {
  const out = new Map<string, InClusterRoute>();
  for (const listing of routes.models()) {
    const entry = routes.lookup(listing.id);
    if (entry?.kind === 'in-cluster' && !out.has(entry.provider)) out.set(entry.provider, entry);
  }
  return [...out.values()];
}

export interface GpuTimeTracking {
  ledger: GpuTimeLedger;
  /** `usage` with the ledger told of each request (which minutes were busy). */
  sink(usage: UsageSink): UsageSink;
  /** Stops the ticks, and writes the last minutes. */
  stop(): Promise<void>;
}

/**
 * The ledger of a gateway, running: a look at the replicas and a write every GPU_SAMPLE_MS, and a
 * look whenever the route table changes. A failing store is logged once per outage, not per tick;
 * its minutes wait in memory (bounded) and are written when it answers.
 */
export function startGpuTimeLedger(opts: {
  routes: RouteTable;
  prices: Pick<PriceBook, 'gpuHourPrice'>;
  store: Pick<UsageStore, 'recordGpuTime'>;
  log: Logger;
  periodMs?: number;
}): GpuTimeTracking {
  const ledger = new GpuTimeLedger({
    routes: () => inClusterRoutes(opts.routes),
    usdPerHour: (route) => opts.prices.gpuHourPrice(route.model, route.engine),
    store: opts.store,
  });
  let stopped = false;
  let failing = false;
  let inFlight = false;
  const write = async () => {
    inFlight = true;
    try {
      await ledger.flush();
      if (failing) opts.log.info('GPU time written again');
      failing = false;
    } catch (err) {
      if (!failing)
        opts.log.warn('GPU time not written: retrying', { error: errorMessage(err), droppedMinutes: ledger.dropped });
      failing = true;
    } finally {
      inFlight = false;
    }
  };
  ledger.observe();
  opts.routes.onChange(() => {
    if (!stopped) ledger.observe();
  });
  const timer = setInterval(() => {
    ledger.observe();
    // A store that hangs gets one write at a time, not one more per tick.
    if (!inFlight) void write();
  }, opts.periodMs ?? GPU_SAMPLE_MS);
  timer.unref();
  return {
    ledger,
    sink: (usage) => ledger.sink(usage),
    stop: async () => {
      if (stopped) return;
      stopped = true;
      clearInterval(timer);
      ledger.observe();
      await write();
    },
  };
}
