import { describe, expect, it } from 'vitest';
import { federatedNaming, singleNaming } from './naming.js';
import { notificationForClient, positionsOf, refusalStatus, sealPosition } from './server-stream.js';
import { SessionSealer } from './session.js';

describe('the GET stream’s event ids', () => {
  const sealer = new SessionSealer(() => 'secret');

  it('resume each server where its stream stood, on any replica with the same secret', () => {
    const id = sealPosition(sealer, 'session-a', { docs: 'ev-7', github: 'g-1' });
    expect(id).not.toContain('ev-7');
    expect(positionsOf(new SessionSealer(() => 'secret'), 'session-a', id)).toEqual({ docs: 'ev-7', github: 'g-1' });
  });

  it('resume nothing for another session’s id, another secret, or a forged or mangled one', () => {
    const id = sealPosition(sealer, 'session-a', { docs: 'ev-7' });
    expect(positionsOf(sealer, 'session-b', id)).toEqual({});
    expect(positionsOf(new SessionSealer(() => 'other'), 'session-a', id)).toEqual({});
    expect(positionsOf(sealer, 'session-a', `${id.slice(0, -4)}AAAA`)).toEqual({});
    expect(positionsOf(sealer, 'session-a', 'ev-7')).toEqual({});
    expect(positionsOf(sealer, 'session-a', 'x'.repeat(10_000))).toEqual({});
    expect(positionsOf(sealer, 'session-a', undefined)).toEqual({});
    // A session's own sealed value that is not a position.
    expect(positionsOf(sealer, 'session-a', sealer.sealValue({ at: { docs: 'ev-7' } }))).toEqual({});
  });
});

describe('a server’s notification as the client hears it', () => {
  it('names an updated resource as the endpoint names resources', () => {
    const n = { jsonrpc: '2.0' as const, method: 'notifications/resources/updated', params: { uri: 'file:///a.md' } };
    expect(notificationForClient(n, 'docs', federatedNaming).params).toEqual({ uri: 'docs+file:///a.md' });
    expect(notificationForClient(n, 'docs', singleNaming('docs')).params).toEqual({ uri: 'file:///a.md' });
  });

  it('passes list_changed as it is, and names a cancelled relayed request', () => {
    const changed = { jsonrpc: '2.0' as const, method: 'notifications/tools/list_changed' };
    expect(notificationForClient(changed, 'docs', federatedNaming)).toEqual(changed);
    const cancelled = {
      jsonrpc: '2.0' as const,
      method: 'notifications/cancelled',
      params: { requestId: 4, reason: 'timeout' },
    };
    expect(notificationForClient(cancelled, 'docs', federatedNaming).params).toEqual({
      requestId: 'mcp-gateway:["docs",4]',
      reason: 'timeout',
    });
  });
});

describe('a GET no server’s stream opened for', () => {
  it('is refused so that the client does the right thing next', () => {
    // A server ended the session: initialize again.
    expect(refusalStatus([405, 404])).toBe(404);
    expect(refusalStatus([409, 405])).toBe(409);
    // None offers a stream: the client stops asking.
    expect(refusalStatus([405, 405])).toBe(405);
    // Unreachable or slow: the client tries again, it must not read this as "no stream here".
    expect(refusalStatus([405, 502])).toBe(502);
    expect(refusalStatus([504])).toBe(502);
    expect(refusalStatus([])).toBe(502);
  });
});
