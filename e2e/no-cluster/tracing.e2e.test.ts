import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PRODUCT_VERSION } from '../../crds/constants.js';
import { type OllamaDouble, startOllamaDouble } from '../doubles/ollama.js';
import { type Collector, startCollector } from '../otel/collector.js';
import { type ProxyProcess, routedModel, standaloneFiles, startProxyProcess } from '../support/proxy-process.js';

/**
 * Traces of the proxy process at a real OpenTelemetry Collector (e2e/otel/build.sh, built from
 * the Go module proxy): the proxy exports OTLP/HTTP (protobuf) as configured by the standard
 * OTEL_* variables, the collector receives and passes the spans on as OTLP/JSON. A chat request
 * from the official SDK carrying a W3C traceparent arrives as a SERVER span in the caller's trace
 * with the GenAI attributes, and its upstream call as a CLIENT child whose context reached the
 * model server.
 */

const KEY = 'sk-tracing-e2e-key-0123456789';
const CALLER_TRACE = '0af7651916cd43dd8448eb211c80319c';
const CALLER_SPAN = 'b7ad6b7169203331';
let otel: Collector;
let double: OllamaDouble;
let proxy: ProxyProcess;

beforeAll(async () => {
  otel = await startCollector();
  double = await startOllamaDouble();
  const dir = mkdtempSync(join(tmpdir(), 'pao-tracing-'));
  proxy = await startProxyProcess(standaloneFiles(dir, [routedModel('llama3.1:8b', double.url)], `${KEY}\n`), {
    ...process.env,
    OTEL_EXPORTER_OTLP_ENDPOINT: otel.otlpHttpUrl,
    OTEL_BSP_SCHEDULE_DELAY: '200',
  });
});

afterAll(async () => {
  await proxy?.stop('SIGTERM');
  await double?.close();
  await otel?.stop();
});

describe('OpenTelemetry traces at a real collector', () => {
  it('a chat request arrives as a SERVER span with the GenAI attributes and a CLIENT child, in the caller trace', async () => {
    expect(proxy.output()).toContain('"tracing":"otlp"');
    const client = new OpenAI({
      baseURL: `${proxy.base}/openai/v1`,
      apiKey: KEY,
      defaultHeaders: { traceparent: `00-${CALLER_TRACE}-${CALLER_SPAN}-01` },
    });
    const chat = await client.chat.completions.create({
      model: 'llama3.1:8b',
      messages: [{ role: 'user', content: 'a prompt that must not reach the trace backend' }],
      max_tokens: 16,
      temperature: 0.5,
    });
    expect(chat.choices[0]?.message.content).toBeTruthy();

    const spans = await otel.waitForSpans((s) => s.traceId === CALLER_TRACE, 15_000, 2);
    const server = spans.find((s) => s.kind === 'SERVER');
    const upstream = spans.find((s) => s.kind === 'CLIENT');
    expect(server?.name).toBe('chat llama3.1:8b');
    expect(server?.parentSpanId).toBe(CALLER_SPAN);
    expect(server?.resource).toMatchObject({
      'service.name': 'platform-ai-optimizer-proxy',
      'service.version': PRODUCT_VERSION,
    });
    expect(server?.attributes).toMatchObject({
      'gen_ai.operation.name': 'chat',
      'gen_ai.request.model': 'llama3.1:8b',
      'gen_ai.provider.name': 'ollama',
      'gateway.route.provider': 'llama',
      'gen_ai.request.max_tokens': 16,
      'gen_ai.request.temperature': 0.5,
      'gen_ai.usage.output_tokens': chat.usage?.completion_tokens,
      'gen_ai.usage.input_tokens': chat.usage?.prompt_tokens,
      'http.response.status_code': 200,
    });
    expect(server?.status.code).not.toBe('ERROR');
    expect(upstream?.name).toBe('chat llama3.1:8b');
    expect(upstream?.parentSpanId).toBe(server?.spanId);
    expect(upstream?.attributes).toMatchObject({
      'server.address': '127.0.0.1',
      'gen_ai.provider.name': 'ollama',
      'gateway.route.provider': 'llama',
    });
    // The model server received the upstream span's context.
    const sent = double.requests.at(-1)?.headers.traceparent;
    expect(sent).toBe(`00-${CALLER_TRACE}-${upstream?.spanId}-01`);
    expect(JSON.stringify(otel.requests())).not.toContain('must not reach');
  });

  it('a request without a caller trace starts its own; a failed one is an error span', async () => {
    const res = await fetch(`${proxy.base}/openai/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': KEY },
      body: JSON.stringify({ model: 'not-routed', messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(res.status).toBe(404);
    const [span] = await otel.waitForSpans((s) => s.attributes['error.type'] === 'model_not_found', 15_000);
    expect(span?.traceId).not.toBe(CALLER_TRACE);
    expect(span?.parentSpanId).toBe('');
    expect(span?.name).toBe('chat');
    expect(span?.status.code).toBe('ERROR');
  });
});
