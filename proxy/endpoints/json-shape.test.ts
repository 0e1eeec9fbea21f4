import { describe, expect, it } from 'vitest';
import { MemoryBudget } from '../access/memory-budget.js';
import { checkJsonShape } from './json-shape.js';

const limits = { maxDepth: 4, maxValues: 10 };
const nested = (d: number) => `${'['.repeat(d)}${']'.repeat(d)}`;

describe('checkJsonShape', () => {
  it.each([
    ['a flat object', '{"model":"m","messages":[{"role":"user","content":"hi"}]}', undefined],
    ['depth at the limit', `{"a":${nested(3)}}`, undefined],
    ['one level deeper, named by its field', `{"model":"m","tools":${nested(4)}}`, 'tools'],
    ['a deep array as the body', nested(5), null],
    ['brackets and commas inside strings do not count', `{"a":"[[[[[,,,,,,,,,,,,{{{{{\\"]]]"}`, undefined],
    ['an escaped quote does not end a string', `{"a":"\\"[[[[[[[[["}`, undefined],
    ['values past the limit', `{"junk":[${Array(11).fill('{}').join(',')}]}`, 'too_many_values'],
    ['many keys', `{${Array.from({ length: 12 }, (_, i) => `"k${i}":${i}`).join(',')}}`, 'too_many_values'],
    ['not JSON at all is left to JSON.parse', 'hello, world', undefined],
  ])('%s', (_, text, want) => {
    const err = checkJsonShape(text, limits);
    if (want === undefined) return expect(err).toBeUndefined();
    expect(err?.status).toBe(400);
    if (want === 'too_many_values') return expect(err?.code).toBe('too_many_values');
    expect(err?.param).toBe(want);
    expect(err?.message).toContain('nested more than 4 levels');
  });

  it('scans a 10 MiB body of tiny values without building it, and stops at the limit', () => {
    const text = `{"model":"m","junk":[${'{},'.repeat(3_500_000)}{}]}`;
    text.charCodeAt(0); // flatten the concatenation first: a body read from a socket arrives flat
    const before = process.memoryUsage().heapUsed;
    const err = checkJsonShape(text, { maxDepth: 64, maxValues: 200_000 });
    expect(err?.code).toBe('too_many_values');
    expect(process.memoryUsage().heapUsed - before).toBeLessThan(4 * 1024 * 1024);
  });
});

describe('MemoryBudget', () => {
  it('refuses with 503 and Retry-After past the limit, and lets a lone request through whatever its size', () => {
    const b = new MemoryBudget(100);
    b.take(500); // alone: allowed, or a large limit-sized request could never run
    expect(() => b.take(1)).toThrow(expect.objectContaining({ status: 503, code: 'server_busy' }));
    b.give(500);
    b.take(60);
    b.take(40);
    try {
      b.take(1);
      expect.unreachable();
    } catch (err) {
      expect((err as { headers: Record<string, string> }).headers['Retry-After']).toBe('1');
    }
    b.give(40);
    b.take(30);
    expect(b.inUse).toBe(90);
  });
});
