import { describe, expect, it } from 'vitest';
import { containsDesired } from './contains-desired.js';

describe('containsDesired', () => {
  const owner = { apiVersion: 'ai.platform/v1beta1', kind: 'ModelDeployment', name: 'qwen', uid: 'new' };
  it.each([
    ['same fields', { a: 1, b: { c: [1, 2] } }, { a: 1, b: { c: [1, 2] } }, true],
    ['extra fields in actual', { a: 1, b: 2, status: {} }, { a: 1 }, true],
    ['a changed value', { a: 1 }, { a: 2 }, false],
    ['a list of another length', { c: [1, 2, 3] }, { c: [1, 2] }, false],
    // A deleted and recreated owner of the same name: the old reference lingers until GC drops it.
    [
      'our owner reference among a previous one',
      { metadata: { ownerReferences: [{ ...owner, uid: 'old' }, owner] } },
      { metadata: { ownerReferences: [owner] } },
      true,
    ],
    [
      'only the previous owner',
      { metadata: { ownerReferences: [{ ...owner, uid: 'old' }] } },
      { metadata: { ownerReferences: [owner] } },
      false,
    ],
  ])('%s', (_, actual, desired, want) => {
    expect(containsDesired(actual, desired)).toBe(want);
  });
});
