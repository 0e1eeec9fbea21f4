import { type ChildProcess, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { startPostgres } from '../postgres/server.js';
import { startRedis } from '../redis/server.js';
import type { LoadArgs, LoadResult } from './load.js';

/**
 * Where the proxy's CPU goes under load: the same upstream double and autocannon process as
 * gateways.ts, the proxy run from the compiled dist/ (as the image runs it) under `--cpu-prof`,
 * the profile then summarized as self and inclusive time per function and self time per package.
 * Run: npm run bench:profile -- [--mode json|stream] [--dialect chat|responses|messages] [--responses-store false]
 *      [--connections 16] [--duration 10] [--top 40]
 *      [--store sqlite|postgres] [--target ours|bare|floor] [--keep DIR] [--proxy-args="..."]
 */

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const MODEL = 'llama3.1:8b';

/** The request profiled per dialect: one user turn, as gateways.ts sends it. */
const DIALECTS = {
  chat: {
    path: '/openai/v1/chat/completions',
    barePath: '/v1/chat/completions',
    body: (stream: boolean, _store: boolean) => ({
      model: MODEL,
      messages: [{ role: 'user', content: 'hello there' }],
      stream,
      tags: ['project:bench'],
    }),
  },
  responses: {
    path: '/openai/v1/responses',
    barePath: '/v1/responses',
    body: (stream: boolean, store: boolean) => ({ model: MODEL, input: 'hello there', stream, store }),
  },
  messages: {
    path: '/anthropic/v1/messages',
    barePath: '/v1/messages',
    body: (stream: boolean, _store: boolean) => ({
      model: MODEL,
      max_tokens: 64,
      messages: [{ role: 'user', content: 'hello there' }],
      stream,
    }),
  },
};

interface CallFrame {
  functionName: string;
  url: string;
  lineNumber: number;
}
interface ProfileNode {
  id: number;
  callFrame: CallFrame;
  children?: number[];
}
interface CpuProfile {
  startTime: number;
  endTime: number;
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

function start(name: string, args: string[], env: NodeJS.ProcessEnv = process.env): ChildProcess {
  const child = spawn(process.execPath, args, { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'inherit'] });
  process.once('exit', () => child.kill('SIGKILL'));
  child.once('error', (err) => console.error(`${name}: ${err.message}`));
  return child;
}

const lineReaders = new WeakMap<ChildProcess, { lines: string[]; wake: () => void }>();

/** Waits for the next line of the child's stdout that passes `test` (lines are read once, in order). */
async function lineMatching(child: ChildProcess, test: (line: string) => boolean): Promise<string> {
  let reader = lineReaders.get(child);
  if (!reader) {
    if (!child.stdout) throw new Error('no stdout');
    const r = { lines: [] as string[], wake: () => {} };
    createInterface({ input: child.stdout }).on('line', (l) => {
      r.lines.push(l);
      r.wake();
    });
    child.once('exit', () => r.wake());
    lineReaders.set(child, r);
    reader = r;
  }
  for (;;) {
    const line = reader.lines.shift();
    if (line !== undefined) {
      if (test(line)) return line;
      continue;
    }
    if (child.exitCode !== null || child.signalCode !== null) throw new Error('exited before the expected line');
    const r = reader;
    await new Promise<void>((resolve) => {
      r.wake = resolve;
    });
  }
}

/** A frame's name as a reader finds it: function, file relative to the repo or package, line. */
function frameName(f: CallFrame): string {
  const file = f.url.replace(/^file:\/\//, '').replace(ROOT, '');
  return `${f.functionName || '(anonymous)'} ${file}:${f.lineNumber + 1}`;
}

/** Which package (or our source folder, or Node itself) a frame belongs to. */
function packageOf(f: CallFrame): string {
  const url = f.url;
  if (url === '') return f.functionName.startsWith('(') ? f.functionName : '(native)';
  if (url.startsWith('node:'))
    return `node:${url.slice(5).split('/')[0] === 'internal' ? url.slice(14).split('/')[0] : url.slice(5)}`;
  const nm = url.lastIndexOf('node_modules/');
  if (nm >= 0) {
    const rest = url.slice(nm + 13).split('/');
    return rest[0]?.startsWith('@') ? `${rest[0]}/${rest[1]}` : (rest[0] ?? url);
  }
  const ours = /\/dist\/([^/]+)\/([^/]+)$/.exec(url);
  return ours ? `${ours[1]}/${ours[2]}` : url;
}

export interface ProfileSummary {
  totalMs: number;
  idleMs: number;
  selfByFunction: Array<{ name: string; ms: number; pct: number }>;
  inclusiveByFunction: Array<{ name: string; ms: number; pct: number }>;
  selfByPackage: Array<{ name: string; ms: number; pct: number }>;
}

/**
 * Only samples in [from, to] (µs, the profile's clock) count: start-up (module loading) and the
 * warm-up are not what a request costs.
 */
export function summarize(profile: CpuProfile, top: number, from = 0, to = Number.POSITIVE_INFINITY): ProfileSummary {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const self = new Map<string, number>();
  const inclusive = new Map<string, number>();
  const pkg = new Map<string, number>();
  let total = 0;
  let idle = 0;
  const add = (m: Map<string, number>, k: string, v: number) => m.set(k, (m.get(k) ?? 0) + v);
  let at = profile.startTime;
  for (let i = 0; i < profile.samples.length; i++) {
    at += profile.timeDeltas[i] ?? 0;
    const us = profile.timeDeltas[i + 1] ?? profile.timeDeltas[i] ?? 0;
    if (at < from || at > to) continue;
    const leaf = byId.get(profile.samples[i] as number);
    if (!leaf) continue;
    total += us;
    if (leaf.callFrame.functionName === '(idle)') {
      idle += us;
      continue;
    }
    add(self, frameName(leaf.callFrame), us);
    add(pkg, packageOf(leaf.callFrame), us);
    // A recursive function counts once per sample.
    const seen = new Set<string>();
    for (let id: number | undefined = leaf.id; id !== undefined; id = parent.get(id)) {
      const node = byId.get(id);
      if (!node || node.callFrame.functionName === '(root)') continue;
      const name = frameName(node.callFrame);
      if (seen.has(name)) continue;
      seen.add(name);
      add(inclusive, name, us);
    }
  }
  const busy = total - idle;
  const rank = (m: Map<string, number>) =>
    [...m.entries()]
      .sort((a, b) => b[1] - a[1])
      .slice(0, top)
      .map(([name, us]) => ({ name, ms: +(us / 1000).toFixed(1), pct: +((100 * us) / busy).toFixed(2) }));
  return {
    totalMs: +(total / 1000).toFixed(0),
    idleMs: +(idle / 1000).toFixed(0),
    selfByFunction: rank(self),
    inclusiveByFunction: rank(inclusive),
    selfByPackage: rank(pkg),
  };
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      mode: { type: 'string', default: 'json' },
      dialect: { type: 'string', default: 'chat' },
      // false: Responses requests ask `store: false` (the cost of storing them, by difference).
      'responses-store': { type: 'string', default: 'true' },
      connections: { type: 'string', default: '16' },
      duration: { type: 'string', default: '10' },
      top: { type: 'string', default: '40' },
      keep: { type: 'string' },
      // bare: the pass-through floor (bare-proxy.ts), profiled the same way for comparison.
      target: { type: 'string', default: 'ours' },
      // postgres: usage in a local PostgreSQL and the (never reached) rate limit in a local Redis.
      store: { type: 'string', default: 'sqlite' },
      'proxy-args': { type: 'string', default: '' },
    },
  });
  const stream = values.mode === 'stream';
  const dir = values.keep ?? mkdtempSync(join(os.tmpdir(), 'profile-'));
  mkdirSync(dir, { recursive: true });
  const double = start('double', [
    '--import',
    'tsx',
    '--input-type=module',
    '-e',
    [
      `import { startOllamaDouble } from './e2e/doubles/ollama.ts';`,
      `const double = await startOllamaDouble({ models: [${JSON.stringify(MODEL)}], record: false });`,
      `double.behave({ completionTokens: 8, firstByteDelayMs: 0, interTokenDelayMs: 0 });`,
      `console.log(JSON.stringify({ url: double.url }));`,
    ].join('\n'),
  ]);
  const doubleUrl = (JSON.parse(await lineMatching(double, (l) => l.startsWith('{"url"'))) as { url: string }).url;
  writeFileSync(
    join(dir, 'config.yaml'),
    `apiVersion: ai.platform/v1beta1\nkind: ModelDeployment\nmetadata: { name: bench }\nspec: { model: "${MODEL}", serviceName: bench, endpoint: "${doubleUrl}" }\n`,
  );
  writeFileSync(join(dir, 'keys.txt'), 'sk-bench\n');
  // bare and floor: the pass-through and the accounting floor (gateways.ts), each a script of its own.
  const bareScript = { bare: 'e2e/bench/bare-proxy.ts', floor: 'e2e/bench/floor-proxy.ts' }[values.target ?? ''];
  const bare = bareScript !== undefined;
  const pg = !bare && values.store === 'postgres' ? await startPostgres() : undefined;
  const redis = pg ? await startRedis() : undefined;
  const backing = pg && redis ? ['--usage-db', pg.url, '--redis', redis.url] : ['--usage-db', join(dir, 'usage.db')];
  const proxy = bare
    ? start('bare', ['--cpu-prof', '--cpu-prof-dir', dir, '--import', 'tsx', bareScript, doubleUrl])
    : start('proxy', [
        '--cpu-prof',
        '--cpu-prof-dir',
        dir,
        'dist/proxy/main.js',
        '--config',
        join(dir, 'config.yaml'),
        '--keys-file',
        join(dir, 'keys.txt'),
        ...backing,
        // Checked on every request, reached by none: the limiter's cost, not its refusals.
        '--rate-limit-rps',
        '1000000',
        '--rate-limit-burst',
        '1000000',
        '--port',
        '0',
        '--metrics-port',
        '0',
        ...(values['proxy-args'] ? values['proxy-args'].split(' ') : []),
      ]);
  const listening = await lineMatching(proxy, (l) => l.includes(bare ? '{"url"' : '"proxy listening"'));
  const base = (JSON.parse(listening) as { url: string }).url;
  const dialect = DIALECTS[values.dialect as keyof typeof DIALECTS];
  if (!dialect) throw new Error(`--dialect is one of ${Object.keys(DIALECTS).join(', ')}`);
  const load: LoadArgs = {
    url: `${base}${bare ? dialect.barePath : dialect.path}`,
    headers: { 'content-type': 'application/json', 'x-api-key': 'sk-bench', 'x-tags': 'team:bench' },
    body: JSON.stringify(dialect.body(stream, values['responses-store'] !== 'false')),
    connections: Number(values.connections),
    warmupS: 2,
    durationS: Number(values.duration),
  };
  const gen = start('load', ['--import', 'tsx', 'e2e/bench/load.ts', JSON.stringify(load)]);
  await lineMatching(gen, (l) => l.startsWith('{"event":"start"'));
  const measuredFrom = performance.now();
  await lineMatching(gen, (l) => l.startsWith('{"event":"stop"'));
  const measuredTo = performance.now();
  const result = JSON.parse(await lineMatching(gen, (l) => l.startsWith('{"event":"result"'))) as LoadResult;
  const exited = new Promise((r) => proxy.once('exit', r));
  proxy.kill('SIGTERM');
  await exited;
  const exitedAt = performance.now();
  double.kill('SIGTERM');
  await pg?.destroy();
  await redis?.destroy();
  const file = readdirSync(dir).find((f) => f.endsWith('.cpuprofile'));
  if (!file) throw new Error(`no profile written in ${dir}`);
  const profile = JSON.parse(readFileSync(join(dir, file), 'utf8')) as CpuProfile;
  // The profile ends as the proxy exits: the measured window is placed back from its end.
  const from = profile.endTime - (exitedAt - measuredFrom) * 1000;
  const to = profile.endTime - (exitedAt - measuredTo) * 1000;
  const summary = summarize(profile, Number(values.top), from, to);
  const requests = result.ok;
  console.log(
    `${values.dialect} ${values.mode} c=${values.connections}: ${result.rps} req/s, mean ${result.meanMs} ms; profile ${summary.totalMs} ms, ` +
      `busy ${summary.totalMs - summary.idleMs} ms = ${(((summary.totalMs - summary.idleMs) * 1000) / requests).toFixed(1)} µs of the main thread per request (${requests} requests in the measured window)`,
  );
  const show = (title: string, rows: ProfileSummary['selfByFunction']) => {
    console.log(`\n${title} (% of the main thread's busy time)`);
    for (const r of rows) console.log(`${r.pct.toFixed(2).padStart(6)}%  ${r.ms.toFixed(1).padStart(8)} ms  ${r.name}`);
  };
  show('self time by package', summary.selfByPackage);
  show('self time by function', summary.selfByFunction);
  show('inclusive time by function', summary.inclusiveByFunction);
  if (values.keep) console.log(`\nprofile kept: ${join(dir, file)}`);
  else rmSync(dir, { recursive: true, force: true });
  process.exit(0);
}

if (process.argv[1]?.endsWith('profile.ts')) await main();
