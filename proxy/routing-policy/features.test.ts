import { describe, expect, it } from 'vitest';
import { growth } from '../../e2e/support/growth.js';
import { featuresOf, PROMPT_CAP } from './features.js';

const PNG =
  'data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==';

describe('featuresOf, OpenAI chat', () => {
  it('reads the latest user turn, the turns, tools, JSON, effort and the output limit', () => {
    const f = featuresOf('openai-chat', {
      model: 'auto',
      messages: [
        { role: 'system', content: 'You are terse.' },
        { role: 'user', content: 'first question' },
        { role: 'assistant', content: 'first answer' },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'second' },
            { type: 'text', text: 'question' },
          ],
        },
      ],
      tools: [
        { type: 'function', function: { name: 'get_weather', parameters: { type: 'object' } } },
        { type: 'custom', custom: { name: 'apply_patch' } },
      ],
      response_format: { type: 'json_schema', json_schema: { name: 'x', schema: {} } },
      reasoning_effort: 'high',
      max_completion_tokens: 300,
    });
    expect(f).toMatchObject({
      prompt: 'second\nquestion',
      depth: 3,
      tools: 2,
      toolNames: ['get_weather', 'apply_patch'],
      json: true,
      reasoning: 'high',
      maxOutputTokens: 300,
      images: false,
    });
    expect(f.inputTokens).toBeGreaterThan(5);
  });

  it('counts an image at a fixed cost, not its base64 URL, and does not take tool results as the prompt', () => {
    const big = `data:image/png;base64,${'A'.repeat(400_000)}`;
    const f = featuresOf('openai-chat', {
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'what is this?' },
            { type: 'image_url', image_url: { url: big } },
          ],
        },
        { role: 'assistant', tool_calls: [{ id: 'c', type: 'function', function: { name: 'zoom', arguments: '{}' } }] },
        { role: 'tool', tool_call_id: 'c', content: 'zoomed' },
      ],
    });
    expect(f.images).toBe(true);
    expect(f.prompt).toBe('what is this?');
    expect(f.inputTokens).toBeLessThan(1000);
    expect(f.depth).toBe(2);
  });

  it('keeps both ends of a long prompt within the cap', () => {
    const text = `ASK AT THE START ${'x'.repeat(50_000)} ASK AT THE END`;
    const f = featuresOf('openai-chat', { messages: [{ role: 'user', content: text }] });
    expect(f.prompt.length).toBeLessThanOrEqual(PROMPT_CAP);
    expect(f.prompt.startsWith('ASK AT THE START')).toBe(true);
    expect(f.prompt.endsWith('ASK AT THE END')).toBe(true);
    expect(f.inputTokens).toBeGreaterThan(12_000);
  });
});

describe('featuresOf, OpenAI responses', () => {
  it('takes a string input as the prompt and instructions into the size', () => {
    const f = featuresOf('openai-responses', {
      input: 'Translate hello',
      instructions: 'x'.repeat(4000),
      reasoning: { effort: 'low' },
      text: { format: { type: 'json_object' } },
      max_output_tokens: 50,
    });
    expect(f).toMatchObject({ prompt: 'Translate hello', depth: 1, reasoning: 'low', json: true, maxOutputTokens: 50 });
    expect(f.inputTokens).toBeGreaterThan(1000);
  });

  it('reads items: a run of function calls is one assistant turn; input_image is an image', () => {
    const f = featuresOf('openai-responses', {
      input: [
        {
          role: 'user',
          content: [
            { type: 'input_text', text: 'look' },
            { type: 'input_image', image_url: PNG },
          ],
        },
        { type: 'function_call', call_id: 'a', name: 'read', arguments: '{}' },
        { type: 'function_call', call_id: 'b', name: 'read', arguments: '{}' },
        { type: 'function_call_output', call_id: 'a', output: 'one' },
        { type: 'function_call_output', call_id: 'b', output: 'two' },
        { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'done' }] },
      ],
      tools: [{ type: 'function', name: 'read' }, { type: 'web_search' }],
    });
    expect(f).toMatchObject({ prompt: 'look', images: true, depth: 3, tools: 1, toolNames: ['read'] });
  });
});

