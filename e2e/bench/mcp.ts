import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Agent, request } from 'undici';
import { startEverything } from '../mcp/servers.js';
import { type ProxyProcess, standaloneFiles, startProxyProcess } from '../support/proxy-process.js';
import { machineFacts, printVerdicts, type Verdict } from './gateways.js';

/**
 * What the gateway adds to an agent's tool call: tools/call of server-everything's `echo` (a real
 * MCP server from npm, its own process) made directly and through the gateway's /mcp (the
 * standalone proxy process from dist/, its own process), on initialized sessions: one call at a
 * time, direct and through the gateway alternately (the added latency p50/p99), then from 32
 * callers at once (throughput, p50/p99). Every call
 * through the gateway also does what production does: key check, session opened (AES-GCM), the
 * key's allow-list, the tool's rate bucket, one usage record (SQLite), metrics.
 * Targets: added p50 at most 2 ms and p99 at most 10 ms, one call at a time.
 *
 * npx tsx e2e/bench/mcp.ts [--quick] [--json-out FILE]   (npm run bench -- --only mcp)
 */

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const KEY = 'sk-bench-mcp';
const { values } = parseArgs({ options: { quick: { type: 'boolean' }, 'json-out': { type: 'string' } } });
const quick = values.quick ?? false;
const SEQUENTIAL = quick ? 300 : 2000;
const CONCURRENT = { callers: 32, calls: quick ? 1000 : 8000 };

const dispatcher = new Agent({ connections: 64, keepAliveTimeout: 30_000 });

interface Target {
  name: 'direct' | 'gateway';
  url: string;
  headers: Record<string, string>;
  tool: string;
}

async function post(
  t: Target,
  body: unknown,
  session?: string,
): Promise<{ status: number; session?: string; text: string }> {
  const res = await request(t.url, {
    method: 'POST',
    dispatcher,
    headers: {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'mcp-protocol-version': '2025-11-25',
      ...t.headers,
      ...(session ? { 'mcp-session-id': session } : {}),
    },
    body: JSON.stringify(body),
  });
  const text = await res.body.text();
  const sid = res.headers['mcp-session-id'];
  return { status: res.statusCode, text, ...(typeof sid === 'string' ? { session: sid } : {}) };
}

async function openSession(t: Target): Promise<string> {
  const init = await post(t, {
    jsonrpc: '2.0',
    id: 0,
    method: 'initialize',
    params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'bench', version: '1' } },
  });
  if (init.status !== 200 || !init.session)
    throw new Error(`${t.name}: initialize answered ${init.status}: ${init.text}`);
  await post(t, { jsonrpc: '2.0', method: 'notifications/initialized' }, init.session);
  // As clients do, the list first (the gateway learns the tools' names from it).
  await post(t, { jsonrpc: '2.0', id: 1, method: 'tools/list' }, init.session);
  return init.session;
}

let nextId = 10;
async function call(t: Target, session: string): Promise<number> {
  const started = performance.now();
  const r = await post(
    t,
    { jsonrpc: '2.0', id: nextId++, method: 'tools/call', params: { name: t.tool, arguments: { message: 'bench' } } },
    session,
  );
  const ms = performance.now() - started;
  if (r.status !== 200 || !r.text.includes('Echo: bench'))
    throw new Error(`${t.name}: tools/call answered ${r.status}: ${r.text.slice(0, 200)}`);
  return ms;
}

const percentile = (sorted: number[], p: number) =>
  sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? 0;
const stats = (ms: number[]) => {
  const s = [...ms].sort((a, b) => a - b);
  return { p50: +percentile(s, 50).toFixed(3), p99: +percentile(s, 99).toFixed(3) };
};

async function concurrent(t: Target, sessions: string[], calls: number): Promise<{ ms: number[]; seconds: number }> {
  const ms: number[] = [];
  let left = calls;
  const started = performance.now();
  await Promise.all(
    sessions.map(async (session) => {
      while (left-- > 0) ms.push(await call(t, session));
    }),
  );
  return { ms, seconds: (performance.now() - started) / 1000 };
}

async function main(): Promise<void> {
  const everything = await startEverything();
  const dir = mkdtempSync(join(tmpdir(), 'pao-bench-mcp-'));
  let gateway: ProxyProcess | undefined;
  try {
    const doc = [
      'apiVersion: ai.platform/v1beta1',
      'kind: McpServer',
      'metadata: {name: everything}',
      `spec: {url: "${everything.url}"}`,
    ].join('\n');
    // From dist/, as the image runs it (and as the gateways section measures ours).
    execFileSync('npm', ['run', 'build'], { cwd: ROOT, stdio: 'ignore' });
    gateway = await startProxyProcess(
      [...standaloneFiles(dir, [doc], `${KEY}\n`), '--usage-db', join(dir, 'usage.db')],
      process.env,
      { compiled: true },
    );
    const targets: Target[] = [
      { name: 'direct', url: everything.url, headers: {}, tool: 'echo' },
      { name: 'gateway', url: `${gateway.base}/mcp`, headers: { 'x-api-key': KEY }, tool: 'everything_echo' },
    ];
    const rows: Array<Record<string, string | number>> = [];
    const seq: Record<string, { p50: number; p99: number }> = {};
    // One call at a time, direct and through the gateway alternately: both see the machine as it
    // is at that moment (this machine's speed drifts by more than the gateway adds, run to run).
    const seqSessions = await Promise.all(targets.map((t) => openSession(t)));
    const seqMs: number[][] = targets.map(() => []);
    for (let i = 0; i < 100 + SEQUENTIAL; i++) {
      for (const [j, t] of targets.entries()) {
        const ms = await call(t, seqSessions[j] as string);
        if (i >= 100) seqMs[j]?.push(ms); // the first 100: warm-up (JIT, connections)
      }
    }
    for (const [j, t] of targets.entries()) {
      const s = stats(seqMs[j] ?? []);
      seq[t.name] = s;
      const sessions = await Promise.all(Array.from({ length: CONCURRENT.callers }, () => openSession(t)));
      const c = await concurrent(t, sessions, CONCURRENT.calls);
      const cs = stats(c.ms);
      rows.push({
        target: t.name,
        'seq p50 ms': s.p50,
        'seq p99 ms': s.p99,
        [`c${CONCURRENT.callers} calls/s`]: Math.round(CONCURRENT.calls / c.seconds),
        [`c${CONCURRENT.callers} p50 ms`]: cs.p50,
        [`c${CONCURRENT.callers} p99 ms`]: cs.p99,
      });
    }
    const added = {
      p50: +((seq.gateway?.p50 ?? 0) - (seq.direct?.p50 ?? 0)).toFixed(3),
      p99: +((seq.gateway?.p99 ?? 0) - (seq.direct?.p99 ?? 0)).toFixed(3),
    };
    rows.push({ target: 'added (gateway - direct)', 'seq p50 ms': added.p50, 'seq p99 ms': added.p99 });
    console.table(rows);
    const verdicts: Verdict[] = [
      { id: 'mcp-added-p50', pass: added.p50 <= 2, detail: `tools/call added ${added.p50} ms at p50 (target <= 2 ms)` },
      {
        id: 'mcp-added-p99',
        pass: added.p99 <= 10,
        detail: `tools/call added ${added.p99} ms at p99 (target <= 10 ms)`,
      },
    ];
    printVerdicts(verdicts);
    if (values['json-out']) {
      writeFileSync(values['json-out'], JSON.stringify({ machine: machineFacts(), rows, added, verdicts }, null, 2));
    }
  } finally {
    await gateway?.stop('SIGTERM');
    await everything.stop();
    await dispatcher.close();
  }
}

await main();
