import { InMemorySpanExporter, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { ModelDeployment } from '../../crds/model-deployment.js';
import { type OllamaDouble, startOllamaDouble } from '../../e2e/doubles/ollama.js';
import { startGateway, type TestGateway } from '../../e2e/support/gateway.js';
import { ApiKeys } from '../access/auth.js';
import { buildRoutes, RouteTable } from '../serving/routes.js';
import { OpenAICompatibleUpstream } from '../upstreams/openai-compatible.js';
import { MemoryUsage } from '../usage/record.js';
import { ProxyMetrics } from './metrics.js';
import { tracerFromEnv } from './otel-env.js';
import { OtelRequestTracer } from './otel-tracer.js';

/**
 * Traces and the latency metrics of streamed answers, through the whole pipeline against the
 * Ollama double: what a trace backend and a Prometheus dashboard see of one request.
 */

const KEY = 'sk-tracing-test-key';
const SECRET_PROMPT = 'the launch code is 0000';
let double: OllamaDouble;
let exporter: InMemorySpanExporter;
let tracer: OtelRequestTracer;
let metrics: ProxyMetrics;
let gateway: TestGateway;

const md = (name: string, model: string, endpoint: string, fallback?: string[]): ModelDeployment => ({
  apiVersion: 'ai.platform/v1beta1',
  kind: 'ModelDeployment',
  metadata: { name, namespace: 'platform-llms' },
  spec: { model, serviceName: name, port: 11434, replicas: 1, endpoint, ...(fallback ? { fallback } : {}) },
});

const chat = (body: Record<string, unknown>, headers: Record<string, string> = {}) =>
  gateway.request('/openai/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': KEY, ...headers },
    body: JSON.stringify({ messages: [{ role: 'user', content: SECRET_PROMPT }], ...body }),
  });

async function spans(count: number): Promise<ReadableSpan[]> {
  for (let i = 0; i < 100 && exporter.getFinishedSpans().length < count; i++) {
    await tracer.flush();
    await new Promise((r) => setTimeout(r, 10));
  }
  return exporter.getFinishedSpans();
}

beforeAll(async () => {
  double = await startOllamaDouble();
});
afterAll(async () => {
  await tracer?.shutdown();
  await double.close();
});

afterEach(async () => {
  await gateway?.stop();
});

beforeEach(async () => {
  double.reset();
  exporter = new InMemorySpanExporter();
  tracer = new OtelRequestTracer(exporter, { name: 'platform-ai-optimizer-proxy', version: '0.2.0' });
  metrics = new ProxyMetrics();
  const routes = new RouteTable();
  routes.set(
    buildRoutes(
      [md('llama', 'llama3.1:8b', double.url), md('broken', 'gemma2:9b', 'http://127.0.0.1:1', ['llama3.1:8b'])],
      { standalone: true },
    ),
  );
  gateway = await startGateway(
    { retry: { retries: 0, backoffMs: 0, maxBackoffMs: 0 } },
    {
      keys: ApiKeys.fromKeys([KEY]),
      routes,
      inCluster: new OpenAICompatibleUpstream({
        timeouts: { connectMs: 500, firstByteMs: 2000, responseMs: 2000, idleMs: 1000 },
      }),
      usage: new MemoryUsage(),
      metrics,
      tracer,
    },
  );
});

