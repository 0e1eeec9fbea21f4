import { describe, expect, it } from 'vitest';
import { FrameKeys } from '../upstreams/frame-keys.js';
import type { StreamReader } from '../upstreams/stream-reader.js';
import { conformAnswer, conformEvent, conformingReader } from './conformance.js';

/** The answers real Ollama 0.17.4 sends (captured from it), with what each dialect's spec requires of them. */

const chatOllama = {
  id: 'chatcmpl-913',
  object: 'chat.completion',
  created: 1795832752,
  model: 'smollm2:135m',
  system_fingerprint: 'fp_ollama',
  choices: [{ index: 0, message: { role: 'assistant', content: 'Hi' }, finish_reason: 'length' }],
  usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 },
};

const frame = (data: unknown, event?: string) => `${event ? `event: ${event}\n` : ''}data: ${JSON.stringify(data)}\n\n`;

/** What the relay's fast path asks of an event's bytes, as it asks it. */
const fastOf = (reader: StreamReader, text: string) => {
  const raw = Buffer.from(text);
  return reader.fast?.(raw, undefined, new FrameKeys().of(raw));
};

/** A reader that passes each event on as it came, the way the relay's readers do. */
const passing: StreamReader = {
  read: (event, data) => ({ out: frame(JSON.parse(data), event), token: false, last: false }),
  fast: () => ({ token: true }),
};

describe('whole answers', () => {
  it('chat: each choice gets logprobs null and its message refusal null; the rest is as it came', () => {
    const out = conformAnswer('openai-chat', chatOllama) as typeof chatOllama;
    expect(out.choices[0]).toEqual({
      index: 0,
      message: { role: 'assistant', content: 'Hi', refusal: null },
      finish_reason: 'length',
      logprobs: null,
    });
    expect(out.usage).toEqual(chatOllama.usage);
    expect(out.system_fingerprint).toBe('fp_ollama');
    // The input is not changed: the upstream's bytes are still what it sent.
    expect(chatOllama.choices[0]).not.toHaveProperty('logprobs');
  });

  it('chat: an answer already conformant is the very same value (its bytes go out unchanged)', () => {
    const conformant = conformAnswer('openai-chat', chatOllama);
    expect(conformAnswer('openai-chat', conformant)).toBe(conformant);
  });

  it('chat: logprobs the caller asked for are kept', () => {
    const logprobs = { content: [{ token: 'Hi', logprob: -1, bytes: [72, 105], top_logprobs: [] }], refusal: null };
    const body = { ...chatOllama, choices: [{ ...chatOllama.choices[0], logprobs }] };
    const out = conformAnswer('openai-chat', body) as { choices: Array<{ logprobs: unknown }> };
    expect(out.choices[0]?.logprobs).toBe(logprobs);
  });

  it('completions: each choice gets logprobs null', () => {
    const body = {
      id: 'cmpl-33',
      object: 'text_completion',
      created: 1,
      model: 'm',
      choices: [{ text: 'Hi', index: 0, finish_reason: 'length' }],
      usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 },
    };
    expect(conformAnswer('openai-completions', body)).toEqual({
      ...body,
      choices: [{ text: 'Hi', index: 0, finish_reason: 'length', logprobs: null }],
    });
  });

  it('embeddings: Ollama’s list is conformant as it is', () => {
    const body = {
      object: 'list',
      data: [{ object: 'embedding', embedding: [0.1], index: 0 }],
      model: 'all-minilm',
      usage: { prompt_tokens: 1, total_tokens: 1 },
    };
    expect(conformAnswer('openai-embeddings', body)).toBe(body);
  });

  it('responses: null where the spec has a string or nothing is dropped; required fields are added', () => {
    const body = {
      id: 'resp_1',
      object: 'response',
      created_at: 1,
      status: 'completed',
      model: 'm',
      output: [
        {
          id: 'msg_1',
          type: 'message',
          status: 'completed',
          role: 'assistant',
          content: [{ type: 'output_text', text: 'Hi' }],
        },
      ],
      usage: { input_tokens: 10, output_tokens: 5, total_tokens: 15 },
      safety_identifier: null,
      prompt_cache_key: null,
      user: null,
    };
    const out = conformAnswer('openai-responses', body) as Record<string, unknown>;
    expect(out).not.toHaveProperty('safety_identifier');
    expect(out).not.toHaveProperty('prompt_cache_key');
    expect(out).not.toHaveProperty('user');
    expect(out).toMatchObject({
      error: null,
      incomplete_details: null,
      instructions: null,
      tools: [],
      tool_choice: 'auto',
      metadata: {},
      temperature: null,
      top_p: null,
      parallel_tool_calls: true,
      usage: {
        input_tokens: 10,
        output_tokens: 5,
        total_tokens: 15,
        input_tokens_details: { cached_tokens: 0 },
        output_tokens_details: { reasoning_tokens: 0 },
      },
      output: [{ content: [{ type: 'output_text', text: 'Hi', annotations: [], logprobs: [] }] }],
    });
  });

  it('responses: what a request set is kept (instructions, temperature, metadata)', () => {
    const body = { id: 'r', object: 'response', instructions: 'be brief', temperature: 0, metadata: { a: 'b' } };
    expect(conformAnswer('openai-responses', body)).toMatchObject(body);
  });

  it('anthropic: stop_sequence and the fields newer than Ollama are null; the usage has its cache counts', () => {
    const body = {
      id: 'msg_1',
      type: 'message',
      role: 'assistant',
      model: 'm',
      content: [
        { type: 'text', text: 'Hi' },
        { type: 'tool_use', id: 't', name: 'f', input: {} },
      ],
      stop_reason: 'max_tokens',
      usage: { input_tokens: 10, output_tokens: 5 },
    };
    expect(conformAnswer('anthropic-messages', body)).toEqual({
      ...body,
      content: [
        { type: 'text', text: 'Hi', citations: null },
        { type: 'tool_use', id: 't', name: 'f', input: {}, caller: { type: 'direct' } },
      ],
      stop_sequence: null,
      stop_details: null,
      container: null,
      usage: {
        input_tokens: 10,
        output_tokens: 5,
        cache_creation_input_tokens: 0,
        cache_read_input_tokens: 0,
        cache_creation: null,
        inference_geo: null,
        output_tokens_details: null,
        server_tool_use: null,
        service_tier: null,
      },
    });
  });

  it('anything not an object (an upstream’s odd answer) is left as it is', () => {
    expect(conformAnswer('openai-chat', 'text')).toBe('text');
    expect(conformAnswer('openai-chat', [1])).toEqual([1]);
  });
});

