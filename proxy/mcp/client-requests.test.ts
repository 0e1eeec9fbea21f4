import { describe, expect, it } from 'vitest';
import {
  answerUnrelayed,
  cancelledForClient,
  relayedCapabilities,
  relayedId,
  unrelayable,
  unrelayedId,
} from './client-requests.js';
import { RPC, RpcError } from './json-rpc.js';

describe('requests of servers to the client', () => {
  it("declares to servers only the client's sampling, elicitation and roots, bounded in size", () => {
    expect(
      relayedCapabilities({ sampling: {}, elicitation: { form: {} }, roots: { listChanged: true }, experimental: {} }),
    ).toEqual({ sampling: {}, elicitation: { form: {} }, roots: { listChanged: true } });
    expect(relayedCapabilities({ sampling: true, tasks: {} })).toEqual({});
    expect(relayedCapabilities('x')).toEqual({});
    // A client's capability object sealed into every session id: past its bound, names only.
    expect(relayedCapabilities({ sampling: { pad: 'x'.repeat(5000) } })).toEqual({ sampling: {} });
  });

  it('refuses at once what the client cannot take: no such capability, no stream, not a client method', () => {
    expect(unrelayable('sampling/createMessage', { sampling: {} }, true)).toBeUndefined();
    expect(unrelayable('elicitation/create', { sampling: {} }, true)?.code).toBe(RPC.methodNotFound);
    expect(unrelayable('roots/list', undefined, true)?.message).toMatch(/no roots capability/);
    expect(unrelayable('sampling/createMessage', { sampling: {} }, false)?.message).toMatch(/no event stream/);
    expect(unrelayable('tools/call', { sampling: {} }, true)?.code).toBe(RPC.methodNotFound);
  });

  it('names the server in the id the client answers, and gives the server its own id back', () => {
    for (const id of [7, 'abc', 'mcp-gateway:["x",1]']) {
      expect(unrelayedId(relayedId('github', id))).toEqual({ server: 'github', id });
    }
    expect(unrelayedId(42)).toBeUndefined();
    expect(unrelayedId('mcp-gateway:not json')).toBeUndefined();
    expect(unrelayedId('mcp-gateway:[1,2]')).toBeUndefined();
    expect(unrelayedId('mcp-gateway:["s",{"a":1}]')).toBeUndefined();
  });

  it("tells the client of a server's cancel under the id it was relayed with; answers a server's ping itself", () => {
    const cancel = {
      jsonrpc: '2.0' as const,
      method: 'notifications/cancelled',
      params: { requestId: 3, reason: 'x' },
    };
    expect(cancelledForClient(cancel, 'github').params?.requestId).toBe(relayedId('github', 3));
    const progress = { jsonrpc: '2.0' as const, method: 'notifications/progress', params: { progressToken: 1 } };
    expect(cancelledForClient(progress, 'github')).toBe(progress);
    const no = new RpcError(RPC.gateway, 'no');
    expect(answerUnrelayed({ jsonrpc: '2.0', id: 9, method: 'ping' }, no)).toEqual({
      jsonrpc: '2.0',
      id: 9,
      result: {},
    });
    expect(answerUnrelayed({ jsonrpc: '2.0', id: 9, method: 'roots/list' }, no)).toEqual({
      jsonrpc: '2.0',
      id: 9,
      error: { code: RPC.gateway, message: 'no' },
    });
  });
});
