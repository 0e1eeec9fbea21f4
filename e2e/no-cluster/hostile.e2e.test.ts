import { mkdtempSync, rmSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type OllamaDouble, startOllamaDouble } from '../doubles/ollama.js';
import { chartProxyMemory } from '../support/chart-memory.js';
import { type ProxyProcess, routedModel, standaloneFiles, startProxyProcess } from '../support/proxy-process.js';
import { rssMiB } from '../support/rss.js';

/**
 * Hostile callers against the real proxy process, started with the chart's memory settings
 * (V8 heap 256 MiB, request memory budget 128 MiB, container limit 512 MiB): each attack runs
 * while /healthz is polled and the process's RSS sampled, and must leave the process alive and
 * answering, every request with a JSON answer.
 */

const KEY = 'sk-hostile-e2e-7c1d';
const MODEL = 'llama3.1:8b';
/** The chart's heap, young-generation and container limits: the test holds the proxy to what a pod gets. */
const MEMORY = chartProxyMemory();
const CONTAINER_LIMIT_MIB = MEMORY.limitMiB;
const TEN_MIB = 10 * 1024 * 1024;
const SLOW_TIMEOUT_S = 3;
let double: OllamaDouble;
let proxy: ProxyProcess;
let dir: string;

/** Runs `attack` while watching the process: the slowest /healthz answer and the peak RSS. */
async function watched<T>(
  attack: () => Promise<T>,
): Promise<{ result: T; slowestHealthMs: number; peakRssMiB: number }> {
  const pid = proxy.child.pid as number;
  let slowest = 0;
  let peak = rssMiB(pid);
  let done = false;
  const probe = (async () => {
    while (!done) {
      const started = performance.now();
      const res = await fetch(`${proxy.base}/healthz`, { signal: AbortSignal.timeout(5_000) });
      expect(res.status).toBe(200);
      slowest = Math.max(slowest, performance.now() - started);
      peak = Math.max(peak, rssMiB(pid));
      await new Promise((r) => setTimeout(r, 50));
    }
  })();
  try {
    const result = await attack();
    return { result, slowestHealthMs: slowest, peakRssMiB: peak };
  } finally {
    done = true;
    await probe;
  }
}

const head = `{"model":"${MODEL}","messages":[{"role":"user","content":"hi"}]`;
/** Worst-case 10 MiB bodies, one per shape. */
const SHAPES: Record<string, () => string> = {
  'tiny values': () => `${head},"junk":[${'{},'.repeat((TEN_MIB - 100) / 3)}{}]}`,
  'deep nesting': () => `${head},"tools":${'['.repeat(TEN_MIB / 2 - 100)}${']'.repeat(TEN_MIB / 2 - 100)}}`,
  'long strings': () => `{"model":"${MODEL}","messages":[{"role":"user","content":"${'x'.repeat(TEN_MIB - 200)}"}]}`,
  'many keys': () => {
    const keys: string[] = [];
    let size = 0;
    for (let i = 0; size < TEN_MIB - 200; i++) {
      const k = `"k${i}":${i}`;
      keys.push(k);
      size += k.length + 1;
    }
    return `${head},"metadata":{${keys.join(',')}}}`;
  },
};

const report: string[] = [];

beforeAll(async () => {
  double = await startOllamaDouble({ models: [MODEL], record: false });
  dir = mkdtempSync(join(tmpdir(), 'pao-hostile-'));
  proxy = await startProxyProcess(
    [
      ...standaloneFiles(dir, [routedModel(MODEL, double.url)], `${KEY}\n`),
      '--usage-db',
      join(dir, 'u.db'),
      // Shorter than the defaults (10 s, 30 s) so the slow-client attack runs in seconds.
      '--header-timeout-seconds',
      String(SLOW_TIMEOUT_S),
      '--body-timeout-seconds',
      String(SLOW_TIMEOUT_S),
    ],
    // As the chart runs it.
    { ...process.env, NODE_OPTIONS: MEMORY.nodeOptions, GATEWAY_REQUEST_MEMORY_MB: '128' },
  );
});

