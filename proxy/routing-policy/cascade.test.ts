import { describe, expect, it } from 'vitest';
import { CASCADE_TRIGGERS } from '../../crds/routing-policy.js';
import type { ChunkSource } from '../upstreams/chunk-source.js';
import { judgeAnswer, judgeStream } from './cascade.js';
import type { RequestFeatures } from './features.js';

/** The cascade's judge: what counts as a failed answer, whole and before a stream's first content. */

const f = (over: Partial<RequestFeatures> = {}): RequestFeatures => ({
  inputTokens: 10,
  tools: 1,
  toolNames: ['get_weather'],
  images: false,
  depth: 1,
  json: false,
  prompt: 'hi',
  ...over,
});
const ALL = new Set(CASCADE_TRIGGERS);

const chat = (message: Record<string, unknown>, finish = 'stop') => ({
  choices: [{ index: 0, message: { role: 'assistant', ...message }, finish_reason: finish }],
});

describe('judgeAnswer', () => {
  it('passes an answer, and fails empty, refused, cut, unknown-tool and invalid-JSON ones', () => {
    expect(judgeAnswer('openai-chat', chat({ content: 'Paris.' }), f(), ALL)).toBeUndefined();
    expect(judgeAnswer('openai-chat', chat({ content: '  ' }), f(), ALL)).toBe('Empty');
    expect(judgeAnswer('openai-chat', chat({ content: "I'm sorry, but I can't help with that." }), f(), ALL)).toBe(
      'Refusal',
    );
    expect(judgeAnswer('openai-chat', chat({ content: null, refusal: 'no' }), f(), ALL)).toBe('Refusal');
    expect(judgeAnswer('openai-chat', chat({ content: 'Paris is' }, 'length'), f(), ALL)).toBe('Length');
    // A cut at the caller's own maximum is what it asked for; below it, the model's limit.
    expect(judgeAnswer('openai-chat', chat({ content: 'Paris is' }, 'length'), f({ maxOutputTokens: 2 }), ALL, 2)).toBe(
      undefined,
    );
    expect(
      judgeAnswer('openai-chat', chat({ content: 'Paris is' }, 'length'), f({ maxOutputTokens: 900 }), ALL, 400),
    ).toBe('Length');
    const call = (name: string) =>
      chat({ content: null, tool_calls: [{ id: 'c', type: 'function', function: { name, arguments: '{}' } }] });
    expect(judgeAnswer('openai-chat', call('get_weather'), f(), ALL)).toBeUndefined();
    expect(judgeAnswer('openai-chat', call('get_wether'), f(), ALL)).toBe('UnknownTool');
    expect(judgeAnswer('openai-chat', chat({ content: '{"a":1}' }), f({ json: true }), ALL)).toBeUndefined();
    expect(judgeAnswer('openai-chat', chat({ content: 'Sure! {"a":1}' }), f({ json: true }), ALL)).toBe('InvalidJson');
    // Only the policy's triggers count.
    expect(judgeAnswer('openai-chat', chat({ content: '' }), f(), new Set(['Error'] as const))).toBeUndefined();
  });

  it('reads Responses and Messages answers', () => {
    const responses = (output: unknown[], extra = {}) => ({ object: 'response', output, ...extra });
    expect(
      judgeAnswer(
        'openai-responses',
        responses([{ type: 'message', content: [{ type: 'output_text', text: 'ok' }] }]),
        f(),
        ALL,
      ),
    ).toBeUndefined();
    expect(judgeAnswer('openai-responses', responses([]), f(), ALL)).toBe('Empty');
    expect(
      judgeAnswer('openai-responses', responses([{ type: 'function_call', name: 'rm_rf', arguments: '{}' }]), f(), ALL),
    ).toBe('UnknownTool');
    const msg = (content: unknown[], stop = 'end_turn') => ({ type: 'message', content, stop_reason: stop });
    expect(judgeAnswer('anthropic-messages', msg([{ type: 'text', text: 'ok' }]), f(), ALL)).toBeUndefined();
    expect(judgeAnswer('anthropic-messages', msg([{ type: 'text', text: 'o' }], 'max_tokens'), f(), ALL)).toBe(
      'Length',
    );
    expect(judgeAnswer('anthropic-messages', msg([], 'refusal'), f(), ALL)).toBe('Refusal');
    expect(
      judgeAnswer('anthropic-messages', msg([{ type: 'tool_use', name: 'get_weather', input: {} }]), f(), ALL),
    ).toBe(undefined);
  });
});

function source(chunks: string[]): ChunkSource & { cancelled: boolean } {
  const bytes = chunks.map((c) => new TextEncoder().encode(c));
  const s = {
    cancelled: false,
    read: async () => bytes.shift(),
    cancel: () => {
      s.cancelled = true;
    },
  };
  return s;
}

async function drain(body: ChunkSource): Promise<string> {
  let text = '';
  for (let c = await body.read(); c !== undefined; c = await body.read()) text += new TextDecoder().decode(c);
  return text;
}

const ev = (o: unknown) => `data: ${JSON.stringify(o)}\n\n`;
const delta = (d: Record<string, unknown>) => ev({ choices: [{ index: 0, delta: d, finish_reason: null }] });

describe('judgeStream', () => {
  it('hands on a stream with content whole, the held bytes first, split events and all', async () => {
    const chunks = [
      delta({ role: 'assistant' }),
      delta({ content: '' }).slice(0, 10),
      delta({ content: '' }).slice(10),
      delta({ content: 'Hi' }),
      'data: [DONE]\n\n',
    ];
    const judged = await judgeStream('openai-chat', source(chunks), f(), ALL);
    expect('body' in judged).toBe(true);
    if ('body' in judged) expect(await drain(judged.body as ChunkSource)).toBe(chunks.join(''));
  });

  it('fails a stream that ends before content, or calls an unknown tool, and cancels it', async () => {
    expect(
      await judgeStream('openai-chat', source([delta({ role: 'assistant' }), 'data: [DONE]\n\n']), f(), ALL),
    ).toEqual({
      failed: 'Empty',
    });
    const s = source([
      delta({ tool_calls: [{ index: 0, id: 'c', function: { name: 'nope', arguments: '' } }] }),
      'data: [DONE]\n\n',
    ]);
    expect(await judgeStream('openai-chat', s, f(), ALL)).toEqual({ failed: 'UnknownTool' });
    expect(s.cancelled).toBe(true);
    const messages = source([
      `event: message_start\n${ev({ type: 'message_start', message: {} })}`,
      `event: content_block_start\n${ev({ type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } })}`,
      `event: message_stop\n${ev({ type: 'message_stop' })}`,
    ]);
    expect(await judgeStream('anthropic-messages', messages, f(), ALL)).toEqual({ failed: 'Empty' });
  });
});
