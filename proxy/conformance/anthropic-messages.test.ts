import { describe, expect, it } from 'vitest';
import { message, messageEvent, messageEventMayNeed } from './anthropic-messages.js';

describe('Anthropic Messages', () => {
  it('a message that has every field is the same value', () => {
    const whole = message({ id: 'm', model: 'x', content: [], usage: { input_tokens: 1, output_tokens: 2 } });
    expect(message(whole)).toBe(whole);
  });

  it('what a server said is kept: a stop sequence, cache counts, a service tier', () => {
    const out = message({
      stop_reason: 'stop_sequence',
      stop_sequence: '.',
      usage: { input_tokens: 1, output_tokens: 2, cache_read_input_tokens: 7, service_tier: 'standard' },
    });
    expect(out).toMatchObject({
      stop_reason: 'stop_sequence',
      stop_sequence: '.',
      usage: { cache_read_input_tokens: 7, cache_creation_input_tokens: 0, service_tier: 'standard' },
    });
  });

  it('a message without usage gets the zero usage', () => {
    expect(message({}).usage).toMatchObject({ input_tokens: 0, output_tokens: 0 });
  });

  it('a thinking block gets its signature; blocks of kinds it does not know pass as they are', () => {
    const start = { type: 'content_block_start', index: 0, content_block: { type: 'thinking', thinking: '' } };
    expect(messageEvent('content_block_start', start).content_block).toEqual({
      type: 'thinking',
      thinking: '',
      signature: '',
    });
    const other = { type: 'content_block_start', index: 0, content_block: { type: 'server_tool_use', id: 's' } };
    expect(messageEvent(undefined, other)).toBe(other);
  });

  it('message_delta without usage or delta gets both', () => {
    const out = messageEvent('message_delta', { type: 'message_delta' });
    expect(out.delta).toEqual({ stop_reason: null, stop_sequence: null, stop_details: null, container: null });
    expect(out.usage).toMatchObject({ output_tokens: 0, input_tokens: null });
  });

  it('deltas, stops and pings are never read', () => {
    for (const name of ['content_block_delta', 'content_block_stop', 'message_stop', 'ping', undefined])
      expect(messageEventMayNeed(name)).toBe(false);
    expect(messageEventMayNeed('message_start')).toBe(true);
  });
});