afterAll(async () => {
  console.log(['| attack | answers | slowest /healthz | peak RSS |', '|---|---|---|---|', ...report].join('\n'));
  await proxy?.stop('SIGTERM');
  await double?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('hostile callers against the real proxy process', () => {
  it.each(Object.keys(SHAPES))(
    '8 concurrent 10 MiB bodies of %s: all answered in JSON, /healthz within 1.5 s, memory under the limit',
    { timeout: 120_000 },
    async (shape) => {
      const body = (SHAPES[shape] as () => string)();
      expect(Buffer.byteLength(body)).toBeGreaterThan(TEN_MIB - 1024);
      expect(Buffer.byteLength(body)).toBeLessThanOrEqual(TEN_MIB);
      const { result, slowestHealthMs, peakRssMiB } = await watched(() =>
        Promise.all(
          Array.from({ length: 8 }, async () => {
            const res = await fetch(`${proxy.base}/openai/v1/chat/completions`, {
              method: 'POST',
              headers: { 'content-type': 'application/json', 'x-api-key': KEY },
              body,
            });
            const answer = (await res.json()) as { error?: { code: string }; choices?: unknown[] };
            return { status: res.status, code: answer.error?.code ?? 'ok', retryAfter: res.headers.get('retry-after') };
          }),
        ),
      );
      const counts: Record<string, number> = {};
      for (const r of result) counts[`${r.status} ${r.code}`] = (counts[`${r.status} ${r.code}`] ?? 0) + 1;
      report.push(
        `| ${shape} | ${Object.entries(counts)
          .map(([k, n]) => `${n}x ${k}`)
          .join(', ')} | ${Math.round(slowestHealthMs)} ms | ${Math.round(peakRssMiB)} MiB |`,
      );
      expect(proxy.child.exitCode).toBeNull();
      // Every /healthz answered within the probe's 5 s (it fails the test otherwise): a blocked
      // event loop (a synchronous parse of the bodies) stalls it for seconds. The slowest answer
      // is a figure for the report above, not a bound: a loaded machine moves it.
      expect(peakRssMiB).toBeLessThan(CONTAINER_LIMIT_MIB);
      for (const r of result) {
        if (r.status === 503) {
          // Over the memory budget: refused at once, with when to come back.
          expect(r.code).toBe('server_busy');
          expect(r.retryAfter).toBe('1');
        } else if (shape === 'long strings') {
          expect(r.status).toBe(200);
        } else {
          expect(r.status).toBe(400);
          expect(r.code).toBe(shape === 'deep nesting' ? 'invalid_request' : 'too_many_values');
        }
      }
      if (shape === 'long strings') expect(result.some((r) => r.status === 200)).toBe(true);
    },
  );

  it('20k refused requests with distinct tag values do not poison the reports or slow chat down', {
    timeout: 180_000,
  }, async () => {
    const send = (i: number) =>
      fetch(`${proxy.base}/openai/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-api-key': KEY, 'x-tags': `junk:v${i},team:t${i}` },
        body: `{"model":"no-such-model:${i}","messages":[{"role":"user","content":"hi"}]}`,
      }).then((r) => r.status);
    let next = 0;
    const statuses: number[] = [];
    const { peakRssMiB } = await watched(() =>
      Promise.all(
        Array.from({ length: 32 }, async () => {
          while (next < 20_000) statuses.push(await send(next++));
        }),
      ),
    );
    expect(statuses.every((s) => s === 404)).toBe(true);
    // A paid request: its team is real.
    const paid = await fetch(`${proxy.base}/openai/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': KEY, 'x-tags': 'team:ml' },
      body: `${head}}`,
    });
    expect(paid.status).toBe(200);
    await new Promise((r) => setTimeout(r, 500)); // the recorder's batch

    const reports = [
      '/v1/usage?groupBy=junk',
      '/v1/usage?groupBy=team',
      '/v1/analytics?groupBy=team',
      '/v1/usage?groupBy=model',
      '/v1/analytics?groupBy=junk&tag=team:t5',
      '/v1/usage?groupBy=team&tag=junk:v1&tag=team:t1',
      '/v1/tags?search=t',
    ];
    const slowest: Record<string, number> = {};
    for (const path of reports) {
      const started = performance.now();
      const res = await fetch(`${proxy.base}${path}`, { headers: { 'x-api-key': KEY } });
      const ms = performance.now() - started;
      slowest[path] = ms;
      expect(res.status).toBe(200);
      const body = (await res.json()) as { groups?: unknown[]; data?: unknown[]; series?: unknown[] };
      // Bounded by the rollups, not the 20k refused requests: at most 21 groups, whatever the junk.
      // Its time is a figure for the report; the chats below catch a report that stalls the loop.
      expect((body.groups ?? body.data ?? []).length, path).toBeLessThanOrEqual(21);
    }
    const byTeam = (await (
      await fetch(`${proxy.base}/v1/usage?groupBy=team`, { headers: { 'x-api-key': KEY } })
    ).json()) as {
      groups: Array<{ group: string; requests: number }>;
    };
    // Refused requests made no tag rows: the real team is there, the 20k junk values are not.
    expect(byTeam.groups.map((g) => g.group)).toEqual(['ml']);

    // Chat latency while someone loops over the reports, against idle.
    const chatOnce = async () => {
      const started = performance.now();
      const res = await fetch(`${proxy.base}/openai/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-api-key': KEY },
        body: `${head}}`,
      });
      await res.text();
      return performance.now() - started;
    };
    const p99 = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length * 0.99)] ?? 0;
    // Idle measured before and after the busy phase: a machine that slows down meanwhile (CI's
    // other work on 2 cores) moves both, not only the busy samples.
    const idle: number[] = [];
    for (let i = 0; i < 150; i++) idle.push(await chatOnce());
    let looping = true;
    const loop = (async () => {
      while (looping) {
        for (const path of reports)
          await (await fetch(`${proxy.base}${path}`, { headers: { 'x-api-key': KEY } })).text();
      }
    })();
    const busy: number[] = [];
    for (let i = 0; i < 300; i++) busy.push(await chatOnce());
    looping = false;
    await loop;
    for (let i = 0; i < 150; i++) idle.push(await chatOnce());
    report.push(
      `| 20k refused requests, distinct tags | 20000x 404; reports ${Object.values(slowest)
        .map((ms) => Math.round(ms))
        .join(
          '/',
        )} ms; chat p99 idle ${p99(idle).toFixed(1)} ms, during reports ${p99(busy).toFixed(1)} ms | - | ${Math.round(peakRssMiB)} MiB |`,
    );
    // p95, not p99: of 300 samples p99 is the third slowest, one scheduler hiccup on a 2-core
    // machine under CI; a report stalling the event loop would move the whole tail. Twice idle,
    // or idle + 20 ms when idle is a few ms: the report loop shares the proxy's two cores with
    // the chats, which alone can double a 4 ms p95 (8.5 vs 8.4 ms failed a run once), while a
    // report computed on the event loop (100+ ms at 20k records) stalls by far more.
    const p95 = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length * 0.95)] ?? 0;
    expect(p95(busy)).toBeLessThan(Math.max(2 * p95(idle), p95(idle) + 20));
  });

  it('200 slow uploads and 200 never-ending headers are cut at the timeouts while /healthz answers', {
    timeout: 60_000,
  }, async () => {
    const port = Number(new URL(proxy.base).port);
    const held: Socket[] = [];
    const outcome = (kind: 'upload' | 'headers') =>
      new Promise<{ kind: string; status: string; ms: number }>((resolve) => {
        const s = connect(port, '127.0.0.1');
        held.push(s);
        const started = performance.now();
        let text = '';
        let trickle: NodeJS.Timeout | undefined;
        s.on('connect', () => {
          if (kind === 'upload') {
            s.write(
              `POST /openai/v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nx-api-key: ${KEY}\r\ncontent-length: 100000\r\n\r\n{"model":"${MODEL}",`,
            );
            trickle = setInterval(() => s.writable && s.write(' '), 500);
          } else {
            s.write('POST /openai/v1/chat/completions HTTP/1.1\r\nhost: x\r\n');
            trickle = setInterval(() => s.writable && s.write('x-pad: 1\r\n'), 500);
          }
        });
        s.on('data', (d) => {
          text += d.toString();
        });
        s.on('error', () => {});
        s.on('close', () => {
          clearInterval(trickle);
          resolve({ kind, status: /^HTTP\/1\.1 (\d+)/.exec(text)?.[1] ?? 'closed', ms: performance.now() - started });
        });
      });
    const { result, slowestHealthMs, peakRssMiB } = await watched(() =>
      Promise.all([
        ...Array.from({ length: 200 }, () => outcome('upload')),
        ...Array.from({ length: 200 }, () => outcome('headers')),
      ]),
    );
    for (const s of held) s.destroy();
    const uploads = result.filter((r) => r.kind === 'upload');
    const headerOnly = result.filter((r) => r.kind === 'headers');
    const slowest = (xs: Array<{ ms: number }>) => Math.max(...xs.map((x) => x.ms));
    report.push(
      `| 200 slow uploads + 200 endless headers (timeouts ${SLOW_TIMEOUT_S} s) | uploads: ${uploads.filter((r) => r.status === '408').length}x 408 request_timeout, cut after <= ${(slowest(uploads) / 1000).toFixed(1)} s; headers: ${headerOnly.filter((r) => r.status === '408' || r.status === 'closed').length}x cut after <= ${(slowest(headerOnly) / 1000).toFixed(1)} s | ${Math.round(slowestHealthMs)} ms | ${Math.round(peakRssMiB)} MiB |`,
    );
    expect(proxy.child.exitCode).toBeNull();
    // As for the large bodies: every /healthz answered within the probe's 5 s; the slowest is in the report.
    expect(uploads.every((r) => r.status === '408')).toBe(true);
    // Each trickle would outlive the test: every connection is cut near its limit (Node checks the
    // timeouts every second), well inside twice the limit even on a loaded machine.
    expect(slowest(uploads)).toBeLessThan((2 * SLOW_TIMEOUT_S + 5) * 1000);
    expect(slowest(headerOnly)).toBeLessThan((2 * SLOW_TIMEOUT_S + 5) * 1000);
  });

  it('afterwards still answers a normal request, and keeps metrics off the API port', async () => {
    const res = await fetch(`${proxy.base}/openai/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': KEY },
      body: `${head}}`,
    });
    expect(res.status).toBe(200);
    const onApiPort = await fetch(`${proxy.base}/metrics`);
    expect(onApiPort.status).toBe(404);
    const metrics = await (await fetch(`${proxy.metrics}/metrics`)).text();
    expect(metrics).toContain('pao_gateway_requests_total');
    expect(metrics).not.toMatch(/key="/);
    // The 20k refused requests claimed no label value: the paid team:ml is labelled, no junk is.
    expect(metrics).toMatch(/tag_team="ml"/);
    expect(metrics).not.toMatch(/tag_team="t\d+"/);
    report.push(
      `| GET /metrics on the API port, after 20k junk team tags | 404; metrics port: team ml labelled, 0 junk values, no key label | - | ${Math.round(rssMiB(proxy.child.pid as number))} MiB |`,
    );
  });
});
