import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { periodStart } from '../../crds/budget-period.js';
import { PostgresUsageStore } from '../../proxy/usage/postgres-store.js';
import { type OllamaDouble, startOllamaDouble } from '../doubles/ollama.js';
import { type Postgres, startPostgres } from '../postgres/server.js';
import { type ProxyProcess, routedModel, standaloneFiles, startProxyProcess } from '../support/proxy-process.js';

/**
 * One budget, two proxy processes, one real PostgreSQL: the key may spend BUDGET_USD a day.
 * Eight callers spread over both replicas spend it as fast as they can; the test measures how
 * far past the budget the spend went (the overshoot) and how long the second replica kept
 * serving after the first refused, and holds both to the bound the design states: each replica
 * sees the other's spend at most one refresh (2 s) plus one recorder batch (250 ms) late, so
 * the overshoot is at most the spend rate over that window plus the requests in flight.
 */

const KEY = 'sk-budget-e2e-000000000000000000000000000000';
const BUDGET_USD = 0.05;
const REFRESH_MS = 2_000;
const FLUSH_MS = 250;
const CALLERS = 8;
let pg: Postgres;
let double: OllamaDouble;
let dir: string;
const proxies: ProxyProcess[] = [];

beforeAll(async () => {
  pg = await startPostgres();
  double = await startOllamaDouble({ models: ['llama3.1:8b'], record: false });
  dir = mkdtempSync(join(tmpdir(), 'pao-budget-'));
  const digest = createHash('sha256').update(KEY).digest('hex');
  const files = standaloneFiles(
    dir,
    [
      routedModel('llama3.1:8b', double.url),
      `apiVersion: ai.platform/v1beta1
kind: ApiKey
metadata: { name: spender }
spec: { team: data, budget: { usd: ${BUDGET_USD}, period: Daily } }
status: { digest: "sha256:${digest}" }
`,
    ],
    '# keys come from the ApiKey documents\nsk-unused-admin\n',
  );
  for (let i = 0; i < 2; i++) {
    proxies.push(await startProxyProcess([...files, '--usage-db', pg.url, '--budget-refresh-ms', String(REFRESH_MS)]));
  }
}, 90_000);

afterAll(async () => {
  for (const p of proxies) await p.stop('SIGTERM');
  await double?.close();
  await pg?.destroy();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('a budget shared by two proxy processes on PostgreSQL', () => {
  it('refuses on both replicas once spent, within the stated staleness, overshooting at most the stated bound', {
    timeout: 120_000,
  }, async () => {
    const [a, b] = proxies;
    if (!a || !b) throw new Error('no proxies');
    const firstRefusal = new Map<string, number>();
    let served = 0;
    const started = Date.now();
    const callers = Array.from({ length: CALLERS }, async (_, w) => {
      // Each caller stops once both replicas have refused it twice in a row.
      let refusedInRow = 0;
      for (let i = 0; refusedInRow < 4 && Date.now() - started < 60_000; i++) {
        const p = (i + w) % 2 ? a : b;
        const res = await fetch(`${p.base}/openai/v1/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'x-api-key': KEY },
          body: JSON.stringify({ model: 'llama3.1:8b', messages: [{ role: 'user', content: 'spend' }] }),
        });
        const body = (await res.json()) as { error?: { code: string } };
        if (res.status === 429) {
          expect(body.error?.code).toBe('insufficient_quota');
          expect(Number(res.headers.get('retry-after'))).toBeGreaterThan(0);
          if (!firstRefusal.has(p.base)) firstRefusal.set(p.base, Date.now());
          refusedInRow++;
        } else {
          expect(res.status).toBe(200);
          served++;
          refusedInRow = 0;
        }
      }
    });
    await Promise.all(callers);
    const elapsedS = (Math.min(...firstRefusal.values()) - started) / 1000;
    // Every record written (the recorders flush every 250 ms), then the spend from the store.
    await new Promise((r) => setTimeout(r, 1_000));
    const store = await PostgresUsageStore.open(pg.url);
    const [spent = 0] = await store.spend([{ apiKey: 'spender', since: periodStart('Daily', new Date()) }]);
    const report = await store.usage({
      from: new Date(Date.now() - 3_600_000),
      to: new Date(Date.now() + 60_000),
      granularity: 'hour',
      groupBy: 'model',
      tags: [],
    });
    await store.close();
    // Every answer of the double costs about the same.
    const perRequest = spent / served;
    const rateUsdPerS = BUDGET_USD / elapsedS;
    const overshoot = spent - BUDGET_USD;
    const bound = rateUsdPerS * ((REFRESH_MS + FLUSH_MS) / 1000 + 0.5) + CALLERS * perRequest;
    const times = [...firstRefusal.values()];
    const lag = Math.max(...times) - Math.min(...times);
    console.log(
      JSON.stringify({
        budgetUsd: BUDGET_USD,
        spentUsd: +spent.toFixed(6),
        overshootUsd: +overshoot.toFixed(6),
        overshootPct: +((overshoot / BUDGET_USD) * 100).toFixed(1),
        boundUsd: +bound.toFixed(6),
        served,
        perRequestUsd: +perRequest.toFixed(6),
        spendRateUsdPerS: +rateUsdPerS.toFixed(5),
        secondReplicaRefusedAfterMs: lag,
      }),
    );
    expect(firstRefusal.size).toBe(2);
    expect(report.totals.requests).toBeGreaterThanOrEqual(served);
    expect(spent).toBeGreaterThanOrEqual(BUDGET_USD);
    expect(overshoot).toBeLessThanOrEqual(bound);
    // The second replica learns within one refresh and one batch (plus scheduling slack).
    expect(lag).toBeLessThanOrEqual(REFRESH_MS + FLUSH_MS + 1_000);
  });
});
