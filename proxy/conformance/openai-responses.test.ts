import { describe, expect, it } from 'vitest';
import { response, responseEvent, responseEventMayNeed } from './openai-responses.js';

describe('Responses', () => {
  it('a whole response’s usage null is dropped: the spec has usage or none', () => {
    const out = response({ id: 'r', object: 'response', status: 'failed', usage: null });
    expect(out).not.toHaveProperty('usage');
    expect(out.error).toBeNull();
  });

  it('function calls and reasoning items pass as they are; message text gets annotations and logprobs', () => {
    const call = { type: 'function_call', id: 'fc', call_id: 'c', name: 'f', arguments: '{}', status: 'completed' };
    const reasoning = { type: 'reasoning', id: 'rs', summary: [] };
    const out = response({
      output: [call, reasoning, { type: 'message', content: [{ type: 'output_text', text: 'a' }] }],
    });
    const output = out.output as unknown[];
    expect(output[0]).toBe(call);
    expect(output[1]).toBe(reasoning);
    expect(output[2]).toEqual({
      type: 'message',
      content: [{ type: 'output_text', text: 'a', annotations: [], logprobs: [] }],
    });
  });

  it('usage without its details gets them, and a total', () => {
    const out = response({ usage: { input_tokens: 3, output_tokens: 4 } });
    expect(out.usage).toEqual({
      input_tokens: 3,
      output_tokens: 4,
      total_tokens: 7,
      input_tokens_details: { cached_tokens: 0 },
      output_tokens_details: { reasoning_tokens: 0 },
    });
  });

  it('the item and part events: items’ text parts as in a whole response', () => {
    const added = { type: 'response.content_part.added', part: { type: 'output_text', text: '' } };
    expect(responseEvent(undefined, added)).toEqual({
      ...added,
      part: { type: 'output_text', text: '', annotations: [], logprobs: [] },
    });
    const done = {
      type: 'response.output_item.done',
      item: { type: 'message', content: [{ type: 'output_text', text: 'a', annotations: [], logprobs: [] }] },
    };
    expect(responseEvent('response.output_item.done', done)).toBe(done);
  });

  it('only the lifecycle, item and text events are read; a delta only without its logprobs', () => {
    expect(responseEventMayNeed('response.function_call_arguments.delta', 'data: {}')).toBe(false);
    expect(responseEventMayNeed('response.output_text.delta', 'data: {"logprobs":[]}')).toBe(false);
    expect(responseEventMayNeed('response.output_text.delta', 'data: {"delta":"a"}')).toBe(true);
    expect(responseEventMayNeed('response.completed', 'data: {}')).toBe(true);
    expect(responseEventMayNeed(undefined, 'data: {}')).toBe(false);
  });
});
