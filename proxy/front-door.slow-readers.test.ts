import { createServer, type Server } from 'node:http';
import { type AddressInfo, connect, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from '../e2e/support/gateway.js';
import { ApiKeys } from './access/auth.js';
import { oneModelRoutes } from './serving/test-routes.js';
import { ProxyMetrics } from './telemetry/metrics.js';
import { OpenAICompatibleUpstream } from './upstreams/openai-compatible.js';
import { MemoryUsage } from './usage/record.js';

/**
 * A caller that reads its stream slowly, over real sockets: the gateway must pace the model
 * server by backpressure (its socket stops being read) rather than hold the rest of the answer
 * for the caller. The answer here is far larger than every socket buffer on the way, so a relay
 * that buffered would let the upstream write all of it while the caller reads nothing.
 */

const KEY = 'sk-slow-reader';
const EVENT_TEXT = 'x'.repeat(64 * 1024);
const EVENTS = 2048; // 128 MiB of content
const event = `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [{ index: 0, delta: { content: EVENT_TEXT }, finish_reason: null }] })}\n\n`;
const TOTAL = EVENTS * Buffer.byteLength(event);

let upstream: Server;
let proxy: TestGateway;
let port: number;
/** Bytes of the answer the upstream's socket has taken so far. */
let written = 0;
let upstreamDone = false;
const sockets: Socket[] = [];

beforeAll(async () => {
  upstream = createServer((req, res) => {
    req.resume();
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    let i = 0;
    // As a model server does: the next event once the socket takes more (write() true or 'drain').
    const more = () => {
      while (i < EVENTS) {
        i++;
        written += Buffer.byteLength(event);
        if (!res.write(event)) return void res.once('drain', more);
      }
      res.end('data: [DONE]\n\n');
      upstreamDone = true;
    };
    more();
  });
  await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
  const routes = oneModelRoutes('m', 'm', `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`);
  proxy = await startGateway(
    {},
    {
      keys: ApiKeys.fromKeys([KEY]),
      routes,
      inCluster: new OpenAICompatibleUpstream(),
      usage: new MemoryUsage(),
      metrics: new ProxyMetrics(),
    },
  );
  port = Number(new URL(proxy.url).port);
});

afterAll(async () => {
  for (const s of sockets) s.destroy();
  await proxy.stop();
  upstream.closeAllConnections();
  await new Promise((r) => upstream.close(r));
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('a caller that reads slowly', () => {
  it('paces the model server through backpressure, then gets the whole answer, nothing lost', async () => {
    const body = JSON.stringify({ model: 'm', stream: true, messages: [{ role: 'user', content: 'hi' }] });
    const s = connect(port, '127.0.0.1');
    sockets.push(s);
    await new Promise((r) => s.once('connect', r));
    // Not read at all for now: what the gateway sends piles up in the socket buffers on the way.
    s.pause();
    s.write(
      `POST /openai/v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nx-api-key: ${KEY}\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    );
    await sleep(1_500);
    const afterWait = written;
    await sleep(500);
    // The upstream is held: it could write nothing more while the caller read nothing.
    expect(written).toBe(afterWait);
    expect(upstreamDone).toBe(false);
    // Only what the kernels' buffers hold left the upstream, far from the whole answer.
    expect(afterWait).toBeGreaterThan(0);
    expect(afterWait).toBeLessThan(TOTAL / 2);

    // Now the caller reads: everything arrives, in order, to [DONE].
    let received = 0;
    let tail = '';
    let events = 0;
    const MARK = '"finish_reason":null';
    await new Promise<void>((resolve, reject) => {
      s.on('data', (chunk: Buffer) => {
        received += chunk.length;
        const text = tail + chunk.toString('latin1');
        events += text.split(MARK).length - 1;
        // Shorter than the mark, so no mark is counted twice; long enough to join one split across chunks.
        tail = text.slice(-(MARK.length - 1));
        if (text.includes('data: [DONE]')) resolve();
      });
      s.once('error', reject);
      s.resume();
    });
    expect(upstreamDone).toBe(true);
    expect(events).toBe(EVENTS);
    expect(received).toBeGreaterThan(TOTAL);
  }, 60_000);
});
