import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import Database from 'better-sqlite3';
import { Agent, request } from 'undici';
import { startProxyProcess } from '../support/proxy-process.js';
import {
  Child,
  installCleanup,
  type MachineFacts,
  machineFacts,
  printVerdicts,
  sampledLoad,
  trackProxy,
  urlLine,
  type Verdict,
} from './gateways.js';
import type { LoadArgs, LoadVariant } from './load.js';
import { longestWarmUpS } from './warm-up.js';

/**
 * Proxy scaling: throughput, p99 latency and CPU per request of proxy/main.ts standalone (auth, tags, routing, usage
 * in SQLite, metrics: as gateways.ts runs it) as the number of routed models and of API keys grows. A lookup must
 * cost the same for one entry or a thousand, so successive requests rotate over every model and every key of a
 * point: a single hot entry would prove nothing about the table behind it.
 * Every point is its own proxy (N ModelDeployments, each its own model name and serviceName, all pointing at one
 * Ollama double that serves every name; K keys in the keys file), all started before the first run and measured in
 * interleaved rounds, so a slow spell of this shared machine lands on every point rather than on one. A point's
 * figure is the median of its rounds. Ends with PASS/FAIL lines: throughput at the most models (keys) >= 85% of
 * that at one.
 * Run: npx tsx e2e/bench/proxy-scaling.ts [--quick] [--duration S] [--warmup S] [--rounds N] [--connections C]
 *      [--models 1,10,100,1000] [--keys 1,10,1000] [--grid] [--json-out FILE]
 */

const UPSTREAM = { completionTokens: 8, firstByteDelayMs: 0, interTokenDelayMs: 0 };
/** The target: a thousand entries keep at least this share of the throughput of one. */
const KEEP = 0.85;
const JSON_HEADERS = { 'content-type': 'application/json', 'x-tags': 'team:bench' };

interface Settings {
  durationS: number;
  warmupS: number;
  rounds: number;
  connections: number;
  models: number[];
  keys: number[];
  /** Every models x keys combination, not only each axis with the other at 1. */
  grid: boolean;
}

const round = (v: number, digits = 3) => (Number.isFinite(v) ? +v.toFixed(digits) : Number.NaN);
const progress = (msg: string) => process.stderr.write(`[scaling] ${msg}\n`);
const errorMessage = (err: unknown) => (err instanceof Error ? err.message : String(err));

/** Distinct names that sort as they are numbered, so a table or a log reads in order. */
const modelName = (i: number) => `bench-${String(i).padStart(4, '0')}:8b`;
const deploymentName = (i: number) => `bench-${String(i).padStart(4, '0')}`;
const apiKey = (i: number) => `sk-scaling-${String(i).padStart(4, '0')}`;

function modelDeployment(i: number, endpoint: string): string {
  return [
    'apiVersion: ai.platform/v1beta1',
    'kind: ModelDeployment',
    'metadata:',
    `  name: ${deploymentName(i)}`,
    'spec:',
    `  model: ${modelName(i)}`,
    `  serviceName: ${deploymentName(i)}`,
    `  endpoint: ${endpoint}`,
    '',
  ].join('\n');
}

const chatBody = (model: string) =>
  JSON.stringify({
    model,
    messages: [{ role: 'user', content: 'hello there' }],
    stream: false,
    tags: ['project:bench'],
  });

/**
 * Request i asks for model i mod N with key i mod K: each axis is walked end to end. Always a list, even of one,
 * so the load generator does the same work per request at every point.
 */
function variants(models: number, keys: number): LoadVariant[] {
  return Array.from({ length: Math.max(models, keys) }, (_, i) => ({
    headers: { 'x-api-key': apiKey(i % keys) },
    body: chatBody(modelName(i % models)),
  }));
}

// ---------------------------------------------------------------------------------------------------------------
// Processes

interface Double {
  url: string;
  child: Child;
}

