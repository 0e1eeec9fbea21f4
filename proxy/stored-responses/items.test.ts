import { describe, expect, it } from 'vitest';
import { newId } from './items.js';

describe('newId', () => {
  it("is OpenAI's shape, begins with the Unix seconds, and sorts in the order the ids were made", () => {
    const before = Math.floor(Date.now() / 1000);
    const ids = Array.from({ length: 2000 }, () => newId('resp'));
    const after = Math.floor(Date.now() / 1000);
    for (const id of ids) expect(id).toMatch(/^resp_[0-9a-f]{48}$/);
    const seconds = Number.parseInt(String(ids[0]).slice(5, 13), 16);
    expect(seconds).toBeGreaterThanOrEqual(before);
    expect(seconds).toBeLessThanOrEqual(after);
    // Ordered within the process, so a stored row lands at its B-trees' right edge.
    expect([...ids].sort()).toEqual(ids);
    expect(new Set(ids).size).toBe(ids.length);
    // The random part differs between consecutive ids (not a counter alone).
    expect(new Set(ids.map((id) => id.slice(21))).size).toBe(ids.length);
  });
});
