import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from '../../e2e/support/gateway.js';
import { ApiKeys } from '../access/auth.js';
import { normalOrigin, originPolicy, originRefusal } from './origin.js';

const KEY = 'sk-origin-test-000000000000000000000';

describe('originRefusal', () => {
  const cluster = originPolicy('0.0.0.0', ['https://tools.example.com', 'http://inspector.example.com:*'], []);
  const laptop = originPolicy('127.0.0.1', [], ['gateway.test']);

  it('passes a caller without Origin (SDKs and agents send none), in a cluster whatever the Host', () => {
    expect(originRefusal(cluster, undefined, 'platform-ai-optimizer-proxy.platform-agent.svc:443')).toBeUndefined();
  });

  it('refuses a browser origin nobody allowed, and passes the allowed ones (any port where it says *)', () => {
    expect(originRefusal(cluster, 'http://evil.example.com', 'evil.example.com')).toMatch(/Origin not allowed/);
    expect(originRefusal(cluster, 'https://tools.example.com', 'x')).toBeUndefined();
    expect(originRefusal(cluster, 'https://TOOLS.example.com', 'x')).toBeUndefined();
    expect(originRefusal(cluster, 'https://tools.example.com:8443', 'x')).toMatch(/Origin not allowed/);
    expect(originRefusal(cluster, 'http://inspector.example.com:6274', 'x')).toBeUndefined();
    expect(originRefusal(cluster, 'http://inspector.example.com.evil.test', 'x')).toMatch(/Origin not allowed/);
    expect(originRefusal(cluster, 'null', 'x')).toMatch(/Origin not allowed/);
  });

  it('on a loopback bind checks the Host too: a rebound name is refused, localhost on any port passes', () => {
    expect(originRefusal(laptop, undefined, 'evil.example.com:8080')).toMatch(/Host header/);
    expect(originRefusal(laptop, undefined, 'localhost:8080')).toBeUndefined();
    expect(originRefusal(laptop, undefined, '127.0.0.1')).toBeUndefined();
    expect(originRefusal(laptop, undefined, '[::1]:8080')).toBeUndefined();
    expect(originRefusal(laptop, undefined, 'gateway.test:8080')).toBeUndefined();
    // A developer's browser tool beside the gateway: loopback origins pass, others do not.
    expect(originRefusal(laptop, 'http://localhost:6274', 'localhost:8080')).toBeUndefined();
    expect(originRefusal(laptop, 'http://evil.example.com', 'localhost:8080')).toMatch(/Origin not allowed/);
  });

  it('on a loopback bind other than 127.0.0.1, a client calling that address is served', () => {
    const other = originPolicy('127.0.0.2', [], []);
    expect(originRefusal(other, undefined, '127.0.0.2:8080')).toBeUndefined();
    expect(originRefusal(other, undefined, 'evil.example.com')).toMatch(/Host header/);
    expect(originRefusal(originPolicy('::1', [], []), undefined, '[::1]:8080')).toBeUndefined();
  });

  it('takes configured origins as browsers send them, and refuses an entry that could never match', () => {
    expect(normalOrigin('https://Tools.Example.com/')).toBe('https://tools.example.com');
    expect(normalOrigin('http://localhost:*')).toBe('http://localhost:*');
    expect(normalOrigin('https://x.example.com:443')).toBe('https://x.example.com');
    expect(normalOrigin('*')).toBe('*');
    for (const bad of ['https://x.example.com/app', 'x.example.com', 'ftp://x.example.com', 'https://x?y=1'])
      expect(normalOrigin(bad)).toBeInstanceOf(Error);
  });

  it('allows any origin only where told to with *', () => {
    expect(originRefusal(originPolicy('0.0.0.0', ['*'], []), 'https://anything.test', 'x')).toBeUndefined();
  });
});

describe('the MCP door refuses a page of another origin before anything else', () => {
  let gateway: TestGateway;
  beforeAll(async () => {
    gateway = await startGateway(
      { mcp: { origins: originPolicy('127.0.0.1', ['https://tools.example.com'], []) } },
      { keys: ApiKeys.fromKeys([KEY]) },
    );
  });
  afterAll(() => gateway.stop());

  const post = (headers: Record<string, string>) =>
    new Promise<{ status: number; body: string }>((resolve, reject) => {
      const url = new URL(`${gateway.url}/mcp`);
      const body = JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'initialize',
        params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'origin-test', version: '1' } },
      });
      const req = request(
        {
          host: url.hostname,
          port: url.port,
          path: url.pathname,
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            accept: 'application/json, text/event-stream',
            'x-api-key': KEY,
            ...headers,
          },
        },
        (res) => {
          let text = '';
          res.on('data', (c: Buffer) => {
            text += c.toString('utf8');
          });
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
        },
      );
      req.on('error', reject);
      req.end(body);
    });

  it("answers 403 in the JSON-RPC envelope to a rebound Host and Origin (the conformance suite's probe)", async () => {
    const r = await post({ host: 'evil.example.com', origin: 'http://evil.example.com' });
    expect(r.status).toBe(403);
    const answer = JSON.parse(r.body) as { jsonrpc: string; error: { code: number; message: string } };
    expect(answer.jsonrpc).toBe('2.0');
    expect(answer.error.message).toMatch(/DNS rebinding/);
  });

  it('refuses before the key is looked at: no key and a foreign origin is a 403, not a 401', async () => {
    const r = await post({ origin: 'http://evil.example.com', 'x-api-key': '' });
    expect(r.status).toBe(403);
  });

  it('serves the caller without Origin and the allowed origin', async () => {
    expect((await post({})).status).toBe(200);
    expect((await post({ origin: 'https://tools.example.com' })).status).toBe(200);
  });
});
