import { afterEach, describe, expect, it, vi } from 'vitest';
import { HeldCall, HeldCalls, HOLD_MS, inputRequired } from './input-rounds.js';
import { RpcError } from './json-rpc.js';
import type { McpTarget } from './servers.js';

// Nothing listens there: the answers to the server are best effort, and fail quietly.
const server = { name: 'docs', url: 'http://127.0.0.1:1/mcp', timeoutMs: 100 } as unknown as McpTarget;
const session = { id: 's1', version: '2025-11-25' };
const elicit = (id: number) => ({
  jsonrpc: '2.0' as const,
  id,
  method: 'elicitation/create',
  params: { message: 'name?' },
});

const call = (client = { elicitation: {} }, cancel: (why: RpcError) => void = () => {}) =>
  new HeldCall<string>('key-a', 'tools/call', 'docs_ask', client, cancel);

afterEach(() => {
  vi.useRealTimers();
});

describe('a call held for its stateless client’s input', () => {
  it('hands the server’s requests to the client in one round, named by server and id, then the call’s end', async () => {
    const held = call();
    held.ask(server, session, elicit(1));
    held.ask(server, session, elicit(2));
    const round = await held.next();
    expect(round.kind).toBe('input');
    if (round.kind !== 'input') return;
    const result = inputRequired(round.asked, 'sealed');
    expect(result).toEqual({
      resultType: 'input_required',
      inputRequests: {
        'mcp-gateway:["docs",1]': { method: 'elicitation/create', params: { message: 'name?' } },
        'mcp-gateway:["docs",2]': { method: 'elicitation/create', params: { message: 'name?' } },
      },
      requestState: 'sealed',
    });
    expect(held.answer({ 'mcp-gateway:["docs",1]': { action: 'decline' } })).toBeUndefined();
    expect(held.answer('not an object')).toBeInstanceOf(RpcError);
    held.settle({ kind: 'done', answer: { jsonrpc: '2.0', id: 'g', result: { content: [] } } });
    expect(await held.next()).toMatchObject({ kind: 'done' });
    expect(held.running).toBe(false);
  });

  it('never asks the client what it declared it cannot answer', async () => {
    const held = call({ elicitation: {} });
    held.ask(server, session, { jsonrpc: '2.0', id: 3, method: 'sampling/createMessage', params: {} });
    held.settle({ kind: 'failed', error: new Error('ended') });
    expect((await held.next()).kind).toBe('failed');
  });

  it('is taken up only by its own key, and cancelled and concluded once it waited too long', async () => {
    vi.useFakeTimers();
    const calls = new HeldCalls<string>();
    const cancelled: string[] = [];
    const held = call({ elicitation: {} }, (why) => {
      cancelled.push(why.message);
      held.settle({ kind: 'failed', error: why });
    });
    const concluded: string[] = [];
    held.conclude = (round, to) => concluded.push(`${round.kind} ${to ?? 'nobody'}`);
    calls.hold(held);
    expect(calls.take(held.id, 'key-b')).toBeUndefined();
    expect(calls.take(held.id, 'key-a')).toBe(held);
    expect(calls.take(held.id, 'key-a')).toBeUndefined();
    calls.hold(held);
    expect(calls.size).toBe(1);
    await vi.advanceTimersByTimeAsync(HOLD_MS + 1);
    expect(cancelled).toEqual(['the client did not come back with the input asked for']);
    expect(concluded).toEqual(['failed nobody']);
    expect(calls.size).toBe(0);
  });
});
