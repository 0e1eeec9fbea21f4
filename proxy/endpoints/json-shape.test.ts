import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import { checkJsonShape } from './json-shape.js';

/** A full collection, in a worker started without --expose-gc. */
setFlagsFromString('--expose-gc');
const collect = runInNewContext('gc') as () => void;

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
    // Collected first, so that what other tests left behind cannot count. Building the 200,000
    // values it reads before the limit would hold about 13 MiB (the whole body, over 200 MiB).
    collect();
    const before = process.memoryUsage().heapUsed;
    const err = checkJsonShape(text, { maxDepth: 64, maxValues: 200_000 });
    expect(err?.code).toBe('too_many_values');
    expect(process.memoryUsage().heapUsed - before).toBeLessThan(4 * 1024 * 1024);
  });
});
