import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ProxyLoad } from './model-autoscaler.js';

/** A proxy replica's /load, as the test sets it. */
interface FakeProxy {
  url: string;
  server: Server;
  report: unknown;
  status: number;
}

async function fakeProxy(report: unknown): Promise<FakeProxy> {
  const p: FakeProxy = { url: '', server: createServer(), report, status: 200 };
  p.server.on('request', (req, res) => {
    if (req.url !== '/load') return res.writeHead(404).end();
    res.writeHead(p.status, { 'content-type': 'application/json' }).end(JSON.stringify(p.report));
  });
  await new Promise<void>((r) => p.server.listen(0, '127.0.0.1', r));
  p.url = `http://127.0.0.1:${(p.server.address() as AddressInfo).port}`;
  return p;
}

const models = (inFlight: number, queued: number, requests: number) => ({
  'qwen2.5:0.5b': { inFlight, queued, requests },
});

describe('ProxyLoad', () => {
  let a: FakeProxy;
  let b: FakeProxy;
  beforeAll(async () => {
    a = await fakeProxy({ startedAt: 1, models: models(2, 1, 10) });
    b = await fakeProxy({ startedAt: 1, models: models(3, 4, 100) });
  });
  afterAll(() => {
    a?.server.close();
    b?.server.close();
  });

  it('sums the replicas’ in-flight and queued requests, and their arrivals since the last read', async () => {
    const load = new ProxyLoad(async () => [a.url, b.url]);
    // First sight: a counter's past is not this interval's.
    expect((await load.read(0))?.get('qwen2.5:0.5b')).toEqual({
      inFlight: 5,
      queued: 5,
      arrived: 0,
      requestsPerSecond: 0,
    });
    a.report = { startedAt: 1, models: models(0, 0, 16) };
    b.report = { startedAt: 1, models: models(1, 0, 104) };
    expect((await load.read(2_000))?.get('qwen2.5:0.5b')).toEqual({
      inFlight: 1,
      queued: 0,
      arrived: 10,
      requestsPerSecond: 5,
    });
  });

  it('counts a restarted replica from zero, and reads the others when one does not answer', async () => {
    const load = new ProxyLoad(async () => [a.url, b.url]);
    a.report = { startedAt: 1, models: models(0, 0, 50) };
    b.report = { startedAt: 1, models: models(0, 0, 500) };
    await load.read(0);
    a.report = { startedAt: 2, models: models(0, 1, 3) };
    b.status = 500;
    expect((await load.read(1_000))?.get('qwen2.5:0.5b')).toEqual({
      inFlight: 0,
      queued: 1,
      arrived: 3,
      requestsPerSecond: 3,
    });
    b.status = 200;
  });

  it('reports nothing at all when no replica answers (the autoscaler then changes nothing)', async () => {
    expect(await new ProxyLoad(async () => ['http://127.0.0.1:9']).read(0)).toBeUndefined();
    expect(await new ProxyLoad(async () => []).read(0)).toBeUndefined();
  });

  it('ignores a report that is not the proxy’s shape', async () => {
    a.report = { startedAt: 1, models: { x: { inFlight: -1, queued: 0, requests: 0 } } };
    expect(await new ProxyLoad(async () => [a.url]).read(0)).toBeUndefined();
  });
});
