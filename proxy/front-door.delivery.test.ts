import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type OllamaDouble, startOllamaDouble } from '../e2e/doubles/ollama.js';
import { startGateway, type TestGateway } from '../e2e/support/gateway.js';
import { eventually } from '../e2e/support/kube.js';
import { ApiKeys } from './access/auth.js';
import { oneModelRoutes } from './serving/test-routes.js';
import { ProxyMetrics } from './telemetry/metrics.js';
import { OpenAICompatibleUpstream } from './upstreams/openai-compatible.js';
import { MemoryUsage, type UsageRecord } from './usage/record.js';

/**
 * Whether a whole answer reached its caller, as the front door tells the usage sink over real
 * sockets: delivered once its last byte went to the socket, not delivered when the caller left
 * first. Streams and records no answer waits on are not asked about.
 */

const KEY = 'sk-delivery-test';

/** Keeps records, which of them await a delivery, and what it was told. */
class DeliveryUsage extends MemoryUsage {
  readonly awaiting = new Set<string>();
  readonly told = new Map<string, boolean>();
  override record(rec: UsageRecord, awaitsDelivery?: boolean): void {
    super.record(rec);
    if (awaitsDelivery) this.awaiting.add(rec.requestId);
  }
  delivered(requestId: string, ok: boolean): void {
    this.told.set(requestId, ok);
  }
}

let double: OllamaDouble;
let gateway: TestGateway;
const usage = new DeliveryUsage();

beforeAll(async () => {
  double = await startOllamaDouble();
  gateway = await startGateway(
    {},
    {
      keys: ApiKeys.fromKeys([KEY]),
      routes: oneModelRoutes('llama', 'llama3.1:8b', double.url),
      inCluster: new OpenAICompatibleUpstream(),
      usage,
      metrics: new ProxyMetrics(),
    },
  );
});

afterAll(async () => {
  await gateway.stop();
  await double.close();
});

const chat = (stream = false) =>
  JSON.stringify({ model: 'llama3.1:8b', stream, messages: [{ role: 'user', content: 'hi' }] });

async function post(body: string): Promise<Response> {
  return fetch(`${gateway.url}/openai/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` },
    body,
  });
}

describe('front door: whether a whole answer was delivered', () => {
  it('a whole answer read by its caller, and an error answer: delivered; a stream is not asked about', async () => {
    const ok = await post(chat());
    await ok.text();
    const refused = await post('{"model": 1}');
    await refused.text();
    expect(refused.status).toBe(400);
    const streamed = await post(chat(true));
    await streamed.text();
    const ids = [ok, refused, streamed].map((r) => r.headers.get('x-request-id') ?? '');
    await eventually('deliveries told', 5_000, async () =>
      usage.told.has(ids[0] ?? '') && usage.told.has(ids[1] ?? '') ? true : undefined,
    );
    expect(usage.told.get(ids[0] ?? '')).toBe(true);
    expect(usage.told.get(ids[1] ?? '')).toBe(true);
    expect(usage.awaiting.has(ids[2] ?? '')).toBe(false);
    expect(usage.told.has(ids[2] ?? '')).toBe(false);
  });

  it('a caller that left while the answer was made: not delivered', async () => {
    double.behave({ firstByteDelayMs: 1_000 });
    try {
      const before = usage.records.length;
      const upstream = double.requests.length;
      const req = request(`${gateway.url}/openai/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` },
      });
      req.on('error', () => {});
      req.end(chat());
      // Gone once the upstream has the request, before its answer.
      await eventually('the request upstream', 5_000, async () =>
        double.requests.length > upstream ? true : undefined,
      );
      req.destroy();
      const rec = await eventually('its record and delivery', 5_000, async () =>
        usage.records.slice(before).find((r) => usage.told.has(r.requestId)),
      );
      expect(usage.awaiting.has(rec.requestId)).toBe(true);
      expect(usage.told.get(rec.requestId)).toBe(false);
    } finally {
      double.reset();
    }
  });
});
