import { connect, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type OllamaDouble, startOllamaDouble } from '../e2e/doubles/ollama.js';
import { startGateway, type TestGateway } from '../e2e/support/gateway.js';
import { ApiKeys } from './access/auth.js';
import { oneModelRoutes } from './serving/test-routes.js';
import { ProxyMetrics } from './telemetry/metrics.js';
import { OpenAICompatibleUpstream } from './upstreams/openai-compatible.js';
import { MemoryUsage } from './usage/record.js';

/**
 * Callers that hold connections without finishing their requests, over real sockets to the
 * production server: a trickled body gets 408 within the upload time, headers that never end
 * are cut, and connections past the cap are closed while the others keep working.
 */

const KEY = 'sk-slow-test';
let double: OllamaDouble;
let gateway: TestGateway;
let port: number;
const usage = new MemoryUsage();
const sockets: Socket[] = [];

beforeAll(async () => {
  double = await startOllamaDouble();
  const routes = oneModelRoutes('llama', 'llama3.1:8b', double.url);
  gateway = await startGateway(
    { connections: { headersTimeoutMs: 800, bodyTimeoutMs: 600, keepAliveTimeoutMs: 1_000, maxConnections: 4 } },
    {
      keys: ApiKeys.fromKeys([KEY]),
      routes,
      inCluster: new OpenAICompatibleUpstream(),
      usage,
      metrics: new ProxyMetrics(),
    },
  );
  port = Number(new URL(gateway.url).port);
});

afterAll(async () => {
  for (const s of sockets) s.destroy();
  await gateway.stop();
  await double.close();
});

async function open(): Promise<Socket> {
  const s = connect(port, '127.0.0.1');
  sockets.push(s);
  await new Promise((r) => s.once('connect', r));
  return s;
}

/** Everything the server sends until it closes the connection (or the wait ends). */
function received(s: Socket, waitMs: number): Promise<{ text: string; closed: boolean }> {
  return new Promise((resolve) => {
    let text = '';
    s.on('data', (d) => {
      text += d.toString();
    });
    const timer = setTimeout(() => resolve({ text, closed: false }), waitMs);
    s.once('close', () => {
      clearTimeout(timer);
      resolve({ text, closed: true });
    });
  });
}

const headers = (length: number) =>
  `POST /openai/v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nx-api-key: ${KEY}\r\ncontent-length: ${length}\r\n\r\n`;

describe('slow clients', () => {
  it('a body trickled slower than the upload timeout gets 408 request_timeout and the connection closes', async () => {
    const s = await open();
    s.write(headers(1000));
    s.write('{"model":"llama3.1:8b",');
    const trickle = setInterval(() => s.writable && s.write(' '), 100);
    // The trickle would take 100 s to finish the body: closed within the wait means it was cut
    // (at 600 ms when idle; the wait leaves a loaded machine room).
    const r = await received(s, 5_000);
    clearInterval(trickle);
    expect(r.text).toMatch(/^HTTP\/1\.1 408/);
    expect(r.text).toContain('"code":"request_timeout"');
    expect(r.closed).toBe(true);
    expect(usage.records.at(-1)).toMatchObject({ status: 408, errorType: 'request_timeout' });
  });

  it('headers that never end are cut after the header timeout', async () => {
    const s = await open();
    s.write('POST /openai/v1/chat/completions HTTP/1.1\r\nhost: x\r\n');
    const trickle = setInterval(() => s.writable && s.write('x-pad: 1\r\n'), 100);
    // The headers would never end: closed within the wait means they were cut (at 800 ms when idle).
    const r = await received(s, 5_000);
    clearInterval(trickle);
    expect(r.closed).toBe(true);
  });

  it('closes connections past the cap, and serves again once others left', async () => {
    const held = await Promise.all([open(), open(), open(), open()]);
    await new Promise((r) => setTimeout(r, 50));
    const extra = await open();
    const r = await received(extra, 1_000);
    expect(r.closed).toBe(true);
    expect(r.text).toBe('');
    for (const s of held) s.destroy();
    await new Promise((r) => setTimeout(r, 100));
    const ok = await fetch(`http://127.0.0.1:${port}/openai/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': KEY, connection: 'close' },
      body: JSON.stringify({ model: 'llama3.1:8b', messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(ok.status).toBe(200);
  });
});
