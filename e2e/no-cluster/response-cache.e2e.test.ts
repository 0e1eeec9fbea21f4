import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OLLAMA_MODEL, OLLAMA_VERSIONS, type OllamaServer, startOllama } from '../ollama/server.js';
import { type RedisServer, startRedis } from '../redis/server.js';
import { type ProxyProcess, standaloneFiles, startProxyProcess } from '../support/proxy-process.js';

/**
 * The response cache with real components: two proxy processes sharing it through a real Redis
 * (one replica's answer is the other's hit); Redis going away leaves every request served (a
 * miss, counted); and a semantic hit found with a real embedding model (all-MiniLM on a real
 * Ollama, the routing policy's embedding model), in front of a real model (SmolLM2 on Ollama).
 */

const EMBED = OLLAMA_VERSIONS.OLLAMA_EMBED_MODEL ?? 'all-minilm:l6-v2';
const KEY = 'sk-cache-e2e-000000000000000000000000000000';
const digest = createHash('sha256').update(KEY).digest('hex');
let redis: RedisServer;
let ollama: OllamaServer;
let dir: string;
let files: string[] = [];
const proxies: ProxyProcess[] = [];

const model = (name: string, served: string) => `apiVersion: ai.platform/v1beta1
kind: ModelDeployment
metadata: { name: ${name} }
spec: { model: "${served}", serviceName: ${name}, endpoint: "${ollama.url}" }
`;

async function replica(redisUrl?: string): Promise<ProxyProcess> {
  const p = await startProxyProcess([...files, '--usage-db', ':memory:', ...(redisUrl ? ['--redis', redisUrl] : [])]);
  proxies.push(p);
  return p;
}

const ask = (p: ProxyProcess, content: string) =>
  fetch(`${p.base}/openai/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': KEY },
    body: JSON.stringify({ model: OLLAMA_MODEL, temperature: 0, max_tokens: 8, messages: [{ role: 'user', content }] }),
  });

beforeAll(async () => {
  redis = await startRedis();
  ollama = await startOllama({ parallel: 2 });
  dir = mkdtempSync(join(tmpdir(), 'pao-cache-'));
  files = standaloneFiles(
    dir,
    [
      model('smollm', OLLAMA_MODEL),
      model('minilm', EMBED),
      `apiVersion: ai.platform/v1beta1
kind: RoutingPolicy
metadata: { name: default }
spec:
  models: [{ name: "${OLLAMA_MODEL}", tier: Light }]
  scorer: { semantic: { embeddingModel: "${EMBED}" } }
`,
      `apiVersion: ai.platform/v1beta1
kind: ApiKey
metadata: { name: cached }
spec: { team: ml, cache: { mode: Semantic, similarity: 0.85 } }
status: { digest: "sha256:${digest}" }
`,
    ],
    'sk-unused-admin\n',
  );
}, 120_000);

afterAll(async () => {
  for (const p of proxies) await p.stop('SIGTERM');
  await ollama?.stop();
  await redis?.destroy();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('the response cache across two proxy processes through Redis', () => {
  it("answers one replica's request from the other's answer; Redis away, every request is still served", {
    timeout: 120_000,
  }, async () => {
    const [a, b] = [await replica(redis.url), await replica(redis.url)];
    if (!a || !b) throw new Error('no proxies');
    const first = await ask(a, 'Name a colour.');
    expect(first.headers.get('x-cache')).toBe('miss');
    const answer = await first.text();
    let hit: Response | undefined;
    for (let i = 0; i < 50 && hit?.headers.get('x-cache') !== 'hit; kind=exact'; i++) {
      hit = await ask(b, 'Name a colour.');
      if (hit.headers.get('x-cache') !== 'hit; kind=exact') await new Promise((r) => setTimeout(r, 100));
    }
    expect(hit?.headers.get('x-cache')).toBe('hit; kind=exact');
    expect(await hit?.text()).toBe(answer);

    await redis.stop();
    for (const p of [a, b]) {
      const res = await ask(p, 'Name an animal.');
      expect(res.status).toBe(200);
      expect(res.headers.get('x-cache')).toBe('miss');
      await res.text();
      const metrics = await (await fetch(`${p.metrics}/metrics`)).text();
      expect(metrics).toMatch(/pao_gateway_cache_results_total\{kind="(exact|semantic)",result="error"\} [1-9]/);
    }
    // Each replica trains its routing policy's classifier over the embedding model in the
    // background (the bank's 1,500 texts): stopped, they leave the one Ollama to the next test.
    for (const p of [a, b]) await p.stop('SIGTERM');
  });
});

describe('a semantic hit', () => {
  it("is found with the routing policy's real embedding model", { timeout: 120_000 }, async () => {
    const p = await replica();
    // The embedding model loaded (again, if Ollama let it go for the chat model) before the first
    // lookup: a cold load takes longer than a lookup waits for it, and that lookup would index nothing.
    await fetch(`${ollama.url}/v1/embeddings`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: EMBED, input: ['warm'] }),
    });
    const first = await ask(p, 'What is the capital city of France?');
    expect(first.headers.get('x-cache')).toBe('miss');
    await first.text();
    // The same question put otherwise, each time a little differently (a trailing space: another
    // exact key, the same meaning), until the embedding model answers within a lookup's time.
    let near: Response | undefined;
    for (let i = 0; i < 20 && near?.headers.get('x-cache') !== 'hit; kind=semantic'; i++) {
      near = await ask(p, `What's the capital city of France?${' '.repeat(i)}`);
      if (near.headers.get('x-cache') !== 'hit; kind=semantic') {
        await near.text();
        await new Promise((r) => setTimeout(r, 200));
      }
    }
    expect(near?.headers.get('x-cache')).toBe('hit; kind=semantic');
    const body = (await near?.json()) as { object: string } | undefined;
    expect(body?.object).toBe('chat.completion');
    const other = await ask(p, 'Write a haiku about the sea.');
    expect(other.headers.get('x-cache')).toBe('miss');
  });
});