async function startDouble(models: number): Promise<Double> {
  const names = Array.from({ length: models }, (_, i) => modelName(i));
  const main = [
    `import { startOllamaDouble } from './e2e/doubles/ollama.ts';`,
    `const double = await startOllamaDouble({ models: ${JSON.stringify(names)}, record: false });`,
    `double.behave(${JSON.stringify(UPSTREAM)});`,
    `process.on('disconnect', () => process.exit(0));`,
    `console.log(JSON.stringify({ url: double.url }));`,
  ].join('\n');
  const child = new Child('double', process.execPath, ['--import', 'tsx', '--input-type=module', '-e', main]);
  return { url: await child.waitFor('url', urlLine, 20_000), child };
}

interface PointKey {
  models: number;
  keys: number;
}

interface Proxy extends PointKey {
  url: string;
  metrics: string;
  usageDb: string;
  pid: number;
  /** From spawn to "proxy listening": reading and validating N documents is part of it. */
  startSeconds: number;
  stop(): Promise<void>;
}

async function startProxy(point: PointKey, double: Double, dir: string): Promise<Proxy> {
  const own = join(dir, `m${point.models}-k${point.keys}`);
  mkdirSync(own);
  const config = join(own, 'config.yaml');
  writeFileSync(config, Array.from({ length: point.models }, (_, i) => modelDeployment(i, double.url)).join('---\n'));
  const keys = join(own, 'keys.txt');
  writeFileSync(keys, `${Array.from({ length: point.keys }, (_, i) => apiKey(i)).join('\n')}\n`);
  const usageDb = join(own, 'usage.db');
  const t0 = performance.now();
  const proxy = await startProxyProcess(['--config', config, '--keys-file', keys, '--usage-db', usageDb]);
  const startSeconds = round((performance.now() - t0) / 1000, 2);
  const managed = trackProxy(`proxy m=${point.models} k=${point.keys}`, proxy);
  return {
    ...point,
    url: `${proxy.base}/openai/v1/chat/completions`,
    metrics: proxy.metrics,
    usageDb,
    pid: managed.pid,
    startSeconds,
    stop: () => managed.stop(),
  };
}

