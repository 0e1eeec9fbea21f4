import { describe, expect, it } from 'vitest';
import { type McpSession, SESSION_TTL_SECONDS, SessionSealer } from './session.js';

const session: McpSession = {
  key: 'abcdef012345',
  version: '2025-11-25',
  upstream: { everything: { id: 'upstream-session-1', version: '2025-11-25' }, stateless: { version: '2025-06-18' } },
  began: Math.floor(Date.now() / 1000),
};

describe('sealed MCP sessions', () => {
  it('open on any replica with the same secret, and on no other', () => {
    const id = new SessionSealer(() => 'shared').seal(session);
    expect(id).toMatch(/^[A-Za-z0-9_-]+$/);
    expect(id).not.toContain('upstream-session-1');
    expect(new SessionSealer(() => 'shared').open(id)).toEqual(session);
    expect(new SessionSealer(() => 'other').open(id)).toBeUndefined();
  });

  it('without a shared secret, are this replica’s own; a secret arriving later takes over', () => {
    let shared: string | undefined;
    const sealer = new SessionSealer(() => shared);
    const own = sealer.seal(session);
    expect(sealer.open(own)).toEqual(session);
    expect(new SessionSealer().open(own)).toBeUndefined();
    shared = 'from-the-secret';
    expect(new SessionSealer(() => 'from-the-secret').open(sealer.seal(session))).toEqual(session);
  });

  it('end when the shared secret changes (deleting the Secret rotates it), even those opened lately', () => {
    let shared = 'one';
    const sealer = new SessionSealer(() => shared);
    const id = sealer.seal(session);
    expect(sealer.open(id)).toEqual(session);
    shared = 'two';
    expect(sealer.open(id)).toBeUndefined();
  });

  it('refuse an altered, a made-up, an expired or a terminated id', () => {
    const sealer = new SessionSealer(() => 's');
    const id = sealer.seal(session);
    const altered = `${id.slice(0, 40)}${id[40] === 'A' ? 'B' : 'A'}${id.slice(41)}`;
    expect(sealer.open(altered)).toBeUndefined();
    expect(sealer.open('nope')).toBeUndefined();
    expect(sealer.open('x'.repeat(10_000))).toBeUndefined();
    const old = sealer.seal({ ...session, began: session.began - SESSION_TTL_SECONDS - 10 });
    expect(sealer.open(old)).toBeUndefined();
    expect(sealer.open(id)).toEqual(session);
    sealer.terminate(id);
    expect(sealer.open(id)).toBeUndefined();
  });
});
