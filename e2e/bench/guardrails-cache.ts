import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { Agent, request } from 'undici';
import type { Guardrail } from '../../crds/guardrail.js';
import type { ModelDeployment } from '../../crds/model-deployment.js';
import { ApiKeys } from '../../proxy/access/auth.js';
import { GuardrailSet } from '../../proxy/guardrails/guardrail-set.js';
import { buildRoutes, RouteTable } from '../../proxy/serving/routes.js';
import { ProxyMetrics } from '../../proxy/telemetry/metrics.js';
import { MemoryUsage } from '../../proxy/usage/record.js';
import { startOllamaDouble } from '../doubles/ollama.js';
import { startGateway, type TestGateway } from '../support/gateway.js';
import { machineFacts, printVerdicts, type Verdict } from './gateways.js';

/**
 * What guardrails and the response cache cost, over real sockets, against the Ollama double (in
 * this process, so both sides share it): the same requests, one at a time, alternately through a
 * gateway without guardrails and one whose built-in detectors (all categories, Redact) check
 * every request and answer. A 2,000-token chat request with a card, an email and an AWS key in it
 * (the added p50); a streamed answer's time to its first content byte (the added p50); a cache
 * hit (standalone, memory) answered whole, its p50. Targets (issue 56): guardrails add at most
 * 1 ms p50 to such a request and at most 2 ms to a stream's first token; a hit answers under 2 ms
 * p50. The cache off is every other benchmark: no key opts in there.
 *
 * npx tsx e2e/bench/guardrails-cache.ts [--quick] [--json-out FILE]   (npm run bench -- --only guard)
 */

const { values } = parseArgs({ options: { quick: { type: 'boolean' }, 'json-out': { type: 'string' } } });
const N = values.quick ? 300 : 2000;
const WARMUP = 100;
const MODEL = 'llama3.1:8b';
const KEY = 'sk-bench-guard';
const CACHED_KEY = 'sk-bench-cached';

const p = (sorted: number[], q: number) =>
  sorted[Math.min(sorted.length - 1, Math.floor((q / 100) * sorted.length))] ?? Number.NaN;
const round = (n: number) => Math.round(n * 1000) / 1000;

/** About 2,000 tokens of prose with a card, an email and an AWS key in it. */
const PROMPT = `${'The quarterly report shows steady growth across every region, with costs held flat. '.repeat(90)}Charge 4111 1111 1111 1111, mail finance@example.com, key AKIAIOSFODNN7EXAMPLE.`;

async function main() {
  const double = await startOllamaDouble({ models: [MODEL], record: false });
  double.behave({ completionTokens: 64 });
  const md: ModelDeployment = {
    apiVersion: 'ai.platform/v1beta1',
    kind: 'ModelDeployment',
    metadata: { name: 'bench' },
    spec: { model: MODEL, serviceName: 'bench', port: 11434, replicas: 1, endpoint: double.url },
  };
  const gateway = async (guardrails?: GuardrailSet): Promise<TestGateway> => {
    const routes = new RouteTable();
    routes.set(buildRoutes([md], { standalone: true }));
    const keys = ApiKeys.fromKeys([KEY, CACHED_KEY]);
    return startGateway(
      {},
      {
        keys,
        routes,
        usage: new MemoryUsage(1000),
        metrics: new ProxyMetrics(),
        ...(guardrails ? { guardrails } : {}),
      },
    );
  };
  const all: Guardrail = {
    apiVersion: 'ai.platform/v1beta1',
    kind: 'Guardrail',
    metadata: { name: 'bench' },
    spec: { detectors: { builtIn: {} }, action: 'Redact' },
  };
  const plain = await gateway();
  const guarded = await gateway(new GuardrailSet([all]));
  const client = new Agent({ connections: 2 });
  const send = async (g: TestGateway, body: unknown, headers: Record<string, string> = {}) => {
    const t = performance.now();
    const res = await request(`${g.url}/openai/v1/chat/completions`, {
      method: 'POST',
      dispatcher: client,
      headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}`, ...headers },
      body: JSON.stringify(body),
    });
    let first = Number.NaN;
    for await (const chunk of res.body) {
      if (Number.isNaN(first) && String(chunk).includes('"content":"')) first = performance.now() - t;
    }
    if (res.statusCode !== 200) throw new Error(`HTTP ${res.statusCode}`);
    return { total: performance.now() - t, first };
  };
  try {
    const whole = { model: MODEL, messages: [{ role: 'user', content: PROMPT }] };
    const stream = { ...whole, stream: true };
    const rows: Record<string, number | string>[] = [];
    const added: Record<string, number> = {};
    for (const [name, body, pick] of [
      ['2,000-token request, whole', whole, 'total'],
      ['stream, first content byte', stream, 'first'],
    ] as const) {
      const times = { plain: [] as number[], guarded: [] as number[] };
      for (let i = 0; i < WARMUP + N; i++) {
        const a = await send(plain, body);
        const b = await send(guarded, body);
        if (i < WARMUP) continue;
        times.plain.push(a[pick]);
        times.guarded.push(b[pick]);
      }
      const s = { plain: times.plain.sort((x, y) => x - y), guarded: times.guarded.sort((x, y) => x - y) };
      rows.push({
        row: name,
        'plain p50 ms': round(p(s.plain, 50)),
        'guarded p50 ms': round(p(s.guarded, 50)),
        'plain p99 ms': round(p(s.plain, 99)),
        'guarded p99 ms': round(p(s.guarded, 99)),
      });
      added[name] = round(p(s.guarded, 50) - p(s.plain, 50));
    }
    // Cache hits: one answer kept, then the same request again and again (temperature 0, opted in by header).
    const cached = {
      model: MODEL,
      temperature: 0,
      messages: [{ role: 'user', content: 'What is the capital of France?' }],
    };
    const opt = { authorization: `Bearer ${CACHED_KEY}`, 'x-gateway-cache': 'exact' };
    await send(plain, cached, opt);
    const hits: number[] = [];
    for (let i = 0; i < WARMUP + N; i++) {
      const r = await send(plain, cached, opt);
      if (i >= WARMUP) hits.push(r.total);
    }
    hits.sort((x, y) => x - y);
    rows.push({
      row: 'cache hit, whole (standalone, memory)',
      'plain p50 ms': round(p(hits, 50)),
      'plain p99 ms': round(p(hits, 99)),
    });
    console.table(rows);
    const verdicts: Verdict[] = [
      {
        id: 'guardrails add <= 1 ms p50 (2,000-token request)',
        pass: (added['2,000-token request, whole'] ?? Infinity) <= 1,
        detail: `+${added['2,000-token request, whole']} ms`,
      },
      {
        id: "guardrails add <= 2 ms p50 to a stream's first token",
        pass: (added['stream, first content byte'] ?? Infinity) <= 2,
        detail: `+${added['stream, first content byte']} ms`,
      },
      { id: 'a cache hit answers < 2 ms p50 (standalone)', pass: p(hits, 50) < 2, detail: `${round(p(hits, 50))} ms` },
    ];
    printVerdicts(verdicts);
    if (values['json-out'])
      writeFileSync(values['json-out'], JSON.stringify({ machine: machineFacts(), rows, added, verdicts }, null, 2));
  } finally {
    await plain.stop();
    await guarded.stop();
    await double.close();
    await client.close();
  }
}

await main();
