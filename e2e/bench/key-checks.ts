import { exportJWK, generateKeyPair, SignJWT } from 'jose';
import { Agent, request } from 'undici';
import type { ApiKey } from '../../crds/api-key.js';
import type { ModelDeployment } from '../../crds/model-deployment.js';
import { ApiKeys, keyPolicy, policyOf, sha256 } from '../../proxy/access/auth.js';
import { BudgetGuard } from '../../proxy/access/budgets.js';
import type { RateLimiter } from '../../proxy/access/rate-limit.js';
import { RedisRateLimiter } from '../../proxy/access/redis-rate-limit.js';
import { Identities } from '../../proxy/identity/identities.js';
import { buildRoutes, RouteTable } from '../../proxy/serving/routes.js';
import { ProxyMetrics } from '../../proxy/telemetry/metrics.js';
import { OpenAICompatibleUpstream } from '../../proxy/upstreams/openai-compatible.js';
import { MemoryUsage } from '../../proxy/usage/record.js';
import { SqliteUsageStore } from '../../proxy/usage/sqlite-store.js';
import { startOllamaDouble } from '../doubles/ollama.js';
import { startRedis } from '../redis/server.js';
import { startGateway, type TestGateway } from '../support/gateway.js';

/**
 * What a team key's checks add to a request: the same sequential requests (keep-alive, one at a
 * time) through the proxy (node:http server, as production) against the Ollama double, with
 *   plain       a key of the keys file: no limits, no budget (the floor)
 *   keys        an ApiKey among 1,000 (digest lookup), with a request rate, tokens per minute, a
 *               key budget and a tag budget: limits in this replica
 *   keys+redis  the same with the limits in a real redis-server (one round trip per request)
 *   token       a JWT (RS256) of an IdentityProvider in place of the key, its profile that ApiKey:
 *               verified once, then a digest and a lookup per request
 *   token-first a new token on every request (another subject each): its signature checked each time
 * Prints p50/p99 and what each adds over plain, with PASS/FAIL per target.
 * Run: npx tsx e2e/bench/key-checks.ts [requests]
 */

const N = Number(process.argv.find((a) => /^\d+$/.test(a)) ?? 3000);
const WARMUP = 300;
const TARGETS = { keys: 0.2, 'keys+redis': 1, token: 0.2, 'token-first': 0.5 };

const percentile = (sorted: number[], p: number) =>
  sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? Number.NaN;

const double = await startOllamaDouble({ models: ['llama3.1:8b'], record: false });
const redis = await startRedis();
const md: ModelDeployment = {
  apiVersion: 'ai.platform/v1beta1',
  kind: 'ModelDeployment',
  metadata: { name: 'bench' },
  spec: { model: 'llama3.1:8b', serviceName: 'bench', port: 11434, replicas: 1, endpoint: double.url },
};
const routes = new RouteTable();
routes.set(buildRoutes([md], { standalone: true }));
const apiKey = (i: number, key: string): ApiKey => ({
  apiVersion: 'ai.platform/v1beta1',
  kind: 'ApiKey',
  metadata: { name: `team-${i}` },
  spec: {
    team: `team-${i}`,
    role: 'User',
    rotation: 0,
    tags: { 'cost-center': String(i) },
    rateLimit: { requestsPerSecond: 1_000_000, burst: 1_000_000, tokensPerMinute: 1_000_000_000 },
    budget: { usd: 1_000_000, period: 'Monthly' },
  },
  status: { digest: `sha256:${sha256(key).toString('hex')}` },
});
const keys = ApiKeys.fromKeys(['sk-plain']);
const teamKeys = Array.from({ length: 1000 }, (_, i) => apiKey(i, i === 500 ? 'sk-team' : `sk-other-${i}`));
keys.setManaged(
  teamKeys.flatMap((ak) => policyOf(ak) ?? []),
  teamKeys.map(keyPolicy),
);
// An issuer whose tokens stand for team-500's grants (its keys given in place, no network).
const signer = await generateKeyPair('RS256');
const jwk = { ...(await exportJWK(signer.publicKey)), kid: 'bench', alg: 'RS256' };
keys.identities = new Identities({ getJson: async () => ({ keys: [jwk] }) });
keys.identities.set([
  {
    apiVersion: 'ai.platform/v1beta1',
    kind: 'IdentityProvider',
    metadata: { name: 'bench' },
    spec: {
      issuer: 'https://issuer.bench.invalid',
      jwksUri: 'https://issuer.bench.invalid/jwks',
      audiences: ['bench'],
      profiles: [{ apiKey: 'team-500', claim: { name: 'groups', values: ['bench'] } }],
    },
  },
]);
const tokenOf = (sub: string) =>
  new SignJWT({ sub, groups: ['bench'] })
    .setProtectedHeader({ alg: 'RS256', kid: 'bench' })
    .setIssuer('https://issuer.bench.invalid')
    .setAudience('bench')
    .setExpirationTime('2h')
    .sign(signer.privateKey);