/** Every variant once, in order: each model routes to the double and each key is accepted, before anything counts. */
async function probe(proxy: Proxy): Promise<void> {
  const dispatcher = new Agent({ connections: 1 });
  try {
    for (const v of variants(proxy.models, proxy.keys)) {
      const res = await request(proxy.url, {
        method: 'POST',
        headers: { ...JSON_HEADERS, ...v.headers },
        body: v.body ?? '',
        dispatcher,
      });
      const text = await res.body.text();
      if (res.statusCode !== 200 || !text.includes('tok7')) {
        throw new Error(`probe ${v.headers?.['x-api-key']} ${v.body}: HTTP ${res.statusCode} ${text.slice(0, 200)}`);
      }
    }
  } finally {
    await dispatcher.close();
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Measurements

export interface ScalingRun {
  round: number;
  rps: number;
  meanMs: number;
  p50Ms: number;
  p99Ms: number;
  /** 2xx responses completed in the measured window. */
  ok: number;
  /** non-2xx + errors: anything but 0 invalidates the run. */
  bad: number;
  /** The proxy process, % of one core. */
  cpuPct: number;
  /** The proxy's CPU time per completed request: the figure least moved by what else the machine does. */
  cpuUsPerReq: number;
  rssMiB: number;
  doubleCpuPct: number;
  loadgenCpuPct: number;
  statusCodes: Record<string, number>;
}

/** One autocannon run in its own process; the proxy's and the double's CPU are sampled between its markers. */
async function runLoad(proxy: Proxy, double: Double, settings: Settings, dir: string, n: number): Promise<ScalingRun> {
  const args: LoadArgs = {
    url: proxy.url,
    headers: JSON_HEADERS,
    body: chatBody(modelName(0)),
    connections: settings.connections,
    warmupS: settings.warmupS,
    durationS: settings.durationS,
    variants: variants(proxy.models, proxy.keys),
  };
  // 1000 variants exceed what one command-line argument may hold.
  const file = join(dir, `load-m${proxy.models}-k${proxy.keys}.json`);
  writeFileSync(file, JSON.stringify(args));
  const { load: result, sampled } = await sampledLoad(
    `@${file}`,
    { target: proxy.pid, double: double.child.pid },
    longestWarmUpS(settings.warmupS) + settings.durationS + 60,
  );
  const ok = result.ok > 0;
  return {
    round: n,
    rps: result.rps,
    // Latencies of a run that completed nothing arrive as null (JSON has no NaN); they must not count as 0 ms.
    meanMs: ok ? result.meanMs : Number.NaN,
    p50Ms: ok ? result.p50Ms : Number.NaN,
    p99Ms: ok ? result.p99Ms : Number.NaN,
    ok: result.ok,
    bad: result.non2xx + result.errors,
    cpuPct: sampled.target.cpuPct,
    cpuUsPerReq: round(((sampled.target.cpuPct / 100) * 1e6) / result.rps, 1),
    rssMiB: sampled.target.rssMiB,
    doubleCpuPct: sampled.double.cpuPct,
    loadgenCpuPct: result.loadCpuPct,
    statusCodes: result.statusCodes,
  };
}

/**
 * Proof that the load itself reached every entry: models (in the request metrics) and keys (in the usage records)
 * asked for more than the probe's one time each.
 */
interface Reached {
  models: number;
  keys: number;
  usageRows: number;
}

async function modelsReached(proxy: Proxy): Promise<number> {
  const text = await (await fetch(`${proxy.metrics}/metrics`)).text();
  const requests = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (!line.startsWith('pao_gateway_requests_total{')) continue;
    const model = /[{,]model="([^"]*)"/.exec(line)?.[1];
    if (model) requests.set(model, (requests.get(model) ?? 0) + Number(line.split(' ').at(-1)));
  }
  return [...requests.values()].filter((n) => n > 1).length;
}

