import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type OllamaDouble, startOllamaDouble } from '../doubles/ollama.js';
import { type Postgres, startPostgres } from '../postgres/server.js';
import { chartProxyMemory } from '../support/chart-memory.js';
import { eventually } from '../support/kube.js';
import { type ProxyProcess, startProxyProcess } from '../support/proxy-process.js';
import { RssSamples } from '../support/rss.js';

/**
 * No usage record lost to a crash (the usage spool, proxy/usage/spool.ts), with real processes:
 * the proxy under load is killed with SIGKILL at a random moment and restarted, 20 times, on
 * SQLite and on PostgreSQL. Every request answered 2xx before the kill, and every stream that
 * delivered a token, must be in the store exactly once; nothing may be there twice; and no
 * record of an answer its caller did not get whole counts as a served request (the crash cut it:
 * stored with delivered false, its cost kept). Then a
 * PostgreSQL outage of 36 s with the proxy killed while the database is still down, and a spool
 * on a full disk (a small tmpfs).
 */

/** Longest steady load before the outage while the proxy's memory levels off (a leak never does). */
const WARMUP_MS = 180_000;
/**
 * The outage: long enough that its last third holds three times the backlog of its first (what a
 * backlog kept in memory would show as growth), short enough for CI's time.
 */
const OUTAGE_MS = 36_000;
const KEY = 'sk-usage-crash-e2e';
const JSON_MODEL = 'llama3.1:8b';
const STREAM_MODEL = 'qwen2.5:0.5b';
const KILLS = 20;
const CALLERS = 16;

let double: OllamaDouble;
let postgres: Postgres;
let dir: string;
const live: ProxyProcess[] = [];
let unmount: (() => void) | undefined;

beforeAll(async () => {
  double = await startOllamaDouble({ models: [JSON_MODEL, STREAM_MODEL], record: false });
  // Streams of 10 tokens 20 ms apart: some are mid-stream when the kill comes.
  double.behave({ completionTokens: 10, interTokenDelayMs: 20 }, STREAM_MODEL);
  postgres = await startPostgres();
  dir = mkdtempSync(join(tmpdir(), 'pao-usage-crash-'));
  writeFileSync(
    join(dir, 'config.yaml'),
    [JSON_MODEL, STREAM_MODEL]
      .map(
        (model, i) => `apiVersion: ai.platform/v1beta1
kind: ModelDeployment
metadata: { name: m${i} }
spec: { model: "${model}", serviceName: m${i}, endpoint: "${double.url}" }
`,
      )
      .join('---\n'),
  );
  writeFileSync(join(dir, 'keys.txt'), `${KEY}\n`);
}, 60_000);

