import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { WARMUP_SLICE_S, warmedUp } from './warm-up.js';

/**
 * The load generator of the gateway comparison, in a process of its own so that it never shares an event loop with
 * what it measures. A warm-up until the rate levels off (warmUp), then the measured run; prints JSON lines on stdout:
 * `{"event":"start"}` and `{"event":"stop"}` around the measured run (the parent samples CPU between them), then
 * `{"event":"result",...}`.
 * Run: node --import tsx e2e/bench/load.ts '{"url":"http://...","connections":16,"durationS":8,...}'
 *      node --import tsx e2e/bench/load.ts @args.json   (the same JSON in a file: a long `variants` list does not
 *      fit the 128 KiB the kernel allows one argument)
 */

/** What one request changes from the base request: headers added (or replaced) and its own body. */
export interface LoadVariant {
  headers?: Record<string, string>;
  body?: string;
}

export interface LoadArgs {
  url: string;
  headers: Record<string, string>;
  body: string;
  connections: number;
  warmupS: number;
  durationS: number;
  /**
   * Successive requests, across all connections together, take these in turn: a benchmark of a lookup then hits
   * every entry rather than one that stays hot. Absent: every request is the base request.
   */
  variants?: LoadVariant[];
}

export interface LoadResult {
  /** 2xx responses completed in the measured run. */
  ok: number;
  rps: number;
  meanMs: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  non2xx: number;
  errors: number;
  timeouts: number;
  statusCodes: Record<string, number>;
  elapsedS: number;
  /** CPU of this process over the measured run, % of one core: tells whether the generator itself saturated. */
  loadCpuPct: number;
  /** Each warm-up slice's rate, req/s: how the target's rate rose before the measured run. */
  warmupRps: number[];
}

/** The part of autocannon's programmatic API used here (it ships no types). */
interface AutocannonRequest {
  method: 'POST';
  headers: Record<string, string>;
  body: string;
}
interface AutocannonOptions {
  url: string;
  method: 'POST';
  headers: Record<string, string>;
  body: string;
  /** autocannon rebuilds a request whose entry has setupRequest before sending it, every time. */
  requests?: Array<{ setupRequest: (req: AutocannonRequest) => AutocannonRequest }>;
  connections: number;
  pipelining: number;
  duration: number;
  timeout: number;
}
interface AutocannonSummary {
  requests: { total: number };
  errors: number;
  timeouts: number;
  non2xx: number;
  statusCodeStats: Record<string, { count: number }>;
}
interface AutocannonRun extends PromiseLike<AutocannonSummary> {
  on(event: 'response', listener: (client: unknown, status: number, bytes: number, ms: number) => void): this;
}
type Autocannon = (opts: AutocannonOptions) => AutocannonRun;

const autocannon = createRequire(import.meta.url)('autocannon') as Autocannon;

function percentile(sorted: Float64Array, p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? Number.NaN;
}

/** autocannon's own histogram has 1 ms resolution; these comparisons need microseconds, so every 2xx is kept. */
class Latencies {
  private values = new Float64Array(1 << 16);
  private n = 0;

  add(ms: number): void {
    if (this.n === this.values.length) {
      const grown = new Float64Array(this.values.length * 2);
      grown.set(this.values);
      this.values = grown;
    }
    this.values[this.n++] = ms;
  }

  summary(): { count: number; mean: number; p50: number; p99: number; max: number } {
    const sorted = this.values.slice(0, this.n).sort();
    let sum = 0;
    for (const v of sorted) sum += v;
    return {
      count: this.n,
      mean: this.n > 0 ? sum / this.n : Number.NaN,
      p50: percentile(sorted, 50),
      p99: percentile(sorted, 99),
      max: sorted[sorted.length - 1] ?? Number.NaN,
    };
  }
}

function options(args: LoadArgs, durationS: number): AutocannonOptions {
  return {
    url: args.url,
    method: 'POST',
    headers: args.headers,
    body: args.body,
    ...(args.variants?.length ? { requests: [{ setupRequest: rotation(args, args.variants) }] } : {}),
    connections: args.connections,
    pipelining: 1,
    duration: durationS,
    timeout: 10,
  };
}

/**
 * One counter shared by every connection: autocannon cycles a `requests` list per connection, so with a list of
 * the variants themselves 16 connections would step in lockstep and a short run would never reach the end of it.
 */
function rotation(args: LoadArgs, variants: LoadVariant[]): (req: AutocannonRequest) => AutocannonRequest {
  // Built once: the generator's own cost per request must not depend on which variant is sent.
  const built = variants.map((v) => ({ headers: { ...args.headers, ...v.headers }, body: v.body ?? args.body }));
  let next = 0;
  return (req) => {
    const v = built[next] ?? { headers: args.headers, body: args.body };
    next = (next + 1) % built.length;
    return { ...req, headers: v.headers, body: v.body };
  };
}

function readArgs(arg: string): LoadArgs {
  return JSON.parse(arg.startsWith('@') ? readFileSync(arg.slice(1), 'utf8') : arg) as LoadArgs;
}

/**
 * Warm-up: the JIT, the connection pools and the upstream's keep-alive sockets settle before anything is counted,
 * in slices until the rate levels off (warm-up.ts). Each slice's rate is returned.
 */
async function warmUp(args: LoadArgs): Promise<number[]> {
  const rates: number[] = [];
  while (args.warmupS > 0 && !warmedUp(rates, args.warmupS)) {
    const t0 = performance.now();
    const summary = await autocannon(options(args, WARMUP_SLICE_S));
    rates.push(round(summary.requests.total / ((performance.now() - t0) / 1000), 1));
  }
  return rates;
}

const emit = (line: object) => process.stdout.write(`${JSON.stringify(line)}\n`);
const round = (v: number, digits = 3) => +v.toFixed(digits);

async function main(): Promise<void> {
  const args = readArgs(process.argv[2] ?? '{}');
  const warmupRps = await warmUp(args);

  const latencies = new Latencies();
  emit({ event: 'start' });
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  const run = autocannon(options(args, args.durationS));
  run.on('response', (_client, status, _bytes, ms) => {
    if (status >= 200 && status < 300) latencies.add(ms);
  });
  const summary = await run;
  const elapsedS = (performance.now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  emit({ event: 'stop' });

  const l = latencies.summary();
  const statusCodes: Record<string, number> = {};
  for (const [code, { count }] of Object.entries(summary.statusCodeStats)) statusCodes[code] = count;
  const result: LoadResult = {
    ok: l.count,
    rps: round(l.count / elapsedS, 1),
    meanMs: round(l.mean),
    p50Ms: round(l.p50),
    p99Ms: round(l.p99),
    maxMs: round(l.max),
    non2xx: summary.non2xx,
    errors: summary.errors,
    timeouts: summary.timeouts,
    statusCodes,
    elapsedS: round(elapsedS),
    loadCpuPct: round(((cpu.user + cpu.system) / 1000 / (elapsedS * 1000)) * 100, 1),
    warmupRps,
  };
  emit({ event: 'result', ...result });
}

// The parent went away (Ctrl-C, crash): stop loading a server nobody measures.
process.on('disconnect', () => process.exit(1));
await main();
process.exit(0);
