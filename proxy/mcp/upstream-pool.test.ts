import { describe, expect, it } from 'vitest';
import type { McpTarget } from './servers.js';
import { type Opened, UpstreamPool } from './upstream-pool.js';

const target = (name: string) => ({ name, url: 'http://127.0.0.1:1/mcp', timeoutMs: 100 }) as unknown as McpTarget;

describe('the servers’ sessions of stateless callers', () => {
  it('open once per key and server, and again after an idle while or when dropped', async () => {
    let now = 0;
    const opened: string[] = [];
    const pool = new UpstreamPool(
      async (t): Promise<Opened> => {
        opened.push(t.name);
        return { session: { version: '2025-11-25' }, result: {} };
      },
      100,
      1000,
      () => now,
    );
    const docs = target('docs');
    await pool.get('key-a', docs);
    await pool.get('key-a', docs);
    await pool.get('key-b', docs);
    expect(opened).toEqual(['docs', 'docs']);
    now = 5000;
    await pool.get('key-a', docs);
    expect(opened).toHaveLength(3);
    pool.drop('key-a', 'docs');
    await pool.get('key-a', docs);
    expect(opened).toHaveLength(4);
  });

  it('remember a failed opening for a while, so that a server down slows no request; and keep to their bound', async () => {
    let now = 0;
    let opens = 0;
    let fail = true;
    const pool = new UpstreamPool(
      async (): Promise<Opened> => {
        opens++;
        if (fail) throw new Error('down');
        return { session: { version: '2025-11-25' }, result: {} };
      },
      2,
      600_000,
      () => now,
    );
    const docs = target('docs');
    await expect(pool.get('k', docs)).rejects.toThrow('down');
    await new Promise((r) => setTimeout(r, 0));
    await expect(pool.get('k', docs)).rejects.toThrow('down');
    expect(opens).toBe(1);
    fail = false;
    now = 31_000;
    await pool.get('k', docs);
    expect(opens).toBe(2);
    for (const k of ['a', 'b', 'c', 'd']) await pool.get(k, target('docs'));
    expect(pool.size).toBe(2);
  });

  it('open one session per set of client capabilities, declaring them to the server', async () => {
    const declared: string[] = [];
    const pool = new UpstreamPool(async (_t, client): Promise<Opened> => {
      declared.push(JSON.stringify(client));
      return { session: { version: '2025-11-25' }, result: {} };
    });
    const docs = target('docs');
    await pool.get('k', docs);
    await pool.get('k', docs, { elicitation: {} });
    await pool.get('k', docs, { elicitation: {} });
    expect(declared).toEqual(['{}', '{"elicitation":{}}']);
    // A server that ended one session of the key: every one it has there goes.
    pool.drop('k', 'docs');
    expect(pool.size).toBe(0);
  });

  it('tell a listener its stream is gone when the session is dropped', async () => {
    const pool = new UpstreamPool(async (): Promise<Opened> => ({ session: { version: '2025-11-25' }, result: {} }));
    let gone = 0;
    // The server at target() cannot be reached: its stream is refused, and the listener told.
    await pool.listen('k', target('docs'), { notification: () => {}, gone: () => gone++ });
    await new Promise((r) => setTimeout(r, 300));
    expect(gone).toBe(1);
  });
});
