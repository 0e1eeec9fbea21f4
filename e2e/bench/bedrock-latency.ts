import { BedrockRuntimeClient, ConverseStreamCommand } from '@aws-sdk/client-bedrock-runtime';
import { Agent, request } from 'undici';
import type { ExternalProvider } from '../../crds/external-provider.js';
import { ProviderCredentials } from '../../crds/providers/credentials.js';
import { ApiKeys } from '../../proxy/access/auth.js';
import { buildRoutes, RouteTable } from '../../proxy/serving/routes.js';
import { ProxyMetrics } from '../../proxy/telemetry/metrics.js';
import { ProviderUpstream } from '../../proxy/upstreams/provider-upstream.js';
import { MemoryUsage } from '../../proxy/usage/record.js';
import { startAwsDouble } from '../doubles/aws.js';
import { startGateway } from '../support/gateway.js';

/**
 * Streaming overhead of the Bedrock path, measured through the AWS double: the AWS SDK's
 * ConverseStream called directly versus an OpenAI streaming request through the gateway
 * (translation to Converse, the call signed and sent by the provider upstream, event-stream
 * decoding, OpenAI chunks out). Sequential requests;
 * prints p50/p99 of time to first content and of the whole stream.
 * Run: npx tsx e2e/bench/bedrock-latency.ts [requests]
 */

const N = Number(process.argv.find((a) => /^\d+$/.test(a)) ?? 300);
const creds = { accessKeyId: 'AKIABENCH00000000001', secretAccessKey: 'benchSecret0000000000000000000000000000' };
const MODEL = 'anthropic.claude-3-haiku-20240307-v1:0';

const pct = (xs: number[], p: number) =>
  [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))] ?? 0;

async function main() {
  const aws = await startAwsDouble({
    principals: [
      { ...creds, arn: 'arn:aws:iam::123456789012:user/bench', allow: ['bedrock:*'], account: '123456789012' },
    ],
    models: { 'us-east-1': [{ modelId: MODEL, providerName: 'Anthropic' }] },
  });
  const ep: ExternalProvider = {
    apiVersion: 'ai.platform/v1beta1',
    kind: 'ExternalProvider',
    metadata: { name: 'bench', namespace: 'platform-agent' },
    spec: {
      provider: 'bedrock',
      displayName: 'bench',
      region: 'us-east-1',
      auth: { method: 'AccessKey', secretRef: { name: 'k' } },
      includeInCLI: true,
      streaming: true,
      models: [MODEL],
    },
  };
  const routes = new RouteTable();
  const env = { PAO_ENDPOINT_URL_BEDROCK_RUNTIME: aws.url };
  routes.set(buildRoutes([], { standalone: true, env }, [ep]));
  const b64 = (s: string) => Buffer.from(s).toString('base64');
  const secret = () => ({ data: { accessKeyId: b64(creds.accessKeyId), secretAccessKey: b64(creds.secretAccessKey) } });
  const bedrock = new ProviderUpstream({ credentials: new ProviderCredentials(secret, { env }) });
  const gateway = await startGateway(
    {},
    {
      keys: ApiKeys.fromKeys(['sk-bench']),
      routes,
      providers: { bedrock },
      usage: new MemoryUsage(1000),
      metrics: new ProxyMetrics(),
    },
  );
  const url = `${gateway.url}/openai/v1/chat/completions`;
  const sdk = new BedrockRuntimeClient({ region: 'us-east-1', endpoint: aws.url, credentials: creds });
  const client = new Agent({ connections: 1 });

  async function direct(): Promise<[number, number]> {
    const t0 = performance.now();
    let first = 0;
    const out = await sdk.send(
      new ConverseStreamCommand({ modelId: MODEL, messages: [{ role: 'user', content: [{ text: 'hello there' }] }] }),
    );
    for await (const e of out.stream ?? []) if (!first && e.contentBlockDelta) first = performance.now() - t0;
    return [first, performance.now() - t0];
  }
  async function proxied(): Promise<[number, number]> {
    const t0 = performance.now();
    let first = 0;
    const res = await request(url, {
      method: 'POST',
      dispatcher: client,
      headers: { 'content-type': 'application/json', 'x-api-key': 'sk-bench' },
      body: JSON.stringify({ model: MODEL, stream: true, messages: [{ role: 'user', content: 'hello there' }] }),
    });
    for await (const chunk of res.body)
      if (!first && String(chunk).includes('"content":"tok')) first = performance.now() - t0;
    return [first, performance.now() - t0];
  }
  const rows = [];
  for (const [mode, fn] of [
    ['sdk direct', direct],
    ['gateway', proxied],
  ] as const) {
    for (let i = 0; i < 30; i++) await fn();
    const first: number[] = [];
    const total: number[] = [];
    for (let i = 0; i < N; i++) {
      const [f, t] = await fn();
      first.push(f);
      total.push(t);
    }
    rows.push({
      mode,
      ttft_p50_ms: +pct(first, 50).toFixed(2),
      ttft_p99_ms: +pct(first, 99).toFixed(2),
      total_p50_ms: +pct(total, 50).toFixed(2),
      total_p99_ms: +pct(total, 99).toFixed(2),
    });
  }
  console.table(rows);
  await gateway.stop();
  sdk.destroy();
  await bedrock.close();
  await client.close();
  await aws.close();
}

await main();
