import { createServer, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ApiKey } from '../../crds/api-key.js';
import { mcpAuthProvider } from '../../crds/mcp/auth.js';
import type { McpServer } from '../../crds/mcp-server.js';
import type { Logger } from '../../crds/observability/log.js';
import { ApiKeys, policyOf, sha256 } from '../../proxy/access/auth.js';
import { McpServerTable } from '../../proxy/mcp/servers.js';
import { MemoryUsage, type UsageRecord } from '../../proxy/usage/record.js';
import { type RunningServer, startEverything } from '../mcp/servers.js';
import { type RedisServer, startRedis } from '../redis/server.js';
import { startGateway, type TestGateway } from '../support/gateway.js';

/**
 * Governance and faults of the MCP gateway against real servers: the key's rate per tool shared
 * through Redis by two replicas; payloads kept only for keys that opt in; a server that hangs
 * timed out, one that dies mid-stream ending the caller's stream with an error, an answer past
 * the bound refused; the server's credentials (a bearer token from a Secret) used and never shown
 * to callers or logs.
 */

const TOKEN = 'mcp-upstream-token-3f9c1a7e';
const KEYS = { plain: 'sk-gov-plain', limited: 'sk-gov-limited', recorded: 'sk-gov-recorded' };

const apiKey = (name: string, key: string, mcp?: ApiKey['spec']['mcp']): ApiKey => ({
  apiVersion: 'ai.platform/v1beta1',
  kind: 'ApiKey',
  metadata: { name, namespace: 'platform-agent' },
  spec: { team: 'gov', role: 'User', rotation: 0, ...(mcp ? { mcp } : {}) },
  status: { digest: `sha256:${sha256(key).toString('hex')}` },
});

const mcpServer = (name: string, url: string, spec: Partial<McpServer['spec']> = {}): McpServer => ({
  apiVersion: 'ai.platform/v1beta1',
  kind: 'McpServer',
  metadata: { name, namespace: 'platform-agent' },
  spec: { url, ...spec },
});

interface PassThrough {
  url: string;
  server: Server;
  /** The Authorization header of every request. */
  seen: string[];
  /** The JSON-RPC method of every POST (what the gateway told the server). */
  methods: string[];
}

/**
 * server-everything behind a pass-through that notes what reaches it; with `token`, a door that
 * takes only `Authorization: Bearer <token>` (as a hosted MCP server would).
 */