/** After the proxy stopped: SIGTERM flushed what its usage recorder held. */
function keysReached(proxy: Proxy): Omit<Reached, 'models'> {
  const db = new Database(proxy.usageDb, { readonly: true, fileMustExist: true });
  try {
    const row = db
      .prepare(
        'SELECT sum(n > 1) AS keys, sum(n) AS rows FROM (SELECT count(*) AS n FROM requests GROUP BY key_prefix)',
      )
      .get() as { keys: number | null; rows: number | null };
    return { keys: row.keys ?? 0, usageRows: row.rows ?? 0 };
  } finally {
    db.close();
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Report

export interface ScalingPoint extends PointKey {
  /** Medians over the rounds. */
  rps: number;
  p50Ms: number;
  p99Ms: number;
  cpuUsPerReq: number;
  /** The largest of the rounds. */
  rssMiB: number;
  /** Summed over the rounds. */
  ok: number;
  bad: number;
  startSeconds: number;
  reached: Reached;
  runs: ScalingRun[];
}

export interface ScalingResult {
  machine: MachineFacts;
  settings: Settings;
  upstream: typeof UPSTREAM;
  points: ScalingPoint[];
  verdicts: Verdict[];
  /** Load average when the run ended: with machine.loadAverage, how busy the machine was besides this run. */
  loadAverageEnd: number[];
}

function median(values: number[]): number {
  const sorted = values.filter(Number.isFinite).sort((a, b) => a - b);
  if (sorted.length === 0) return Number.NaN;
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? (sorted[mid] ?? Number.NaN) : ((sorted[mid - 1] ?? 0) + (sorted[mid] ?? 0)) / 2;
}

function toPoint(proxy: Proxy, runs: ScalingRun[], reached: Reached): ScalingPoint {
  return {
    models: proxy.models,
    keys: proxy.keys,
    rps: round(median(runs.map((r) => r.rps)), 1),
    p50Ms: round(median(runs.map((r) => r.p50Ms))),
    p99Ms: round(median(runs.map((r) => r.p99Ms))),
    cpuUsPerReq: round(median(runs.map((r) => r.cpuUsPerReq)), 1),
    rssMiB: Math.max(...runs.map((r) => r.rssMiB)),
    ok: runs.reduce((a, r) => a + r.ok, 0),
    bad: runs.reduce((a, r) => a + r.bad, 0),
    startSeconds: proxy.startSeconds,
    reached,
    runs,
  };
}

/** Every request answered, and every model and key of the point was asked for. */
const valid = (p: ScalingPoint) =>
  p.bad === 0 && p.ok > 0 && p.reached.models === p.models && p.reached.keys === p.keys;

/** Percentage of `base` that `v` is, to one decimal. */
const share = (v: number, base: number) => round((100 * v) / base, 1);

function axisVerdict(axis: 'models' | 'keys', points: ScalingPoint[]): Verdict {
  const other = axis === 'models' ? 'keys' : 'models';
  const line = points.filter((p) => p[other] === 1 && valid(p)).sort((a, b) => a[axis] - b[axis]);
  const [low, high] = [line[0], line.at(-1)];
  if (!low || !high || low === high || low[axis] !== 1) {
    return { id: `${axis}: throughput at the most ${axis} >= 85% of at 1`, pass: null, detail: 'not measured' };
  }
  return {
    id: `${axis}: throughput at ${high[axis]} ${axis} >= ${KEEP * 100}% of at 1`,
    pass: high.rps >= KEEP * low.rps,
    detail:
      `${high.rps} vs ${low.rps} req/s = ${share(high.rps, low.rps)}%; ` +
      `p99 ${high.p99Ms} vs ${low.p99Ms} ms; ` +
      `proxy cpu ${high.cpuUsPerReq} vs ${low.cpuUsPerReq} µs/req = ${share(high.cpuUsPerReq, low.cpuUsPerReq)}%`,
  };
}

export function printPoints(points: ScalingPoint[]): void {
  console.table(
    points.map((p) => ({
      models: p.models,
      keys: p.keys,
      'req/s': p.rps,
      'p50 ms': p.p50Ms,
      'p99 ms': p.p99Ms,
      'cpu µs/req': p.cpuUsPerReq,
      'rss MiB': p.rssMiB,
      ok: p.ok,
      bad: p.bad,
      'start s': p.startSeconds,
      'models hit': p.reached.models,
      'keys hit': p.reached.keys,
      'req/s by round': p.runs.map((r) => r.rps).join(' '),
    })),
  );
}

export function report(result: ScalingResult): void {
  const s = result.settings;
  console.log(
    `\nProxy scaling, ${result.machine.cpuModel} x${result.machine.cores}, node ${result.machine.node}; ` +
      `autocannon c=${s.connections}, json, warm-up until the rate levels off (at least ${s.warmupS} s) + ${s.durationS} s per run, ` +
      `${s.rounds} interleaved rounds (medians shown); requests rotate over every model and key of a point. ` +
      `Shared machine: load average ${result.machine.loadAverage.join(' ')} at start, ` +
      `${result.loadAverageEnd.join(' ')} at end.`,
  );
  printPoints(result.points);
  for (const p of result.points.filter((x) => !valid(x))) {
    console.error(
      `\n!!!!! models=${p.models} keys=${p.keys}: ${p.bad} failed, ${p.ok} ok, ${p.reached.models} models ` +
        `and ${p.reached.keys} keys reached: not comparable\n`,
    );
  }
  printVerdicts(result.verdicts);
}

// ---------------------------------------------------------------------------------------------------------------
// Main

function parseSettings(): Settings & { jsonOut: string | undefined } {
  const { values } = parseArgs({
    options: {
      quick: { type: 'boolean', default: false },
      duration: { type: 'string' },
      warmup: { type: 'string' },
      rounds: { type: 'string' },
      connections: { type: 'string', default: '16' },
      models: { type: 'string', default: '1,10,100,1000' },
      keys: { type: 'string', default: '1,10,1000' },
      grid: { type: 'boolean', default: false },
      'json-out': { type: 'string' },
    },
  });
  const quick = values.quick ?? false;
  const list = (v: string | undefined, flag: string) => {
    const out = (v ?? '').split(',').map(Number);
    if (out.some((n) => !Number.isInteger(n) || n < 1)) throw new Error(`--${flag}: positive integers, got ${v}`);
    // 1 is the baseline every verdict compares with.
    return [...new Set([1, ...out])].sort((a, b) => a - b);
  };
  return {
    durationS: Number(values.duration ?? (quick ? 2 : 5)),
    warmupS: Number(values.warmup ?? (quick ? 0.5 : 1)),
    rounds: Number(values.rounds ?? (quick ? 1 : 3)),
    connections: Number(values.connections),
    models: list(values.models, 'models'),
    keys: list(values.keys, 'keys'),
    grid: values.grid ?? false,
    jsonOut: values['json-out'],
  };
}

function pointsOf(settings: Settings): PointKey[] {
  if (settings.grid) return settings.models.flatMap((models) => settings.keys.map((keys) => ({ models, keys })));
  return [
    ...settings.models.map((models) => ({ models, keys: 1 })),
    ...settings.keys.filter((k) => k !== 1).map((keys) => ({ models: 1, keys })),
  ];
}

async function main(): Promise<void> {
  const { jsonOut, ...settings } = parseSettings();
  const dir = mkdtempSync(join(os.tmpdir(), 'scaling-bench-'));
  installCleanup(dir);
  const machine = machineFacts();
  progress(`${machine.cpuModel}, ${machine.cores} cores, load average ${machine.loadAverage.join(' ')}`);
  const double = await startDouble(Math.max(...settings.models));
  const proxies: Proxy[] = [];
  for (const point of pointsOf(settings)) {
    const proxy = await startProxy(point, double, dir);
    await probe(proxy);
    proxies.push(proxy);
    progress(`models=${point.models} keys=${point.keys}: started in ${proxy.startSeconds} s, every variant answers`);
  }

  const runs = new Map<Proxy, ScalingRun[]>(proxies.map((p) => [p, []]));
  for (let n = 1; n <= settings.rounds; n++) {
    for (const proxy of proxies) {
      try {
        const run = await runLoad(proxy, double, settings, dir, n);
        runs.get(proxy)?.push(run);
        progress(
          `round ${n} models=${proxy.models} keys=${proxy.keys}: ${run.rps} req/s, p99 ${run.p99Ms} ms, ` +
            `cpu ${run.cpuUsPerReq} µs/req` +
            (run.bad > 0 ? `, ${run.bad} FAILED REQUESTS` : ''),
        );
      } catch (err) {
        progress(`round ${n} models=${proxy.models} keys=${proxy.keys}: ${errorMessage(err)}`);
      }
    }
  }
  const points: ScalingPoint[] = [];
  for (const proxy of proxies) {
    const models = await modelsReached(proxy);
    await proxy.stop();
    points.push(toPoint(proxy, runs.get(proxy) ?? [], { models, ...keysReached(proxy) }));
  }
  await double.child.stop();

  const result: ScalingResult = {
    machine,
    settings,
    upstream: UPSTREAM,
    points,
    verdicts: [axisVerdict('models', points), axisVerdict('keys', points)],
    loadAverageEnd: os.loadavg().map((l) => round(l, 2)),
  };
  report(result);
  if (jsonOut) {
    mkdirSync(dirname(jsonOut), { recursive: true });
    writeFileSync(jsonOut, `${JSON.stringify(result, null, 2)}\n`);
  }
  if (!points.every(valid)) process.exitCode = 1;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) await main();
