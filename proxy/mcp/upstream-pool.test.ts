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

  it('keep no failed opening, and no more than their bound', async () => {
    let fail = true;
    const pool = new UpstreamPool(async (): Promise<Opened> => {
      if (fail) throw new Error('down');
      return { session: { version: '2025-11-25' }, result: {} };
    }, 2);
    await expect(pool.get('k', target('docs'))).rejects.toThrow('down');
    await new Promise((r) => setTimeout(r, 0));
    expect(pool.size).toBe(0);
    fail = false;
    for (const k of ['a', 'b', 'c', 'd']) await pool.get(k, target('docs'));
    expect(pool.size).toBe(2);
  });
});