const token = await tokenOf('alice');
// Signed before the runs: one per request of token-first, none seen before it is sent.
const fresh = await Promise.all(Array.from({ length: N + WARMUP }, (_, i) => tokenOf(`caller-${i}`)));
let nextFresh = 0;
const freshToken = () => fresh[nextFresh++] ?? token;
const store = new SqliteUsageStore(':memory:');
const budgets = new BudgetGuard(store, () => keys.policies(), { refreshMs: 60_000 });
budgets.setTagBudgets([{ name: 'p', tag: { key: 'project', value: 'bench' }, usd: 1_000_000, period: 'Monthly' }]);
await budgets.refresh();

function serve(limiter?: RateLimiter): Promise<TestGateway> {
  return startGateway(
    {},
    {
      keys,
      routes,
      inCluster: new OpenAICompatibleUpstream(),
      usage: new MemoryUsage(1000),
      metrics: new ProxyMetrics(),
      budgets,
      ...(limiter ? { limiter } : {}),
    },
  );
}

const redisLimiter = new RedisRateLimiter({ url: redis.url });
for (let i = 0; i < 100 && !redisLimiter.shared; i++) await new Promise((r) => setTimeout(r, 20));
const local = await serve();
const shared = await serve(redisLimiter);
const client = new Agent({ connections: 1 });
const body = JSON.stringify({ model: 'llama3.1:8b', messages: [{ role: 'user', content: 'hello there' }] });

async function once(base: string, key: string): Promise<number> {
  const started = performance.now();
  const res = await request(`${base}/openai/v1/chat/completions`, {
    method: 'POST',
    dispatcher: client,
    headers: { 'content-type': 'application/json', 'x-api-key': key, 'x-tags': 'project:bench' },
    body,
  });
  await res.body.text();
  if (res.statusCode !== 200) throw new Error(`status ${res.statusCode}`);
  return performance.now() - started;
}

const modes = [
  ['plain', local.url, 'sk-plain'],
  ['keys', local.url, 'sk-team'],
  ['keys+redis', shared.url, 'sk-team'],
  ['token', local.url, token],
  ['token-first', local.url, freshToken],
] as const;
const keyOf = (key: string | (() => string)) => (typeof key === 'function' ? key() : key);
const times: Record<string, number[]> = Object.fromEntries(modes.map(([m]) => [m, []]));
for (const [, url, key] of modes) for (let i = 0; i < WARMUP; i++) await once(url, keyOf(key));
// Interleaved, so drift on the machine falls on every mode alike.
for (let i = 0; i < N; i++) for (const [mode, url, key] of modes) times[mode]?.push(await once(url, keyOf(key)));
const rows = modes.map(([mode]) => {
  const t = (times[mode] ?? []).sort((a, b) => a - b);
  return { mode, p50_ms: +percentile(t, 50).toFixed(3), p99_ms: +percentile(t, 99).toFixed(3) };
});
const plain = rows[0] as { p50_ms: number; p99_ms: number };
const table = rows.map((r) => ({
  ...r,
  added_p50_ms: +(r.p50_ms - plain.p50_ms).toFixed(3),
  added_p99_ms: +(r.p99_ms - plain.p99_ms).toFixed(3),
}));
console.table(table);
for (const r of table) {
  const target = TARGETS[r.mode as keyof typeof TARGETS];
  if (target === undefined) continue;
  console.log(
    `${r.added_p50_ms <= target ? 'PASS' : 'FAIL'} ${r.mode}: adds ${r.added_p50_ms} ms p50 over a key with no checks (target <= ${target} ms)`,
  );
}
await client.close();
await local.stop();
await shared.stop();
await redisLimiter.close();
await store.close();
await redis.destroy();
await double.close();
