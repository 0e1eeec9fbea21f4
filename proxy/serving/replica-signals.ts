import { Agent, request } from 'undici';
import type { LoadSignals } from '../../crds/engines/engine.js';
import type { RouteTable } from './routes.js';

/**
 * The engine's own view of each replica's load, for the replica pools' cache-aware routing
 * (replica-pool.ts): requests waiting in the engine and its KV-cache use, as its metrics
 * endpoint says (crds/engines/engine.ts LoadSignals names the path and the gauges). The proxy's
 * in-flight counts see only this proxy's calls; the engine's signals see every proxy's, and how
 * full the cache that prefix routing fills is.
 *
 * Each replica of a route that has signals, and more than one replica (there is nothing to choose
 * between otherwise), is read every second with a short timeout; a replica that stops answering
 * keeps its last reading, which goes stale and is then ignored, so routing falls back to the
 * proxy's own counts rather than to old news.
 */

/** The latest reading of one replica. A gauge the engine does not export reads NaN (never compares true). */
export interface ReplicaSignal {
  /** Requests waiting in the engine for a batch slot (summed over its engines). */
  waiting: number;
  /** Requests being generated (summed over its engines). */
  running: number;
  /** KV-cache use, 0..1 (the mean over its engines). */
  kvCacheUsage: number;
  /** When it was read (the poller's clock). */
  at: number;
}

/** What the pools read: the fresh reading of a replica, or none. */
export interface SignalSource {
  of(url: string): ReplicaSignal | undefined;
}

export interface SignalTarget {
  /** The replica's base URL, as the route lists it. */
  url: string;
  signals: LoadSignals;
}

export interface ReplicaSignalsOptions {
  /** The replicas to read now, asked on every round: those no longer listed are forgotten. */
  targets: () => Iterable<SignalTarget>;
  intervalMs?: number;
  /** Per read: a replica slower than this to answer its metrics is under too much load to wait for. */
  timeoutMs?: number;
  /** A reading older than this is ignored (the replica stopped answering its metrics). */
  staleMs?: number;
  /** Largest metrics page read (vLLM's is some 100 KiB with its histograms). */
  maxBytes?: number;
  now?: () => number;
}

const SIGNALS_INTERVAL_MS = 1_000;
const SIGNALS_TIMEOUT_MS = 500;
const SIGNALS_STALE_MS = 5_000;
const MAX_BYTES = 4 * 1024 * 1024;

export class ReplicaSignals implements SignalSource {
  private readonly latest = new Map<string, ReplicaSignal>();
  /** Replicas listed in the last round; a reading arriving for one no longer listed is dropped. */
  private listed = new Set<string>();
  private readonly reading = new Set<string>();
  private readonly agent: Agent;
  private readonly timer: NodeJS.Timeout;
  private readonly now: () => number;
  private readonly timeoutMs: number;
  private readonly staleMs: number;
  private readonly maxBytes: number;

  constructor(private readonly opts: ReplicaSignalsOptions) {
    this.now = opts.now ?? (() => performance.now());
    this.timeoutMs = opts.timeoutMs ?? SIGNALS_TIMEOUT_MS;
    this.staleMs = opts.staleMs ?? SIGNALS_STALE_MS;
    this.maxBytes = opts.maxBytes ?? MAX_BYTES;
    // Its own connections, one kept alive per replica: reads never wait behind model calls.
    this.agent = new Agent({ connections: 1, connectTimeout: this.timeoutMs, keepAliveTimeout: 10_000 });
    this.timer = setInterval(() => void this.poll(), opts.intervalMs ?? SIGNALS_INTERVAL_MS);
    // A poller never keeps the process alive on its own.
    this.timer.unref();
  }

  of(url: string): ReplicaSignal | undefined {
    const s = this.latest.get(url);
    return s && this.now() - s.at <= this.staleMs ? s : undefined;
  }

  /** One round: every listed replica read at once (one read per replica at a time). */
  async poll(): Promise<void> {
    const listed = new Set<string>();
    const reads: Promise<void>[] = [];
    for (const t of this.opts.targets()) {
      if (listed.has(t.url)) continue;
      listed.add(t.url);
      if (!this.reading.has(t.url)) reads.push(this.read(t));
    }
    this.listed = listed;
    for (const url of this.latest.keys()) if (!listed.has(url)) this.latest.delete(url);
    await Promise.all(reads);
  }

