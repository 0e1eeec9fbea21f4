import { describe, expect, it } from 'vitest';
import { embeddingList } from './openai-embeddings.js';

describe('embeddings', () => {
  it('an embedding without its object or index gets them, the index its place in the list', () => {
    const out = embeddingList({
      object: 'list',
      model: 'm',
      data: [{ embedding: [1] }, { embedding: [2] }],
      usage: { prompt_tokens: 2 },
    });
    expect(out).toEqual({
      object: 'list',
      model: 'm',
      data: [
        { embedding: [1], object: 'embedding', index: 0 },
        { embedding: [2], object: 'embedding', index: 1 },
      ],
      usage: { prompt_tokens: 2, total_tokens: 2 },
    });
  });

  it('a list without usage gets a zero one (the spec requires it)', () => {
    expect(embeddingList({ object: 'list', model: 'm', data: [] }).usage).toEqual({
      prompt_tokens: 0,
      total_tokens: 0,
    });
  });
});
