import { describe, expect, it } from 'vitest';
import { eachRecord, edited, filled, withoutNulls } from './shape.js';

describe('copy-on-write edits', () => {
  it('filled: the same object where nothing is missing; a copy with the defaults where something is', () => {
    const whole = { a: 1, b: null };
    expect(filled(whole, { a: 2, b: 3 })).toBe(whole);
    const part = { a: 1 };
    const out = filled(part, { a: 2, b: [] });
    expect(out).toEqual({ a: 1, b: [] });
    expect(part).toEqual({ a: 1 });
  });

  it('filled: each answer gets its own default arrays and objects, never one shared between answers', () => {
    const defaults = { tools: [], metadata: {} };
    const one = filled({}, defaults);
    const two = filled({}, defaults);
    expect(one.tools).not.toBe(two.tools);
    expect(one.metadata).not.toBe(defaults.metadata);
  });

  it('withoutNulls: drops only the named keys, only when null', () => {
    const body = { a: null, b: null, c: 'x' };
    expect(withoutNulls(body, ['a', 'c'])).toEqual({ b: null, c: 'x' });
    const clean = { a: 'x' };
    expect(withoutNulls(clean, ['a', 'z'])).toBe(clean);
  });

  it('edited and eachRecord: the same values where the edit changed nothing', () => {
    const list = [{ a: 1 }, 'not a record', { a: 2 }];
    expect(eachRecord(list, (r) => r)).toBe(list);
    const out = eachRecord(list, (r) => (r.a === 2 ? { a: 3 } : r)) as unknown[];
    expect(out).toEqual([{ a: 1 }, 'not a record', { a: 3 }]);
    expect(out[0]).toBe(list[0]);
    const obj = { k: list };
    expect(edited(obj, 'k', (v) => v)).toBe(obj);
  });
});
