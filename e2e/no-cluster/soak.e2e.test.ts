import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Pool } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type OllamaDouble, startOllamaDouble } from '../doubles/ollama.js';
import { PROMPT_CANARY } from '../support/known-secrets.js';
import { type ProxyProcess, startProxyProcess } from '../support/proxy-process.js';

/**
 * Soak: the proxy process as users run it (usage recorder and SQLite store on) under moderate
 * concurrency for SOAK_SECONDS (default 60): no request fails, the process's memory levels off,
 * and every request is accounted for in the usage API and the metrics.
 */

const SECONDS = Number(process.env.SOAK_SECONDS ?? 60);
const CONCURRENCY = 16;
const KEY = 'sk-soak-test-key';
const TEAMS = ['search', 'chat', 'ads'];
/** Growth of the proxy's RSS between the second quarter of the run and the last one. */
const MAX_GROWTH_MIB = 48;
const MAX_RSS_MIB = 400;
/**
 * V8 grows its heap lazily up to a limit sized from the machine's memory (GBs here; 512Mi in the
 * chart's container): without a cap, RSS climbs for minutes with no leak at all. Capped well
 * below the container limit, garbage is collected and a real leak shows as growth, GC thrash
 * (failed requests) or a crash within the minute.
 */
const HEAP_MIB = 128;

let double: OllamaDouble;
let proxy: ProxyProcess;
let dir: string;

const rssMiB = (pid: number) => {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m?.[1] ? Number(m[1]) / 1024 : Number.NaN;
};

beforeAll(async () => {
  double = await startOllamaDouble({ models: ['llama3.1:8b'], record: false });
  double.behave({ completionTokens: 16, interTokenDelayMs: 1 });
  dir = mkdtempSync(join(tmpdir(), 'soak-'));
  writeFileSync(
    join(dir, 'gateway.yaml'),
    `apiVersion: ai.platform/v1beta1\nkind: ModelDeployment\nmetadata: {name: local}\nspec: {model: "llama3.1:8b", serviceName: local, endpoint: "${double.url}"}\n`,
  );
  writeFileSync(join(dir, 'keys.txt'), `${KEY}\n`);
  proxy = await startProxyProcess(
    ['--config', join(dir, 'gateway.yaml'), '--keys-file', join(dir, 'keys.txt'), '--usage-db', join(dir, 'usage.db')],
    { ...process.env, NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} --max-old-space-size=${HEAP_MIB}` },
  );
});

afterAll(async () => {
  await proxy?.stop('SIGTERM');
  await double?.close();
});

describe('soak', () => {
  it(
    `serves ${CONCURRENCY} concurrent callers for ${SECONDS} s without errors, memory growth or lost usage`,
    async () => {
      const pid = proxy.child.pid ?? 0;
      const pool = new Pool(proxy.base, { connections: CONCURRENCY });
      const sent = new Map<string, number>(TEAMS.map((t) => [t, 0]));
      const failures: string[] = [];
      let requests = 0;
      let streamed = 0;
      const samples: Array<{ at: number; rss: number }> = [];
      const started = performance.now();
      const end = started + SECONDS * 1000;
      const sampler = setInterval(() => samples.push({ at: performance.now() - started, rss: rssMiB(pid) }), 1000);

      const worker = async (w: number) => {
        for (let i = 0; performance.now() < end; i++) {
          const team = TEAMS[(w + i) % TEAMS.length] ?? 'search';
          const stream = i % 2 === 0;
          const res = await pool.request({
            path: '/openai/v1/chat/completions',
            method: 'POST',
            headers: { 'content-type': 'application/json', 'x-api-key': KEY, 'x-tags': `team:${team}` },
            body: JSON.stringify({
              model: 'llama3.1:8b',
              stream,
              messages: [{ role: 'user', content: `soak request ${i} ${PROMPT_CANARY}` }],
              tags: [`worker:w${w}`],
            }),
          });
          const text = await res.body.text();
          requests++;
          if (
            res.statusCode !== 200 ||
            (stream && !text.trimEnd().endsWith('data: [DONE]')) ||
            text.includes('"error"')
          ) {
            if (failures.length < 5) failures.push(`${res.statusCode} ${text.slice(0, 200)}`);
            continue;
          }
          sent.set(team, (sent.get(team) ?? 0) + 1);
          if (stream) streamed++;
        }
      };
      await Promise.all(Array.from({ length: CONCURRENCY }, (_, w) => worker(w)));
      clearInterval(sampler);
      await pool.close();
      const elapsed = (performance.now() - started) / 1000;

      const window = (from: number, to: number) => {
        const xs = samples.filter((s) => s.at >= from * SECONDS * 1000 && s.at < to * SECONDS * 1000).map((s) => s.rss);
        return xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length);
      };
      const early = window(0.25, 0.5);
      const late = window(0.75, 1);
      const peak = Math.max(...samples.map((s) => s.rss));
      console.log(
        `[soak] ${requests} requests (${streamed} streamed) in ${elapsed.toFixed(1)} s = ${(requests / elapsed).toFixed(0)}/s at concurrency ${CONCURRENCY}; proxy RSS ${early.toFixed(0)} MiB (2nd quarter) -> ${late.toFixed(0)} MiB (last quarter), peak ${peak.toFixed(0)} MiB`,
      );

      expect(failures).toEqual([]);
      expect(requests).toBeGreaterThan(SECONDS * 50);
      expect(late - early).toBeLessThan(MAX_GROWTH_MIB);
      expect(peak).toBeLessThan(MAX_RSS_MIB);

      // Every request is in the usage store once the recorder's last flush (250 ms) is done.
      await new Promise((r) => setTimeout(r, 700));
      const get = async <T>(path: string) => {
        const res = await fetch(`${proxy.base}${path}`, { headers: { 'x-api-key': KEY } });
        expect(res.status).toBe(200);
        return (await res.json()) as T;
      };
      const byTeam = await get<{
        totals: { requests: number; outputTokens: number };
        groups: Array<{ group: string; requests: number }>;
      }>('/v1/usage?groupBy=team&granularity=hour');
      expect(byTeam.totals.requests).toBe(requests);
      expect(byTeam.totals.outputTokens).toBe(requests * 16);
      expect(Object.fromEntries(byTeam.groups.map((g) => [g.group, g.requests]))).toEqual(Object.fromEntries(sent));
      const metrics = await (await fetch(`${proxy.metrics}/metrics`)).text();
      const counted = [...metrics.matchAll(/^pao_gateway_requests_total\{[^}]*status="200"[^}]*\} (\d+)/gm)].reduce(
        (a, m) => a + Number(m[1]),
        0,
      );
      expect(counted).toBe(requests);
      expect(metrics).toMatch(/^pao_gateway_usage_records_dropped_total 0$/m);
    },
    (SECONDS + 60) * 1000,
  );
});
