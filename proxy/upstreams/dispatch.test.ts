import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { Agent } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { exchangeStreamed, exchangeWhole } from './dispatch.js';

/** A server whose answer each test writes; it counts the connections it was opened. */
let server: Server;
let origin = '';
let connections = 0;
let respond: (res: ServerResponse) => void = (res) => res.end('ok');
const sockets = new Set<Socket>();
const agent = new Agent({ connections: 4 });
const never = new AbortController().signal;
const post = { path: '/v1/chat/completions', method: 'POST' as const, body: '{}', headers: {} };

beforeAll(async () => {
  server = createServer((req, res) => {
    req.resume();
    req.on('end', () => respond(res));
  });
  server.on('connection', (s: Socket) => {
    connections++;
    sockets.add(s);
    s.once('close', () => sockets.delete(s));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  await agent.close();
  for (const s of sockets) s.destroy();
  await new Promise((r) => server.close(r));
});

describe('undici dispatch exchanges', () => {
  it('a whole answer arrives with its status and headers', async () => {
    respond = (res) => res.writeHead(429, { 'retry-after': '7' }).end('{"error":"slow down"}');
    const a = await exchangeWhole(agent, { origin, ...post }, never);
    expect(a).toMatchObject({ status: 429, text: '{"error":"slow down"}' });
    expect(a.headers['retry-after']).toBe('7');
  });

  it('a caller that left before the call never reaches the upstream', async () => {
    const gone = AbortSignal.abort();
    const before = connections;
    await expect(exchangeWhole(agent, { origin, ...post }, gone)).rejects.toMatchObject({ code: 'UND_ERR_ABORTED' });
    await expect(exchangeStreamed(agent, { origin, ...post }, gone)).rejects.toMatchObject({
      code: 'UND_ERR_ABORTED',
    });
    expect(connections).toBe(before);
  });

  it('streams read to [DONE] and the rest discarded reuse one keep-alive connection', async () => {
    respond = (res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('data: {"x":1}\n\n');
      res.write('data: [DONE]\n\n');
      // Trailing bytes after the answer's end: read and dropped, not a reason to close.
      setTimeout(() => res.end(': bye\n\n'), 5);
    };
    const before = connections;
    for (let i = 0; i < 10; i++) {
      const a = await exchangeStreamed(agent, { origin, ...post }, never);
      let text = '';
      while (!text.includes('[DONE]')) text += (await a.body.next())?.toString() ?? '';
      a.body.discard(64 * 1024);
      // Past the trailing bytes: the exchange is over and its connection idle in the pool.
      await new Promise((r) => setTimeout(r, 20));
    }
    // The first may open one; every later stream went over it.
    expect(connections - before).toBeLessThanOrEqual(1);
  });

  it('a reader that is behind pauses the socket: the upstream cannot run ahead, and nothing is lost', async () => {
    const chunk = 'x'.repeat(64 * 1024);
    const total = 400;
    let written = 0;
    let finished = false;
    respond = (res) => {
      res.writeHead(200);
      const more = () => {
        while (written < total) {
          written++;
          if (!res.write(chunk)) return void res.once('drain', more);
        }
        res.end();
        finished = true;
      };
      more();
    };
    const a = await exchangeStreamed(agent, { origin, ...post }, never);
    await new Promise((r) => setTimeout(r, 300));
    // 25 MiB would have been taken in by now without the pause.
    expect(finished).toBe(false);
    expect(written).toBeLessThan(total);
    let bytes = 0;
    for (let c = await a.body.next(); c; c = await a.body.next()) bytes += c.length;
    expect(bytes).toBe(total * chunk.length);
  });

  it("the caller's signal ends a stream mid-way: the read fails and the connection is dropped", async () => {
    let closed = false;
    respond = (res) => {
      res.writeHead(200);
      res.write('data: {"x":1}\n\n');
      res.once('close', () => {
        closed = true;
      });
    };
    const caller = new AbortController();
    const a = await exchangeStreamed(agent, { origin, ...post }, caller.signal);
    expect((await a.body.next())?.toString()).toContain('"x":1');
    const next = a.body.next();
    caller.abort();
    await expect(next).rejects.toMatchObject({ code: 'UND_ERR_ABORTED' });
    await new Promise((r) => setTimeout(r, 50));
    expect(closed).toBe(true);
  });
});
