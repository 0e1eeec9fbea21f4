import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { type GatewaysResult, machineFacts, printRows, printVerdicts, type Verdict } from './gateways.js';
import { writePlots } from './plot.js';
import { printPoints, type ScalingResult } from './proxy-scaling.js';
import { printStreamRows, type StreamsResult } from './streams.js';

/**
 * `npm run bench`: the benchmarks of this repo, each in a child process of its own, collected into
 * e2e/bench/out/results-<date>.json and e2e/bench/out/latest.json, with one summary per section at the end.
 *   gateways  gateways.ts: proxy overhead against direct, a bare Node proxy, TensorZero, Portkey and LiteLLM
 *   streams   streams.ts: thousands of long streams held open (in-cluster and Bedrock routes), slow readers
 *   scaling   proxy-scaling.ts: proxy throughput, p99 and CPU per request at 1..1000 routed models and API keys
 *   latency   proxy-latency.ts: sequential added latency, in-process proxy
 *   keys      key-checks.ts: what a team key's lookup, limits (local or Redis) and budgets add
 *   bedrock   bedrock-latency.ts: streaming overhead of the Bedrock path through the AWS double
 *   usage     usage-store.ts: SQLite usage store at 1M records
 *   operator  operator-scale.ts: operator on a local control plane (binaries from e2e/cluster/build.sh)
 *   cold-start  cold-start.ts: time to first token after scale from zero (control plane, kwok, real Ollama)
 *   engines   engines.ts: prefix-aware routing over 2 real vLLM replicas against least in flight; Ollama
 *             against vLLM on the same model at concurrency 1, 4 and 16
 *   mcp       mcp.ts: what the gateway adds to an MCP tool call (real server-everything), p50/p99
 *   guard     guardrails-cache.ts: what built-in guardrails add to a 2,000-token request and a stream's
 *             first token, and a response cache hit's latency
 *   routing   routing.ts: model "auto" over a labelled set (real Ollama, hosted double): savings against the
 *             premium model, tier shares, agreement and under-routing per RoutingPolicy; routing overhead p50
 * Then the charts of the sections that ran (plot.ts) as PNG files in e2e/bench/plots/; `npm run bench:plot -- FILE`
 * draws them again from a saved results file.
 * Flags: --only gateways,usage,...  --quick (smaller runs)  --duration S (gateways, per row)  --install-litellm
 */

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const OUT = join(ROOT, 'e2e', 'bench', 'out');
const OUTPUT_KEEP = 64 * 1024;

interface Section {
  script: string;
  args: (opts: Options) => string[];
  /** Writes its own JSON result (--json-out); the others' tables are captured from console.table. */
  structured?: true;
  /** A JSON result it writes to a fixed path of its own: kept as its result when written during the section. */
  resultFile?: string;
  /** Prints its structured result again in the final summary. */
  summary?: (result: unknown) => void;
}