afterAll(async () => {
  for (const p of live) await p.stop('SIGKILL');
  await double?.close();
  await postgres?.destroy();
  unmount?.();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

async function proxy(usageDb: string, spool: string): Promise<ProxyProcess> {
  const p = await startProxyProcess(
    [
      '--config',
      join(dir, 'config.yaml'),
      '--keys-file',
      join(dir, 'keys.txt'),
      '--usage-db',
      usageDb,
      '--usage-spool-dir',
      spool,
    ],
    // V8's limits as a pod has them (the chart's NODE_OPTIONS): its heap is sized up to them, not
    // to this machine's memory, so the memory test's warm-up levels off as it does in a pod.
    { ...process.env, NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} ${chartProxyMemory().nodeOptions}`.trim() },
  );
  live.push(p);
  return p;
}

/** One whole (json) chat answer: its status and request id. */
async function ask(p: ProxyProcess, tags: string): Promise<{ status: number; id: string }> {
  const res = await fetch(`${p.base}/openai/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': KEY, 'x-tags': tags },
    body: JSON.stringify({ model: JSON_MODEL, messages: [{ role: 'user', content: 'hi' }] }),
  });
  await res.text();
  return { status: res.status, id: res.headers.get('x-request-id') ?? '' };
}

/** What the callers know for sure: the request ids the proxy answered (2xx) or streamed a token of. */
interface Seen {
  owed: Set<string>;
  /** Answers the callers got whole: a whole answer's body read to its end, a stream read to its end. */
  received: Set<string>;
  sent: number;
}

/** One caller: json and streaming requests in turn until `stop`; errors (the kill) end nothing. */
async function caller(p: ProxyProcess, w: number, seen: Seen, stop: () => boolean): Promise<void> {
  for (let i = 0; !stop(); i++) {
    const stream = (i + w) % 4 === 0;
    seen.sent += 1;
    try {
      const res = await fetch(`${p.base}/openai/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-api-key': KEY, 'x-tags': `caller:c${w}` },
        body: JSON.stringify({
          model: stream ? STREAM_MODEL : JSON_MODEL,
          stream,
          messages: [{ role: 'user', content: 'hi' }],
        }),
      });
      const id = res.headers.get('x-request-id') ?? '';
      if (!stream) {
        await res.text();
        seen.received.add(id);
        if (res.ok) seen.owed.add(id);
        continue;
      }
      const reader = res.body?.getReader();
      const decoder = new TextDecoder();
      let text = '';
      for (;;) {
        const { done, value } = (await reader?.read()) ?? { done: true, value: undefined };
        if (done) break;
        text += decoder.decode(value, { stream: true });
        // A token reached the caller: the gateway owes a record of this stream from now on.
        if (res.ok && text.includes('"content":"')) seen.owed.add(id);
      }
      seen.received.add(id);
    } catch {
      // The proxy died under this request: only what it answered before counts.
      await new Promise((r) => setTimeout(r, 20));
    }
  }
}

/** A request id's rows: how many, how many of them served (delivered), the record's time. */
interface Rows {
  n: number;
  served: number;
  ts: number;
}

interface Store {
  name: string;
  usageDb: string;
  /** Rows per request id. */
  counts(): Promise<Map<string, number>>;
  rows(): Promise<Map<string, Rows>>;
}

const countsOf = (rows: Map<string, Rows>) => new Map([...rows].map(([id, r]) => [id, r.n]));

function sqliteStore(): Store {
  const file = join(dir, 'usage.db');
  const rows = async () => {
    const db = new Database(file, { readonly: true });
    try {
      const found = db
        .prepare(
          'SELECT request_id AS id, count(*) AS n, SUM(delivered) AS served, MIN(ts) AS ts FROM requests GROUP BY request_id',
        )
        .all() as Array<Rows & { id: string }>;
      return new Map(found.map(({ id, ...r }) => [id, r]));
    } finally {
      db.close();
    }
  };
  return { name: 'SQLite', usageDb: file, rows, counts: async () => countsOf(await rows()) };
}

function postgresStore(): Store {
  const rows = async () => {
    const client = new pg.Client({ connectionString: postgres.url });
    await client.connect();
    try {
      const { rows: found } = await client.query<{ id: string; n: string; served: string; ts: string }>(
        `SELECT request_id AS id, count(*) AS n, count(*) FILTER (WHERE delivered) AS served, min(ts) AS ts
         FROM usage_requests GROUP BY request_id`,
      );
      return new Map(found.map((r) => [r.id, { n: Number(r.n), served: Number(r.served), ts: Number(r.ts) }]));
    } finally {
      await client.end();
    }
  };
  return { name: 'PostgreSQL', usageDb: postgres.url, rows, counts: async () => countsOf(await rows()) };
}

/** SIGKILL and the records the store must hold afterwards, checked once the restarted proxy caught up. */
async function killRounds(store: Store): Promise<void> {
  const spool = join(dir, `spool-${store.name}`);
  const owedAll = new Set<string>();
  const receivedAll = new Set<string>();
  const rounds: Array<{
    from: number;
    killAt: number;
    received: number;
    replayed: string;
    cut: string;
    undelivered: string;
  }> = [];
  let p = await proxy(store.usageDb, spool);
  for (let round = 0; round < KILLS; round++) {
    const seen: Seen = { owed: new Set(), received: new Set(), sent: 0 };
    const from = Date.now();
    let stopped = false;
    const load = Array.from({ length: CALLERS }, (_, w) => caller(p, w, seen, () => stopped));
    // A different moment each round: 0.3 to 1.5 s into the load.
    const killAt = 300 + Math.floor(Math.random() * 1200);
    await new Promise((r) => setTimeout(r, killAt));
    p.child.kill('SIGKILL');
    await new Promise((r) => p.child.once('exit', r));
    stopped = true;
    await Promise.all(load);
    for (const id of seen.owed) owedAll.add(id);
    for (const id of seen.received) receivedAll.add(id);
    // Restarted on the same spool: it replays what the store did not get.
    p = await proxy(store.usageDb, spool);
    const replayed = /"usage spool replayed[^\n]*"records":(\d+)[^\n]*"cutStreams":(\d+),"undelivered":(\d+)/.exec(
      p.output(),
    );
    rounds.push({
      from,
      killAt,
      received: seen.received.size,
      replayed: replayed?.[1] ?? '0',
      cut: replayed?.[2] ?? '0',
      undelivered: replayed?.[3] ?? '0',
    });
  }
  let rows = new Map<string, Rows>();
  await eventually(`${store.name}: every owed record stored`, 60_000, async () => {
    rows = await store.rows();
    return [...owedAll].every((id) => rows.has(id)) ? true : undefined;
  }).catch(() => {});
  const lost = [...owedAll].filter((id) => !rows.has(id));
  const doubled = [...rows].filter(([, r]) => r.n > 1).map(([id]) => id);
  // Served: the store says the answer reached its caller. A caller that got no whole answer got a
  // reset and will ask again: counted as served, that request would count twice.
  const servedUnanswered = [...rows].filter(([id, r]) => r.served > 0 && !receivedAll.has(id)).map(([id]) => id);
  // Each round's records, by their time (no load runs between a kill and the next round).
  const table = rounds.map((r, i) => {
    const to = rounds[i + 1]?.from ?? Number.POSITIVE_INFINITY;
    const mine = [...rows.values()].filter((x) => x.ts >= r.from && x.ts < to);
    const served = mine.filter((x) => x.served > 0).length;
    return `| ${i + 1} | ${r.killAt} | ${r.received} | ${mine.length} | ${served} | ${mine.length - served} | ${r.replayed} | ${r.cut} | ${r.undelivered} |`;
  });
  console.log(
    `[usage-crash] ${store.name}: ${KILLS} kills, ${owedAll.size} requests answered (or streamed a token) before a kill, ` +
      `${owedAll.size - lost.length} recorded, ${lost.length} lost, ${doubled.length} doubled, ` +
      `${servedUnanswered.length} counted as served that no caller got whole\n` +
      '| round | kill at ms | answered whole | recorded | served | not delivered | replayed records | cut streams | cut answers |\n' +
      `|---|---|---|---|---|---|---|---|---|\n${table.join('\n')}`,
  );
  expect(lost, `${store.name}: answered before a kill, not in the store`).toEqual([]);
  expect(doubled, `${store.name}: in the store more than once`).toEqual([]);
  expect(servedUnanswered, `${store.name}: recorded as served, never received whole`).toEqual([]);
  expect(owedAll.size).toBeGreaterThan(KILLS * 20);
  await p.stop('SIGTERM');
}

describe('usage survives the proxy being killed', () => {
  it(`SQLite: ${KILLS} kills at random moments under load lose no answered request and double none`, {
    timeout: 300_000,
  }, async () => {
    await killRounds(sqliteStore());
  });

  it(`PostgreSQL: ${KILLS} kills at random moments under load lose no answered request and double none`, {
    timeout: 300_000,
  }, async () => {
    await killRounds(postgresStore());
  });

  it(`a ${OUTAGE_MS / 1000} s PostgreSQL outage, the proxy killed while it is down: nothing lost, nothing doubled, memory flat`, {
    timeout: 240_000 + WARMUP_MS,
  }, async () => {
    const store = postgresStore();
    // The database has the kill rounds' records too: this test's are those from now on.
    const testFrom = Date.now();
    const spool = join(dir, 'spool-outage');
    const p = await proxy(store.usageDb, spool);
    const pid = p.child.pid as number;
    const seen: Seen = { owed: new Set(), received: new Set(), sent: 0 };
    let stopped = false;
    // The pace of the PostgreSQL outage test (e2e/no-cluster/usage-postgres.e2e.test.ts): 4 callers at 250/s.
    const RATE = 250;
    const load = Array.from({ length: 4 }, async (_, w) => {
      const start = Date.now();
      for (let i = 0; !stopped; i++) {
        const wait = start + (i * 1000) / RATE - Date.now();
        if (wait > 0) await new Promise((r) => setTimeout(r, wait));
        seen.sent += 1;
        try {
          const { status, id } = await ask(p, `caller:o${w}`);
          seen.received.add(id);
          if (status === 200) seen.owed.add(id);
        } catch {
          await new Promise((r) => setTimeout(r, 20));
        }
      }
    });
    // Steady load with the database up until memory levels off (e2e/support/rss.ts: a fresh
    // process warms up for a minute or more, longer on a busy machine), then 15 s of it measured.
    const samples = new RssSamples(pid, 250);
    const levelled = await samples.level(WARMUP_MS);
    const steadyFrom = samples.now();
    await new Promise((r) => setTimeout(r, 15_000));
    const outageFrom = samples.now();
    await postgres.stop();
    await new Promise((r) => setTimeout(r, OUTAGE_MS));
    samples.stop();
    const steady = samples.all.filter((s) => s.at >= steadyFrom && s.at < outageFrom).map((s) => s.rss);
    const outage = samples.all.filter((s) => s.at >= outageFrom).map((s) => s.rss);
    const spooled = Number(
      /pao_gateway_usage_spool_bytes (\d+)/.exec(await (await fetch(`${p.metrics}/metrics`)).text())?.[1],
    );
    p.child.kill('SIGKILL');
    await new Promise((r) => p.child.once('exit', r));
    stopped = true;
    await Promise.all(load);
    await postgres.start();
    const q = await proxy(store.usageDb, spool);
    let counts = new Map<string, number>();
    await eventually('the outage backlog written', 90_000, async () => {
      counts = await store.counts();
      return [...seen.owed].every((id) => counts.has(id)) ? true : undefined;
    }).catch(() => {});
    const lost = [...seen.owed].filter((id) => !counts.has(id));
    const doubled = [...counts].filter(([, n]) => n > 1);
    // The records read back from the spool after the outage (delivery marks kept for them) and
    // after the kill: none counted as served that its caller did not get.
    const rows = [...(await store.rows())].filter(([, r]) => r.ts >= testFrom);
    const servedUnanswered = rows.filter(([id, r]) => r.served > 0 && !seen.received.has(id));
    const undelivered = rows.filter(([, r]) => r.served === 0).length;
    const peakSteady = Math.max(...steady);
    const peakOutage = Math.max(...outage);
    console.log(
      `[usage-crash] outage: ${seen.owed.size} answered, ${(spooled / 1048576).toFixed(1)} MiB spooled when killed, ` +
        `${lost.length} lost, ${doubled.length} doubled, ${undelivered} not delivered, ${servedUnanswered.length} served unanswered; ` +
        `peak RSS steady ${peakSteady.toFixed(0)} MiB, outage ${peakOutage.toFixed(0)} MiB`,
    );
    expect(lost).toEqual([]);
    expect(doubled).toEqual([]);
    expect(servedUnanswered).toEqual([]);
    expect(spooled).toBeGreaterThan(1024 * 1024);
    expect(levelled, `RSS still rising after ${WARMUP_MS / 1000} s of steady load`).toBeDefined();
    // Flat: the backlog lives on disk, so memory must not grow with it. The outage's last third
    // (three times the backlog of its first third) peaks within what GC moves from one sample to the
    // next; the outage as a whole costs the error path's buffers over steady load, not the backlog's.
    const third = Math.floor(outage.length / 3);
    const peakEarly = Math.max(...outage.slice(0, third));
    const peakLate = Math.max(...outage.slice(-third));
    console.log(
      `[usage-crash] outage peak RSS first third ${peakEarly.toFixed(0)} MiB, last third ${peakLate.toFixed(0)} MiB`,
    );
    expect(peakLate).toBeLessThanOrEqual(peakEarly + 16);
    expect(peakOutage).toBeLessThanOrEqual(peakSteady + 48);
    await q.stop('SIGTERM');
  });

  it('a spool left damaged by the crash (a record cut short, a flipped byte): the restart skips those, says so, and serves', {
    timeout: 60_000,
  }, async () => {
    const store = sqliteStore();
    const spool = join(dir, 'spool-damaged');
    const p = await proxy(store.usageDb, spool);
    const answered = [];
    for (let i = 0; i < 20; i++) answered.push(await ask(p, 'case:damaged'));
    p.child.kill('SIGKILL');
    await new Promise((r) => p.child.once('exit', r));
    // The segment: a byte flipped inside its fifth record's JSON, and its last record cut short.
    const replica = readdirSync(spool)[0] as string;
    const segment = readdirSync(join(spool, replica)).find((n) => n.startsWith('seg-')) as string;
    const file = join(spool, replica, segment);
    const bytes = readFileSync(file);
    const fifth = bytes.indexOf(answered[4]?.id ?? '-');
    expect(fifth).toBeGreaterThan(0);
    bytes[fifth + 4] = (bytes[fifth + 4] as number) ^ 0x01;
    writeFileSync(file, bytes.subarray(0, bytes.length - 9));
    const q = await proxy(store.usageDb, spool);
    expect(q.output()).toMatch(/usage spool: damaged or torn records skipped.*"records":2/);
    const metrics = await (await fetch(`${q.metrics}/metrics`)).text();
    expect(metrics).toMatch(/pao_gateway_usage_spool_skipped_total 2/);
    expect((await ask(q, 'case:damaged')).status).toBe(200);
    await q.stop('SIGTERM');
  });

  it('a spool on a full disk: the proxy keeps serving, says so once, and the store still gets every record', {
    timeout: 60_000,
  }, async (ctx) => {
    // A real full disk: a small tmpfs (mounting needs root, as CI runs).
    if (process.getuid?.() !== 0) ctx.skip();
    const mnt = mkdtempSync(join(tmpdir(), 'pao-spool-disk-'));
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=256k', 'tmpfs', mnt]);
    unmount = () => execFileSync('umount', ['-l', mnt]);
    const store = sqliteStore();
    const before = (await store.counts()).size;
    const p = await proxy(store.usageDb, mnt);
    const ids: string[] = [];
    const FILLER = ['a', 'b', 'c', 'd'].map((k) => `${k}:${'x'.repeat(60)}`).join(',');
    // Records of about 500 bytes: the 256 KiB disk is full after some hundreds of them.
    for (let round = 0; round < 40 && !p.output().includes('usage spool not writable'); round++) {
      const answers = await Promise.all(Array.from({ length: 50 }, () => ask(p, FILLER)));
      for (const a of answers) {
        expect(a.status).toBe(200);
        ids.push(a.id);
      }
    }
    expect(p.output()).toMatch(/usage spool not writable.*(ENOSPC|no space)/i);
    expect(p.output().match(/usage spool not writable/g)).toHaveLength(1);
    await eventually('every record stored', 30_000, async () => {
      const counts = await store.counts();
      return ids.every((id) => counts.get(id) === 1) ? true : undefined;
    });
    expect((await store.counts()).size).toBe(before + ids.length);
    await p.stop('SIGTERM');
  });
});
