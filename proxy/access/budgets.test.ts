import { describe, expect, it } from 'vitest';
import type { SpendScope } from '../usage/store.js';
import type { KeyPolicy } from './auth.js';
import { BudgetGuard } from './budgets.js';

/**
 * The guard's arithmetic against a store whose answers the test controls: this replica's own
 * spend counts at once, exactly once, from being accounted until the store has it.
 */

const NOW = Date.parse('2026-11-23T12:00:00Z');
const key: KeyPolicy = { name: 'k', team: 't', role: 'User', tags: [], budget: { usd: 1, period: 'Daily' } };

function guard() {
  let inStore = 0;
  let pause: Promise<void> | undefined;
  const store = {
    spend: async (scopes: SpendScope[]) => {
      const answer = scopes.map(() => inStore);
      await pause;
      return answer;
    },
  };
  const g = new BudgetGuard(store, () => [key], { now: () => NOW });
  return {
    g,
    /** The store's figure grows (a batch committed), without telling the guard. */
    store: (usd: number) => {
      inStore += usd;
    },
    write: (usd: number) => {
      inStore += usd;
      g.written([{ time: new Date(NOW).toISOString(), apiKey: 'k', tags: [], costUsd: usd }]);
    },
    pauseReads: () => {
      let go = () => {};
      pause = new Promise((r) => {
        go = r;
      });
      return () => {
        pause = undefined;
        go();
      };
    },
  };
}

describe('BudgetGuard', () => {
  it('counts a request once: locally until written, then from the store', async () => {
    const { g, write } = guard();
    g.add(key, [], 0.3, NOW);
    expect(g.spent('key:k', 'Daily')).toBeCloseTo(0.3);
    write(0.3);
    // Written but not read yet: still this replica's own to count.
    expect(g.spent('key:k', 'Daily')).toBeCloseTo(0.3);
    await g.refresh();
    expect(g.spent('key:k', 'Daily')).toBeCloseTo(0.3);
    g.add(key, [], 0.2, NOW);
    expect(g.spent('key:k', 'Daily')).toBeCloseTo(0.5);
  });

  it('counts the spool backlog from before a restart until it is written, then from the store', async () => {
    const { g, store } = guard();
    g.setTagBudgets([{ name: 'x', tag: { key: 'project', value: 'x' }, usd: 5, period: 'Daily' }]);
    // Replayed from the spool: records of a crashed process, not yet in the store.
    g.unwrittenRecords([
      { time: new Date(NOW).toISOString(), apiKey: 'k', tags: [{ key: 'project', value: 'x' }], costUsd: 0.6 },
      { time: new Date(NOW).toISOString(), apiKey: 'k', tags: [], costUsd: 0 },
    ]);
    expect(g.spent('key:k', 'Daily')).toBeCloseTo(0.6);
    expect(g.spent('tag:project:x', 'Daily')).toBeCloseTo(0.6);
    // Written by the recorder: the store has it now, this replica no longer counts it as its own.
    store(0.6);
    g.written([
      { time: new Date(NOW).toISOString(), apiKey: 'k', tags: [{ key: 'project', value: 'x' }], costUsd: 0.6 },
    ]);
    await g.refresh();
    expect(g.spent('key:k', 'Daily')).toBeCloseTo(0.6);
    expect(g.spent('tag:project:x', 'Daily')).toBeCloseTo(0.6);
    g.add(key, [], 0.5, NOW);
    expect(g.check(key, [])?.error.code).toBe('insufficient_quota');
  });

  it('a write during a read may count twice until the next read, never zero times', async () => {
    const { g, write, pauseReads } = guard();
    g.add(key, [], 0.4, NOW);
    const release = pauseReads();
    const reading = g.refresh();
    write(0.4); // the read already took its figure (0): the write is not in it
    release();
    await reading;
    expect(g.spent('key:k', 'Daily')).toBeCloseTo(0.4);
    await g.refresh();
    expect(g.spent('key:k', 'Daily')).toBeCloseTo(0.4);
    // A write the read did see, during it: counted twice until the next read, then once.
    g.add(key, [], 0.1, NOW);
    const again = pauseReads();
    const next = g.refresh();
    write(0.1);
    again();
    await next;
    expect(g.spent('key:k', 'Daily')).toBeGreaterThanOrEqual(0.5 - 1e-9);
    await g.refresh();
    expect(g.spent('key:k', 'Daily')).toBeCloseTo(0.5);
  });

  it('refuses once the key budget is reached, with Retry-After at midnight UTC', async () => {
    const { g } = guard();
    g.add(key, [], 1, NOW);
    const refused = g.check(key, []);
    expect(refused?.scope).toBe('key');
    expect(refused?.error.headers).toMatchObject({ 'Retry-After': String(12 * 3600) });
  });
});
