import { describe, expect, it } from 'vitest';
import { generateKey, keyDigest, keyHint } from './api-key-controller.js';

describe('generated keys', () => {
  it('are sk- and 256 random bits, shown only by digest and hint', () => {
    const a = generateKey();
    expect(a).toMatch(/^sk-[A-Za-z0-9_-]{43}$/);
    expect(generateKey()).not.toBe(a);
    expect(keyDigest(a)).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(keyHint(a)).toBe(`${a.slice(0, 7)}...${a.slice(-4)}`);
    expect(keyHint(a)).toHaveLength(14);
  });
});
