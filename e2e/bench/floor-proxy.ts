import { createHash } from 'node:crypto';
import { closeSync, mkdtempSync, openSync, rmSync, writeSync } from 'node:fs';
import { Agent, createServer, type IncomingMessage, request, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/**
 * The floor of a gateway that accounts for every request, on this machine: bare-proxy.ts plus only the work no such
 * gateway can skip, done the cheapest way Node allows, with none of ours' code:
 *   - the caller's key hashed (SHA-256) and looked up;
 *   - the body read whole and parsed (the model, the tags and the stream flag are in it), and written out again
 *     (the route's model name replaces the caller's);
 *   - the answer's usage read: a whole answer parsed; a stream scanned for its usage event, which alone is parsed;
 *   - a usage record (the fields ours keeps) serialized and appended to a file, one write per event-loop turn, the
 *     answer's end held until its record's write (what "no record is lost to a crash" costs at the least).
 * No validation, routing policy, limits, budgets, metrics, tracing, SQLite, delivery marks or error envelopes.
 * What ours costs above this is its features beyond the floor; what this costs above bare-proxy.ts is the floor.
 * Run: node --import tsx e2e/bench/floor-proxy.ts <upstream base url>; prints {"url":"http://127.0.0.1:PORT"}.
 */

const upstream = new URL(process.argv[2] ?? 'http://127.0.0.1:11434');
const agent = new Agent({ keepAlive: true });
const dir = mkdtempSync(join(tmpdir(), 'floor-proxy-'));
const fd = openSync(join(dir, 'usage.spool'), 'a');
const KEYS = new Map([[createHash('sha256').update('sk-bench').digest('hex'), { team: 'bench', id: 'k1' }]]);

/** Records of this turn, and the ends of the answers that wait for them. */
let pending: Buffer[] = [];
let waiting: Array<() => void> = [];
function appendRecord(record: object, then: () => void): void {
  pending.push(Buffer.from(`${JSON.stringify(record)}\n`));
  waiting.push(then);
  if (pending.length === 1) setImmediate(flush);
}
function flush(): void {
  const [bufs, ends] = [pending, waiting];
  pending = [];
  waiting = [];
  writeSync(fd, bufs.length === 1 ? (bufs[0] as Buffer) : Buffer.concat(bufs));
  for (const end of ends) end();
}

let seq = 0;
function recordOf(caller: { team: string; id: string }, model: string, tags: unknown, usage: unknown, started: number) {
  const u = (usage ?? {}) as { prompt_tokens?: number; completion_tokens?: number };
  return {
    requestId: `floor-${++seq}`,
    ts: Date.now(),
    keyId: caller.id,
    team: caller.team,
    model,
    provider: 'in-cluster',
    endpoint: 'chat',
    tags,
    promptTokens: u.prompt_tokens ?? 0,
    completionTokens: u.completion_tokens ?? 0,
    costUsd: ((u.prompt_tokens ?? 0) + (u.completion_tokens ?? 0)) * 1e-7,
    latencyMs: performance.now() - started,
    status: 200,
  };
}

function callerOf(req: IncomingMessage): { team: string; id: string } | undefined {
  const header = req.headers.authorization ?? req.headers['x-api-key'];
  const key = typeof header === 'string' ? header.replace(/^Bearer /, '') : '';
  return KEYS.get(createHash('sha256').update(key).digest('hex'));
}

/** The usage event of an OpenAI stream: the one chunk that carries `"usage":{`. */
function usageIn(chunk: Buffer): unknown {
  const at = chunk.indexOf('"usage":{');
  if (at < 0) return undefined;
  const start = chunk.lastIndexOf('data: ', at);
  const end = chunk.indexOf('\n', at);
  try {
    return (JSON.parse(chunk.subarray(start + 6, end < 0 ? undefined : end).toString()) as { usage?: unknown }).usage;
  } catch {
    return undefined;
  }
}

function relay(res: ServerResponse, up: IncomingMessage, done: (usage: unknown, end: () => void) => void): void {
  const streamed = String(up.headers['content-type'] ?? '').startsWith('text/event-stream');
  res.writeHead(up.statusCode ?? 502, { 'content-type': String(up.headers['content-type'] ?? 'application/json') });
  let usage: unknown;
  const whole: Buffer[] = [];
  up.on('data', (chunk: Buffer) => {
    if (streamed) {
      usage ??= usageIn(chunk);
      res.write(chunk);
    } else whole.push(chunk);
  });
  up.on('end', () => {
    if (streamed) return done(usage, () => res.end());
    const body = whole.length === 1 ? (whole[0] as Buffer) : Buffer.concat(whole);
    const parsed = JSON.parse(body.toString()) as { usage?: unknown };
    done(parsed.usage, () => res.end(body));
  });
}

const server = createServer((req, res) => {
  const started = performance.now();
  const caller = callerOf(req);
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    if (!caller) return void res.writeHead(401).end();
    const body = JSON.parse(Buffer.concat(chunks).toString()) as { model: string; tags?: unknown };
    const { tags: bodyTags, ...forwarded } = body;
    const tags = req.headers['x-tags'] ?? bodyTags;
    // As ours asks: a stream's usage comes in its last event.
    if ((forwarded as { stream?: boolean }).stream)
      Object.assign(forwarded, { stream_options: { include_usage: true } });
    const payload = JSON.stringify(forwarded);
    const out = request(
      {
        host: upstream.hostname,
        port: upstream.port,
        method: 'POST',
        path: req.url,
        headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) },
        agent,
      },
      (up) => relay(res, up, (usage, end) => appendRecord(recordOf(caller, body.model, tags, usage, started), end)),
    );
    out.on('error', () => {
      if (!res.headersSent) res.writeHead(502);
      res.end();
    });
    res.on('close', () => {
      if (!res.writableFinished) out.destroy();
    });
    out.end(payload);
  });
});

server.listen({ port: 0, host: '127.0.0.1', backlog: 4096 }, () => {
  console.log(JSON.stringify({ url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` }));
});
function stop(): never {
  closeSync(fd);
  rmSync(dir, { recursive: true, force: true });
  process.exit(0);
}
process.on('disconnect', stop);
process.once('SIGTERM', stop);
