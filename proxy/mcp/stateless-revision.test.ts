import { describe, expect, it } from 'vitest';
import type { RpcRequest } from './json-rpc.js';
import {
  claimedRevision,
  discoverResult,
  statelessAnswer,
  statelessRefusal,
  withoutEnvelope,
} from './stateless-revision.js';

const envelope = {
  'io.modelcontextprotocol/protocolVersion': '2026-07-28',
  'io.modelcontextprotocol/clientCapabilities': { sampling: {} },
  'io.modelcontextprotocol/clientInfo': { name: 'c', version: '1' },
};
const call: RpcRequest = {
  jsonrpc: '2.0',
  id: 7,
  method: 'tools/call',
  params: { name: 'docs_search', arguments: { q: 'x' }, _meta: { ...envelope, progressToken: 'p1' } },
};
const headers =
  (h: Record<string, string>) =>
  (n: string): string | undefined =>
    h[n];
const sent = { 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/call', 'mcp-name': 'docs_search' };

describe('the stateless revision', () => {
  it('is told by the envelope, not by a header', () => {
    expect(claimedRevision(call)).toBe('2026-07-28');
    expect(claimedRevision({ params: { _meta: { progressToken: 1 } } })).toBeUndefined();
    expect(claimedRevision({})).toBeUndefined();
  });

  it('serves a request whose headers say what its body says, a base64 Mcp-Name included', () => {
    expect(statelessRefusal(call, headers(sent))).toBeUndefined();
    const b64 = `=?base64?${Buffer.from('docs_search').toString('base64')}?=`;
    expect(statelessRefusal(call, headers({ ...sent, 'mcp-name': b64 }))).toBeUndefined();
  });

  it('refuses each contradiction with its own code and status', () => {
    const refusal = (req: RpcRequest, h: Record<string, string>) => {
      const r = statelessRefusal(req, headers(h));
      return r && { code: r.code, status: r.status, data: r.data };
    };
    expect(refusal(call, { ...sent, 'mcp-name': 'other' })).toMatchObject({
      code: -32020,
      status: 400,
      data: { mismatch: { header: 'Mcp-Name' } },
    });
    expect(refusal(call, { ...sent, 'mcp-method': 'tools/list' })).toMatchObject({ code: -32020 });
    const { 'mcp-protocol-version': _v, ...noVersion } = sent;
    expect(refusal(call, noVersion)).toMatchObject({ code: -32020, status: 400 });
    const future = {
      ...call,
      params: { _meta: { ...envelope, 'io.modelcontextprotocol/protocolVersion': '2099-01-01' } },
    };
    expect(refusal(future, sent)).toMatchObject({
      code: -32022,
      status: 400,
      data: { requested: '2099-01-01', supported: expect.arrayContaining(['2026-07-28', '2025-11-25']) },
    });
    const noCaps = {
      ...call,
      params: { ...call.params, _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28' } },
    };
    expect(refusal(noCaps, sent)).toMatchObject({ code: -32602, status: 400 });
    const ping = { jsonrpc: '2.0' as const, id: 1, method: 'ping', params: { _meta: envelope } };
    expect(refusal(ping, { 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'ping' })).toMatchObject({
      code: -32601,
      status: 404,
    });
  });

  it('reaches a server of the session revisions without the envelope, its own _meta kept', () => {
    expect(withoutEnvelope(call).params).toEqual({
      name: 'docs_search',
      arguments: { q: 'x' },
      _meta: { progressToken: 'p1' },
    });
    const bare = { ...call, params: { name: 'n', _meta: envelope } };
    expect(withoutEnvelope(bare).params).toEqual({ name: 'n' });
  });

  it('shapes answers as the revision has them', () => {
    const listed = statelessAnswer('tools/list', {
      jsonrpc: '2.0',
      id: 1,
      result: { tools: [{ name: 't', inputSchema: {}, execution: { taskSupport: 'optional' } }] },
    });
    expect(listed).toEqual({
      jsonrpc: '2.0',
      id: 1,
      result: { tools: [{ name: 't', inputSchema: {} }], resultType: 'complete', ttlMs: 0, cacheScope: 'private' },
    });
    const called = statelessAnswer('tools/call', { jsonrpc: '2.0', id: 2, result: { content: [] } });
    expect(called).toEqual({ jsonrpc: '2.0', id: 2, result: { content: [], resultType: 'complete' } });
    const missing = statelessAnswer('resources/read', {
      jsonrpc: '2.0',
      id: 3,
      error: { code: -32002, message: 'no' },
    });
    expect(missing).toMatchObject({ error: { code: -32602 } });
  });

  it('discovers the revision, what is offered and by whom', () => {
    expect(discoverResult({ tools: {}, tasks: {} }, { name: 'g', version: '1' }, 'hi')).toEqual({
      resultType: 'complete',
      supportedVersions: ['2026-07-28'],
      capabilities: { tools: {} },
      instructions: 'hi',
      ttlMs: 0,
      cacheScope: 'private',
      _meta: { 'io.modelcontextprotocol/serverInfo': { name: 'g', version: '1' } },
    });
  });
});
