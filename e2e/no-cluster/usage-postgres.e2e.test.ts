import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PostgresUsageStore } from '../../proxy/usage/postgres-store.js';
import { type OllamaDouble, startOllamaDouble } from '../doubles/ollama.js';
import { type Postgres, startPostgres } from '../postgres/server.js';
import { eventually } from '../support/kube.js';
import { type ProxyProcess, startProxyProcess } from '../support/proxy-process.js';

/**
 * Usage on a real PostgreSQL shared by proxy processes: two replicas under load write one
 * record of every request; the database stopped for 30 s in the middle costs no request and
 * no record (each replica holds its records and writes them after recovery); reports from
 * either replica agree to the request. Then the faults one at a time: dropped connections, a
 * write error (the database turned read-only), a real full disk (a tablespace on a small tmpfs),
 * a failover (the address now reaching a promoted standby), and a
 * buffer bound that drops, counted, what it cannot hold.
 */

const KEY = 'sk-usage-pg-e2e';
const MODELS = ['llama3.1:8b', 'qwen2.5:0.5b'];
const OUTAGE_MS = 30_000;
/**
 * Requests per second from each of the outage test's four callers. Paced, not as fast as the
 * machine allows: through the outage each replica holds every record it is sent, and the product
 * bounds that (--usage-buffer, default 50,000; past it records are dropped and counted by design,
 * the last test below). An unpaced loop sent about 2,000 requests/s to each replica while the
 * database was down on a 2-core machine (nothing to insert makes the proxy faster): 50,000 held
 * after 25-29 s, 7,000-15,000 more dropped, so the result depended on the machine. Paced, a
 * replica is sent at most 4 x RATE / 2 = 500 requests/s, so from the start of the load to its
 * recovery (3 s, the outage, the restart, the recorder's backoff of at most 5 s: about 40 s) it
 * holds at most about 20,000, 40% of the bound, on any machine.
 */
const RATE = 250;
let pg: Postgres;
let standby: Postgres | undefined;
let double: OllamaDouble;
let dir: string;
const proxies: ProxyProcess[] = [];
let unmount: (() => void) | undefined;

function config(): string {
  const file = join(dir, 'config.yaml');
  writeFileSync(
    file,
    MODELS.map(
      (model, i) => `apiVersion: ai.platform/v1beta1
kind: ModelDeployment
metadata: { name: m${i} }
spec: { model: "${model}", serviceName: m${i}, endpoint: "${double.url}" }
`,
    ).join('---\n'),
  );
  return file;
}

async function proxy(usageDb: string, extra: string[] = []): Promise<ProxyProcess> {
  writeFileSync(join(dir, 'keys.txt'), `${KEY}\n`);
  const p = await startProxyProcess([
    '--config',
    config(),
    '--keys-file',
    join(dir, 'keys.txt'),
    '--usage-db',
    usageDb,
    ...extra,
  ]);
  proxies.push(p);
  return p;
}

