import { type ChildProcess, execFileSync, spawn, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import os from 'node:os';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { setTimeout as delay } from 'node:timers/promises';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import Database from 'better-sqlite3';
import { Agent, request } from 'undici';
import { postgresBin, startPostgres } from '../postgres/server.js';
import { startRedis } from '../redis/server.js';
import { chartProxyMemory } from '../support/chart-memory.js';
import { type ProxyProcess, startProxyProcess } from '../support/proxy-process.js';
import { findLiteLLM, installLiteLLM, LITELLM_MISSING, liteLLMLaunch } from './litellm.js';
import type { LoadArgs, LoadResult } from './load.js';
import { TENSORZERO_MODEL, TENSORZERO_VERSION, tensorZeroLaunch } from './tensorzero.js';
import { longestWarmUpS, WARMUP_SLICE_S } from './warm-up.js';

/**
 * Proxy overhead, compared: the same upstream double, the same load generator (autocannon in its own process) and the
 * same requests, non-streaming and streaming, at several concurrencies, against
 *   direct   the Ollama double itself (its own process),
 *   bare     a pass-through node:http proxy (bare-proxy.ts): the floor of any Node proxy here,
 *   floor    bare plus only what a gateway that accounts every request durably cannot skip (floor-proxy.ts: the key
 *            hashed, the body parsed and written again, the answer's usage read, a record appended to a file per
 *            event-loop turn before the answer ends), chat only: what of ours' cost above bare is the floor's,
 *   ours     dist/proxy/main.js standalone, as the image runs it, with the chart's heap limit: auth, a per-key rate
 *            limit (this replica's buckets), tags, routing, usage (SQLite) and metrics on,
 *   ours-pg  the same with usage in PostgreSQL and the rate limit in Redis (both local; their CPU reported apart),
 *   tensorzero  TensorZero, the Rust gateway (PyPI `tensorzero`, pinned; tensorzero.ts), observability off,
 *   portkey  Portkey's open-source gateway (@portkey-ai/gateway),
 *   litellm  LiteLLM's proxy, when a `litellm` executable is installed (see litellm.ts).
 * The targets are all started first and each row is run on every target in turn (the others idle meanwhile), so a
 * row's ratios compare runs seconds apart: this machine's speed drifts over minutes. Each run starts once the
 * target's rate has levelled off (warm-up.ts: the JIT, pools and sockets settled; the warm-up's rates are printed
 * with the row), then is measured for --duration seconds.
 * Per run: requests/s, latency mean/p50/p99, errors, latency added over direct, CPU (% of one core) and peak RSS of
 * the process under test. Streaming time to first token comes from a sequential client of its own, since autocannon
 * only times whole responses; ours then holds c=128 for a soak (60 s) with its RSS sampled. Ends with PASS/FAIL lines
 * for the project's overhead and memory targets.
 * The same for OpenAI Responses and Anthropic Messages (--dialects), on direct, bare and ours.
 * Then what the usage spool costs: ours against ours with the spool off (--usage-spool-dir off), both
 * running, rows alternated over --spool-rounds rounds and compared by their medians (this machine's
 * throughput drifts by more than the 3 % asked of the spool between rows run minutes apart).
 * Run: npx tsx e2e/bench/gateways.ts [--quick] [--duration S] [--connections 1,16,128] [--targets a,b] [--dialects]
 *      [--warmup S] [--ttft-requests N] [--json-out FILE] [--install-litellm] [--spool-rounds N] [--rounds N]
 * --rounds N (3, or 1 with --quick): each row run N times per target, alternated, its median kept.
 */

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const MODEL = 'llama3.1:8b';
const TARGETS = ['direct', 'bare', 'floor', 'ours', 'ours-pg', 'tensorzero', 'portkey', 'litellm'] as const;
/** ours-nospool: ours with the usage spool off, measured only beside ours (spoolCost). */
type TargetName = (typeof TARGETS)[number] | 'ours-nospool';
const MODES = ['json', 'stream'] as const;
type Mode = (typeof MODES)[number];
/**
 * The dialects measured: chat completions on every target; OpenAI Responses and Anthropic Messages (what coding
 * agents speak) on direct, bare and ours, each passed through to the double's own endpoint as to Ollama's.
 */
const DIALECTS = ['chat', 'responses', 'messages'] as const;
type BenchDialect = (typeof DIALECTS)[number];
/** Fixed upstream behaviour: 8 tokens, no artificial delays, so every difference is the proxy's. */
const UPSTREAM = { completionTokens: 8, firstByteDelayMs: 0, interTokenDelayMs: 0 };
const OUTPUT_KEEP = 64 * 1024;
const PORTKEY = 'node_modules/@portkey-ai/gateway/build/start-server.js';
/**
 * Portkey 1.15.2 with the @hono/node-server npm resolves for it (1.19.x) answers every streaming request with 500
 * "TypeError: immutable" (Portkey-AI/gateway#1389): it appends headers to the upstream fetch Response. This preload
 * hands it responses with mutable headers, so it can be measured at all; it costs one Response copy per request.
 */
const PORTKEY_SHIM =
  'data:text/javascript,' +
  encodeURIComponent(
    'const f=globalThis.fetch,R=globalThis.Response,H=globalThis.Headers;' +
      'globalThis.fetch=async(...a)=>{const r=await f(...a);' +
      'return new R(r.body,{status:r.status,statusText:r.statusText,headers:new H(r.headers)})};',
  );

interface Settings {
  durationS: number;
  /** The soak of ours at c=128 (streaming), memory sampled throughout. */
  soakS: number;
  /** Rounds of the alternated spool-cost comparison (0: not measured). */
  spoolRounds: number;
  /** Runs of each row per target, the targets alternated; the row is each target's median run. */
  rounds: number;
  warmupS: number;
  connections: number[];
  targets: TargetName[];
  ttftRequests: number;
  ttftWarmup: number;
  installLiteLLM: boolean;
  /** chat always; responses and messages where the target serves them. */
  dialects: BenchDialect[];
}

const errorMessage = (err: unknown) => (err instanceof Error ? err.message : String(err));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const round = (v: number, digits = 3) => (Number.isFinite(v) ? +v.toFixed(digits) : Number.NaN);
const progress = (msg: string) => process.stderr.write(`[gateways] ${msg}\n`);

// ---------------------------------------------------------------------------------------------------------------
// Machine facts

export interface MachineFacts {
  cpuModel: string;
  cores: number;
  ramGiB: number;
  node: string;
  os: string;
  date: string;
  loadAverage: number[];
}

export function machineFacts(): MachineFacts {
  const cpuinfo = readText('/proc/cpuinfo');
  const osRelease = /^PRETTY_NAME="?([^"\n]*)"?$/m.exec(readText('/etc/os-release'))?.[1];
  return {
    cpuModel: /^model name\s*:\s*(.*)$/m.exec(cpuinfo)?.[1]?.trim() ?? os.cpus()[0]?.model ?? 'unknown',
    cores: os.availableParallelism(),
    ramGiB: round(os.totalmem() / 2 ** 30, 1),
    node: process.version,
    os: `${osRelease ?? os.type()} (${os.type()} ${os.release()} ${os.arch()})`,
    date: new Date().toISOString(),
    // Other work on a shared machine shows here; read it before trusting small differences.
    loadAverage: os.loadavg().map((l) => round(l, 2)),
  };
}

