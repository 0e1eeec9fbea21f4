import { describe, expect, it, vi } from 'vitest';
import { ProxyError } from '../endpoints/errors.js';
import { BODY_MEMORY_FACTOR, bodyNeverFits, MemoryBudget, type NeverFits, Reservation } from './memory-budget.js';

const never: NeverFits = (most) => new ProxyError(400, 'invalid_request_error', 'too_big', `at most ${most}`, 'field');

describe('MemoryBudget', () => {
  it('refuses with 503 and Retry-After past what is free, and takes again once memory is given back', () => {
    const b = new MemoryBudget(100);
    b.take(60);
    b.take(40);
    try {
      b.take(1);
      expect.unreachable();
    } catch (err) {
      expect(err).toMatchObject({ status: 503, code: 'server_busy', headers: { 'Retry-After': '1' } });
    }
    b.give(40);
    b.take(30);
    expect(b.inUse).toBe(90);
  });
});

describe('Reservation', () => {
  it('refuses what could never fit, not even alone, with the reserver 4xx (given the most one request may hold)', () => {
    const b = new MemoryBudget(100);
    const alone = new Reservation(b);
    // The budget is empty: a retry would meet the same refusal, so no 503.
    expect(() => alone.atLeast(101, never)).toThrow(expect.objectContaining({ status: 400, message: 'at most 100' }));
    expect(b.inUse).toBe(0);
    alone.atLeast(100, never);
    expect(b.inUse).toBe(100);
    alone.release();
    expect(b.inUse).toBe(0);
  });

  it('answers 503 only for what fits the budget once others finish, and grows by the difference', () => {
    const b = new MemoryBudget(100);
    const other = new Reservation(b);
    other.atLeast(50, never);
    const mine = new Reservation(b);
    mine.atLeast(30, never);
    mine.atLeast(20, never); // already held
    expect(b.inUse).toBe(80);
    expect(() => mine.atLeast(60, never)).toThrow(expect.objectContaining({ status: 503, code: 'server_busy' }));
    other.release();
    mine.atLeast(60, never);
    expect(b.inUse).toBe(60);
    mine.release();
    expect(b.inUse).toBe(0);
  });

  it('a body too large for the whole budget is a 413 with the largest body that fits', () => {
    const b = new MemoryBudget(4 * 1024 * 1024);
    const r = new Reservation(b);
    try {
      r.atLeast(2 * 1024 * 1024 * BODY_MEMORY_FACTOR, bodyNeverFits);
      expect.unreachable();
    } catch (err) {
      expect(err).toMatchObject({ status: 413, code: 'request_too_large', headers: {} });
      expect((err as Error).message).toContain(`at most ${1024 * 1024} bytes`);
    }
  });

  it('admits any size and holds nothing without a budget', () => {
    const neverFits = vi.fn(never);
    const r = new Reservation(undefined);
    expect(() => r.atLeast(Number.MAX_SAFE_INTEGER, neverFits)).not.toThrow();
    expect(neverFits).not.toHaveBeenCalled();
    r.release();
    // The same size against a budget is refused: the budget, not the sizes, made the difference.
    expect(() => new Reservation(new MemoryBudget(1024)).atLeast(Number.MAX_SAFE_INTEGER, neverFits)).toThrow(
      'at most 1024',
    );
  });
});
