import { describe, expect, it } from 'vitest';
import { PREFIX_CHARS, prefixKey } from './prefix-affinity.js';

/** Deterministic filler text of n characters, different per seed. */
const text = (n: number, seed = 'a') => `${seed}:`.padEnd(n, `${seed} lorem ipsum dolor sit amet `);
const SYSTEM = text(3000, 'system');

const chat = (system: string, user: string, extra: Record<string, unknown> = {}) => ({
  model: 'm',
  messages: [
    { role: 'system', content: system },
    { role: 'user', content: user },
  ],
  ...extra,
});

describe('prefixKey', () => {
  it('gives requests that share a long system prompt one key, whatever follows it', () => {
    const a = prefixKey('openai-chat', chat(SYSTEM, 'What is the capital of France?'));
    const b = prefixKey('openai-chat', chat(SYSTEM, 'Summarize the following text.'));
    expect(a).toMatch(/^[A-Za-z0-9_-]{11}$/);
    expect(b).toBe(a);
    expect(prefixKey('openai-chat', chat(text(3000, 'other'), 'What is the capital of France?'))).not.toBe(a);
  });

  it('keys only the first PREFIX_CHARS characters', () => {
    const base = text(PREFIX_CHARS + 500);
    const sameStart = `${base.slice(0, PREFIX_CHARS)}${'x'.repeat(500)}`;
    const differsInside = `${base.slice(0, PREFIX_CHARS - 10)}${'x'.repeat(510)}`;
    const key = (prompt: string) => prefixKey('openai-completions', { model: 'm', prompt });
    expect(key(sameStart)).toBe(key(base));
    expect(key(differsInside)).not.toBe(key(base));
  });

  it('gives short prompts no key (least loaded), in every dialect', () => {
    const short = text(PREFIX_CHARS - 100);
    expect(prefixKey('openai-chat', chat(short.slice(0, 1000), short.slice(0, 900)))).toBeUndefined();
    expect(prefixKey('openai-completions', { prompt: short })).toBeUndefined();
    expect(prefixKey('openai-responses', { instructions: 'be brief', input: short })).toBeUndefined();
    expect(prefixKey('anthropic-messages', { system: 'be brief', messages: [{ role: 'user', content: short }] })).toBe(
      undefined,
    );
    expect(prefixKey('openai-chat', { model: 'm' })).toBeUndefined();
    // Long enough, but embeddings keep no cache: no key.
    expect(prefixKey('openai-embeddings', { input: text(10_000) })).toBeUndefined();
  });

  it('counts the whole conversation toward the threshold, turn by turn', () => {
    const turns = Array.from({ length: 30 }, (_, i) => ({
      role: i % 2 ? 'assistant' : 'user',
      content: text(100, `t${i}`),
    }));
    expect(prefixKey('openai-chat', { messages: turns.slice(0, 5) })).toBeUndefined();
    const long = prefixKey('openai-chat', { messages: turns });
    expect(long).toBeDefined();
    // The next turn of the same conversation keeps its key (its prefix is unchanged).
    expect(prefixKey('openai-chat', { messages: [...turns, { role: 'user', content: 'and then?' }] })).toBe(long);
  });

  it('reads text parts as their text, so content as a string or as parts keys alike', () => {
    const asString = prefixKey('openai-chat', chat(SYSTEM, 'hi'));
    const asParts = prefixKey('openai-chat', {
      messages: [
        { role: 'system', content: [{ type: 'text', text: SYSTEM }] },
        { role: 'user', content: [{ type: 'text', text: 'hi' }] },
      ],
    });
    expect(asParts).toBe(asString);
    const anthropicString = prefixKey('anthropic-messages', { system: SYSTEM, messages: [] });
    const anthropicBlocks = prefixKey('anthropic-messages', {
      system: [{ type: 'text', text: SYSTEM, cache_control: { type: 'ephemeral' } }],
      messages: [],
    });
    expect(anthropicBlocks).toBe(anthropicString);
  });

  it('tells roles apart: the same text as system or as user is a different prompt', () => {
    const asSystem = prefixKey('openai-chat', { messages: [{ role: 'system', content: SYSTEM }] });
    const asUser = prefixKey('openai-chat', { messages: [{ role: 'user', content: SYSTEM }] });
    expect(asSystem).toBeDefined();
    expect(asUser).not.toBe(asSystem);
  });

  it('reads the tools first (rendered before the system prompt), by name and description', () => {
    const tool = (name: string) => ({ type: 'function', function: { name, description: text(1500, name) } });
    const withTools = (names: string[]) =>
      prefixKey('openai-chat', chat('be helpful', 'hi', { tools: names.map(tool) }));
    expect(withTools(['read', 'write'])).toBeDefined();
    expect(withTools(['read', 'write'])).toBe(withTools(['read', 'write']));
    expect(withTools(['read', 'grep'])).not.toBe(withTools(['read', 'write']));
    // Anthropic's tools are flat: { name, description, input_schema }.
    const flat = (names: string[]) =>
      prefixKey('anthropic-messages', {
        tools: names.map((name) => ({ name, description: text(1500, name), input_schema: {} })),
        messages: [{ role: 'user', content: 'hi' }],
      });
    expect(flat(['read', 'write'])).toBeDefined();
    expect(flat(['read', 'grep'])).not.toBe(flat(['read', 'write']));
  });

  it('reads Responses instructions then input, string or items, tool calls included', () => {
    const key = (input: unknown, instructions = SYSTEM) => prefixKey('openai-responses', { instructions, input });
    expect(key('hi')).toBe(key([{ role: 'user', content: [{ type: 'input_text', text: 'hi' }] }]));
    expect(key('hi')).not.toBe(key('hi', text(3000, 'other')));
    const history = (output: string) => [
      { role: 'user', content: 'list the files' },
      { type: 'function_call', call_id: 'c1', name: 'ls', arguments: '{"path":"."}' },
      { type: 'function_call_output', call_id: 'c1', output },
    ];
    const short = 'be brief';
    expect(key(history(text(3000, 'a')), short)).toBeDefined();
    expect(key(history(text(3000, 'a')), short)).not.toBe(key(history(text(3000, 'b')), short));
  });

  it('reads Anthropic tool use and results', () => {
    const key = (result: string) =>
      prefixKey('anthropic-messages', {
        system: 'be brief',
        messages: [
          { role: 'user', content: 'read the file' },
          { role: 'assistant', content: [{ type: 'tool_use', id: 't1', name: 'read', input: { path: 'a.ts' } }] },
          {
            role: 'user',
            content: [{ type: 'tool_result', tool_use_id: 't1', content: [{ type: 'text', text: result }] }],
          },
        ],
      });
    expect(key(text(3000, 'x'))).toBeDefined();
    expect(key(text(3000, 'x'))).not.toBe(key(text(3000, 'y')));
  });

  it('tells images apart by the end of their data, not its common header', () => {
    const png = (body: string) => `data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAA${body}`;
    const key = (data: string) =>
      prefixKey('openai-chat', {
        messages: [
          {
            role: 'user',
            content: [
              { type: 'image_url', image_url: { url: png(data) } },
              { type: 'text', text: SYSTEM },
            ],
          },
        ],
      });
    expect(key('A'.repeat(5000))).toBeDefined();
    expect(key('A'.repeat(5000))).not.toBe(key('B'.repeat(5000)));
  });

  it('reads completions prompts as text, a batch by its first, or token ids', () => {
    const long = text(3000);
    const key = (prompt: unknown) => prefixKey('openai-completions', { prompt });
    expect(key([long, 'second prompt'])).toBe(key(long));
    const tokens = Array.from({ length: 1000 }, (_, i) => i);
    expect(key(tokens)).toBeDefined();
    expect(key(tokens.slice(0, 100))).toBeUndefined();
    expect(key([tokens])).toBe(key(tokens));
    expect(key([7, ...tokens])).not.toBe(key(tokens));
  });

  it('stops reading once it has its characters: later turns are never touched', () => {
    const messages: unknown[] = [
      { role: 'system', content: SYSTEM },
      { role: 'user', content: 'hi' },
    ];
    // A turn that throws when read: the walk must be done before it.
    Object.defineProperty(messages, 1, {
      enumerable: true,
      get() {
        throw new Error('read past the prefix');
      },
    });
    expect(prefixKey('openai-chat', { messages })).toBe(prefixKey('openai-chat', chat(SYSTEM, 'anything')));
  });

  it('ignores what it cannot read rather than throwing', () => {
    const odd = [null, 3, 'x', { role: 5 }, { role: 'user', content: { nested: true } }, [1, 2]];
    expect(() => prefixKey('openai-chat', { messages: odd, tools: 'nope' })).not.toThrow();
    expect(() => prefixKey('anthropic-messages', { system: 42, messages: odd })).not.toThrow();
    expect(() => prefixKey('openai-responses', { instructions: null, input: odd })).not.toThrow();
    expect(() => prefixKey('openai-completions', { prompt: [[]] })).not.toThrow();
  });
});