  private async read(t: SignalTarget): Promise<void> {
    this.reading.add(t.url);
    try {
      const text = await this.fetch(`${t.url.replace(/\/+$/, '')}/${t.signals.path.replace(/^\/+/, '')}`);
      const s = text === undefined ? undefined : parseSignals(text, t.signals);
      if (s && this.listed.has(t.url)) this.latest.set(t.url, { ...s, at: this.now() });
    } catch {
      // Unreachable, slow or closed: its last reading goes stale, and routing does without it.
    } finally {
      this.reading.delete(t.url);
    }
  }

  /** The page's text; undefined for an error status or a page past maxBytes. */
  private async fetch(url: string): Promise<string | undefined> {
    const res = await request(url, {
      dispatcher: this.agent,
      signal: AbortSignal.timeout(this.timeoutMs),
      headersTimeout: this.timeoutMs,
      bodyTimeout: this.timeoutMs,
    });
    if (res.statusCode !== 200) {
      await res.body.dump();
      return undefined;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of res.body as AsyncIterable<Buffer>) {
      size += chunk.length;
      if (size > this.maxBytes) {
        res.body.destroy();
        return undefined;
      }
      chunks.push(chunk);
    }
    return Buffer.concat(chunks).toString('utf8');
  }

  /** Stops the rounds and drops the connections (reads under way fail, quietly). */
  async close(): Promise<void> {
    clearInterval(this.timer);
    this.listed = new Set();
    this.latest.clear();
    await this.agent.destroy();
  }
}

/**
 * The three gauges of a metrics page in Prometheus' text exposition format, or undefined where it
 * has none of them. A gauge with several series (vLLM's data-parallel engines, engine="0", "1"…)
 * is summed, the cache use averaged.
 *
 * A line parser of its own rather than a library: the dependencies hold none for this format
 * (prom-client only writes it), and reading three gauges needs only what this does: find the
 * lines that begin with the name, skip the label set (quoted values may hold `}` and escapes), and
 * read the number. It looks up each name rather than parsing every line, so a page of histograms
 * costs a few string searches.
 */
export function parseSignals(text: string, names: LoadSignals): Omit<ReplicaSignal, 'at'> | undefined {
  const waiting = gauge(text, names.waiting);
  const running = gauge(text, names.running);
  const kv = gauge(text, names.kvCacheUsage);
  if (waiting.n === 0 && running.n === 0 && kv.n === 0) return undefined;
  return {
    waiting: waiting.n > 0 ? waiting.sum : Number.NaN,
    running: running.n > 0 ? running.sum : Number.NaN,
    kvCacheUsage: kv.n > 0 ? kv.sum / kv.n : Number.NaN,
  };
}

/** Sum and count of the samples of one metric name (series lines only, not # HELP / # TYPE). */
function gauge(text: string, name: string): { sum: number; n: number } {
  let sum = 0;
  let n = 0;
  for (let at = text.indexOf(name); at !== -1; at = text.indexOf(name, at + name.length)) {
    if (at > 0 && text.charCodeAt(at - 1) !== 10 /* \n */) continue;
    let i = at + name.length;
    const next = text[i];
    if (next === '{') i = afterLabels(text, i);
    else if (next !== ' ' && next !== '\t') continue; // a longer name beginning with this one
    while (text[i] === ' ' || text[i] === '\t') i++;
    let end = i;
    while (end < text.length && !' \t\r\n'.includes(text[end] as string)) end++;
    const value = end > i ? Number(text.slice(i, end)) : Number.NaN;
    if (Number.isFinite(value)) {
      sum += value;
      n++;
    }
  }
  return { sum, n };
}

/** The index after a label set's closing brace, its quoted values read with their escapes. */
function afterLabels(text: string, open: number): number {
  let quoted = false;
  for (let i = open + 1; i < text.length; i++) {
    const c = text[i];
    if (c === '\n') return i;
    if (quoted && c === '\\') i++;
    else if (c === '"') quoted = !quoted;
    else if (c === '}' && !quoted) return i + 1;
  }
  return text.length;
}

/**
 * The poller of a gateway's in-cluster routes: every replica of a route whose engine exports load
 * signals (InClusterRoute.loadSignals) and that has more than one replica to choose from.
 */
export function replicaSignals(routes: RouteTable, opts: Omit<ReplicaSignalsOptions, 'targets'> = {}): ReplicaSignals {
  return new ReplicaSignals({ ...opts, targets: () => signalTargets(routes) });
}

function* signalTargets(routes: RouteTable): Iterable<SignalTarget> {
  // Aliases list the same route again; models() lists every route that serves.
  for (const m of routes.models()) {
    const r = routes.lookup(m.id);
    if (r?.kind !== 'in-cluster' || !r.loadSignals || !r.replicas || r.replicas.length < 2) continue;
    for (const url of r.replicas) yield { url, signals: r.loadSignals };
  }
}