describe('featuresOf, Anthropic messages', () => {
  it('reads system, blocks, tools, and thinking budgets as levels', () => {
    const body = (budget: number) => ({
      system: [{ type: 'text', text: 'be brief' }],
      messages: [
        { role: 'user', content: 'fix the bug' },
        { role: 'assistant', content: [{ type: 'tool_use', id: 't', name: 'read_file', input: { path: 'a.ts' } }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't', content: 'const a = 1;' }] },
      ],
      tools: [{ name: 'read_file', input_schema: { type: 'object' } }],
      thinking: { type: 'enabled', budget_tokens: budget },
      max_tokens: 2048,
    });
    expect(featuresOf('anthropic-messages', body(1024))).toMatchObject({
      prompt: 'fix the bug',
      depth: 2,
      toolNames: ['read_file'],
      reasoning: 'low',
      maxOutputTokens: 2048,
    });
    expect(featuresOf('anthropic-messages', body(8000)).reasoning).toBe('medium');
    expect(featuresOf('anthropic-messages', body(32_000)).reasoning).toBe('high');
    expect(featuresOf('anthropic-messages', { messages: [], output_config: { effort: 'max' } }).reasoning).toBe('high');
    // `high` is Anthropic's default (Claude Code sends it on every call): no more than a plain request.
    expect(
      featuresOf('anthropic-messages', { messages: [], output_config: { effort: 'high' } }).reasoning,
    ).toBeUndefined();
    expect(featuresOf('anthropic-messages', { messages: [], output_config: { effort: 'low' } }).reasoning).toBe(
      'minimal',
    );
  });

  it('sees an image block and a JSON schema output', () => {
    const f = featuresOf('anthropic-messages', {
      messages: [
        {
          role: 'user',
          content: [
            { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AAAA' } },
            { type: 'text', text: 'describe' },
          ],
        },
      ],
      output_format: { type: 'json_schema', schema: {} },
    });
    expect(f).toMatchObject({ images: true, prompt: 'describe', json: true });
  });
});

describe('featuresOf on what it does not expect', () => {
  it('never throws, whatever the shapes', () => {
    const junk: unknown[] = [null, 1, 'x', [], { a: [null, { b: 2 }] }, { messages: 'no' }, { messages: [null, 3] }];
    for (const dialect of [
      'openai-chat',
      'openai-responses',
      'anthropic-messages',
      'openai-completions',
      'openai-embeddings',
    ] as const)
      for (const v of junk) {
        const body = (
          typeof v === 'object' && v !== null && !Array.isArray(v) ? v : { messages: v, input: v, tools: v }
        ) as Record<string, unknown>;
        const f = featuresOf(dialect, body);
        expect(f.inputTokens).toBeGreaterThanOrEqual(0);
        expect(typeof f.prompt).toBe('string');
      }
  });

  it('completions: the prompt string; embeddings: no prompt', () => {
    expect(featuresOf('openai-completions', { prompt: 'once upon' }).prompt).toBe('once upon');
    expect(featuresOf('openai-embeddings', { input: 'embed me' })).toMatchObject({ prompt: '', tools: 0, depth: 0 });
  });

  it('reads a 300 KB agent conversation in linear time', () => {
    const conversation = (turns: number) => ({
      messages: Array.from({ length: turns }, (_, i) =>
        i % 2 === 0
          ? { role: 'user', content: `step ${i}: ${'lorem ipsum dolor sit amet '.repeat(20)}` }
          : { role: 'assistant', content: 'ok '.repeat(40) },
      ),
    });
    // 75 turns against 600 (300 KB): linear work is about 8x slower, quadratic 64x. The time
    // itself is the routing bench's.
    expect(
      growth(
        (turns) => {
          const body = conversation(turns);
          return () => featuresOf('openai-chat', body);
        },
        75,
        600,
      ),
    ).toBeLessThan(24);
  });
});
