import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Pool } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type OllamaDouble, startOllamaDouble } from '../doubles/ollama.js';
import { chartProxyMemory } from '../support/chart-memory.js';
import { PROMPT_CANARY } from '../support/known-secrets.js';
import { type ProxyProcess, startProxyProcess } from '../support/proxy-process.js';
import { RssSamples } from '../support/rss.js';

/**
 * Soak: the proxy process as users run it (usage recorder and SQLite store on) under moderate
 * concurrency: no request fails, the process's memory levels off (e2e/support/rss.ts says when)
 * and then stays level for SOAK_SECONDS (default 40), and every request is accounted for in the
 * usage API and the metrics. A leak never levels off: it fails the warm-up's bound, or the window's.
 */

const SECONDS = Number(process.env.SOAK_SECONDS ?? 40);
const CONCURRENCY = 16;
const KEY = 'sk-soak-test-key';
const TEAMS = ['search', 'chat', 'ads'];
/** Longest warm-up: past it, memory that still rises is a failure (a leak does not level off). */
const MAX_WARMUP_SECONDS = 300;
/** Growth of the peak RSS between the first and the second half of the measured window, once level. */
const MAX_GROWTH_MIB = 24;
/** The chart's container limit is 512 MiB: the proxy must stay clear of it. */
const MAX_RSS_MIB = 480;
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
    {
      ...process.env,
      // The young generation as a pod has it (the chart's --max-semi-space-size): left to Node 24's
      // default it grows for a minute and more of the warm-up.
      NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} --max-old-space-size=${HEAP_MIB} --max-semi-space-size=${chartProxyMemory().semiSpaceMiB}`,
    },
  );
});

afterAll(async () => {
  await proxy?.stop('SIGTERM');
  await double?.close();
});

describe('soak', () => {
  it(
    `serves ${CONCURRENCY} concurrent callers without errors; once warm, ${SECONDS} s without memory growth or lost usage`,
    async () => {
      const pid = proxy.child.pid ?? 0;
      const pool = new Pool(proxy.base, { connections: CONCURRENCY });
      const sent = new Map<string, number>(TEAMS.map((t) => [t, 0]));
      const failures: string[] = [];
      let requests = 0;
      let streamed = 0;
      let running = true;
      const samples = new RssSamples(pid);

      const worker = async (w: number) => {
        for (let i = 0; running; i++) {
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
      const workers = Promise.all(Array.from({ length: CONCURRENCY }, (_, w) => worker(w)));
      // Warm-up: until RSS levels off (or the bound passes: a leak never levels off).
      const levelled = await samples.level(MAX_WARMUP_SECONDS * 1000);
      const warm = samples.now();
      const requestsWarm = requests;
      // The measured window, from the moment RSS was level.
      await new Promise((r) => setTimeout(r, SECONDS * 1000));
      running = false;
      await workers;
      samples.stop();
      await pool.close();
      const measured = (samples.now() - warm) / 1000;
      const half = warm + (SECONDS * 1000) / 2;
      const first = samples.peak(warm, half);
      const second = samples.peak(half);
      const peak = samples.peak();
      console.log(
        `[soak] warm after ${(warm / 1000).toFixed(0)} s (levelled ${levelled === undefined ? 'never' : `at ${levelled / 1000} s`}, RSS ${samples.peak(0, 10_000).toFixed(0)} -> ${samples.peak(0, warm).toFixed(0)} MiB); then ${requests - requestsWarm} requests in ${measured.toFixed(1)} s = ${((requests - requestsWarm) / measured).toFixed(0)}/s at concurrency ${CONCURRENCY}; peak RSS ${first.toFixed(0)} MiB (first half) -> ${second.toFixed(0)} MiB (second half), overall ${peak.toFixed(0)} MiB; ${requests} requests in all (${streamed} streamed)`,
      );

      expect(failures).toEqual([]);
      expect(levelled, `RSS still rising after ${MAX_WARMUP_SECONDS} s`).toBeDefined();
      expect(requests - requestsWarm).toBeGreaterThan(SECONDS * 50);
      expect(second - first).toBeLessThan(MAX_GROWTH_MIB);
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
    (MAX_WARMUP_SECONDS + SECONDS + 90) * 1000,
  );
});