describe('traces (OpenTelemetry GenAI conventions)', () => {
  it('a request is a SERVER span continuing the caller trace, its upstream call a CLIENT child whose context reaches the model server', async () => {
    const callerTrace = '4bf92f3577b34da6a3ce929d0e0e4736';
    const res = await chat(
      { model: 'llama3.1:8b', max_tokens: 8, temperature: 0.2 },
      { traceparent: `00-${callerTrace}-00f067aa0ba902b7-01` },
    );
    expect(res.status).toBe(200);
    const [upstream, server] = await spans(2);
    expect(server?.name).toBe('chat llama3.1:8b');
    expect(server?.kind).toBe(1); // SERVER
    expect(server?.spanContext().traceId).toBe(callerTrace);
    expect(server?.parentSpanContext?.spanId).toBe('00f067aa0ba902b7');
    expect(server?.attributes).toMatchObject({
      'gen_ai.operation.name': 'chat',
      'gen_ai.request.model': 'llama3.1:8b',
      'gen_ai.provider.name': 'ollama',
      'gateway.route.provider': 'platform-llms/llama',
      'gen_ai.request.max_tokens': 8,
      'gen_ai.request.temperature': 0.2,
      'gen_ai.usage.input_tokens': expect.any(Number),
      'gen_ai.usage.output_tokens': 8,
      'http.response.status_code': 200,
    });
    expect(upstream?.name).toBe('chat llama3.1:8b');
    expect(upstream?.kind).toBe(2); // CLIENT
    expect(upstream?.parentSpanContext?.spanId).toBe(server?.spanContext().spanId);
    expect(upstream?.attributes).toMatchObject({
      'server.address': '127.0.0.1',
      'gen_ai.provider.name': 'ollama',
      'gateway.route.provider': 'platform-llms/llama',
    });
    // W3C trace context on the wire to the model server: the upstream span is its parent.
    const sent = double.requests[0]?.headers.traceparent;
    expect(sent).toBe(`00-${callerTrace}-${upstream?.spanContext().spanId}-01`);
    // The caller's words are theirs: no span holds them.
    expect(JSON.stringify([server?.attributes, upstream?.attributes])).not.toContain('launch code');
  });

  it('a stream span ends with the stream; a fallback shows as a failed child and the one that answered', async () => {
    const res = await chat({ model: 'gemma2:9b', stream: true, stream_options: { include_usage: true } });
    expect(res.status).toBe(200);
    await res.text();
    const all = await spans(3);
    const server = all.find((s) => s.kind === 1);
    const children = all.filter((s) => s.kind === 2);
    expect(children.map((s) => [s.name, s.status.code])).toEqual([
      ['chat gemma2:9b', 2], // ERROR: nothing listens there
      ['chat llama3.1:8b', 0],
    ]);
    expect(children[0]?.attributes['error.type']).toBe('upstream_unreachable');
    expect(server?.attributes).toMatchObject({
      'gen_ai.request.model': 'gemma2:9b',
      'gen_ai.usage.output_tokens': 8,
      'gateway.stream': true,
    });
    expect(server?.attributes['gateway.time_to_first_token']).toBeGreaterThan(0);
  });

  it('a refused request is an error span named without the caller-made model name', async () => {
    const res = await chat({ model: 'no-such-model-made-up-by-a-caller' });
    expect(res.status).toBe(404);
    const [server] = await spans(1);
    expect(server?.name).toBe('chat');
    expect(server?.status.code).toBe(2);
    expect(server?.attributes['error.type']).toBe('model_not_found');
    expect(JSON.stringify(server?.attributes)).not.toContain('made-up');
  });

  it('names the provider system its backend gives, the serving resource apart; an unavailable model names none', async () => {
    const bedrock = { system: 'aws.bedrock', provider: 'team-a/bedrock' } as const;
    const span = tracer.start({ operation: 'chat', header: () => undefined, requestId: 'req-1' });
    span.routed('amazon.nova-micro-v1:0', bedrock, {});
    span.upstream({ model: 'amazon.nova-micro-v1:0', ...bedrock }).end();
    span.end({ status: 200, route: bedrock, stream: false });
    const deploying = tracer.start({ operation: 'chat', header: () => undefined, requestId: 'req-2' });
    const unavailable = { provider: 'platform-llms/gemma' } as const;
    deploying.routed('gemma2:9b', unavailable, {});
    deploying.end({ status: 503, route: unavailable, stream: false, errorType: 'model_deploying' });
    const [upstream, server, down] = await spans(3);
    const named = { 'gen_ai.provider.name': 'aws.bedrock', 'gateway.route.provider': 'team-a/bedrock' };
    expect(server?.attributes).toMatchObject(named);
    expect(upstream?.attributes).toMatchObject(named);
    expect(upstream?.attributes['server.address']).toBeUndefined();
    expect(down?.attributes['gen_ai.provider.name']).toBeUndefined();
    expect(down?.attributes['gateway.route.provider']).toBe('platform-llms/gemma');
  });

  it('is off unless an OTLP endpoint is configured', async () => {
    expect(await tracerFromEnv({}, '0.2.0')).toBeUndefined();
    expect(
      await tracerFromEnv({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_SDK_DISABLED: 'true' }, '0'),
    ).toBeUndefined();
    const on = await tracerFromEnv({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://127.0.0.1:1/v1/traces' }, '0.2.0');
    expect(on).toBeInstanceOf(OtelRequestTracer);
    return on?.shutdown();
  });
});

describe('latency metrics of streamed answers', () => {
  it('time to first token, time per output token and requests in flight, per model', async () => {
    double.behave({ completionTokens: 5, firstByteDelayMs: 40, interTokenDelayMs: 20 });
    const res = await chat({ model: 'llama3.1:8b', stream: true });
    const inFlight = await metrics.registry.getSingleMetricAsString('pao_gateway_requests_in_flight');
    expect(inFlight).toContain('pao_gateway_requests_in_flight{model="llama3.1:8b",provider="platform-llms/llama"} 1');
    await res.text();
    await new Promise((r) => setTimeout(r, 20));
    const text = await metrics.registry.metrics();
    expect(text).toContain('pao_gateway_requests_in_flight{model="llama3.1:8b",provider="platform-llms/llama"} 0');
    const sum = (name: string) =>
      Number(
        new RegExp(`${name}_sum\\{model="llama3.1:8b",provider="platform-llms/llama"\\} ([0-9.e-]+)`).exec(text)?.[1],
      );
    const count = (name: string) =>
      Number(
        new RegExp(`${name}_count\\{model="llama3.1:8b",provider="platform-llms/llama"\\} (\\d+)`).exec(text)?.[1],
      );
    expect(count('pao_gateway_time_to_first_token_seconds')).toBe(1);
    expect(sum('pao_gateway_time_to_first_token_seconds')).toBeGreaterThanOrEqual(0.04);
    // 4 tokens after the first, 20 ms apart: about 20 ms each.
    expect(count('pao_gateway_time_per_output_token_seconds')).toBe(1);
    expect(sum('pao_gateway_time_per_output_token_seconds')).toBeGreaterThanOrEqual(0.015);
    expect(sum('pao_gateway_time_per_output_token_seconds')).toBeLessThan(0.2);
  });

  it('a whole (non-streamed) answer has no first-token time', async () => {
    expect((await chat({ model: 'llama3.1:8b' })).status).toBe(200);
    const text = await metrics.registry.metrics();
    expect(text).not.toMatch(/pao_gateway_time_to_first_token_seconds_count\{[^}]*\} [1-9]/);
  });
});
