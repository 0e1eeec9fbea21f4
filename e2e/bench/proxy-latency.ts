import { Agent, request } from 'undici';
import type { ModelDeployment } from '../../crds/model-deployment.js';
import { ApiKeys } from '../../proxy/access/auth.js';
import { buildRoutes, RouteTable } from '../../proxy/serving/routes.js';
import { ProxyMetrics } from '../../proxy/telemetry/metrics.js';
import { OpenAICompatibleUpstream } from '../../proxy/upstreams/openai-compatible.js';
import { MemoryUsage } from '../../proxy/usage/record.js';
import { startOllamaDouble } from '../doubles/ollama.js';
import { startGateway } from '../support/gateway.js';

/**
 * Added latency of the gateway over a real socket: the same sequential requests (keep-alive,
 * one at a time) sent to the Ollama double directly and through the proxy with auth, tags,
 * routing and usage recording on. Prints p50/p99/mean per mode; `--json` prints JSON.
 * Run: npx tsx e2e/bench/proxy-latency.ts [requests]
 */

const N = Number(process.argv.find((a) => /^\d+$/.test(a)) ?? 2000);
const WARMUP = 200;

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? Number.NaN;
}

async function main() {
  const double = await startOllamaDouble({ models: ['llama3.1:8b'] });
  const md: ModelDeployment = {
    apiVersion: 'ai.platform/v1beta1',
    kind: 'ModelDeployment',
    metadata: { name: 'bench' },
    spec: { model: 'llama3.1:8b', serviceName: 'bench', port: 11434, replicas: 1, endpoint: double.url },
  };
  const routes = new RouteTable();
  routes.set(buildRoutes([md], { standalone: true }));
  const upstream = new OpenAICompatibleUpstream();
  const gateway = await startGateway(
    {},
    {
      keys: ApiKeys.fromKeys(['sk-bench']),
      routes,
      inCluster: upstream,
      usage: new MemoryUsage(1000),
      metrics: new ProxyMetrics(),
    },
  );
  const proxyUrl = gateway.url;
  const client = new Agent({ connections: 1 });
  const body = (stream: boolean) =>
    JSON.stringify({
      model: 'llama3.1:8b',
      messages: [{ role: 'user', content: 'hello there' }],
      stream,
      tags: ['team:bench'],
    });

  async function once(base: string, path: string, stream: boolean): Promise<{ total: number; firstByte: number }> {
    const started = performance.now();
    const res = await request(`${base}${path}`, {
      method: 'POST',
      dispatcher: client,
      headers: { 'content-type': 'application/json', 'x-api-key': 'sk-bench', 'x-tags': 'project:bench' },
      body: body(stream),
    });
    let firstByte = 0;
    for await (const _chunk of res.body) {
      if (!firstByte) firstByte = performance.now() - started;
    }
    if (res.statusCode !== 200) throw new Error(`status ${res.statusCode}`);
    return { total: performance.now() - started, firstByte };
  }

  const rows: Array<Record<string, string | number>> = [];
  for (const stream of [false, true]) {
    const results: Record<string, { total: number[]; firstByte: number[] }> = {};
    for (const [mode, base, path] of [
      ['direct', double.url, '/v1/chat/completions'],
      ['proxy', proxyUrl, '/openai/v1/chat/completions'],
    ] as const) {
      for (let i = 0; i < WARMUP; i++) await once(base, path, stream);
      const total: number[] = [];
      const firstByte: number[] = [];
      for (let i = 0; i < N; i++) {
        const r = await once(base, path, stream);
        total.push(r.total);
        firstByte.push(r.firstByte);
      }
      total.sort((a, b) => a - b);
      firstByte.sort((a, b) => a - b);
      results[mode] = { total, firstByte };
    }
    for (const mode of ['direct', 'proxy'] as const) {
      const r = results[mode];
      if (!r) continue;
      const mean = r.total.reduce((a, b) => a + b, 0) / r.total.length;
      rows.push({
        mode: `${stream ? 'stream' : 'json'}:${mode}`,
        p50_ms: +percentile(r.total, 50).toFixed(3),
        p99_ms: +percentile(r.total, 99).toFixed(3),
        mean_ms: +mean.toFixed(3),
        first_byte_p50_ms: +percentile(r.firstByte, 50).toFixed(3),
      });
    }
  }
  const added = (kind: string, col: 'p50_ms' | 'p99_ms' | 'mean_ms' | 'first_byte_p50_ms') => {
    const d = rows.find((r) => r.mode === `${kind}:direct`)?.[col] as number;
    const p = rows.find((r) => r.mode === `${kind}:proxy`)?.[col] as number;
    return +(p - d).toFixed(3);
  };
  const summary = {
    requests: N,
    added_json_p50_ms: added('json', 'p50_ms'),
    added_json_p99_ms: added('json', 'p99_ms'),
    added_stream_p50_ms: added('stream', 'p50_ms'),
    added_stream_p99_ms: added('stream', 'p99_ms'),
    added_stream_first_byte_p50_ms: added('stream', 'first_byte_p50_ms'),
  };
  if (process.argv.includes('--json')) console.log(JSON.stringify({ rows, summary }, null, 2));
  else {
    console.table(rows);
    console.table([summary]);
  }
  await gateway.stop();
  await client.close();
  await upstream.close();
  await double.close();
}

await main();