function readText(path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return '';
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Child processes: every one is registered so that exit, Ctrl-C or a crash takes it down too.

export interface Managed {
  name: string;
  pid: number;
  stop(): Promise<void>;
  kill(): void;
}

const running = new Set<Managed>();

export class Child implements Managed {
  readonly proc: ChildProcess;
  private out = '';

  constructor(
    readonly name: string,
    command: string,
    args: string[],
    env: NodeJS.ProcessEnv = process.env,
  ) {
    // The IPC channel is only a lifeline: our own children exit on 'disconnect' if this process dies unannounced.
    const ipc = command === process.execPath;
    this.proc = spawn(command, args, {
      cwd: ROOT,
      env,
      stdio: ['ignore', 'pipe', 'pipe', ...(ipc ? ['ipc' as const] : [])],
    });
    const keep = (d: Buffer) => {
      this.out = (this.out + d.toString()).slice(-OUTPUT_KEEP);
    };
    this.proc.stdout?.on('data', keep);
    this.proc.stderr?.on('data', keep);
    this.proc.on('error', (err) => keep(Buffer.from(`\nspawn failed: ${err.message}\n`)));
    running.add(this);
    this.proc.once('exit', () => running.delete(this));
  }

  get pid(): number {
    return this.proc.pid ?? -1;
  }

  get exited(): boolean {
    return this.proc.exitCode !== null || this.proc.signalCode !== null || this.proc.pid === undefined;
  }

  output(): string {
    return this.out;
  }

  stdout(): NodeJS.ReadableStream {
    if (!this.proc.stdout) throw new Error(`${this.name}: no stdout`);
    return this.proc.stdout;
  }

  /** Polls the output until `test` returns a value; fails if the process exits or time runs out. */
  async waitFor<T>(what: string, test: (out: string) => T | undefined, timeoutMs: number): Promise<T> {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      const found = test(this.out);
      if (found !== undefined) return found;
      if (this.exited) break;
      await sleep(50);
    }
    throw new Error(`${this.name}: no ${what} (${this.exited ? 'exited' : 'timed out'}):\n${this.out.slice(-2000)}`);
  }

  async stop(): Promise<void> {
    if (this.exited) return;
    const gone = new Promise<void>((resolve) => this.proc.once('exit', () => resolve()));
    this.proc.kill('SIGTERM');
    await Promise.race([gone, delay(5000, undefined, { ref: false })]);
    this.kill();
  }

  kill(): void {
    if (!this.exited) this.proc.kill('SIGKILL');
  }
}

/** The `{"url": ...}` line our own servers print once listening. */
export function urlLine(out: string): string | undefined {
  for (const line of out.split('\n')) {
    if (!line.startsWith('{"url"')) continue;
    return (JSON.parse(line) as { url: string }).url;
  }
  return undefined;
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      srv.close(() => (typeof addr === 'object' && addr ? resolve(addr.port) : reject(new Error('no port'))));
    });
  });
}

async function waitHealthy(url: string, child: Child, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline && !child.exited) {
    if ((await fetch(url).catch(() => undefined))?.ok) return;
    await sleep(250);
  }
  const why = child.exited ? 'exited' : 'timed out';
  throw new Error(`${child.name}: no 200 from ${url} (${why}):\n${child.output().slice(-2000)}`);
}

// ---------------------------------------------------------------------------------------------------------------
// /proc sampling of the process under test (and its children: a wrapper must not hide the real server's cost).

const CLK_TCK = (() => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
  } catch {
    return 100;
  }
})();

function processTree(pid: number): number[] {
  const all = [pid];
  for (let i = 0; i < all.length; i++) {
    const task = `/proc/${all[i]}/task`;
    let tids: string[] = [];
    try {
      tids = readdirSync(task);
    } catch {
      continue; // Gone since it was listed.
    }
    for (const tid of tids) {
      for (const child of readText(`${task}/${tid}/children`).split(' ')) if (child.trim()) all.push(Number(child));
    }
  }
  return all;
}

/** utime + stime of the tree, in clock ticks (fields 14 and 15 of /proc/PID/stat, counted after the comm). */
function cpuTicks(pid: number): number {
  let ticks = 0;
  for (const p of processTree(pid)) {
    const stat = readText(`/proc/${p}/stat`);
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    ticks += Number(fields[11] ?? 0) + Number(fields[12] ?? 0);
  }
  return ticks;
}

export function rssKiB(pid: number): number {
  let kib = 0;
  for (const p of processTree(pid)) kib += Number(/VmRSS:\s+(\d+)/.exec(readText(`/proc/${p}/status`))?.[1] ?? 0);
  return kib;
}

/** CPU and peak RSS of one process tree between construction and finish(). */
export class Usage {
  private readonly t0 = performance.now();
  private readonly ticks0: number;
  private peakKiB: number;
  private readonly timer: NodeJS.Timeout;

  constructor(private readonly pid: number) {
    this.ticks0 = cpuTicks(pid);
    this.peakKiB = rssKiB(pid);
    this.timer = setInterval(() => {
      this.peakKiB = Math.max(this.peakKiB, rssKiB(this.pid));
    }, 100);
  }