const SECTIONS: Record<string, Section> = {
  gateways: {
    script: 'e2e/bench/gateways.ts',
    args: (opts) => opts.gatewayArgs,
    structured: true,
    summary: (result) => {
      const r = result as GatewaysResult;
      printRows(r.rows);
      printVerdicts(r.verdicts);
    },
  },
  streams: {
    script: 'e2e/bench/streams.ts',
    args: (opts) => (opts.quick ? ['--quick'] : []),
    structured: true,
    summary: (result) => {
      const r = result as StreamsResult;
      printStreamRows(r.rows);
      printVerdicts(r.verdicts);
    },
  },
  scaling: {
    script: 'e2e/bench/proxy-scaling.ts',
    args: (opts) => (opts.quick ? ['--quick'] : []),
    structured: true,
    summary: (result) => {
      const r = result as ScalingResult;
      printPoints(r.points);
      printVerdicts(r.verdicts);
    },
  },
  latency: { script: 'e2e/bench/proxy-latency.ts', args: (opts) => (opts.quick ? ['300'] : []) },
  keys: { script: 'e2e/bench/key-checks.ts', args: (opts) => (opts.quick ? ['300'] : []) },
  bedrock: { script: 'e2e/bench/bedrock-latency.ts', args: (opts) => (opts.quick ? ['50'] : []) },
  usage: { script: 'e2e/bench/usage-store.ts', args: (opts) => (opts.quick ? ['100000'] : []) },
  operator: {
    script: 'e2e/bench/operator-scale.ts',
    args: (opts) => (opts.quick ? ['20'] : []),
    resultFile: join(OUT, 'operator-scale.json'),
  },
  'cold-start': { script: 'e2e/bench/cold-start.ts', args: (opts) => (opts.quick ? ['1'] : []) },
  engines: {
    script: 'e2e/bench/engines.ts',
    args: (opts) => (opts.quick ? ['--quick'] : []),
    structured: true,
    summary: (result) => {
      const r = result as { prefix?: unknown[]; engines?: unknown[]; verdicts: Verdict[] };
      if (r.prefix) console.table(r.prefix);
      if (r.engines) console.table(r.engines);
      printVerdicts(r.verdicts);
    },
  },
  mcp: {
    script: 'e2e/bench/mcp.ts',
    args: (opts) => (opts.quick ? ['--quick'] : []),
    structured: true,
    summary: (result) => {
      const r = result as { rows: unknown[]; verdicts: Verdict[] };
      console.table(r.rows);
      printVerdicts(r.verdicts);
    },
  },
  guard: {
    script: 'e2e/bench/guardrails-cache.ts',
    args: (opts) => (opts.quick ? ['--quick'] : []),
    structured: true,
    summary: (result) => {
      const r = result as { rows: unknown[]; verdicts: Verdict[] };
      console.table(r.rows);
      printVerdicts(r.verdicts);
    },
  },
  routing: {
    script: 'e2e/bench/routing.ts',
    args: (opts) => (opts.quick ? ['--quick'] : []),
    structured: true,
    summary: (result) => {
      const r = result as { offline: unknown[]; online?: unknown[]; overheadMs?: unknown; verdicts: Verdict[] };
      console.table(r.online ?? r.offline);
      if (r.overheadMs) console.table(r.overheadMs);
      printVerdicts(r.verdicts);
    },
  },
};

/**
 * The older benchmarks only print console.table; this preload also appends every table they print, as a JSON line,
 * to $BENCH_TABLES_FILE, so their numbers reach the results file without changing them.
 */
const CAPTURE_TABLES =
  'data:text/javascript,' +
  encodeURIComponent(
    "import { appendFileSync } from 'node:fs';" +
      'const file = process.env.BENCH_TABLES_FILE; const table = console.table.bind(console);' +
      'console.table = (data, columns) => { if (file) appendFileSync(file, JSON.stringify(data) + "\\n");' +
      ' return table(data, columns); };',
  );

interface SectionResult {
  status: 'ok' | 'failed' | 'interrupted';
  exitCode: number | null;
  seconds: number;
  /** A structured section's result (gateways, scaling, operator); the tables the others printed. */
  result?: unknown;
  tables?: unknown[];
  /** What the section printed (its last 64 KiB), for the facts it does not put in a table. */
  output?: string;
}

// The section running now, in a process group of its own so that its whole tree (proxies, doubles, a control plane)
// can be signalled at once.
let current: ChildProcess | undefined;
let interrupted = false;

function signalGroup(signal: NodeJS.Signals): void {
  const pid = current?.pid;
  if (pid === undefined || current?.exitCode !== null || current.signalCode !== null) return;
  try {
    process.kill(-pid, signal);
  } catch {
    // Already gone.
  }
}

function installCleanup(): void {
  process.on('exit', () => signalGroup('SIGKILL'));
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.on(signal, () => {
      // A second Ctrl-C does not wait for the grace period.
      if (interrupted) process.exit(130);
      interrupted = true;
      console.error(`\n${signal}: stopping the running benchmark (again to force)`);
      signalGroup('SIGTERM');
      setTimeout(() => signalGroup('SIGKILL'), 5000).unref();
    });
  }
}