const chat = (p: ProxyProcess, model: string, team: string) =>
  fetch(`${p.base}/openai/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': KEY, 'x-tags': `team:${team}` },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }] }),
  }).then(async (r) => {
    await r.text();
    return r.status;
  });

interface Groups {
  totals: { requests: number; inputTokens: number; outputTokens: number };
  groups: Array<{ group: string; requests: number }>;
}
const report = async (p: ProxyProcess, groupBy: string): Promise<Groups> =>
  (await (
    await fetch(`${p.base}/v1/usage?groupBy=${groupBy}&from=2026-01-01T00:00:00Z`, { headers: { 'x-api-key': KEY } })
  ).json()) as Groups;
const byGroup = (g: Groups) => Object.fromEntries(g.groups.map((x) => [x.group, x.requests]));
const dropped = async (p: ProxyProcess) =>
  Number(/pao_gateway_usage_records_dropped_total (\d+)/.exec(await (await fetch(`${p.metrics}/metrics`)).text())?.[1]);

beforeAll(async () => {
  pg = await startPostgres();
  double = await startOllamaDouble({ models: MODELS, record: false });
  dir = mkdtempSync(join(tmpdir(), 'pao-usage-pg-'));
}, 60_000);

afterAll(async () => {
  for (const p of proxies) await p.stop('SIGTERM');
  await double?.close();
  await pg?.destroy();
  await standby?.destroy();
  unmount?.();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('usage on PostgreSQL shared by two proxy processes', () => {
  it('counts every request exactly, through a 30 s database outage under load, and both replicas report the same', {
    timeout: 180_000,
  }, async () => {
    const [a, b] = [await proxy(pg.url), await proxy(pg.url)];
    if (!a || !b) throw new Error('no proxies');
    const sent: Record<string, number> = {};
    const statuses: number[] = [];
    let stop = false;
    // Four callers, alternating replicas, models and teams, each at RATE, until told to stop.
    const load = Array.from({ length: 4 }, async (_, w) => {
      const start = Date.now();
      for (let i = 0; !stop; i++) {
        // On a schedule from the start: a caller that fell behind catches up, never past RATE overall.
        const wait = start + (i * 1000) / RATE - Date.now();
        if (wait > 0) await new Promise((r) => setTimeout(r, wait));
        const p = (i + w) % 2 ? a : b;
        const model = MODELS[(i + w) % 2] as string;
        const team = `t${w}`;
        const status = await chat(p, model, team);
        statuses.push(status);
        if (status === 200) sent[team] = (sent[team] ?? 0) + 1;
      }
    });
    await new Promise((r) => setTimeout(r, 3_000));
    await pg.stop();
    const down = statuses.length;
    await new Promise((r) => setTimeout(r, OUTAGE_MS));
    const servedDuringOutage = statuses.length - down;
    await pg.start();
    await new Promise((r) => setTimeout(r, 3_000));
    stop = true;
    await Promise.all(load);

    // Usage never takes the gateway down: every request was answered, during the outage too.
    expect(statuses.every((s) => s === 200)).toBe(true);
    expect(servedDuringOutage).toBeGreaterThan(100);
    const total = statuses.length;
    // Nothing dropped (the load fits the buffer): checked before waiting for the totals, which
    // could otherwise only time out, short by exactly what was dropped.
    for (const p of [a, b]) expect(await dropped(p), 'records dropped past the usage buffer').toBe(0);
    // Both replicas wrote what they held; from either one the totals are exact.
    await eventually('all records written', 30_000, async () =>
      (await report(a, 'model')).totals.requests === total ? true : undefined,
    );
    for (const p of [a, b]) {
      const byTeam = byGroup(await report(p, 'team'));
      expect(byTeam).toEqual(sent);
      const byModel = await report(p, 'model');
      expect(byModel.totals.requests).toBe(total);
      expect(byModel.totals.outputTokens).toBe(total * 8);
      expect(await dropped(p)).toBe(0);
    }
    // Each said so, once each way.
    for (const p of [a, b]) {
      expect(p.output().match(/usage store failing/g)?.length).toBe(1);
      expect(p.output()).toContain('usage store answering again');
    }
    console.log(
      `[usage-pg] ${total} requests (${servedDuringOutage} during the ${OUTAGE_MS / 1000} s outage), all 200, all counted once`,
    );
    await Promise.all([a.stop('SIGTERM'), b.stop('SIGTERM')]);
  });

  it('loses nothing when the database drops every connection mid-load', { timeout: 60_000 }, async () => {
    pg.psql('CREATE DATABASE dropped_case');
    const p = await proxy(pg.url.replace(/\/postgres$/, '/dropped_case'));
    for (let i = 0; i < 200; i++) {
      expect(await chat(p, 'llama3.1:8b', 'conn')).toBe(200);
      if (i % 50 === 25)
        pg.psql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = 'dropped_case'");
    }
    await eventually('all written', 20_000, async () =>
      byGroup(await report(p, 'team')).conn === 200 ? true : undefined,
    );
    expect(await dropped(p)).toBe(0);
    await p.stop('SIGTERM');
  });

  it('holds records through a write error (a read-only database) and writes them after', {
    timeout: 60_000,
  }, async () => {
    pg.psql('CREATE DATABASE readonly_case');
    const url = pg.url.replace(/\/postgres$/, '/readonly_case');
    const p = await proxy(url);
    expect(await chat(p, 'llama3.1:8b', 'ro')).toBe(200);
    await eventually('first record', 10_000, async () =>
      (await report(p, 'team')).totals.requests === 1 ? true : undefined,
    );
    pg.psql('ALTER DATABASE readonly_case SET default_transaction_read_only = on');
    pg.psql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = 'readonly_case'");
    for (let i = 0; i < 20; i++) expect(await chat(p, 'llama3.1:8b', 'ro')).toBe(200);
    await eventually('failing said', 10_000, () => (p.output().includes('usage store failing') ? true : undefined));
    expect((await report(p, 'team')).totals.requests).toBe(1);
    pg.psql('ALTER DATABASE readonly_case SET default_transaction_read_only = off');
    pg.psql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = 'readonly_case'");
    await eventually('held records written', 20_000, async () =>
      (await report(p, 'team')).totals.requests === 21 ? true : undefined,
    );
    expect(await dropped(p)).toBe(0);
    await p.stop('SIGTERM');
  });

  it('holds records while its disk is full and writes them once there is room', { timeout: 90_000 }, async (ctx) => {
    // A real full disk: a tablespace on a small tmpfs (mounting needs root, as CI runs).
    if (process.getuid?.() !== 0) ctx.skip();
    const mnt = mkdtempSync(join(tmpdir(), 'pao-pg-disk-'));
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=24m', 'tmpfs', mnt]);
    unmount = () => execFileSync('umount', ['-l', mnt]);
    execFileSync('chown', ['65534:65534', mnt]);
    pg.psql(`CREATE TABLESPACE small LOCATION '${mnt}'`);
    pg.psql('CREATE DATABASE full_case TABLESPACE small');
    const p = await proxy(pg.url.replace(/\/postgres$/, '/full_case'));
    expect(await chat(p, 'llama3.1:8b', 'disk')).toBe(200);
    await eventually('first record', 10_000, async () =>
      byGroup(await report(p, 'team')).disk === 1 ? true : undefined,
    );
    // Fill the disk with committed rows (an aborted insert's pages would be vacuumed away) until it refuses.
    pg.psql('CREATE TABLE filler (x text) TABLESPACE small');
    let full = '';
    for (let i = 0; i < 200 && !full; i++) {
      try {
        pg.psql('INSERT INTO filler SELECT repeat(md5(g::text), 60) FROM generate_series(1, 500) g');
      } catch (err) {
        full = String(err);
      }
    }
    expect(full).toMatch(/No space left on device|could not extend/);
    // Rows still fit in the pages already allocated; traffic goes on until a write needs a new one.
    let sent = 1;
    while (!p.output().includes('usage store failing') && sent < 20_000) {
      for (let i = 0; i < 100; i++) expect(await chat(p, 'llama3.1:8b', 'disk')).toBe(200);
      sent += 100;
      await new Promise((r) => setTimeout(r, 300));
    }
    expect(p.output()).toMatch(/usage store failing.*(No space left on device|could not extend)/);
    for (let i = 0; i < 100; i++) expect(await chat(p, 'llama3.1:8b', 'disk')).toBe(200);
    sent += 100;
    expect(byGroup(await report(p, 'team')).disk).toBeLessThan(sent);
    execFileSync('mount', ['-o', 'remount,size=96m', mnt]);
    await eventually('held records written', 30_000, async () =>
      byGroup(await report(p, 'team')).disk === sent ? true : undefined,
    );
    console.log(
      `[usage-pg] full disk after ${sent - 100} requests; ${sent} sent, all 200, all written once there was room`,
    );
    expect(await dropped(p)).toBe(0);
    await p.stop('SIGTERM');
  });

  it('follows a failover: the address now reaches the promoted standby', { timeout: 60_000 }, async () => {
    // The standby has the schema, as a promoted replica would.
    standby = await startPostgres();
    await (await PostgresUsageStore.open(standby.url)).close();
    await standby.stop();
    const p = await proxy(pg.url);
    expect(await chat(p, 'llama3.1:8b', 'fo')).toBe(200);
    await eventually('on the primary', 10_000, async () =>
      byGroup(await report(p, 'team')).fo === 1 ? true : undefined,
    );
    // The primary fails; the standby takes over its address (a Service, a DNS name or a VIP moves).
    const address = pg.port;
    await pg.stop();
    for (let i = 0; i < 10; i++) expect(await chat(p, 'llama3.1:8b', 'fo')).toBe(200);
    await standby.start(address);
    await eventually('on the standby', 20_000, async () =>
      byGroup(await report(p, 'team')).fo === 10 ? true : undefined,
    );
    expect(await dropped(p)).toBe(0);
    await p.stop('SIGTERM');
    await standby.stop();
    await pg.start();
  });

  it('past its buffer, drops records and counts them, never silently', { timeout: 60_000 }, async () => {
    // The memory-only mode (spool off): the buffer is the bound. The spool's own bound is
    // proxy/usage/spool.test.ts's.
    const p = await proxy(pg.url, ['--usage-buffer', '50', '--usage-spool-dir', 'off']);
    await pg.stop();
    try {
      for (let i = 0; i < 120; i++) expect(await chat(p, 'llama3.1:8b', 'bound')).toBe(200);
    } catch (err) {
      // Seen once in 12 runs (ECONNREFUSED: the process was gone); its last words say why.
      console.log(`proxy output, exit ${p.child.exitCode} ${p.child.signalCode}:\n${p.output().slice(-6000)}`);
      throw err;
    }
    expect(await dropped(p)).toBe(70);
    await pg.start();
    await eventually('the 50 held written', 20_000, async () =>
      byGroup(await report(p, 'team')).bound === 50 ? true : undefined,
    );
    expect(p.output()).toContain('usage store failing');
    expect(p.output()).toContain('usage buffer full: dropping records');
    expect(p.output()).toMatch(/usage store answering again.*"dropped":70/);
    await p.stop('SIGTERM');
  });
});