function passThrough(target: RunningServer, token?: string): Promise<PassThrough> {
  const seen: string[] = [];
  const methods: string[] = [];
  const server = createServer((req, res) => {
    seen.push(req.headers.authorization ?? '');
    if (token !== undefined && req.headers.authorization !== `Bearer ${token}`) {
      res.writeHead(401, { 'www-authenticate': 'Bearer' }).end();
      return;
    }
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      if (req.method === 'POST') {
        try {
          methods.push(String((JSON.parse(body.toString()) as { method?: string }).method));
        } catch {
          methods.push('(not JSON)');
        }
      }
      const up = request(
        `http://127.0.0.1:${target.port}${req.url}`,
        { method: req.method, headers: req.headers },
        (r) => {
          res.writeHead(r.statusCode ?? 502, r.headers);
          r.pipe(res);
        },
      );
      up.end(body);
    });
  });
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () =>
      resolve({ url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`, server, seen, methods }),
    ),
  );
}

async function connect(url: string, key: string): Promise<Client> {
  const client = new Client({ name: 'e2e-gov', version: '1.0.0' });
  await client.connect(
    new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { 'X-API-Key': key } } }),
  );
  return client;
}

describe('MCP governance and faults', () => {
  let everything: RunningServer;
  let doomed: RunningServer;
  let redis: RedisServer;
  let door: PassThrough;
  let tap: PassThrough;
  const replicas: TestGateway[] = [];
  const usage = new MemoryUsage();
  const logs: string[] = [];
  const logger: Logger = {
    info: (m, f) => logs.push(`${m} ${JSON.stringify(f ?? {})}`),
    warn: (m, f) => logs.push(`${m} ${JSON.stringify(f ?? {})}`),
    error: (m, f) => logs.push(`${m} ${JSON.stringify(f ?? {})}`),
  };
  const secrets: Record<string, Record<string, string>> = {
    'tickets-token': { token: Buffer.from(TOKEN).toString('base64') },
    'wrong-token': { token: Buffer.from('not-the-token-9d2e').toString('base64') },
  };

  beforeAll(async () => {
    [everything, doomed, redis] = await Promise.all([startEverything(), startEverything(), startRedis()]);
    door = await passThrough(everything, TOKEN);
    tap = await passThrough(everything);
    const keys = new ApiKeys();
    keys.setManaged(
      [
        apiKey('plain', KEYS.plain),
        apiKey('limited', KEYS.limited, { toolRateLimit: { requestsPerSecond: 0.01, burst: 3 } }),
        apiKey('recorded', KEYS.recorded, { recordPayloads: true }),
      ].flatMap((k) => policyOf(k) ?? []),
    );
    const servers = new McpServerTable((s) =>
      mcpAuthProvider(s, (name) => (secrets[name] ? { data: secrets[name] } : undefined)),
    );
    servers.set([
      mcpServer('everything', everything.url),
      mcpServer('slow', everything.url, { timeoutSeconds: 1 }),
      mcpServer('doomed', doomed.url),
      mcpServer('watched', tap.url),
      mcpServer('tickets', door.url, { auth: { method: 'Bearer', secretRef: { name: 'tickets-token' } } }),
      mcpServer('locked', door.url, { auth: { method: 'Bearer', secretRef: { name: 'wrong-token' } } }),
    ]);
    for (let i = 0; i < 2; i++) {
      replicas.push(
        await startGateway(
          { logger, redisUrl: redis.url, mcp: { sessionSecret: 'gov', maxAnswerBytes: 64 * 1024 } },
          { keys, usage, mcpServers: servers },
        ),
      );
    }
  }, 180_000);

  afterAll(async () => {
    await Promise.all(replicas.map((r) => r.stop()));
    door?.server.close();
    tap?.server.close();
    await Promise.all([everything?.stop(), doomed?.stop(), redis?.destroy()]);
  });

  const gw = (i = 0) => `${(replicas[i] as TestGateway).url}/mcp`;
  const since = (n: number, pick: (r: UsageRecord) => boolean) => usage.records.slice(n).filter(pick);

  it('a key’s rate per tool is one bucket across replicas (Redis): the 4th call in a burst of 3 is refused, other tools are not', async () => {
    const a = await connect(gw(0), KEYS.limited);
    const b = await connect(gw(1), KEYS.limited);
    // As clients do: list first (the gateway learns the tools' names from the list).
    await a.listTools();
    const n = usage.records.length;
    const outcomes: string[] = [];
    for (const c of [a, b, a, b]) {
      outcomes.push(
        await c.callTool({ name: 'everything_echo', arguments: { message: 'x' } }).then(
          () => 'ok',
          (e: unknown) => String(e),
        ),
      );
    }
    expect(outcomes.slice(0, 3)).toEqual(['ok', 'ok', 'ok']);
    expect(outcomes[3]).toMatch(/Rate limit of this key for tool everything_echo: retry in \d+s/);
    expect(await b.callTool({ name: 'everything_get-sum', arguments: { a: 1, b: 2 } })).toMatchObject({
      content: [{ type: 'text' }],
    });
    expect(since(n, (r) => r.model === 'echo').map((r) => r.status)).toEqual([200, 200, 200, 429]);
    // A name nobody serves: the server answers with an error result; it is recorded as "unknown".
    const m = usage.records.length;
    const made = await b.callTool({ name: 'everything_made-up-9f2', arguments: {} });
    expect(made).toMatchObject({ isError: true });
    expect(JSON.stringify(made)).toMatch(/made-up-9f2/);
    expect(since(m, () => true)).toEqual([expect.objectContaining({ provider: 'everything', model: 'unknown' })]);
    await Promise.all([a.close(), b.close()]);
  });

  it('keeps arguments and results only for a key that opts in', async () => {
    const n = usage.records.length;
    for (const key of [KEYS.plain, KEYS.recorded]) {
      const c = await connect(gw(), key);
      await c.callTool({ name: 'everything_echo', arguments: { message: `private words of ${key}` } });
      await c.close();
    }
    const [plain, recorded] = since(n, (r) => r.model === 'echo');
    expect(plain?.payload).toBeUndefined();
    expect(JSON.parse(recorded?.payload ?? '{}')).toMatchObject({
      arguments: { message: `private words of ${KEYS.recorded}` },
      result: { content: [{ type: 'text' }] },
    });
  });

  it('times out a server that hangs', async () => {
    const c = await connect(gw(), KEYS.plain);
    const n = usage.records.length;
    const started = Date.now();
    const err = await c
      .callTool({ name: 'slow_trigger-long-running-operation', arguments: { duration: 5, steps: 5 } })
      .catch((e: unknown) => e);
    expect(String(err)).toMatch(/did not answer within 1s/);
    expect(Date.now() - started).toBeLessThan(4000);
    expect(since(n, (r) => r.provider === 'slow')).toEqual([
      expect.objectContaining({ status: 504, errorType: 'timeout' }),
    ]);
    await c.close();
  });

  it('passes a cancellation to the server and stops waiting; the call is recorded as cancelled (499)', async () => {
    const c = await connect(gw(), KEYS.plain);
    const n = usage.records.length;
    const stop = new AbortController();
    const started = Date.now();
    const err = await c
      .callTool(
        { name: 'watched_trigger-long-running-operation', arguments: { duration: 20, steps: 20 } },
        { signal: stop.signal, onprogress: () => stop.abort('the user pressed Esc') },
      )
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Error);
    expect(Date.now() - started).toBeLessThan(5000);
    // The server heard it: the call, then notifications/cancelled for it.
    await new Promise((r) => setTimeout(r, 300));
    expect(tap.methods.slice(tap.methods.lastIndexOf('tools/call'))).toContain('notifications/cancelled');
    expect(since(n, (r) => r.provider === 'watched')).toEqual([
      expect.objectContaining({ status: 499, errorType: 'cancelled' }),
    ]);
    await c.close();
  });

  it('ends the caller’s stream with an error when the server dies mid-stream', async () => {
    const c = await connect(gw(), KEYS.plain);
    const n = usage.records.length;
    const started = Date.now();
    const progress: number[] = [];
    const call = c
      .callTool(
        { name: 'doomed_trigger-long-running-operation', arguments: { duration: 20, steps: 20 } },
        {
          onprogress: (p) => {
            progress.push(p.progress);
            if (progress.length === 1) void doomed.stop();
          },
        },
      )
      .catch((e: unknown) => e);
    const err = await call;
    expect(progress.length).toBeGreaterThanOrEqual(1);
    expect(String(err)).toMatch(/MCP server doomed (closed its stream before answering|is not reachable)/);
    expect(Date.now() - started).toBeLessThan(10_000);
    expect(since(n, (r) => r.provider === 'doomed')).toEqual([expect.objectContaining({ status: 502 })]);
    // The session's other servers still answer.
    expect(await c.callTool({ name: 'everything_echo', arguments: { message: 'still here' } })).toBeTruthy();
    await c.close();
  });

  it('refuses an answer past its bound, and a request body past its own', async () => {
    const c = await connect(`${gw()}/everything`, KEYS.plain);
    // echo answers with what it was given: 70 KiB, past the 64 KiB this gateway takes from a server.
    const big = await c
      .callTool({ name: 'echo', arguments: { message: 'y'.repeat(70 * 1024) } })
      .catch((e: unknown) => e);
    expect(String(big)).toMatch(/answered with more than 65536 bytes/);
    await c.close();
    const huge = await fetch(gw(), {
      method: 'POST',
      headers: { 'X-API-Key': KEYS.plain, 'content-type': 'application/json' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping', params: { pad: 'z'.repeat(11 * 1024 * 1024) } }),
    });
    expect(huge.status).toBe(413);
    expect(await huge.json()).toEqual({ jsonrpc: '2.0', error: { code: -32600, message: expect.any(String) } });
  });

  it('authenticates to a server with its Secret’s token and never shows the token', async () => {
    const c = await connect(gw(), KEYS.plain);
    const names = (await c.listTools()).tools.map((t) => t.name);
    // The right token: its tools are there. The wrong one: the server refused the session, its tools are absent.
    expect(names).toContain('tickets_echo');
    expect(names.some((n) => n.startsWith('locked_'))).toBe(false);
    expect(await c.callTool({ name: 'tickets_echo', arguments: { message: 'authorized' } })).toBeTruthy();
    expect(door.seen).toContain(`Bearer ${TOKEN}`);
    await c.close();
    const alone = await fetch(`${gw()}/locked`, {
      method: 'POST',
      headers: {
        'X-API-Key': KEYS.plain,
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
      },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'initialize',
        params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'x', version: '1' } },
      }),
    });
    const text = await alone.text();
    expect(alone.status).toBe(502);
    expect(text).toMatch(/MCP server locked refused the gateway's credentials/);
    for (const leak of [TOKEN, 'not-the-token-9d2e', 'tickets-token', 'wrong-token', door.url]) {
      expect(text).not.toContain(leak);
      expect(logs.join('\n')).not.toContain(leak);
    }
  });
});
