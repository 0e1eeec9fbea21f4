import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type OllamaDouble, startOllamaDouble } from '../doubles/ollama.js';
import { type RedisServer, startRedis } from '../redis/server.js';
import { eventually } from '../support/kube.js';
import { type ProxyProcess, routedModel, standaloneFiles, startProxyProcess } from '../support/proxy-process.js';

/**
 * One key's rate limit across two proxy processes: with --redis they share one bucket (a burst
 * of 10 admits 10 in all); without, each replica has its own (20 in all). Redis going away never
 * fails a request: each replica limits on its own meanwhile, logs it once, counts it, and
 * shares again once Redis is back.
 */

const KEY = 'sk-rate-e2e-0000000000000000000000000000000';
const BURST = 10;
let redis: RedisServer;
let double: OllamaDouble;
let dir: string;
/** The flags naming the standalone config and keys files. */
let files: string[] = [];
const proxies: ProxyProcess[] = [];

async function replica(redisUrl?: string): Promise<ProxyProcess> {
  const p = await startProxyProcess([...files, '--usage-db', ':memory:', ...(redisUrl ? ['--redis', redisUrl] : [])]);
  proxies.push(p);
  return p;
}

const send = async (ps: ProxyProcess[], n: number): Promise<number[]> => {
  const statuses: number[] = [];
  for (let i = 0; i < n; i++) {
    const p = ps[i % ps.length] as ProxyProcess;
    const res = await fetch(`${p.base}/openai/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': KEY },
      body: JSON.stringify({ model: 'llama3.1:8b', messages: [{ role: 'user', content: 'hi' }] }),
    });
    await res.text();
    statuses.push(res.status);
  }
  return statuses;
};
const count = (statuses: number[], status: number) => statuses.filter((s) => s === status).length;

beforeAll(async () => {
  redis = await startRedis();
  double = await startOllamaDouble({ models: ['llama3.1:8b'], record: false });
  dir = mkdtempSync(join(tmpdir(), 'pao-rate-'));
  const digest = createHash('sha256').update(KEY).digest('hex');
  // Refills one request per 1000 s: what a test sees is the burst.
  files = standaloneFiles(
    dir,
    [
      routedModel('llama3.1:8b', double.url),
      `apiVersion: ai.platform/v1beta1
kind: ApiKey
metadata: { name: limited }
spec: { team: ml, rateLimit: { requestsPerSecond: 0.001, burst: ${BURST} } }
status: { digest: "sha256:${digest}" }
`,
    ],
    'sk-unused-admin\n',
  );
}, 60_000);

afterAll(async () => {
  for (const p of proxies) await p.stop('SIGTERM');
  await double?.close();
  await redis?.destroy();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('rate limits across two proxy processes', () => {
  it('without Redis each replica has its own bucket', async () => {
    const statuses = await send([await replica(), await replica()], 4 * BURST);
    expect(count(statuses, 200)).toBe(2 * BURST);
    expect(count(statuses, 429)).toBe(2 * BURST);
  });

  it('with Redis they share one; Redis away: per replica, said once, counted; back: shared again', {
    timeout: 60_000,
  }, async () => {
    const [a, b] = [await replica(redis.url), await replica(redis.url)];
    if (!a || !b) throw new Error('no proxies');
    const shared = await send([a, b], 4 * BURST);
    expect(count(shared, 200)).toBe(BURST);
    expect(count(shared, 429)).toBe(3 * BURST);

    await redis.stop();
    const during = await send([a, b], 4 * BURST);
    // Never an error for want of Redis: each replica's own bucket answers (full: it was not used).
    expect(during.every((s) => s === 200 || s === 429)).toBe(true);
    expect(count(during, 200)).toBe(2 * BURST);
    for (const p of [a, b]) {
      expect(p.output().match(/Redis not answering/g)).toHaveLength(1);
      const metrics = await (await fetch(`${p.metrics}/metrics`)).text();
      expect(Number(/pao_gateway_rate_limit_fallbacks_total (\d+)/.exec(metrics)?.[1])).toBe(2 * BURST);
    }

    // A fresh Redis (no persistence): a full shared bucket once both replicas reconnect.
    await redis.start();
    await eventually('both replicas share again', 20_000, async () => {
      await send([a, b], 2);
      return a.output().includes('Redis answering again') && b.output().includes('Redis answering again')
        ? true
        : undefined;
    });
    const after = await send([a, b], 4 * BURST);
    expect(count(after, 200)).toBeLessThanOrEqual(BURST);
    expect(count(after, 429)).toBeGreaterThanOrEqual(3 * BURST);
  });
});
