import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Agent, request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway } from '../../e2e/support/gateway.js';
import { ApiKeys } from '../access/auth.js';
import type { InClusterRoute } from '../serving/routes.js';
import { oneModelRoutes } from '../serving/test-routes.js';
import { ProxyMetrics } from '../telemetry/metrics.js';
import { MemoryUsage } from '../usage/record.js';
import { webStream } from './chunk-source.js';
import { OpenAICompatibleUpstream } from './openai-compatible.js';

/**
 * LLM traffic is many long streams at once. Every one the gateway holds must be in its own queue
 * (bounded, timed, metered), never in an HTTP pool below it: this server holds each stream open
 * until as many are open at once as the test sends, so a cap anywhere between them (undici kept
 * 256 connections per origin) shows as streams that never arrive.
 */

const STREAMS = 600;
const chunkLine = `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [{ index: 0, delta: { role: 'assistant', content: 'hi' }, finish_reason: null }] })}\n\n`;
let server: Server;
let base: string;
const open = new Set<ServerResponse>();
let peak = 0;
/** Set: answers wait, headers unsent, until this many requests are open (a model slow to its first token). */
let holdHeadersUntil = 0;
const held: Array<() => void> = [];

function releaseAll(): void {
  for (const res of open) res.end('data: [DONE]\n\n');
  open.clear();
}

beforeAll(async () => {
  server = createServer((req, res) => {
    req.resume();
    if (holdHeadersUntil > 0) {
      held.push(() => {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.end(`${chunkLine}data: [DONE]\n\n`);
      });
      const release = () => {
        for (const go of held.splice(0)) go();
      };
      // All at once; or, should some never arrive (refused on the way), after 5 s, so the test says which.
      if (held.length === 1) setTimeout(release, 5_000).unref();
      if (held.length >= holdHeadersUntil) release();
      return;
    }
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

const route = (over: Partial<InClusterRoute> = {}): InClusterRoute => ({
  kind: 'in-cluster',
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

describe('many streams waiting for their first byte, through the whole gateway', () => {
  const WAITING = 2_500;

  it(`holds ${WAITING} of them with the default request memory: none is refused as server_busy`, async () => {
    const routes = oneModelRoutes('m', 'm', base);
    const upstream = new OpenAICompatibleUpstream();
    const proxy = await startGateway(
      // What main.ts gives it by default (--request-memory-mb 128).
      { requestMemoryBytes: 128 * 1024 * 1024 },
      {
        keys: ApiKeys.fromKeys(['sk-many']),
        routes,
        inCluster: upstream,
        usage: new MemoryUsage(10_000),
        metrics: new ProxyMetrics(),
      },
    );
    const url = `${proxy.url}/openai/v1/chat/completions`;
    const client = new Agent({ connections: WAITING });
    holdHeadersUntil = WAITING;
    try {
      const answers = await Promise.all(
        Array.from({ length: WAITING }, async () => {
          const res = await request(url, {
            method: 'POST',
            dispatcher: client,
            headers: { 'content-type': 'application/json', 'x-api-key': 'sk-many' },
            body: JSON.stringify({ model: 'm', stream: true, messages: [{ role: 'user', content: 'hi' }] }),
          });
          const text = await res.body.text();
          return res.statusCode === 200 ? 'ok' : text.slice(0, 120);
        }),
      );
      expect(answers.filter((a) => a !== 'ok')).toEqual([]);
    } finally {
      holdHeadersUntil = 0;
      await client.close();
      await proxy.stop();
      await upstream.close();
    }
  }, 60_000);
});
