import { describe, expect, it } from 'vitest';
import { chatChunk, chatCompletion } from './openai-chat.js';

describe('chat completions', () => {
  it('a tool-call message without content gets content null beside refusal null', () => {
    const calls = [{ id: 'c', type: 'function', function: { name: 'f', arguments: '{}' } }];
    const out = chatCompletion({
      choices: [{ index: 0, message: { role: 'assistant', tool_calls: calls }, finish_reason: 'tool_calls' }],
    });
    expect(out.choices).toEqual([
      {
        index: 0,
        message: { role: 'assistant', tool_calls: calls, content: null, refusal: null },
        finish_reason: 'tool_calls',
        logprobs: null,
      },
    ]);
  });

  it('usage without a total gets one', () => {
    expect(chatCompletion({ choices: [], usage: { prompt_tokens: 2, completion_tokens: 3 } }).usage).toEqual({
      prompt_tokens: 2,
      completion_tokens: 3,
      total_tokens: 5,
    });
  });

  it('a chunk’s real usage beside its choices is kept (a server that sends it on the finish chunk)', () => {
    const chunk = {
      choices: [{ index: 0, delta: {}, finish_reason: 'stop' }],
      usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
    };
    expect(chatChunk(chunk)).toBe(chunk);
  });

  it('a token chunk without logprobs is left as it is: the chunk schema does not require them', () => {
    const chunk = { choices: [{ index: 0, delta: { content: 'a' }, finish_reason: null }] };
    expect(chatChunk(chunk)).toBe(chunk);
  });

  it('logprobs the caller asked for get the refusal the spec requires beside their content (Ollama leaves it out)', () => {
    const content = [{ token: 'Hi', logprob: -1, bytes: [72, 105], top_logprobs: [] }];
    const whole = chatCompletion({
      choices: [
        { index: 0, message: { role: 'assistant', content: 'Hi' }, finish_reason: 'stop', logprobs: { content } },
      ],
    });
    expect((whole.choices as Array<Record<string, unknown>>)[0]?.logprobs).toEqual({ content, refusal: null });
    const chunk = chatChunk({
      choices: [{ index: 0, delta: { content: 'Hi' }, finish_reason: null, logprobs: { content } }],
    });
    expect((chunk.choices as Array<Record<string, unknown>>)[0]?.logprobs).toEqual({ content, refusal: null });
  });
});