async function runSection(name: string, section: Section, opts: Options, scratch: string): Promise<SectionResult> {
  const tables = join(scratch, `${name}.tables.jsonl`);
  const jsonOut = join(scratch, `${name}.json`);
  const own = section.args(opts);
  const args = section.structured
    ? ['--import', 'tsx', section.script, '--json-out', jsonOut, ...own]
    : ['--import', 'tsx', '--import', CAPTURE_TABLES, section.script, ...own];
  console.log(`\n=== ${name}: ${section.script} ${own.join(' ')}`);
  const started = performance.now();
  const startedAt = Date.now();
  current = spawn(process.execPath, args, {
    cwd: ROOT,
    env: { ...process.env, BENCH_TABLES_FILE: tables },
    stdio: ['ignore', 'pipe', 'inherit'],
    detached: true,
  });
  // Teed: the run stays visible live, and lines printed outside tables (usage-store's write rate) are kept too.
  let output = '';
  current.stdout?.on('data', (d: Buffer) => {
    process.stdout.write(d);
    output = (output + d.toString()).slice(-OUTPUT_KEEP);
  });
  const exitCode = await new Promise<number | null>((resolve) => {
    current?.once('exit', (code) => resolve(code));
    current?.once('error', () => resolve(null));
  });
  current = undefined;
  const seconds = +((performance.now() - started) / 1000).toFixed(1);
  const status = interrupted ? 'interrupted' : exitCode === 0 ? 'ok' : 'failed';
  if (existsSync(jsonOut)) {
    return { status, exitCode, seconds, result: JSON.parse(readFileSync(jsonOut, 'utf8')) as unknown };
  }
  const lines = existsSync(tables) ? readFileSync(tables, 'utf8').split('\n').filter(Boolean) : [];
  // A file left by an earlier run is not this run's result.
  const file = section.resultFile;
  const fresh = file && existsSync(file) && statSync(file).mtimeMs >= startedAt;
  return {
    status,
    exitCode,
    seconds,
    ...(fresh ? { result: JSON.parse(readFileSync(file, 'utf8')) as unknown } : {}),
    tables: lines.map((l) => JSON.parse(l) as unknown),
    output,
  };
}

interface Options {
  only: string[];
  quick: boolean;
  gatewayArgs: string[];
}

function parseOptions(): Options {
  const { values } = parseArgs({
    options: {
      only: { type: 'string', default: Object.keys(SECTIONS).join(',') },
      quick: { type: 'boolean', default: false },
      duration: { type: 'string' },
      'install-litellm': { type: 'boolean', default: false },
    },
  });
  const only = (values.only ?? '').split(',').map((s) => s.trim());
  const unknown = only.filter((s) => !(s in SECTIONS));
  if (unknown.length > 0) throw new Error(`unknown sections ${unknown.join(',')}; known: ${Object.keys(SECTIONS)}`);
  const gatewayArgs = [
    ...(values.quick ? ['--quick'] : []),
    ...(values.duration ? ['--duration', values.duration] : []),
    ...(values['install-litellm'] ? ['--install-litellm'] : []),
  ];
  return { only, quick: values.quick ?? false, gatewayArgs };
}

function summarize(results: Record<string, SectionResult>): void {
  console.log('\n================ summary ================');
  for (const [name, r] of Object.entries(results)) {
    console.log(`\n== ${name}: ${r.status} in ${r.seconds} s${r.exitCode ? ` (exit ${r.exitCode})` : ''}`);
    const summary = SECTIONS[name]?.summary;
    if (r.result !== undefined && summary) summary(r.result);
    for (const table of r.tables ?? []) console.table(table);
  }
}

/** Charts of the sections that ran; after the results file, so a drawing problem loses no measurement. */
async function plot(results: Record<string, SectionResult>): Promise<void> {
  try {
    const written = await writePlots({
      gateways: results.gateways?.result,
      scaling: results.scaling?.result,
      operator: results.operator?.result,
    });
    for (const path of written) console.log(`plot: ${path}`);
  } catch (err) {
    console.error(`plots not drawn: ${err instanceof Error ? err.message : String(err)}`);
    process.exitCode = 1;
  }
}

async function main(): Promise<void> {
  const opts = parseOptions();
  installCleanup();
  const machine = machineFacts();
  const scratch = mkdtempSync(join(tmpdir(), 'bench-'));
  const results: Record<string, SectionResult> = {};
  try {
    for (const name of opts.only) {
      const section = SECTIONS[name];
      if (!section || interrupted) continue;
      results[name] = await runSection(name, section, opts, scratch);
    }
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
  summarize(results);
  const stamp = machine.date.replace(/[:.]/g, '-');
  const file = join(OUT, `results-${stamp}.json`);
  const text = `${JSON.stringify({ machine, quick: opts.quick, sections: results }, null, 2)}\n`;
  mkdirSync(OUT, { recursive: true });
  writeFileSync(file, text);
  // latest.json stays the last complete run; an interrupted one is only kept under its date.
  if (!interrupted) writeFileSync(join(OUT, 'latest.json'), text);
  console.log(`\nwritten ${file}${interrupted ? '' : ' and e2e/bench/out/latest.json'}`);
  if (interrupted) process.exit(130);
  await plot(results);
  if (Object.values(results).some((r) => r.status !== 'ok')) process.exitCode = 1;
}

await main();
