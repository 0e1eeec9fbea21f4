import { describe, expect, it } from 'vitest';
import { FRAME_KEY, FrameKeys, keysOf } from './frame-keys.js';

/** The same questions asked with Buffer searches, as the relay and the readers asked them before. */
function bySearch(raw: Buffer): number {
  const nonEmpty = (key: string) => {
    for (let at = raw.indexOf(key); at !== -1; at = raw.indexOf(key, at + 1))
      if (raw[at + key.length] !== 34 && at + key.length < raw.length) return true;
    return false;
  };
  let keys = 0;
  if (raw.includes('"usage"')) keys |= FRAME_KEY.usage;
  if (['"content":"', '"text":"', '"content": "', '"text": "'].some(nonEmpty)) keys |= FRAME_KEY.content;
  if (raw.includes('"logprobs"')) keys |= FRAME_KEY.logprobs;
  if (raw.includes('"logprobs":{')) keys |= FRAME_KEY.logprobsObject;
  if (raw.includes('"refusal"')) keys |= FRAME_KEY.refusal;
  return keys;
}

const chunk = (delta: unknown, extra: Record<string, unknown> = {}) =>
  `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', choices: [{ index: 0, delta, finish_reason: null }], ...extra })}\n\n`;

const FRAMES = [
  chunk({ role: 'assistant', content: ' hello' }),
  chunk({ content: '' }),
  chunk({ content: 'say "usage" and \\"text\\": "x"' }),
  chunk({ content: 'a' }, { usage: null }),
  chunk({}, { usage: { prompt_tokens: 1, completion_tokens: 2 } }),
  chunk({ content: 'a' }, { logprobs: null }),
  chunk({ content: 'a' }, { logprobs: { content: [] } }),
  chunk({ content: 'a' }, { logprobs: { content: [], refusal: null } }),
  'data: {"choices":[{"text": "spaced"}]}\n\n',
  'data: {"choices":[{"text": ""}]}\n\n',
  'data: {"choices":[{"text":"a","logprobs":null}]}\n\n',
  'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","delta":"Hi","logprobs":[]}\n\n',
  'event: content_block_delta\ndata: {"type":"content_block_delta","delta":{"type":"text_delta","text":"Hi"}}\n\n',
  'data: {"choices":[{"delta":{"content":"a"}}]}\r\n\r\n',
  'data: [DONE]\n\n',
  // Cut short: a key at the very end, its value not there.
  'data: {"choices":[{"delta":{"content":"',
  'data: {"choices":[{"delta":{"content"',
  'data: {"logprobs":',
  '',
];

describe('FrameKeys', () => {
  it('finds the keys Buffer searches find, in one pass', () => {
    for (const text of FRAMES) {
      const raw = Buffer.from(text);
      expect({ text, keys: keysOf(raw) }).toEqual({ text, keys: bySearch(raw) });
    }
  });

  it('reads only the range it is given', () => {
    const raw = Buffer.from(`${chunk({ content: 'a' })}${chunk({}, { usage: { prompt_tokens: 1 } })}`);
    const first = chunk({ content: 'a' }).length;
    expect(keysOf(raw, 0, first)).toBe(FRAME_KEY.content);
    expect(keysOf(raw, first)).toBe(FRAME_KEY.usage);
  });

  it('asks the bytes once per event, and again for the next', () => {
    const keys = new FrameKeys();
    const usage = Buffer.from(chunk({}, { usage: { prompt_tokens: 1 } }));
    expect(keys.of(usage).get()).toBe(FRAME_KEY.usage);
    // The same event's bytes changed behind its back: the first answer stands (read once).
    usage.write('"xxxxx"', usage.indexOf('"usage"'));
    expect(keys.get()).toBe(FRAME_KEY.usage);
    expect(keys.of(Buffer.from(chunk({ content: 'a' }))).get()).toBe(FRAME_KEY.content);
  });
});
