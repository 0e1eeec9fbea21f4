import { describe, expect, it } from 'vitest';
import { completion, completionChunk } from './openai-completions.js';

describe('legacy completions', () => {
  it('logprobs the caller asked for are kept', () => {
    const logprobs = { tokens: ['a'], token_logprobs: [-1], top_logprobs: null, text_offset: [0] };
    const body = { choices: [{ text: 'a', index: 0, finish_reason: 'stop', logprobs }] };
    expect(completion(body)).toBe(body);
  });

  it('a chunk without usage gets only its logprobs', () => {
    expect(completionChunk({ choices: [{ text: 'a', index: 0, finish_reason: null }] })).toEqual({
      choices: [{ text: 'a', index: 0, finish_reason: null, logprobs: null }],
    });
  });
});
