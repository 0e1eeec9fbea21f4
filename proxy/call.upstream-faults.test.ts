import { type AddressInfo, createServer as createTcpServer, type Server as TcpServer } from 'node:net';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { ModelDeployment } from '../crds/model-deployment.js';
import { type Behavior, type OllamaDouble, startOllamaDouble } from '../e2e/doubles/ollama.js';
import { startGateway, type TestGateway } from '../e2e/support/gateway.js';
import { ApiKeys } from './access/auth.js';
import { buildRoutes, RouteTable } from './serving/routes.js';
import { ProxyMetrics } from './telemetry/metrics.js';
import { OpenAICompatibleUpstream } from './upstreams/openai-compatible.js';
import { MemoryUsage } from './usage/record.js';

/**
 * Every upstream fault of the reliability issue, streaming and not, over real sockets to the
 * production front door (proxy/front-door.ts): the caller
 * always gets a well-formed OpenAI error (or a stream that ends with an error event and [DONE]) in
 * bounded time, never a hang, and one usage record carries the error. Retries are on as in
 * production (2, tiny backoff here), so the attempt counts show what is retried.
 */

const KEY = 'sk-faults';
let double: OllamaDouble;
let slam: TcpServer;
let slamUrl: string;
let gateway: TestGateway;
let base: string;
let usage: MemoryUsage;

const md = (name: string, model: string, endpoint: string): ModelDeployment => ({
  apiVersion: 'ai.platform/v1beta1',
  kind: 'ModelDeployment',
  metadata: { name, namespace: 'platform-llms' },
  spec: { model, serviceName: name, port: 11434, replicas: 1, endpoint },
});

beforeAll(async () => {
  double = await startOllamaDouble();
  // Accepts the connection and closes it at once: a crashed model server behind a live port.
  slam = createTcpServer((s) => s.destroy());
  await new Promise<void>((r) => slam.listen(0, '127.0.0.1', r));
  slamUrl = `http://127.0.0.1:${(slam.address() as AddressInfo).port}`;
  const routes = new RouteTable();
  routes.set(
    buildRoutes(
      [
        md('llama', 'llama3.1:8b', double.url),
        md('refused', 'refused:1b', 'http://127.0.0.1:1'),
        md('slam', 'slam:1b', slamUrl),
      ],
      { standalone: true },
    ),
  );
  usage = new MemoryUsage();
  gateway = await startGateway(
    { retry: { retries: 2, backoffMs: 5, maxBackoffMs: 2000 } },
    {
      keys: ApiKeys.fromKeys([KEY]),
      routes,
      inCluster: new OpenAICompatibleUpstream({
        timeouts: { connectMs: 1000, firstByteMs: 800, responseMs: 800, idleMs: 400 },
      }),
      usage,
      metrics: new ProxyMetrics(),
    },
  );
  base = gateway.url;
});

afterAll(async () => {
  await gateway.stop();
  slam.close();
  await double.close();
});

beforeEach(() => {
  double.reset();
  usage.records.length = 0;
});

interface Fault {
  name: string;
  model?: string;
  behave?: Partial<Behavior>;
  /** What the caller sees: the status of a JSON error, or 200 with a stream ending in this error code. */
  json: { status: number; code: string };
  stream: { status: number; code: string; midStream?: boolean };
  /** Chat requests the double received per call (retries included); undefined when it is not the upstream. */
  attempts?: number;
  retryAfter?: string;
}

const FAULTS: Fault[] = [
  {
    name: 'connection refused',
    model: 'refused:1b',
    json: { status: 502, code: 'upstream_unreachable' },
    stream: { status: 502, code: 'upstream_unreachable' },
  },
  {
    name: 'connection closed before any response',
    model: 'slam:1b',
    json: { status: 502, code: 'upstream_stream_broken' },
    stream: { status: 502, code: 'upstream_stream_broken' },
  },
  {
    name: 'reset mid-stream',
    behave: { resetAfterTokens: 3 },
    json: { status: 200, code: '' },
    stream: { status: 200, code: 'upstream_stream_broken', midStream: true },
    attempts: 1,
  },
  {
    name: 'stalled stream (idle timeout)',
    behave: { stallAfterTokens: 2 },
    json: { status: 200, code: '' },
    stream: { status: 200, code: 'upstream_idle_timeout', midStream: true },
    attempts: 1,
  },
  {
    name: '500 from the model server',
    behave: { failWith: { status: 500, message: 'CUDA error' } },
    json: { status: 502, code: 'upstream_error' },
    stream: { status: 502, code: 'upstream_error' },
    attempts: 3,
  },
  {
    name: '429 with a Retry-After longer than the retry cap',
    behave: { failWith: { status: 429, retryAfterSeconds: 30 } },
    json: { status: 429, code: 'upstream_rate_limited' },
    stream: { status: 429, code: 'upstream_rate_limited' },
    attempts: 1,
    retryAfter: '30',
  },
  {
    name: 'slow first byte (headers timeout)',
    behave: { firstByteDelayMs: 1500 },
    json: { status: 504, code: 'upstream_timeout' },
    stream: { status: 504, code: 'upstream_timeout' },
    attempts: 1,
  },
];

/** The answer, or a failed test when the gateway hangs past the client's wide limit (the timeouts here are ~1 s). */
async function call(model: string, stream: boolean) {
  const res = await fetch(`${base}/openai/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': KEY, 'x-tags': 'team:faults' },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hello' }], stream }),
    signal: AbortSignal.timeout(15_000),
  });
  const text = await res.text();
  return { res, text };
}

const settle = () => new Promise((r) => setTimeout(r, 20));

describe('upstream faults', () => {
  for (const fault of FAULTS) {
    for (const stream of [false, true]) {
      const expected = stream ? fault.stream : fault.json;
      // A fault that exists only in streams leaves a non-streaming answer whole.
      const applies = stream || expected.code !== '';
      it(`${fault.name}, ${stream ? 'streaming' : 'non-streaming'}: ${applies ? expected.code : 'answered in full'}`, async () => {
        if (fault.behave) double.behave(fault.behave);
        const { res, text } = await call(fault.model ?? 'llama3.1:8b', stream);
        expect(res.status).toBe(expected.status);
        expect(res.headers.get('x-request-id')).toMatch(/^req_/);
        await settle();
        expect(usage.records).toHaveLength(1);
        const rec = usage.records[0];
        if (!applies) {
          expect(rec).toMatchObject({ status: 200 });
          return;
        }
        if (stream && 'midStream' in expected && expected.midStream) {
          const frames = text.split('\n\n').filter(Boolean);
          expect(frames.at(-1)).toBe('data: [DONE]');
          const error = JSON.parse(frames.at(-2)?.replace(/^data: /, '') ?? '{}') as { error: { code: string } };
          expect(error.error.code).toBe(expected.code);
          expect(rec?.errorType).toBe(expected.code);
          expect(rec?.status).toBeGreaterThanOrEqual(500);
        } else {
          expect(res.headers.get('content-type')).toMatch(/application\/json/);
          const body = JSON.parse(text) as { error: { code: string; message: string; type: string } };
          expect(body.error.code).toBe(expected.code);
          expect(body.error.message.length).toBeGreaterThan(10);
          expect(rec).toMatchObject({
            status: expected.status,
            errorType: expected.code,
            tags: [{ key: 'team', value: 'faults' }],
          });
        }
        if (fault.retryAfter) expect(res.headers.get('retry-after')).toBe(fault.retryAfter);
        if (fault.attempts !== undefined) expect(double.requests).toHaveLength(fault.attempts);
      });
    }
  }
});