  finish(): { cpuPct: number; rssMiB: number } {
    clearInterval(this.timer);
    const seconds = (performance.now() - this.t0) / 1000;
    const cpuSeconds = (cpuTicks(this.pid) - this.ticks0) / CLK_TCK;
    this.peakKiB = Math.max(this.peakKiB, rssKiB(this.pid));
    return { cpuPct: round((cpuSeconds / seconds) * 100, 1), rssMiB: round(this.peakKiB / 1024, 1) };
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Targets

interface Target {
  name: TargetName;
  /** Full chat completions URL. */
  url: string;
  /** Full URLs of the other dialects, where the target serves them (direct, bare, ours). */
  dialectUrls?: Partial<Record<BenchDialect, string>>;
  headers: Record<string, string>;
  /** Chat bodies of its own, where it names the model differently (TensorZero). */
  bodies?: Record<Mode, string>;
  /** The process whose CPU and memory count as the target's. */
  pid: number;
  /** Servers the target needs (PostgreSQL, Redis): their CPU is sampled and reported apart. */
  backing?: Array<{ name: string; pid: number }>;
  notes: string[];
  stop(): Promise<void>;
  /** After the runs, before stop: anything worth checking about what the target did. */
  inspect?: () => Promise<Record<string, number | string>>;
}

interface Double {
  url: string;
  pid: number;
  child: Child;
}

/** Same bytes to every target. The double ignores `tags`; ours records them (LiteLLM keeps them as metadata). */
function chatBody(mode: Mode): string {
  return JSON.stringify({
    model: MODEL,
    messages: [{ role: 'user', content: 'hello there' }],
    stream: mode === 'stream',
    tags: ['project:bench'],
  });
}
const BODIES: Record<Mode, string> = { json: chatBody('json'), stream: chatBody('stream') };
/** The same request in each dialect: one user turn, the double's 8 tokens back (tags by header: only chat has a body field). */
const DIALECT_BODIES: Record<BenchDialect, Record<Mode, string>> = {
  chat: BODIES,
  responses: {
    json: JSON.stringify({ model: MODEL, input: 'hello there' }),
    stream: JSON.stringify({ model: MODEL, input: 'hello there', stream: true }),
  },
  messages: {
    json: JSON.stringify({ model: MODEL, max_tokens: 64, messages: [{ role: 'user', content: 'hello there' }] }),
    stream: JSON.stringify({
      model: MODEL,
      max_tokens: 64,
      messages: [{ role: 'user', content: 'hello there' }],
      stream: true,
    }),
  },
};
const bodyOf = (t: Target, dialect: BenchDialect, mode: Mode): string =>
  (dialect === 'chat' ? t.bodies?.[mode] : undefined) ?? DIALECT_BODIES[dialect][mode];
const urlOf = (t: Target, dialect: BenchDialect): string | undefined =>
  dialect === 'chat' ? t.url : t.dialectUrls?.[dialect];
const JSON_HEADERS = { 'content-type': 'application/json' };

class Skip extends Error {}

/** Skips the target, in one line, when a Debian package it runs is not installed (`npm run bench` as root installs them). */
function skipWithout(packages: Array<'redis-server' | 'postgresql'>): void {
  const installed = {
    'redis-server': () => spawnSync('redis-server', ['--version']).error === undefined,
    postgresql: () => {
      try {
        postgresBin();
        return true;
      } catch {
        return false;
      }
    },
  };
  const missing = packages.filter((p) => !installed[p]());
  if (missing.length > 0) {
    throw new Skip(`needs Debian's ${missing.join(' and ')} (not installed; as root, npm run bench installs them)`);
  }
}

async function startDouble(): Promise<Double> {
  const main = [
    `import { startOllamaDouble } from './e2e/doubles/ollama.ts';`,
    `const double = await startOllamaDouble({ models: [${JSON.stringify(MODEL)}], record: false });`,
    `double.behave(${JSON.stringify(UPSTREAM)});`,
    `process.on('disconnect', () => process.exit(0));`,
    `console.log(JSON.stringify({ url: double.url }));`,
  ].join('\n');
  const child = new Child('double', process.execPath, ['--import', 'tsx', '--input-type=module', '-e', main]);
  const url = await child.waitFor('url', urlLine, 20_000);
  return { url, pid: child.pid, child };
}

async function startTarget(name: TargetName, double: Double, dir: string, settings: Settings): Promise<Target> {
  switch (name) {
    case 'direct':
      return {
        name,
        url: `${double.url}/v1/chat/completions`,
        dialectUrls: { responses: `${double.url}/v1/responses`, messages: `${double.url}/v1/messages` },
        headers: JSON_HEADERS,
        pid: double.pid,
        notes: ['the double itself: cpu/rss columns are the double'],
        stop: async () => {},
      };
    case 'bare':
      return startBare(double);
    case 'floor':
      return startFloor(double);
    case 'ours':
      return startOurs(double, dir, 'sqlite');
    case 'ours-nospool':
      return startOurs(double, dir, 'sqlite', false);
    case 'ours-pg':
      return startOurs(double, dir, 'postgres');
    case 'tensorzero':
      return startTensorZero(double, dir);
    case 'portkey':
      return startPortkey(double);
    case 'litellm':
      return startLiteLLM(double, dir, settings);
  }
}

async function startBare(double: Double): Promise<Target> {
  const child = new Child('bare', process.execPath, ['--import', 'tsx', 'e2e/bench/bare-proxy.ts', double.url]);
  const url = await child.waitFor('url', urlLine, 20_000);
  return {
    name: 'bare',
    url: `${url}/v1/chat/completions`,
    dialectUrls: { responses: `${url}/v1/responses`, messages: `${url}/v1/messages` },
    headers: JSON_HEADERS,
    pid: child.pid,
    notes: [],
    stop: () => child.stop(),
  };
}

async function startFloor(double: Double): Promise<Target> {
  const child = new Child('floor', process.execPath, ['--import', 'tsx', 'e2e/bench/floor-proxy.ts', double.url]);
  const url = await child.waitFor('url', urlLine, 20_000);
  return {
    name: 'floor',
    url: `${url}/v1/chat/completions`,
    // The floor scans OpenAI chat streams for usage only: no dialect rows.
    headers: { ...JSON_HEADERS, 'x-api-key': 'sk-bench', 'x-tags': 'team:bench' },
    pid: child.pid,
    notes: ['chat only'],
    stop: () => child.stop(),
  };
}

/** A rate limit every request is checked against and none reaches: the limiter's cost, not its refusals. */
const UNREACHED_RATE = ['--rate-limit-rps', '1000000', '--rate-limit-burst', '1000000'];

async function startOurs(double: Double, dir: string, store: 'sqlite' | 'postgres', spool = true): Promise<Target> {
  const name: TargetName = store === 'postgres' ? 'ours-pg' : spool ? 'ours' : 'ours-nospool';
  const config = join(dir, `${name}.yaml`);
  writeFileSync(
    config,
    [
      'apiVersion: ai.platform/v1beta1',
      'kind: ModelDeployment',
      'metadata:',
      '  name: bench-llama',
      'spec:',
      `  model: ${MODEL}`,
      '  serviceName: bench-llama',
      `  endpoint: ${double.url}`,
      '',
    ].join('\n'),
  );
  const keys = join(dir, 'keys.txt');
  writeFileSync(keys, 'sk-bench\n');
  if (store === 'postgres') skipWithout(['redis-server', 'postgresql']);
  const pg = store === 'postgres' ? await startPostgres() : undefined;
  const redis = store === 'postgres' ? await startRedis() : undefined;
  const stopBacking = async () => {
    await pg?.destroy();
    await redis?.destroy();
  };
  const usageDb = pg ? pg.url : join(dir, `${name}.db`);
  const { nodeOptions } = chartProxyMemory();
  let proxy: ProxyProcess;
  try {
    proxy = await startProxyProcess(
      [
        '--config',
        config,
        '--keys-file',
        keys,
        '--usage-db',
        usageDb,
        ...UNREACHED_RATE,
        ...(redis ? ['--redis', redis.url] : []),
        ...(spool ? ['--usage-spool-dir', join(dir, `${name}-spool`)] : ['--usage-spool-dir', 'off']),
      ],
      // The chart's heap settings (values.yaml proxy.heapMiB and semiSpaceMiB), as the pod runs it.
      { ...process.env, NODE_OPTIONS: nodeOptions },
      { compiled: true },
    );
  } catch (err) {
    await stopBacking();
    throw err;
  }
  const managed = trackProxy(name, proxy);
  const backing = [
    ...(pg ? [{ name: 'postgres', pid: pg.pid() }] : []),
    ...(redis?.pid() ? [{ name: 'redis', pid: redis.pid() as number }] : []),
  ];
  return {
    name,
    url: `${proxy.base}/openai/v1/chat/completions`,
    // ours-pg measures the stores; the dialects are measured once, on ours.
    ...(name === 'ours'
      ? {
          dialectUrls: {
            responses: `${proxy.base}/openai/v1/responses`,
            messages: `${proxy.base}/anthropic/v1/messages`,
          },
        }
      : {}),
    headers: { ...JSON_HEADERS, 'x-api-key': 'sk-bench', 'x-tags': 'team:bench' },
    pid: managed.pid,
    backing,
    notes: [
      `node dist/proxy/main.js --config --keys-file --usage-db ${pg ? 'postgres://' : 'FILE'} ${UNREACHED_RATE.join(' ')}` +
        ` --usage-spool-dir ${spool ? 'DIR' : 'off'}` +
        `${redis ? ' --redis redis://' : ''}, NODE_OPTIONS=${nodeOptions} (standalone, all features on)`,
    ],
    stop: async () => {
      await managed.stop();
      await stopBacking();
    },
    inspect: () =>
      inspectOurs(
        proxy.metrics,
        pg ? () => Number(pg.psql('SELECT count(*) FROM usage_requests').trim()) : () => sqliteRows(usageDb),
      ),
  };
}

function sqliteRows(file: string): number {
  const db = new Database(file, { readonly: true, fileMustExist: true });
  try {
    return (db.prepare('SELECT count(*) AS n FROM requests').get() as { n: number }).n;
  } finally {
    db.close();
  }
}

/** Our proxy as one of the benchmark's processes: stopped with the others on exit, Ctrl-C or a crash. */
export function trackProxy(name: string, proxy: ProxyProcess): Managed {
  const managed: Managed = {
    name,
    pid: proxy.child.pid ?? -1,
    stop: async () => {
      // SIGTERM is the graceful path: the usage recorder flushes what is queued into SQLite.
      await proxy.stop('SIGTERM');
    },
    kill: () => proxy.child.kill('SIGKILL'),
  };
  running.add(managed);
  proxy.child.once('exit', () => running.delete(managed));
  return managed;
}

/** Proof that the features ran: tagged requests in the metrics and usage rows in the store (read after a flush). */
async function inspectOurs(metricsBase: string, storedRows: () => number): Promise<Record<string, number | string>> {
  const metrics = await (await fetch(`${metricsBase}/metrics`)).text();
  const sum = (prefix: string, filter = '') =>
    metrics
      .split('\n')
      .filter((l) => l.startsWith(prefix) && l.includes(filter))
      .reduce((acc, l) => acc + Number(l.split(' ').at(-1)), 0);
  // Past the recorder's 250 ms batch interval, so the rows counted below are all there is.
  await sleep(600);
  return {
    metricsRequestsTeamBench: sum('pao_gateway_requests_total{', 'team="bench"'),
    usageRowsStored: storedRows(),
    usageRecordsDropped: sum('pao_gateway_usage_records_dropped_total'),
    rateLimited: sum('pao_gateway_rate_limited_total'),
  };
}

async function startTensorZero(double: Double, dir: string): Promise<Target> {
  const launch = tensorZeroLaunch(MODEL, double.url, dir);
  const child = new Child('tensorzero', launch.command, launch.args, { ...process.env, RUST_LOG: 'error' });
  const base = await child.waitFor('url', urlLine, 60_000);
  return {
    name: 'tensorzero',
    url: `${base}/chat/completions`,
    headers: JSON_HEADERS,
    bodies: {
      json: chatBody('json').replace(JSON.stringify(MODEL), JSON.stringify(TENSORZERO_MODEL)),
      stream: chatBody('stream').replace(JSON.stringify(MODEL), JSON.stringify(TENSORZERO_MODEL)),
    },
    pid: child.pid,
    notes: [
      `tensorzero ${TENSORZERO_VERSION} (PyPI), _start_http_gateway, observability off, one "openai" provider; ` +
        `called as ${TENSORZERO_MODEL}; cpu/rss include its Python host process`,
    ],
    stop: () => child.stop(),
  };
}

async function startPortkey(double: Double): Promise<Target> {
  const plain = await launchPortkey(double, false);
  const failures = await probe(plain, ['chat']);
  if (failures.length === 0) return plain;
  const log = plain.log();
  await plain.stop();
  const broken = failures.join('; ');
  if (!failures.every((f) => f.startsWith('chat stream')) || !log.includes('immutable')) {
    throw new Error(`portkey does not answer: ${broken}\n${log.slice(-1500)}`);
  }
  const patched = await launchPortkey(double, true);
  patched.notes.push(
    `out of the box streaming fails (${broken.slice(0, 120)}; log: TypeError: immutable, Portkey-AI/gateway#1389); ` +
      'measured with a preload giving upstream fetch responses mutable headers (both modes)',
  );
  return patched;
}

async function launchPortkey(double: Double, shim: boolean): Promise<Target & { log: () => string }> {
  const port = await freePort();
  const args = [...(shim ? ['--import', PORTKEY_SHIM] : []), PORTKEY, `--port=${port}`];
  const child = new Child('portkey', process.execPath, args);
  await child.waitFor(
    '"Ready for connections"',
    (out) => (out.includes('Ready for connections') ? true : undefined),
    30_000,
  );
  return {
    name: 'portkey',
    url: `http://127.0.0.1:${port}/v1/chat/completions`,
    headers: {
      ...JSON_HEADERS,
      'x-portkey-provider': 'openai',
      'x-portkey-custom-host': `${double.url}/v1`,
      authorization: 'Bearer sk-bench',
    },
    pid: child.pid,
    notes: ['node build/start-server.js --port=N (default options, console UI on)'],
    stop: () => child.stop(),
    log: () => child.output(),
  };
}

async function startLiteLLM(double: Double, dir: string, settings: Settings): Promise<Target> {
  let bin = findLiteLLM();
  if (bin === undefined && settings.installLiteLLM) bin = installLiteLLM();
  if (bin === undefined) throw new Skip(LITELLM_MISSING);
  const port = await freePort();
  const launch = liteLLMLaunch(double.url, dir, port);
  const child = new Child('litellm', bin, launch.args, launch.env);
  const health = `http://127.0.0.1:${port}/health/liveliness`;
  // Python start-up with LiteLLM's imports takes 10+ s on this class of machine.
  await waitHealthy(health, child, 120_000);
  return {
    name: 'litellm',
    url: `http://127.0.0.1:${port}/v1/chat/completions`,
    headers: { ...JSON_HEADERS, authorization: `Bearer ${launch.masterKey}` },
    pid: child.pid,
    notes: [`${bin} --num_workers 1, master key, no database, LITELLM_LOG=ERROR`],
    stop: () => child.stop(),
  };
}

/** How each dialect's stream ends. */
const STREAM_END: Record<BenchDialect, string> = {
  chat: '[DONE]',
  responses: 'response.completed',
  messages: 'message_stop',
};

/** One request per dialect and mode; returns what is wrong (nothing: the target reaches the double and answers 200). */
async function probe(t: Target, dialects: readonly BenchDialect[]): Promise<string[]> {
  const failures: string[] = [];
  for (const dialect of dialects) {
    const url = urlOf(t, dialect);
    if (!url) continue;
    for (const mode of MODES) {
      const what = `${dialect} ${mode}`;
      try {
        const res = await request(url, { method: 'POST', headers: t.headers, body: bodyOf(t, dialect, mode) });
        const text = await res.body.text();
        if (res.statusCode !== 200) failures.push(`${what}: HTTP ${res.statusCode} ${text.slice(0, 200)}`);
        else if (!text.includes('tok7'))
          failures.push(`${what}: 200 without the double's completion: ${text.slice(0, 200)}`);
        else if (mode === 'stream' && !text.includes(STREAM_END[dialect]))
          failures.push(`${what}: stream without ${STREAM_END[dialect]}`);
      } catch (err) {
        failures.push(`${what}: ${errorMessage(err)}`);
      }
    }
  }
  return failures;
}

// ---------------------------------------------------------------------------------------------------------------
// Measurements

export interface Run {
  target: TargetName;
  dialect: BenchDialect;
  mode: Mode;
  c: number;
  load: LoadResult;
  cpuPct: number;
  rssMiB: number;
  doubleCpuPct: number;
  /** CPU % of the target's servers (PostgreSQL with its backends, Redis), apart from its own. */
  backingCpuPct: Record<string, number>;
}

interface LoadEvent {
  event: 'start' | 'stop' | 'result';
}

type Sampled = ReturnType<Usage['finish']>;

/**
 * One autocannon run (load.ts) in its own process, given its argument (JSON, or @FILE for large
 * ones); the CPU and peak RSS of each named process tree are sampled between its start and stop
 * markers, which are handled as they arrive, not polled, so the sampled window is the measured one.
 */
export async function sampledLoad<K extends string>(
  arg: string,
  pids: Record<K, number>,
  timeoutS: number,
): Promise<{ load: LoadResult; sampled: Record<K, Sampled> }> {
  const child = new Child('load', process.execPath, ['--import', 'tsx', 'e2e/bench/load.ts', arg]);
  const limit = setTimeout(() => child.kill(), timeoutS * 1000);
  const names = Object.keys(pids) as K[];
  let usage: Array<[K, Usage]> = [];
  let sampled: Record<K, Sampled> | undefined;
  let load: LoadResult | undefined;
  try {
    for await (const line of createInterface({ input: child.stdout() })) {
      if (!line.startsWith('{"event"')) continue;
      const ev = JSON.parse(line) as LoadEvent;
      if (ev.event === 'start') {
        usage = names.map((n) => [n, new Usage(pids[n])]);
      } else if (ev.event === 'stop' && usage.length > 0) {
        sampled = Object.fromEntries(usage.map(([n, u]) => [n, u.finish()])) as Record<K, Sampled>;
      } else if (ev.event === 'result') {
        load = ev as LoadEvent & LoadResult;
        break;
      }
    }
  } finally {
    clearTimeout(limit);
    await child.stop();
  }
  if (!load || !sampled) throw new Error(`load generator failed:\n${child.output().slice(-2000)}`);
  return { load, sampled };
}

/** One run against a target: its CPU and RSS, the double's CPU and its backing servers' CPU. */
async function runLoad(
  t: Target,
  double: Double,
  mode: Mode,
  c: number,
  settings: Settings,
  durationS = settings.durationS,
  dialect: BenchDialect = 'chat',
): Promise<Run> {
  const url = urlOf(t, dialect);
  if (!url) throw new Error(`${t.name} does not serve ${dialect}`);
  const args: LoadArgs = {
    url,
    headers: t.headers,
    body: bodyOf(t, dialect, mode),
    connections: c,
    warmupS: settings.warmupS,
    durationS,
  };
  const backing = Object.fromEntries((t.backing ?? []).map((b) => [`backing:${b.name}`, b.pid]));
  const { load, sampled } = await sampledLoad(
    JSON.stringify(args),
    { target: t.pid, double: double.pid, ...backing },
    longestWarmUpS(settings.warmupS) + durationS + 60,
  );
  return {
    target: t.name,
    dialect,
    mode,
    c,
    load,
    cpuPct: sampled.target.cpuPct,
    rssMiB: sampled.target.rssMiB,
    doubleCpuPct: sampled.double.cpuPct,
    backingCpuPct: Object.fromEntries(
      Object.entries(sampled)
        .filter(([n]) => n.startsWith('backing:'))
        .map(([n, u]) => [n.slice('backing:'.length), (u as Sampled).cpuPct]),
    ),
  };
}

interface Ttft {
  target: TargetName;
  requests: number;
  ttftP50Ms: number;
  ttftMeanMs: number;
  ttftP99Ms: number;
  totalP50Ms: number;
}

/** Sequential streaming requests on one keep-alive connection: time until the first chunk carrying content. */
async function timeToFirstToken(t: Target, settings: Settings): Promise<Ttft> {
  const dispatcher = new Agent({ connections: 1 });
  const first: number[] = [];
  const total: number[] = [];
  try {
    for (let i = 0; i < settings.ttftWarmup + settings.ttftRequests; i++) {
      const r = await streamOnce(t, dispatcher);
      if (i < settings.ttftWarmup) continue;
      first.push(r.first);
      total.push(r.total);
    }
  } finally {
    await dispatcher.close();
  }
  first.sort((a, b) => a - b);
  total.sort((a, b) => a - b);
  return {
    target: t.name,
    requests: first.length,
    ttftP50Ms: round(pct(first, 50)),
    ttftMeanMs: round(first.reduce((a, b) => a + b, 0) / first.length),
    ttftP99Ms: round(pct(first, 99)),
    totalP50Ms: round(pct(total, 50)),
  };
}

async function streamOnce(t: Target, dispatcher: Agent): Promise<{ first: number; total: number }> {
  const t0 = performance.now();
  const res = await request(t.url, {
    method: 'POST',
    headers: t.headers,
    body: bodyOf(t, 'chat', 'stream'),
    dispatcher,
  });
  let first = Number.NaN;
  for await (const chunk of res.body) {
    if (Number.isNaN(first) && (chunk as Buffer).includes('"content"')) first = performance.now() - t0;
  }
  if (res.statusCode !== 200 || Number.isNaN(first)) {
    throw new Error(`${t.name}: streaming request gave HTTP ${res.statusCode} without content`);
  }
  return { first, total: performance.now() - t0 };
}

function pct(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? Number.NaN;
}

// ---------------------------------------------------------------------------------------------------------------
// Report

interface Row {
  target: TargetName;
  dialect: BenchDialect;
  mode: Mode;
  c: number;
  rps: number;
  meanMs: number;
  p50Ms: number;
  p99Ms: number;
  /** 2xx responses completed in the measured window. */
  ok: number;
  /** non-2xx + errors (errors include timeouts). Anything but 0 invalidates the row. */
  bad: number;
  addedMeanMs: number;
  addedP50Ms: number;
  cpuPct: number;
  /** CPU time per request: compares processes that ran at different throughputs. */
  cpuUsPerReq: number;
  rssMiB: number;
  doubleCpuPct: number;
  loadgenCpuPct: number;
  /** CPU time per request of the target's PostgreSQL and Redis, apart from cpuUsPerReq. */
  backingCpuUsPerReq: Record<string, number>;
  statusCodes: Record<string, number>;
}

function toRows(runs: Run[]): Row[] {
  const direct = (dialect: BenchDialect, mode: Mode, c: number) =>
    runs.find((r) => r.target === 'direct' && r.dialect === dialect && r.mode === mode && r.c === c);
  // Latencies of a run that completed nothing arrive as null (JSON has no NaN); they must not count as 0 ms.
  const ms = (run: Run | undefined, v: (l: LoadResult) => number) =>
    run && run.load.ok > 0 ? v(run.load) : Number.NaN;
  return runs.map((r) => {
    const d = direct(r.dialect, r.mode, r.c);
    const mean = ms(r, (l) => l.meanMs);
    const p50 = ms(r, (l) => l.p50Ms);
    return {
      target: r.target,
      dialect: r.dialect,
      mode: r.mode,
      c: r.c,
      rps: r.load.rps,
      meanMs: mean,
      p50Ms: p50,
      p99Ms: ms(r, (l) => l.p99Ms),
      ok: r.load.ok,
      bad: r.load.non2xx + r.load.errors,
      addedMeanMs: round(mean - ms(d, (l) => l.meanMs)),
      addedP50Ms: round(p50 - ms(d, (l) => l.p50Ms)),
      cpuPct: r.cpuPct,
      cpuUsPerReq: round(((r.cpuPct / 100) * 1e6) / r.load.rps, 1),
      rssMiB: r.rssMiB,
      doubleCpuPct: r.doubleCpuPct,
      loadgenCpuPct: r.load.loadCpuPct,
      backingCpuUsPerReq: Object.fromEntries(
        Object.entries(r.backingCpuPct).map(([name, pct]) => [name, round(((pct / 100) * 1e6) / r.load.rps, 1)]),
      ),
      statusCodes: r.load.statusCodes,
    };
  });
}

export function printRows(rows: Row[]): void {
  console.table(
    rows.map((r) => ({
      target: r.target,
      dialect: r.dialect ?? 'chat',
      mode: r.mode,
      c: r.c,
      'req/s': r.rps,
      'mean ms': r.meanMs,
      'p50 ms': r.p50Ms,
      'p99 ms': r.p99Ms,
      ok: r.ok,
      bad: r.bad,
      '+mean ms': r.addedMeanMs,
      '+p50 ms': r.addedP50Ms,
      'cpu %': r.cpuPct,
      'cpu µs/req': r.cpuUsPerReq,
      'rss MiB': r.rssMiB,
      'double cpu %': r.doubleCpuPct,
      'loadgen cpu %': r.loadgenCpuPct,
      'backing µs/req': Object.entries(r.backingCpuUsPerReq ?? {})
        .map(([name, us]) => `${name} ${us}`)
        .join(', '),
    })),
  );
}

export interface Verdict {
  id: string;
  pass: boolean | null;
  detail: string;
  /** A figure to read beside the targets, not one of them. */
  info?: true;
}

/** Our configurations: the standalone default, then PostgreSQL + Redis. */
const OURS = ['ours', 'ours-pg'] as const;

/** ours held at c=128 for settings.soakS with its memory sampled. */
interface Soak {
  target: TargetName;
  mode: Mode;
  c: number;
  seconds: number;
  rps: number;
  p99Ms: number;
  bad: number;
  rssMiB: number;
}

/** ours with and without the usage spool, alternated: the medians of each. */
interface SpoolCost {
  mode: Mode;
  c: number;
  rounds: number;
  on: { rps: number; cpuUsPerReq: number };
  off: { rps: number; cpuUsPerReq: number };
}

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? (s[m] as number) : ((s[m - 1] as number) + (s[m] as number)) / 2;
};

/** Both configurations up at once, each row run on one then the other (order swapped each round). */
async function spoolCost(double: Double, dir: string, settings: Settings): Promise<SpoolCost[]> {
  const on = await startOurs(double, dir, 'sqlite');
  const off = await startOurs(double, dir, 'sqlite', false);
  const out: SpoolCost[] = [];
  try {
    for (const mode of MODES) {
      for (const c of settings.connections.filter((n) => n <= 16)) {
        const runs: Record<'on' | 'off', Array<{ rps: number; cpuUsPerReq: number }>> = { on: [], off: [] };
        for (let i = 0; i < settings.spoolRounds; i++) {
          const order = i % 2 === 0 ? (['on', 'off'] as const) : (['off', 'on'] as const);
          for (const which of order) {
            const run = await runLoad(which === 'on' ? on : off, double, mode, c, settings);
            runs[which].push({ rps: run.load.rps, cpuUsPerReq: ((run.cpuPct / 100) * 1e6) / run.load.rps });
          }
        }
        const med = (xs: Array<{ rps: number; cpuUsPerReq: number }>) => ({
          rps: round(median(xs.map((x) => x.rps)), 1),
          cpuUsPerReq: round(median(xs.map((x) => x.cpuUsPerReq)), 1),
        });
        const k = { mode, c, rounds: settings.spoolRounds, on: med(runs.on), off: med(runs.off) };
        progress(
          `spool cost ${mode} c=${c}: on ${k.on.rps} req/s ${k.on.cpuUsPerReq} µs, off ${k.off.rps} req/s ${k.off.cpuUsPerReq} µs`,
        );
        out.push(k);
      }
    }
  } finally {
    await on.stop();
    await off.stop();
  }
  return out;
}

function verdicts(
  rows: Row[],
  ttft: Ttft[],
  concurrencies: number[],
  soaks: Soak[],
  memory: ReturnType<typeof chartProxyMemory>,
  spool: SpoolCost[],
): Verdict[] {
  const row = (target: TargetName, mode: Mode, c: number, dialect: BenchDialect = 'chat') =>
    rows.find((r) => r.target === target && (r.dialect ?? 'chat') === dialect && r.mode === mode && r.c === c);
  const out: Verdict[] = [];
  const directT = ttft.find((t) => t.target === 'direct');
  for (const name of OURS) {
    if (!rows.some((r) => r.target === name)) continue;
    for (const mode of MODES) {
      const [ours, bare] = [row(name, mode, 1), row('bare', mode, 1)];
      out.push(
        ours && bare
          ? {
              id: `(a) ${name} ${mode} c=1: added mean latency within 0.1 ms of bare's`,
              pass: ours.addedMeanMs - bare.addedMeanMs <= 0.1,
              detail: `${name} +${ours.addedMeanMs} ms, bare +${bare.addedMeanMs} ms, difference ${round(ours.addedMeanMs - bare.addedMeanMs)} ms`,
            }
          : { id: `(a) ${name} ${mode} c=1`, pass: null, detail: `${name} or bare not measured at c=1` },
      );
    }
    for (const mode of MODES) {
      for (const c of concurrencies.filter((n) => n > 1)) {
        const [ours, bare] = [row(name, mode, c), row('bare', mode, c)];
        if (!ours || !bare) continue;
        out.push({
          id: `(b) ${name} ${mode} c=${c}: throughput >= 85% of bare's`,
          pass: ours.rps >= 0.85 * bare.rps,
          detail: `${name} ${ours.rps} req/s, bare ${bare.rps} req/s = ${round((100 * ours.rps) / bare.rps, 1)}%`,
        });
        const backing = Object.values(ours.backingCpuUsPerReq).reduce((a, b) => a + b, 0);
        out.push({
          id: `(e) ${name} ${mode} c=${c}: CPU per request <= 1.3x bare's`,
          pass: ours.cpuUsPerReq <= 1.3 * bare.cpuUsPerReq,
          detail:
            `${name} ${ours.cpuUsPerReq} µs, bare ${bare.cpuUsPerReq} µs = ${round(ours.cpuUsPerReq / bare.cpuUsPerReq, 2)}x` +
            (backing > 0 ? ` (PostgreSQL + Redis apart: ${round(backing, 1)} µs)` : ''),
        });
      }
    }
    // The coding agents' dialects, held to the chat rows' targets against bare passing the same dialect through.
    for (const dialect of DIALECTS.filter((d) => d !== 'chat')) {
      for (const mode of MODES) {
        for (const c of concurrencies) {
          const [ours, bare] = [row(name, mode, c, dialect), row('bare', mode, c, dialect)];
          if (!ours || !bare) continue;
          if (c === 1) {
            out.push({
              id: `(a) ${name} ${dialect} ${mode} c=1: added mean latency within 0.1 ms of bare's`,
              pass: ours.addedMeanMs - bare.addedMeanMs <= 0.1,
              detail: `${name} +${ours.addedMeanMs} ms, bare +${bare.addedMeanMs} ms, difference ${round(ours.addedMeanMs - bare.addedMeanMs)} ms`,
            });
            continue;
          }
          out.push({
            id: `(b) ${name} ${dialect} ${mode} c=${c}: throughput >= 85% of bare's`,
            pass: ours.rps >= 0.85 * bare.rps,
            detail: `${name} ${ours.rps} req/s, bare ${bare.rps} req/s = ${round((100 * ours.rps) / bare.rps, 1)}%`,
          });
          out.push({
            id: `(e) ${name} ${dialect} ${mode} c=${c}: CPU per request <= 1.3x bare's`,
            pass: ours.cpuUsPerReq <= 1.3 * bare.cpuUsPerReq,
            detail: `${name} ${ours.cpuUsPerReq} µs, bare ${bare.cpuUsPerReq} µs = ${round(ours.cpuUsPerReq / bare.cpuUsPerReq, 2)}x`,
          });
        }
      }
    }
    const oursT = ttft.find((t) => t.target === name);
    out.push(
      oursT && directT
        ? {
            id: `(c) ${name} streaming TTFT overhead <= 1 ms (p50)`,
            pass: oursT.ttftP50Ms - directT.ttftP50Ms <= 1,
            detail: `p50 +${round(oursT.ttftP50Ms - directT.ttftP50Ms)} ms, mean +${round(oursT.ttftMeanMs - directT.ttftMeanMs)} ms`,
          }
        : { id: `(c) ${name} streaming TTFT overhead`, pass: null, detail: `${name} or direct TTFT not measured` },
    );
    const loaded = rows.filter((r) => r.target === name && r.c === Math.max(...concurrencies));
    const soak = soaks.find((k) => k.target === name);
    for (const [what, rss] of [
      [`c=${Math.max(...concurrencies)} runs`, Math.max(...loaded.map((r) => r.rssMiB))],
      [soak ? `${soak.seconds} s soak at c=${soak.c} (${soak.mode})` : 'soak', soak ? soak.rssMiB : Number.NaN],
    ] as const) {
      out.push({
        id: `(m) ${name} peak RSS in the ${what} < the chart's limit`,
        pass: Number.isFinite(rss) ? rss < memory.limitMiB : null,
        detail: `peak ${rss} MiB, limit ${memory.limitMiB} MiB with ${memory.nodeOptions}`,
      });
    }
  }
  // Where the floor of accounting gateways lies against bare, and ours against that floor.
  for (const mode of MODES) {
    for (const c of concurrencies) {
      const [floor, bare, ours] = [row('floor', mode, c), row('bare', mode, c), row('ours', mode, c)];
      if (!floor || !bare) continue;
      out.push({
        id: `(f) floor ${mode} c=${c}`,
        pass: null,
        info: true,
        detail:
          `${floor.rps} req/s = ${round((100 * floor.rps) / bare.rps, 1)}% of bare's, ` +
          `${floor.cpuUsPerReq} µs CPU per request = ${round(floor.cpuUsPerReq / bare.cpuUsPerReq, 2)}x bare's` +
          (ours
            ? `; ours ${round((100 * ours.rps) / floor.rps, 1)}% of the floor's throughput, ${round(ours.cpuUsPerReq / floor.cpuUsPerReq, 2)}x its CPU`
            : ''),
      });
    }
  }
  // The usage spool (one write per event-loop turn, no fsync) costs at most 3 % of throughput.
  for (const k of spool) {
    out.push({
      id: `(u) ours ${k.mode} c=${k.c}: with the usage spool, throughput within 3% of without`,
      pass: k.on.rps >= 0.97 * k.off.rps,
      detail:
        `medians of ${k.rounds} alternated runs: ${k.on.rps} vs ${k.off.rps} req/s (${round((100 * k.on.rps) / k.off.rps, 1)}%), ` +
        `${k.on.cpuUsPerReq} vs ${k.off.cpuUsPerReq} µs CPU per request (${round(k.on.cpuUsPerReq - k.off.cpuUsPerReq, 1)} µs)`,
    });
  }
  // The fastest peer that runs here: every row of ours (all features on), and of ours-pg, ahead of it.
  for (const name of OURS) {
    for (const mode of MODES) {
      for (const c of concurrencies) {
        const [ours, tz] = [row(name, mode, c), row('tensorzero', mode, c)];
        if (!ours || !tz) {
          out.push({
            id: `(t) ${name} ${mode} c=${c}: vs tensorzero`,
            pass: null,
            detail: `${name} or tensorzero not measured`,
          });
          continue;
        }
        out.push({
          id: `(t) ${name} ${mode} c=${c}: ahead of tensorzero in throughput and CPU per request`,
          pass: ours.rps > tz.rps && ours.cpuUsPerReq < tz.cpuUsPerReq,
          detail:
            `${ours.rps} vs ${tz.rps} req/s (${round(ours.rps / tz.rps, 2)}x), ` +
            `${ours.cpuUsPerReq} vs ${tz.cpuUsPerReq} µs CPU per request`,
        });
      }
    }
  }
  for (const mode of MODES) {
    for (const c of concurrencies) {
      const [ours, portkey] = [row('ours', mode, c), row('portkey', mode, c)];
      if (!ours || !portkey) {
        out.push({ id: `(d) ${mode} c=${c}: ours vs portkey`, pass: null, detail: 'ours or portkey not measured' });
        continue;
      }
      const x = ours.rps / portkey.rps;
      out.push({
        id: `(d) ${mode} c=${c}: ours >= 10x portkey throughput and <= 1/10 of its added latency`,
        pass: x >= 10 && ours.addedMeanMs <= portkey.addedMeanMs / 10,
        detail:
          `throughput ${round(x, 2)}x (${ours.rps} vs ${portkey.rps} req/s), ` +
          `added mean ${ours.addedMeanMs} vs ${portkey.addedMeanMs} ms`,
      });
    }
  }
  return out;
}

export function printVerdicts(list: Verdict[]): void {
  for (const v of list) {
    const word = v.info ? 'INFO' : v.pass === null ? 'SKIP' : v.pass ? 'PASS' : 'FAIL';
    console.log(`${word} ${v.id}: ${v.detail}`);
  }
}

function shout(rows: Row[]): void {
  for (const r of rows.filter((x) => x.bad > 0 || x.ok === 0)) {
    const what =
      r.ok === 0
        ? 'no request completed within the measured window'
        : `${r.bad} failed requests (status codes ${JSON.stringify(r.statusCodes)})`;
    console.error(
      `\n!!!!! ${r.target} ${r.dialect ?? 'chat'} ${r.mode} c=${r.c}: ${what}; this row's numbers are not comparable !!!!!\n`,
    );
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Main

export interface GatewaysResult {
  machine: MachineFacts;
  settings: Settings;
  upstream: typeof UPSTREAM;
  targets: Record<string, { status: 'measured' | 'skipped' | 'failed'; notes: string[] }>;
  rows: Row[];
  ttft: Array<Ttft & { overheadP50Ms: number; overheadMeanMs: number }>;
  verdicts: Verdict[];
  /** Load average when the run ended: with machine.loadAverage, how busy the machine was besides this run. */
  loadAverageEnd: number[];
  /** What each of our configurations did (metrics and stored usage), by target. */
  ours?: Record<string, Record<string, number | string>>;
  soaks: Soak[];
  /** What the usage spool costs (ours with it against without, alternated). */
  spool?: SpoolCost[];
  /** The chart's proxy heap setting and memory limit, which ours ran with and is held to. */
  chartMemory: ReturnType<typeof chartProxyMemory>;
}

function parseSettings(): Settings & { jsonOut: string | undefined } {
  const { values } = parseArgs({
    options: {
      quick: { type: 'boolean', default: false },
      'spool-rounds': { type: 'string' },
      rounds: { type: 'string' },
      duration: { type: 'string' },
      warmup: { type: 'string' },
      connections: { type: 'string', default: '1,16,128' },
      targets: { type: 'string', default: TARGETS.join(',') },
      'ttft-requests': { type: 'string' },
      soak: { type: 'string' },
      'json-out': { type: 'string' },
      'install-litellm': { type: 'boolean', default: false },
      dialects: { type: 'string', default: DIALECTS.join(',') },
    },
  });
  const dialects = (values.dialects ?? '').split(',').map((d) => d.trim());
  const unknownDialects = dialects.filter((d) => !(DIALECTS as readonly string[]).includes(d));
  if (unknownDialects.length > 0)
    throw new Error(`unknown dialects ${unknownDialects.join(',')}; known: ${DIALECTS.join(',')}`);
  const quick = values.quick ?? false;
  const targets = (values.targets ?? '').split(',').map((t) => t.trim());
  const unknown = targets.filter((t) => !(TARGETS as readonly string[]).includes(t));
  if (unknown.length > 0) throw new Error(`unknown targets ${unknown.join(',')}; known: ${TARGETS.join(',')}`);
  const ttftRequests = Number(values['ttft-requests'] ?? (quick ? 100 : 500));
  return {
    durationS: Number(values.duration ?? (quick ? 2 : 8)),
    soakS: Number(values.soak ?? (quick ? 5 : 60)),
    spoolRounds: Number(values['spool-rounds'] ?? (quick ? 1 : 5)),
    rounds: Math.max(1, Number(values.rounds ?? (quick ? 1 : 3))),
    warmupS: Number(values.warmup ?? (quick ? 0.5 : 2)),
    connections: (values.connections ?? '').split(',').map(Number),
    // direct first: every other row is compared with it.
    targets: TARGETS.filter((t) => t === 'direct' || targets.includes(t)),
    ttftRequests,
    ttftWarmup: Math.max(10, Math.round(ttftRequests / 10)),
    installLiteLLM: values['install-litellm'] ?? false,
    dialects: DIALECTS.filter((d) => d === 'chat' || dialects.includes(d)),
    jsonOut: values['json-out'],
  };
}

type Outcome = GatewaysResult['targets'][string];

/** Starts each target and checks it answers every dialect it serves; one that cannot is recorded, not measured. */
async function startAll(
  double: Double,
  dir: string,
  settings: Settings,
  targets: Record<string, Outcome>,
): Promise<Target[]> {
  const started: Target[] = [];
  for (const name of settings.targets) {
    let t: Target | undefined;
    try {
      progress(`${name}: starting`);
      t = await startTarget(name, double, dir, settings);
      const failures = await probe(t, settings.dialects);
      if (failures.length > 0) throw new Error(`not answering 200 through to the double: ${failures.join('; ')}`);
      started.push(t);
    } catch (err) {
      targets[name] = failedOutcome(name, err, t);
      await t?.stop();
    }
  }
  return started;
}

function failedOutcome(name: TargetName, err: unknown, t: Target | undefined): Outcome {
  const status = err instanceof Skip ? 'skipped' : 'failed';
  progress(`${name}: ${status}: ${errorMessage(err)}`);
  return { status, notes: [...(t?.notes ?? []), errorMessage(err)] };
}

/**
 * Every row, each target's run of it one after the other: this machine's speed drifts over minutes
 * (bare's own rate moved 1.2-2.1x between two runs 10 minutes apart, RESULTS 27), and a row's
 * targets measured seconds apart share the drift, where one target's rows then the next's did not.
 * With --rounds N the row's targets run N times in turn, the order reversed each round, so that no
 * target always runs first; the row is then each target's median run (medianRuns). The targets not
 * under load sit idle meanwhile. A target that fails a run is dropped from the rest.
 */
async function measureRows(
  live: Target[],
  double: Double,
  settings: Settings,
  runs: Run[],
  targets: Record<string, Outcome>,
): Promise<void> {
  for (const dialect of settings.dialects) {
    for (const mode of MODES) {
      for (const c of settings.connections) {
        for (let i = 0; i < settings.rounds; i++) {
          const serving = live.filter((x) => urlOf(x, dialect) !== undefined);
          for (const t of i % 2 === 0 ? serving : serving.reverse()) {
            await measureRun(t, { dialect, mode, c }, double, settings, runs, (err) => {
              targets[t.name] = failedOutcome(t.name, err, t);
              live.splice(live.indexOf(t), 1);
            });
          }
        }
      }
    }
  }
}

/** One run of a row on one target, recorded; a target whose run fails is stopped and `dropped`. */
async function measureRun(
  t: Target,
  row: { dialect: BenchDialect; mode: Mode; c: number },
  double: Double,
  settings: Settings,
  runs: Run[],
  dropped: (err: unknown) => void,
): Promise<void> {
  const { dialect, mode, c } = row;
  try {
    const run = await runLoad(t, double, mode, c, settings, settings.durationS, dialect);
    runs.push(run);
    const bad = run.load.non2xx + run.load.errors;
    progress(
      `${t.name} ${dialect} ${mode} c=${c}: ${run.load.rps} req/s, mean ${run.load.meanMs} ms, cpu ${run.cpuPct}% ` +
        `(warm-up ${run.load.warmupRps.join(' -> ')} req/s)` +
        (bad > 0 ? `, ${bad} FAILED REQUESTS` : '') +
        (run.load.ok === 0 ? ', NOTHING COMPLETED' : ''),
    );
  } catch (err) {
    dropped(err);
    await t.stop();
  }
}

/**
 * Each target's median run of each row, by requests a second (its CPU, latency and memory are that
 * run's, so a row's figures come from one run; of an even number, the slower of the middle two); a row
 * run once is that run.
 */
export function medianRuns(runs: readonly Run[]): Run[] {
  const byRow = new Map<string, Run[]>();
  for (const r of runs) {
    const key = `${r.target}|${r.dialect}|${r.mode}|${r.c}`;
    byRow.set(key, [...(byRow.get(key) ?? []), r]);
  }
  return [...byRow.values()].map((rs) => {
    const sorted = [...rs].sort((a, b) => a.load.rps - b.load.rps);
    return sorted[Math.floor((sorted.length - 1) / 2)] as Run;
  });
}

/**
 * After the rows, per target: streaming time to first token (after the load runs: a freshly started
 * process answers its first thousand requests with cold JIT, which inflated this figure by ~1 ms for
 * ours; a gateway in service is warm), ours' soak and what ours did.
 */
async function finishTarget(
  t: Target,
  double: Double,
  settings: Settings,
  out: { ttfts: Ttft[]; soaks: Soak[]; ours: Record<string, Record<string, number | string>> },
): Promise<void> {
  const ttft = await timeToFirstToken(t, settings);
  progress(`${t.name}: TTFT p50 ${ttft.ttftP50Ms} ms`);
  out.ttfts.push(ttft);
  if ((OURS as readonly string[]).includes(t.name) && settings.soakS > 0) {
    const run = await runLoad(t, double, 'stream', 128, settings, settings.soakS);
    out.soaks.push({
      target: t.name,
      mode: 'stream',
      c: 128,
      seconds: settings.soakS,
      rps: run.load.rps,
      p99Ms: run.load.p99Ms,
      bad: run.load.non2xx + run.load.errors,
      rssMiB: run.rssMiB,
    });
    progress(`${t.name} soak ${settings.soakS} s at c=128: ${run.load.rps} req/s, peak RSS ${run.rssMiB} MiB`);
  }
  if (t.inspect) out.ours[t.name] = await t.inspect();
}

async function main(): Promise<void> {
  const { jsonOut, ...settings } = parseSettings();
  const dir = mkdtempSync(join(os.tmpdir(), 'gateways-bench-'));
  installCleanup(dir);
  const machine = machineFacts();
  progress(`${machine.cpuModel}, ${machine.cores} cores, load average ${machine.loadAverage.join(' ')}`);
  const double = await startDouble();
  const runs: Run[] = [];
  const ttfts: Ttft[] = [];
  const soaks: Soak[] = [];
  const ours: Record<string, Record<string, number | string>> = {};
  const targets: GatewaysResult['targets'] = {};
  if (settings.targets.some((t) => (OURS as readonly string[]).includes(t))) {
    progress('npm run build (ours runs from dist/, as the image does)');
    execFileSync('npm', ['run', 'build'], { cwd: ROOT, stdio: 'ignore' });
  }

  const live = await startAll(double, dir, settings, targets);
  try {
    await measureRows(live, double, settings, runs, targets);
    for (const t of [...live]) {
      try {
        await finishTarget(t, double, settings, { ttfts, soaks, ours });
        targets[t.name] = { status: 'measured', notes: t.notes };
      } catch (err) {
        targets[t.name] = failedOutcome(t.name, err, t);
      }
    }
  } finally {
    for (const t of live) await t.stop();
  }
  const spool =
    settings.targets.includes('ours') && settings.spoolRounds > 0 ? await spoolCost(double, dir, settings) : [];
  await double.child.stop();

  const rows = toRows(medianRuns(runs));
  const directTtft = ttfts.find((t) => t.target === 'direct');
  const result: GatewaysResult = {
    machine,
    settings,
    upstream: UPSTREAM,
    targets,
    rows,
    ttft: ttfts.map((t) => ({
      ...t,
      overheadP50Ms: directTtft ? round(t.ttftP50Ms - directTtft.ttftP50Ms) : Number.NaN,
      overheadMeanMs: directTtft ? round(t.ttftMeanMs - directTtft.ttftMeanMs) : Number.NaN,
    })),
    verdicts: verdicts(rows, ttfts, settings.connections, soaks, chartProxyMemory(), spool),
    spool,
    loadAverageEnd: os.loadavg().map((l) => round(l, 2)),
    ours,
    soaks,
    chartMemory: chartProxyMemory(),
  };
  report(result);
  if (jsonOut) {
    mkdirSync(dirname(jsonOut), { recursive: true });
    writeFileSync(jsonOut, `${JSON.stringify(result, null, 2)}\n`);
  }
}

export function report(result: GatewaysResult): void {
  console.log(
    `\nGateway overhead, ${result.machine.cpuModel} x${result.machine.cores}, node ${result.machine.node}; ` +
      `autocannon warm-up until the rate levels off (${WARMUP_SLICE_S} s slices, at least ${result.settings.warmupS} s, at most ${longestWarmUpS(result.settings.warmupS)} s) + ${result.settings.durationS} s per run, ` +
      `each row each target's median of ${result.settings.rounds ?? 1} alternated run(s); ` +
      `upstream: ${result.upstream.completionTokens} tokens, no delays. Shared machine: expect noise ` +
      `(load average ${result.machine.loadAverage.join(' ')} at start, ${result.loadAverageEnd.join(' ')} at end).`,
  );
  console.table(
    Object.entries(result.targets).map(([target, t]) => ({ target, status: t.status, notes: t.notes.join(' | ') })),
  );
  printRows(result.rows);
  console.log(`Streaming time to first token, sequential, ${result.settings.ttftRequests} requests per target:`);
  console.table(result.ttft);
  if (result.soaks.length > 0) {
    console.log(
      `Soak of ours (memory), chart limit ${result.chartMemory.limitMiB} MiB, heap ${result.chartMemory.heapMiB} MiB:`,
    );
    console.table(result.soaks);
  }
  if (result.ours) console.log(`ours' bookkeeping during the run: ${JSON.stringify(result.ours)}`);
  shout(result.rows);
  printVerdicts(result.verdicts);
}

export function installCleanup(dir: string): void {
  process.on('exit', () => {
    for (const child of running) child.kill();
    rmSync(dir, { recursive: true, force: true });
  });
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.once(signal, () => {
      progress(`${signal}: stopping every benchmark process`);
      process.exit(130);
    });
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) await main();
