import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { McpCredentialError } from './auth.js';
import { admitsTool, admittedTools, connectMcp, type McpFailureReason, mcpFailureOf } from './discovery.js';

/**
 * The client side's tool filter, and its failure table read from what the SDK really throws:
 * each case connects through connectMcp (the operator's and the proxy's path) to a local HTTP
 * server answering the way a misconfigured or broken endpoint does.
 */

describe('admitsTool: spec.tools', () => {
  const cases: Array<[string, { allow?: string[]; deny?: string[] } | undefined, string, boolean]> = [
    ['no filter admits every tool', undefined, 'echo', true],
    ['an empty filter admits every tool', {}, 'echo', true],
    ['allow admits what it names', { allow: ['echo'] }, 'echo', true],
    ['allow refuses the rest', { allow: ['echo'] }, 'add', false],
    ['an empty allow admits nothing', { allow: [] }, 'echo', false],
    ['deny refuses what it names', { deny: ['echo'] }, 'echo', false],
    ['deny admits the rest', { deny: ['echo'] }, 'add', true],
    ['deny wins over allow', { allow: ['echo'], deny: ['echo'] }, 'echo', false],
    ['names match exactly (case too)', { allow: ['Echo'] }, 'echo', false],
  ];
  it.each(cases)('%s', (_, filter, name, admitted) => {
    expect(admitsTool(filter, name)).toBe(admitted);
  });

  it('keeps the order and the fields of the tools it admits', () => {
    const tools = [{ name: 'a', x: 1 }, { name: 'b' }, { name: 'c', x: 3 }];
    expect(admittedTools(tools, { deny: ['b'] })).toEqual([
      { name: 'a', x: 1 },
      { name: 'c', x: 3 },
    ]);
  });
});

/** Endpoints that are not (working) MCP servers, by path. */
const ANSWERS: Record<string, (res: import('node:http').ServerResponse) => void> = {
  '/html': (res) => res.writeHead(200, { 'content-type': 'text/html' }).end('<html>login</html>'),
  '/json': (res) => res.writeHead(200, { 'content-type': 'application/json' }).end('{"hello":"world"}'),
  '/missing': (res) => res.writeHead(404).end('not found'),
  '/401': (res) => res.writeHead(401, { 'www-authenticate': 'Bearer' }).end('no'),
  '/403': (res) => res.writeHead(403).end('no'),
  '/500': (res) => res.writeHead(500).end('boom'),
  '/503': (res) => res.writeHead(503).end('no upstream'),
  '/hang': () => {},
};

let http: Server;
let base: string;
let closedPort: number;

beforeAll(async () => {
  http = createServer((req, res) => {
    req.resume();
    const answer = ANSWERS[req.url ?? ''];
    if (answer) answer(res);
    else res.writeHead(404).end();
  });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(http.address() as AddressInfo).port}`;
  const probe = createServer();
  await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
  closedPort = (probe.address() as AddressInfo).port;
  await new Promise((resolve) => probe.close(resolve));
});

afterAll(() => {
  http.closeAllConnections();
  http.close();
});

async function failureAt(url: string, opts: { timeoutMs?: number; token?: () => Promise<string> } = {}) {
  try {
    const conn = await connectMcp(url, {
      timeoutMs: opts.timeoutMs ?? 3000,
      ...(opts.token ? { auth: { token: opts.token } } : {}),
    });
    await conn.close();
  } catch (err) {
    return mcpFailureOf(err);
  }
  throw new Error(`${url} connected`);
}

describe('mcpFailureOf: what a failed connect means', () => {
  const cases: Array<[string, () => string, McpFailureReason, RegExp]> = [
    ['a closed port', () => `http://127.0.0.1:${closedPort}/mcp`, 'Unreachable', /ECONNREFUSED/],
    ['a name that does not resolve', () => 'http://mcp.invalid/mcp', 'Unreachable', /ENOTFOUND|EAI_AGAIN/],
    ['a web page', () => `${base}/html`, 'NotMcp', /./],
    ['JSON that is not JSON-RPC', () => `${base}/json`, 'NotMcp', /./],
    ['nothing at the path', () => `${base}/missing`, 'NotMcp', /404/],
    ['401 without credentials', () => `${base}/401`, 'Unauthorized', /401/],
    ['403', () => `${base}/403`, 'Unauthorized', /403/],
    ['a server error', () => `${base}/500`, 'ServerError', /500/],
    ['a proxy with no server behind it', () => `${base}/503`, 'Unreachable', /503/],
  ];
  it.each(cases)('%s', async (_, url, reason, detail) => {
    const failure = await failureAt(url());
    expect(failure.reason).toBe(reason);
    expect(failure.detail).toMatch(detail);
  });

  it('a server that never answers is a Timeout', async () => {
    expect((await failureAt(`${base}/hang`, { timeoutMs: 500 })).reason).toBe('Timeout');
  });

  it('a token the server refuses is Unauthorized', async () => {
    expect((await failureAt(`${base}/401`, { token: async () => 'tok' })).reason).toBe('Unauthorized');
  });

  it("a credential that cannot be had keeps its own reason and message (the key, not the Secret's name)", async () => {
    const failure = await failureAt(`${base}/html`, {
      token: async () => {
        throw new McpCredentialError('SecretMissing', 'the Secret named in spec.auth.secretRef has no key token');
      },
    });
    expect(failure).toEqual({
      reason: 'SecretMissing',
      detail: 'the Secret named in spec.auth.secretRef has no key token',
    });
  });

  it('never repeats what the server answered in its body', async () => {
    const failure = await failureAt(`${base}/503`);
    expect(failure.detail).not.toContain('no upstream');
  });
});