describe('stream events through a relay’s reader', () => {
  const read = (dialect: Parameters<typeof conformingReader>[0], data: unknown, event?: string) =>
    conformingReader(dialect, passing).read(event, JSON.stringify(data))?.out ?? '';

  it('completions: the zero usage on chunks before the last is dropped, logprobs null added', () => {
    const chunk = {
      id: 'cmpl-382',
      object: 'text_completion',
      created: 1,
      choices: [{ text: 'The', index: 0, finish_reason: null }],
      model: 'm',
      usage: { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 },
    };
    const { usage: _u, ...rest } = chunk;
    expect(read('openai-completions', chunk)).toBe(
      frame({ ...rest, choices: [{ text: 'The', index: 0, finish_reason: null, logprobs: null }] }),
    );
  });

  it('completions: the last chunk keeps its usage', () => {
    const last = {
      id: 'c',
      object: 'text_completion',
      choices: [],
      usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 },
    };
    expect(read('openai-completions', last)).toBe(frame(last));
  });

  it('completions: a chunk without logprobs does not take the fast path', () => {
    const reader = conformingReader('openai-completions', passing);
    expect(fastOf(reader, 'data: {"choices":[{"text":"a"}]}\n\n')).toBeUndefined();
    expect(fastOf(reader, 'data: {"choices":[{"text":"a","logprobs":null}]}\n\n')).toEqual({
      token: true,
    });
  });

  it('chat: a zero usage beside choices is null; the usage chunk and token chunks pass as they came', () => {
    const chunk = {
      id: 'c',
      object: 'chat.completion.chunk',
      choices: [{ index: 0, delta: { content: 'a' }, finish_reason: null }],
    };
    expect(read('openai-chat', { ...chunk, usage: { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 } })).toBe(
      frame({ ...chunk, usage: null }),
    );
    const usage = {
      id: 'c',
      object: 'chat.completion.chunk',
      choices: [],
      usage: { prompt_tokens: 1, completion_tokens: 2, total_tokens: 3 },
    };
    expect(read('openai-chat', usage)).toBe(frame(usage));
    expect(fastOf(conformingReader('openai-chat', passing), frame(chunk))).toEqual({
      token: true,
    });
    // A chunk with logprobs that lack their refusal is read (and mended); with it, it passes unread.
    const lp = { ...chunk, choices: [{ ...chunk.choices[0], logprobs: { content: [] } }] };
    expect(fastOf(conformingReader('openai-chat', passing), frame(lp))).toBeUndefined();
    const mended = { ...chunk, choices: [{ ...chunk.choices[0], logprobs: { content: [], refusal: null } }] };
    expect(read('openai-chat', lp)).toBe(frame(mended));
    expect(fastOf(conformingReader('openai-chat', passing), frame(mended))).toEqual({
      token: true,
    });
  });

  it('responses: the response in response.created loses its nulls where the spec has none', () => {
    const created = {
      type: 'response.created',
      sequence_number: 0,
      response: {
        id: 'r',
        object: 'response',
        status: 'in_progress',
        output: [],
        usage: null,
        safety_identifier: null,
        prompt_cache_key: null,
        tools: [],
        tool_choice: 'auto',
        metadata: {},
        instructions: null,
        error: null,
        incomplete_details: null,
        temperature: 0,
        top_p: 1,
        parallel_tool_calls: true,
      },
    };
    const out = JSON.parse(read('openai-responses', created, 'response.created').split('data: ')[1] ?? '') as {
      response: Record<string, unknown>;
    };
    expect(out.response).not.toHaveProperty('usage');
    expect(out.response).not.toHaveProperty('safety_identifier');
    expect(out.response).not.toHaveProperty('prompt_cache_key');
    expect(out.response.status).toBe('in_progress');
  });

  it('responses: a text delta with its logprobs passes unread; one without gets them', () => {
    const delta = {
      type: 'response.output_text.delta',
      item_id: 'm',
      output_index: 0,
      content_index: 0,
      delta: 'a',
      sequence_number: 4,
    };
    expect(read('openai-responses', { ...delta, logprobs: [] }, delta.type)).toBe(
      frame({ ...delta, logprobs: [] }, delta.type),
    );
    expect(read('openai-responses', delta, delta.type)).toBe(frame({ ...delta, logprobs: [] }, delta.type));
  });

  it('anthropic: message_start’s message has stop_reason and stop_sequence null; message_delta its stop_sequence', () => {
    const start = {
      type: 'message_start',
      message: {
        id: 'm',
        type: 'message',
        role: 'assistant',
        model: 'x',
        content: [],
        usage: { input_tokens: 1, output_tokens: 0 },
      },
    };
    const out = JSON.parse(read('anthropic-messages', start, 'message_start').split('data: ')[1] ?? '') as {
      message: Record<string, unknown>;
    };
    expect(out.message).toMatchObject({ stop_reason: null, stop_sequence: null, content: [] });
    expect(out.message.usage).toMatchObject({ input_tokens: 1, cache_read_input_tokens: 0 });
    const delta = {
      type: 'message_delta',
      delta: { stop_reason: 'max_tokens' },
      usage: { input_tokens: 10, output_tokens: 5 },
    };
    const d = JSON.parse(read('anthropic-messages', delta, 'message_delta').split('data: ')[1] ?? '') as Record<
      string,
      Record<string, unknown>
    >;
    expect(d.delta).toEqual({ stop_reason: 'max_tokens', stop_sequence: null, stop_details: null, container: null });
    expect(d.usage).toMatchObject({ input_tokens: 10, output_tokens: 5, cache_read_input_tokens: null });
  });

  it('anthropic: a text delta goes out as it came', () => {
    const delta = { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'A' } };
    expect(read('anthropic-messages', delta, 'content_block_delta')).toBe(frame(delta, 'content_block_delta'));
  });

  it('a translator’s event object is normalized without a parse', () => {
    const e = { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } };
    expect(conformEvent('anthropic-messages', 'content_block_start', e)).toEqual({
      ...e,
      content_block: { type: 'text', text: '', citations: null },
    });
  });
});
