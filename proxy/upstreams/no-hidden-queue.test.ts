import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { webStream } from '../chunk-source.js';
import type { OpenAICompatibleRoute } from '../routing.js';
import { OpenAICompatibleUpstream } from './openai-compatible.js';

/**
 * LLM traffic is many long streams at once. Every one the gateway holds must be in its own queue
 * (bounded, timed, metered), never in an HTTP pool below it: this server holds each stream open
 * until as many are open at once as the test sends, so a cap anywhere between them (undici kept
 * 256 connections per origin) shows as streams that never arrive.
 */

const STREAMS = 600;
let server: Server;
let base: string;
const open = new Set<ServerResponse>();
let peak = 0;

function releaseAll(): void {
  for (const res of open) res.end('data: [DONE]\n\n');
  open.clear();
}

beforeAll(async () => {
  server = createServer((req, res) => {
    req.resume();
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write(
      `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [{ index: 0, delta: { role: 'assistant', content: 'hi' }, finish_reason: null }] })}\n\n`,
    );
    open.add(res);
    peak = Math.max(peak, open.size);
    res.on('close', () => open.delete(res));
  });
  server.maxConnections = 10_000;
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  releaseAll();
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
});

const route = (over: Partial<OpenAICompatibleRoute> = {}): OpenAICompatibleRoute => ({
  kind: 'openai-compatible',
  model: 'm',
  baseUrl: base,
  provider: 'test/m',
  ...over,
});

describe('many streams through one upstream origin', () => {
  it(`opens all ${STREAMS} at once: nothing below the gateway queues them`, async () => {
    const upstream = new OpenAICompatibleUpstream();
    const signal = new AbortController().signal;
    try {
      const started = Array.from({ length: STREAMS }, () =>
        upstream.send({
          route: route(),
          dialect: 'openai-chat',
          body: { model: 'm', messages: [{ role: 'user', content: 'hi' }] },
          stream: true,
          clientWantsUsage: false,
          signal,
        }),
      );
      // Each call resolves once its first byte is back; all of them must, while none has ended.
      const results = await Promise.all(started);
      expect(results.every((r) => r.kind === 'stream')).toBe(true);
      expect(peak).toBe(STREAMS);
      expect(upstream.pools.load().m).toMatchObject({ inFlight: STREAMS, queued: 0 });
      releaseAll();
      const texts = await Promise.all(
        results.map((r) => (r.kind === 'stream' ? new Response(webStream(r.body)).text() : '')),
      );
      expect(texts.filter((t) => t.includes('[DONE]'))).toHaveLength(STREAMS);
      expect(upstream.pools.load().m).toMatchObject({ inFlight: 0, queued: 0 });
    } finally {
      await upstream.close();
    }
  }, 60_000);
});
