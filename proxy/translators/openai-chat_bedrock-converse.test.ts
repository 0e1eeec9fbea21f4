import { describe, expect, it } from 'vitest';
import { ProxyError } from '../endpoints/errors.js';
import {
  type ConverseAnswer,
  type ConverseRequest,
  type ConverseStreamEvent,
  ConverseWhole,
} from '../upstreams/bedrock-converse.js';
import type { OpenAIChatChunk } from './chat-completion.js';
import {
  JSON_TOOL,
  jsonMode,
  MAPPED_FIELDS,
  REJECTED_FIELDS,
  toConverseInput,
} from './openai-chat_bedrock-converse-request.js';
import { finishReasonOf, fromConverseOutput } from './openai-chat_bedrock-converse-response.js';
import { ConverseStreamTranslator } from './openai-chat_bedrock-converse-stream.js';
import { translatorFor } from './table.js';

/**
 * OpenAI chat <-> Bedrock Converse: the request (messages, parameters, tools, JSON mode,
 * reasoning, cache points, limits), the answer, the stream's chunks event by event, and a stream
 * added up into the answer Converse would have given (for callers that want it whole). What the
 * provider adds to every call (its guardrail, the text-only refusal) is the Bedrock module's:
 * crds/providers/bedrock.test.ts.
 */

type ConverseCommandInput = ConverseRequest;
type ConverseCommandOutput = ConverseAnswer;
type ConverseStreamOutput = ConverseStreamEvent;

/** Events added up as the provider upstream does for a caller that wants the answer whole. */
class ConverseStreamAggregator {
  private readonly whole = new ConverseWhole();
  push(event: ConverseStreamOutput): void {
    for (const [type, payload] of Object.entries(event)) this.whole.push(type, payload as Record<string, unknown>);
  }
  usage() {
    return this.whole.usage();
  }
  finishReason() {
    const stop = this.whole.answer().stopReason;
    return stop === undefined ? undefined : finishReasonOf(stop);
  }
  result(model: string, id: string, created: number, json = false) {
    return fromConverseOutput(this.whole.answer(), model, id, created, json);
  }
}

const MODEL_ID = 'anthropic.claude-3-5-haiku-20241022-v1:0';
const user = (content: unknown) => ({ role: 'user', content });
const assistant = (content: unknown) => ({ role: 'assistant', content });

function input(body: Record<string, unknown>): ConverseCommandInput {
  const r = toConverseInput(MODEL_ID, body);
  if (r instanceof ProxyError) throw new Error(`expected a Converse input, got ${r.status} ${r.code}: ${r.message}`);
  return r;
}

function rejection(body: Record<string, unknown>): ProxyError {
  const r = toConverseInput(MODEL_ID, body);
  if (!(r instanceof ProxyError)) throw new Error(`expected a ProxyError, got ${JSON.stringify(r)}`);
  return r;
}

// 1x1 transparent PNG.
const PNG_B64 = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==';

describe('the translator table', () => {
  it('plans chat to Converse directly, and Responses and Anthropic callers through chat', () => {
    expect(translatorFor('openai-chat', 'bedrock-converse')?.from).toBe('openai-chat');
    for (const from of ['openai-responses', 'anthropic-messages'] as const) {
      const t = translatorFor(from, 'bedrock-converse');
      expect([t?.from, t?.to]).toEqual([from, 'bedrock-converse']);
    }
  });
});

describe('toConverseInput: messages', () => {
  it('sends the model id, system and developer messages as system blocks in order, and the turns', () => {
    const r = input({
      model: 'claude-haiku',
      messages: [
        { role: 'system', content: 'You are terse.' },
        { role: 'developer', content: [{ type: 'text', text: 'Answer in French.' }] },
        user('Hi'),
        assistant('Bonjour'),
        user('How are you?'),
      ],
    });
    expect(r).toEqual({
      system: [{ text: 'You are terse.' }, { text: 'Answer in French.' }],
      messages: [
        { role: 'user', content: [{ text: 'Hi' }] },
        { role: 'assistant', content: [{ text: 'Bonjour' }] },
        { role: 'user', content: [{ text: 'How are you?' }] },
      ],
    });
  });

  it('joins the text parts of a system message into one block and drops blank system text', () => {
    const r = input({
      messages: [
        {
          role: 'system',
          content: [
            { type: 'text', text: 'Part one.' },
            { type: 'text', text: ' ' },
            { type: 'text', text: 'Part two.' },
          ],
        },
        { role: 'system', content: '   ' },
        { role: 'developer', content: null },
        user('Hi'),
      ],
    });
    expect(r.system).toEqual([{ text: 'Part one.\nPart two.' }]);
  });

  it('leaves out system when there is none', () => {
    expect(input({ messages: [user('Hi')] })).not.toHaveProperty('system');
  });

  it.each([
    {
      name: 'two user messages',
      messages: [user('a'), user('b'), assistant('c')],
      expected: [
        { role: 'user', content: [{ text: 'a' }, { text: 'b' }] },
        { role: 'assistant', content: [{ text: 'c' }] },
      ],
    },
    {
      name: 'two assistant messages',
      messages: [user('a'), assistant('b'), assistant('c'), user('d')],
      expected: [
        { role: 'user', content: [{ text: 'a' }] },
        { role: 'assistant', content: [{ text: 'b' }, { text: 'c' }] },
        { role: 'user', content: [{ text: 'd' }] },
      ],
    },
    {
      name: 'user messages around a hoisted system message',
      messages: [user('a'), { role: 'system', content: 's' }, user('b')],
      expected: [{ role: 'user', content: [{ text: 'a' }, { text: 'b' }] }],
    },
    {
      name: 'a blank user message merged away',
      messages: [user('  '), user('b')],
      expected: [{ role: 'user', content: [{ text: 'b' }] }],
    },
  ])('merges consecutive same-role messages: $name', ({ messages, expected }) => {
    expect(input({ messages }).messages).toEqual(expected);
  });

  it('maps text parts to text blocks and a data-URL image to its bytes', () => {
    const r = input({
      messages: [
        user([
          { type: 'text', text: 'What is this?' },
          { type: 'image_url', image_url: { url: `data:image/png;base64,${PNG_B64}`, detail: 'low' } },
          { type: 'text', text: '' },
        ]),
      ],
    });
    expect(r.messages).toHaveLength(1);
    const content = r.messages?.[0]?.content ?? [];
    expect(content).toHaveLength(2);
    expect(content[0]).toEqual({ text: 'What is this?' });
    const image = content[1]?.image;
    expect(image?.format).toBe('png');
    // Converse's JSON carries the bytes in base64.
    expect(image?.source?.bytes).toBe(PNG_B64);
  });

  it.each([
    ['jpeg', 'data:image/jpeg;base64,', 'jpeg'],
    ['jpg (a common misspelling)', 'data:image/jpg;base64,', 'jpeg'],
    ['gif', 'data:image/gif;base64,', 'gif'],
    ['webp', 'data:image/webp;base64,', 'webp'],
    ['upper-case type', 'data:image/PNG;base64,', 'png'],
  ])('reads the image format from the data URL: %s', (_name, prefix, format) => {
    const r = input({ messages: [user([{ type: 'image_url', image_url: { url: `${prefix}${PNG_B64}` } }])] });
    expect(r.messages?.[0]?.content?.[0]?.image?.format).toBe(format);
  });

  it('accepts base64 wrapped over several lines', () => {
    const wrapped = `${PNG_B64.slice(0, 40)}\n${PNG_B64.slice(40)}`;
    const r = input({
      messages: [user([{ type: 'image_url', image_url: { url: `data:image/png;base64,${wrapped}` } }])],
    });
    expect(r.messages?.[0]?.content?.[0]?.image?.source?.bytes).toBe(PNG_B64);
  });

  it.each([
    ['https image URL', 'https://example.com/cat.png', 'unsupported_content', /image bytes/],
    ['http image URL', 'http://example.com/cat.png', 'unsupported_content', /image bytes/],
    ['svg data URL', 'data:image/svg+xml;base64,PHN2Zz48L3N2Zz4=', 'unsupported_content', /png, jpeg, gif or webp/],
    ['data URL that is not base64', 'data:image/png,rawbytes', 'unsupported_content', /base64/],
    ['data URL with invalid base64', 'data:image/png;base64,@@@@', 'unsupported_content', /base64/],
    ['data URL with no data', 'data:image/png;base64,', 'invalid_request', /no image data/],
  ])('refuses an image it cannot send: %s', (_name, url, code, message) => {
    const e = rejection({ messages: [user([{ type: 'image_url', image_url: { url } }])] });
    expect(e.status).toBe(400);
    expect(e.type).toBe('invalid_request_error');
    expect(e.code).toBe(code);
    expect(e.param).toBe('messages[0].content[0].image_url.url');
    expect(e.message).toMatch(message);
  });

  it.each([
    ['an image in a system message', { role: 'system', content: [{ type: 'image_url', image_url: { url: 'x' } }] }],
    ['an image in an assistant message', assistant([{ type: 'image_url', image_url: { url: 'x' } }])],
    ['an audio part', user([{ type: 'input_audio', input_audio: { data: 'x', format: 'wav' } }])],
    ['a file part', user([{ type: 'file', file: { file_id: 'f' } }])],
  ])('refuses content Bedrock cannot take through the gateway: %s', (_name, message) => {
    const e = rejection({ messages: [user('Hi'), assistant('ok'), message, user('more')] });
    expect(e.code).toBe('unsupported_content');
    expect(e.param).toBe('messages[2].content[0]');
  });

  it('takes an assistant refusal part as text', () => {
    const r = input({ messages: [user('a'), assistant([{ type: 'refusal', refusal: 'I cannot.' }]), user('b')] });
    expect(r.messages?.[1]).toEqual({ role: 'assistant', content: [{ text: 'I cannot.' }] });
  });

  it.each([
    ['the first message', [assistant('Hello'), user('Hi')], 'messages[0]'],
    [
      'the first after system messages',
      [{ role: 'system', content: 's' }, assistant('Hello'), user('Hi')],
      'messages[1]',
    ],
  ])('refuses a conversation that starts with an assistant message: %s', (_name, messages, param) => {
    const e = rejection({ messages });
    expect(e.status).toBe(400);
    expect(e.param).toBe(param);
    expect(e.message).toMatch(/start with a user message/);
  });

  it('refuses a conversation of system messages only', () => {
    const e = rejection({ messages: [{ role: 'system', content: 's' }] });
    expect(e.status).toBe(400);
    expect(e.message).toMatch(/no user message/);
  });

  it.each([
    ['an empty user message', [user('')], 'messages[0]'],
    ['a whitespace-only user message', [user(' \n ')], 'messages[0]'],
    ['an assistant message without content', [user('a'), { role: 'assistant' }, user('b')], 'messages[1]'],
    ['blank parts only', [user([{ type: 'text', text: '' }])], 'messages[0]'],
    ['merged messages all blank', [user('a'), assistant(''), assistant(null), user('b')], 'messages[1] to messages[2]'],
  ])('refuses a message left with no content: %s', (_name, messages, which) => {
    const e = rejection({ messages });
    expect(e.status).toBe(400);
    expect(e.message).toContain(`${which} has no content`);
  });

  it.each([
    ['a function message', [user('a'), { role: 'function', name: 'f', content: 'r' }], 'messages[1].role'],
    [
      'an assistant message with function_call',
      [user('a'), { role: 'assistant', content: null, function_call: { name: 'f' } }],
      'messages[1].function_call',
    ],
  ])('refuses the deprecated function-calling forms: %s', (_name, messages, param) => {
    const e = rejection({ messages });
    expect(e.status).toBe(400);
    expect(e.code).toBe('unsupported_parameter');
    expect(e.param).toBe(param);
    expect(e.message).toMatch(/deprecated/);
  });

  it.each([
    ['no messages', {}],
    ['an empty messages array', { messages: [] }],
    ['a message that is not an object', { messages: ['hi'] }],
    ['an unknown role', { messages: [{ role: 'robot', content: 'x' }] }],
  ])('refuses malformed messages: %s', (_name, body) => {
    expect(rejection(body).status).toBe(400);
  });
});

describe('toConverseInput: parameters', () => {
  const messages = [user('Hi')];

  it('leaves out inferenceConfig when no parameter is set', () => {
    expect(input({ messages })).not.toHaveProperty('inferenceConfig');
  });

  it.each([
    ['stop as a string', { stop: 'END' }, { stopSequences: ['END'] }],
    ['stop as an array', { stop: ['END', '\n\n'] }, { stopSequences: ['END', '\n\n'] }],
    ['max_tokens alone', { max_tokens: 100 }, { maxTokens: 100 }],
    ['max_completion_tokens alone', { max_completion_tokens: 200 }, { maxTokens: 200 }],
    ['max_completion_tokens over max_tokens', { max_tokens: 100, max_completion_tokens: 200 }, { maxTokens: 200 }],
    [
      'max_completion_tokens over max_tokens, either order',
      { max_completion_tokens: 50, max_tokens: 100 },
      { maxTokens: 50 },
    ],
    ['temperature 1, the most Converse takes', { temperature: 1 }, { temperature: 1 }],
    ['temperature 0', { temperature: 0 }, { temperature: 0 }],
    ['top_p', { top_p: 0.9 }, { topP: 0.9 }],
    [
      'everything together',
      { max_tokens: 10, temperature: 0.5, top_p: 1, stop: ['x'] },
      { maxTokens: 10, temperature: 0.5, topP: 1, stopSequences: ['x'] },
    ],
  ])('maps %s', (_name, params, expected) => {
    expect(input({ messages, ...params }).inferenceConfig).toEqual(expected);
  });

  it.each([
    ['an empty stop array', { stop: [] }],
    ['null parameters', { stop: null, temperature: null, max_tokens: null, top_p: null, seed: null, tools: null }],
  ])('sets no inference parameter for %s', (_name, params) => {
    expect(input({ messages, ...params })).not.toHaveProperty('inferenceConfig');
  });

  it.each([
    ['max_tokens', 0],
    ['max_tokens', -5],
    ['max_tokens', 1.5],
    ['max_tokens', '100'],
    ['max_completion_tokens', 0],
    ['temperature', -0.1],
    // OpenAI allows up to 2; Converse's InferenceConfiguration.temperature is 0 to 1 (botocore).
    ['temperature', 1.7],
    ['temperature', 2.01],
    ['temperature', '0.5'],
    ['temperature', Number.NaN],
    ['top_p', 1.1],
    ['top_p', -1],
    ['stop', ['a', 'b', 'c', 'd', 'e']],
    ['stop', ''],
    ['stop', ['ok', '']],
    ['stop', [1]],
    ['stop', 7],
  ])('refuses %s = %j', (name, value) => {
    const e = rejection({ messages, [name]: value });
    expect(e.status).toBe(400);
    expect(e.type).toBe('invalid_request_error');
    expect(e.param).toBe(name);
  });

  // A value that changes behaviour for each refused field; the first test fails if a field is added without one.
  const REJECTED_SAMPLES: Record<string, unknown> = {
    functions: [{ name: 'f' }],
    function_call: 'auto',
    seed: 42,
    presence_penalty: 0.5,
    frequency_penalty: -0.5,
    logit_bias: { '50256': -100 },
    logprobs: true,
    top_logprobs: 3,
    service_tier: 'flex',
    store: true,
    metadata: { team: 'ml' },
  };

  it('has a sample for every refused field', () => {
    expect(Object.keys(REJECTED_SAMPLES).sort()).toEqual(Object.keys(REJECTED_FIELDS).sort());
  });

  it.each(Object.entries(REJECTED_SAMPLES))('refuses %s with unsupported_parameter', (name, value) => {
    const e = rejection({ messages, [name]: value });
    expect(e.status).toBe(400);
    expect(e.type).toBe('invalid_request_error');
    expect(e.code).toBe('unsupported_parameter');
    expect(e.param).toBe(name);
    expect(e.message).toContain(`${name} is not supported for Bedrock models`);
  });

  it('refuses a JSON response_format together with tools, and an unknown type', () => {
    const tools = [{ type: 'function', function: { name: 'f' } }];
    expect(rejection({ messages, tools, response_format: { type: 'json_object' } }).param).toBe('response_format');
    expect(rejection({ messages, response_format: { type: 'yaml' } }).param).toBe('response_format.type');
    expect(rejection({ messages, response_format: { type: 'json_schema', json_schema: { name: 's' } } }).param).toBe(
      'response_format.json_schema.schema',
    );
  });

  it.each([
    ['response_format text', { response_format: { type: 'text' } }],
    ['presence_penalty 0', { presence_penalty: 0 }],
    ['frequency_penalty 0', { frequency_penalty: 0 }],
    ['logprobs false', { logprobs: false }],
    ['store false', { store: false }],
  ])("accepts OpenAI's default value silently: %s", (_name, params) => {
    expect(input({ messages, ...params })).toEqual({
      messages: [{ role: 'user', content: [{ text: 'Hi' }] }],
    });
  });

  it('refuses a top-level field it does not know', () => {
    const e = rejection({ messages, prediction: { type: 'content', content: 'x' } });
    expect(e.code).toBe('unsupported_parameter');
    expect(e.param).toBe('prediction');
    expect(e.message).toContain('prediction is not supported for Bedrock models');
  });

  it('refuses n other than 1', () => {
    const e = rejection({ messages, n: 2 });
    expect(e.code).toBe('unsupported_parameter');
    expect(e.param).toBe('n');
  });

  it('accepts every mapped field at once and sends only what Converse takes', () => {
    const body: Record<string, unknown> = {
      model: 'claude-haiku',
      messages,
      max_completion_tokens: 20,
      max_tokens: 10,
      temperature: 0.3,
      top_p: 0.8,
      stop: 'x',
      stream: true,
      stream_options: { include_usage: true },
      n: 1,
      user: 'end-user-7',
      tools: [{ type: 'function', function: { name: 'f' } }],
      tool_choice: 'required',
      parallel_tool_calls: true,
      response_format: { type: 'text' },
      reasoning_effort: 'none',
    };
    expect(Object.keys(body).sort()).toEqual(Object.keys(MAPPED_FIELDS).sort());
    expect(input(body)).toEqual({
      messages: [{ role: 'user', content: [{ text: 'Hi' }] }],
      inferenceConfig: { maxTokens: 20, temperature: 0.3, topP: 0.8, stopSequences: ['x'] },
      toolConfig: {
        tools: [{ toolSpec: { name: 'f', inputSchema: { json: { type: 'object', properties: {} } } } }],
        toolChoice: { any: {} },
      },
    });
  });

  it('has no field both mapped and refused', () => {
    const mapped = new Set(Object.keys(MAPPED_FIELDS));
    expect(Object.keys(REJECTED_FIELDS).filter((f) => mapped.has(f))).toEqual([]);
  });
});

const usage = { inputTokens: 12, outputTokens: 3, totalTokens: 15 };

function output(
  stopReason: string,
  content: ConverseCommandOutput['output'] = {
    message: { role: 'assistant', content: [{ text: 'Hello' }] },
  },
): ConverseCommandOutput {
  return {
    output: content,
    stopReason,
    usage,
    metrics: { latencyMs: 100 },
  };
}

describe('fromConverseOutput', () => {
  it('builds a chat.completion with usage', () => {
    const r = fromConverseOutput(output('end_turn'), 'claude-haiku', 'chatcmpl-1', 1_700_000_000);
    expect(r).toEqual({
      body: {
        id: 'chatcmpl-1',
        object: 'chat.completion',
        created: 1_700_000_000,
        model: 'claude-haiku',
        choices: [
          { index: 0, message: { role: 'assistant', content: 'Hello' }, finish_reason: 'stop', logprobs: null },
        ],
        usage: { prompt_tokens: 12, completion_tokens: 3, total_tokens: 15 },
      },
      usage: { promptTokens: 12, completionTokens: 3 },
    });
  });

  it.each([
    ['end_turn', 'stop'],
    ['stop_sequence', 'stop'],
    ['max_tokens', 'length'],
    ['model_context_window_exceeded', 'length'],
    ['content_filtered', 'content_filter'],
    ['guardrail_intervened', 'content_filter'],
    ['tool_use', 'tool_calls'],
    ['malformed_model_output', 'stop'],
    ['malformed_tool_use', 'stop'],
    ['a_reason_added_later', 'stop'],
    ['toString', 'stop'],
  ])('maps stopReason %s to finish_reason %s', (stopReason, finish) => {
    const r = fromConverseOutput(output(stopReason), 'm', 'id', 0);
    expect(r.body.choices[0]?.finish_reason).toBe(finish);
  });

  it('joins the text blocks and leaves out the others', () => {
    const r = fromConverseOutput(
      output('end_turn', {
        message: {
          role: 'assistant',
          content: [
            { reasoningContent: { reasoningText: { text: 'thinking...' } } },
            { text: 'Hello, ' },
            { text: 'world' },
          ],
        },
      }),
      'm',
      'id',
      0,
    );
    expect(r.body.choices[0]?.message.content).toBe('Hello, world');
  });

  it('gives empty content and no usage when Bedrock sent neither', () => {
    const out: ConverseCommandOutput = {
      output: undefined,
      stopReason: 'content_filtered',
      usage: undefined,
      metrics: undefined,
    };
    const r = fromConverseOutput(out, 'm', 'id', 0);
    expect(r.body.choices[0]?.message.content).toBe('');
    expect(r.body.choices[0]?.finish_reason).toBe('content_filter');
    expect(r.body).not.toHaveProperty('usage');
    expect(r).not.toHaveProperty('usage');
  });
});

const STREAM: ConverseStreamOutput[] = [
  { messageStart: { role: 'assistant' } },
  { contentBlockDelta: { contentBlockIndex: 0, delta: { text: 'Hello' } } },
  { contentBlockDelta: { contentBlockIndex: 0, delta: { text: ', ' } } },
  { contentBlockDelta: { contentBlockIndex: 0, delta: { text: 'world' } } },
  { contentBlockStop: { contentBlockIndex: 0 } },
  { messageStop: { stopReason: 'max_tokens' } },
  { metadata: { usage, metrics: { latencyMs: 420 } } },
];

const base = { id: 'chatcmpl-9', object: 'chat.completion.chunk', created: 1_700_000_001, model: 'claude-haiku' };
const choice = (delta: OpenAIChatChunk['choices'][number]['delta'], finish_reason: string | null = null) => ({
  index: 0,
  delta,
  finish_reason,
  logprobs: null,
});

function translate(includeUsage: boolean, events = STREAM) {
  const t = new ConverseStreamTranslator(base.model, base.id, base.created, includeUsage);
  const perEvent = events.map((e) => t.chunks(e));
  return { t, perEvent, chunks: perEvent.flat() };
}

describe('ConverseStreamTranslator', () => {
  it('emits role, content, finish and usage chunks in order when the client asked for usage', () => {
    const { t, perEvent, chunks } = translate(true);
    expect(chunks).toEqual([
      { ...base, choices: [choice({ role: 'assistant', content: '' })], usage: null },
      { ...base, choices: [choice({ content: 'Hello' })], usage: null },
      { ...base, choices: [choice({ content: ', ' })], usage: null },
      { ...base, choices: [choice({ content: 'world' })], usage: null },
      { ...base, choices: [choice({}, 'length')], usage: null },
      { ...base, choices: [], usage: { prompt_tokens: 12, completion_tokens: 3, total_tokens: 15 } },
    ]);
    // contentBlockStop gives nothing; metadata gives exactly the usage chunk.
    expect(perEvent.map((c) => c.length)).toEqual([1, 1, 1, 1, 0, 1, 1]);
    expect(t.usage()).toEqual({ promptTokens: 12, completionTokens: 3 });
    expect(t.finishReason()).toBe('length');
  });

  it('records usage but sends no usage chunk or field when the client did not ask', () => {
    const { t, chunks } = translate(false);
    expect(chunks).toEqual([
      { ...base, choices: [choice({ role: 'assistant', content: '' })] },
      { ...base, choices: [choice({ content: 'Hello' })] },
      { ...base, choices: [choice({ content: ', ' })] },
      { ...base, choices: [choice({ content: 'world' })] },
      { ...base, choices: [choice({}, 'length')] },
    ]);
    for (const c of chunks) expect(c).not.toHaveProperty('usage');
    expect(t.usage()).toEqual({ promptTokens: 12, completionTokens: 3 });
  });

  it('tells when the first content arrived and when the stream finished', () => {
    const t = new ConverseStreamTranslator('m', 'id', 0, false);
    expect(t.firstContentSeen()).toBe(false);
    t.chunks({ messageStart: { role: 'assistant' } });
    t.chunks({ contentBlockDelta: { contentBlockIndex: 0, delta: { text: '' } } });
    expect(t.firstContentSeen()).toBe(false);
    t.chunks({ contentBlockDelta: { contentBlockIndex: 0, delta: { text: 'x' } } });
    expect(t.firstContentSeen()).toBe(true);
    expect(t.finishReason()).toBeUndefined();
    expect(t.usage()).toBeUndefined();
    t.chunks({ messageStop: { stopReason: 'end_turn' } });
    expect(t.finishReason()).toBe('stop');
  });

  it('sends nothing for empty text or non-tool block-start events', () => {
    const t = new ConverseStreamTranslator('m', 'id', 0, true);
    t.chunks({ messageStart: { role: 'assistant' } });
    expect(t.chunks({ contentBlockDelta: { contentBlockIndex: 0, delta: { text: '' } } })).toEqual([]);
    expect(t.chunks({ contentBlockStart: { contentBlockIndex: 1, start: { image: { format: 'png' } } } })).toEqual([]);
  });

  it('sends the role chunk first even when messageStart is missing', () => {
    const { chunks } = translate(false, STREAM.slice(1));
    expect(chunks[0]?.choices[0]?.delta).toEqual({ role: 'assistant', content: '' });
    expect(chunks[1]?.choices[0]?.delta).toEqual({ content: 'Hello' });
    expect(chunks.filter((c) => c.choices[0]?.delta.role === 'assistant')).toHaveLength(1);
  });

  it('sends no usage chunk when metadata has no token counts', () => {
    const t = new ConverseStreamTranslator('m', 'id', 0, true);
    expect(t.chunks({ metadata: { usage: undefined, metrics: { latencyMs: 1 } } })).toEqual([]);
    expect(t.usage()).toBeUndefined();
  });

  it('passes exception messages on to the relay, which maps them through the Bedrock error table', () => {
    // Exceptions arrive as exception messages of the event stream (proxy/upstreams/event-stream.ts),
    // never as events: the translator has nothing to say of them (crds/providers/bedrock.test.ts).
    const t = new ConverseStreamTranslator('m', 'id', 0, false);
    expect(t.chunks({})).toEqual([]);
  });
});

describe('ConverseStreamAggregator', () => {
  it('gives the same answer as fromConverseOutput for the same content', () => {
    const agg = new ConverseStreamAggregator();
    for (const e of STREAM) agg.push(e);
    const expected = fromConverseOutput(
      output('max_tokens', { message: { role: 'assistant', content: [{ text: 'Hello, world' }] } }),
      'claude-haiku',
      'chatcmpl-9',
      5,
    );
    expect(agg.result('claude-haiku', 'chatcmpl-9', 5)).toEqual(expected);
    expect(expected.body.choices[0]?.message.content).toBe('Hello, world');
    expect(expected.body.choices[0]?.finish_reason).toBe('length');
    expect(agg.usage()).toEqual({ promptTokens: 12, completionTokens: 3 });
    expect(agg.finishReason()).toBe('length');
  });

  it('joins several blocks in block order', () => {
    const agg = new ConverseStreamAggregator();
    const events: ConverseStreamOutput[] = [
      { messageStart: { role: 'assistant' } },
      { contentBlockDelta: { contentBlockIndex: 1, delta: { text: 'second' } } },
      { contentBlockDelta: { contentBlockIndex: 0, delta: { text: 'first ' } } },
      { contentBlockDelta: { contentBlockIndex: 0, delta: { reasoningContent: { text: 'hidden' } } } },
      { messageStop: { stopReason: 'end_turn' } },
    ];
    for (const e of events) agg.push(e);
    const r = agg.result('m', 'id', 0);
    expect(r.body.choices[0]?.message.content).toBe('first second');
    expect(r).not.toHaveProperty('usage');
    expect(r.body).not.toHaveProperty('usage');
  });

  it('has no finish reason before messageStop', () => {
    const agg = new ConverseStreamAggregator();
    agg.push({ messageStart: { role: 'assistant' } });
    expect(agg.finishReason()).toBeUndefined();
  });
});

describe('tool calling, OpenAI <-> Converse', () => {
  const weather = {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'Weather in a city',
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
    },
  };
  const call = { id: 'tooluse_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } };
  const second = { id: 'tooluse_2', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } };

  it('sends tools as toolSpecs and each tool_choice as Converse has it', () => {
    const base = { messages: [user('Weather in Paris?')], tools: [weather] };
    const spec = {
      toolSpec: {
        name: 'get_weather',
        description: 'Weather in a city',
        inputSchema: { json: weather.function.parameters },
      },
    };
    expect(input(base).toolConfig).toEqual({ tools: [spec] });
    expect(input({ ...base, tool_choice: 'auto' }).toolConfig).toEqual({ tools: [spec] });
    expect(input({ ...base, tool_choice: 'required' }).toolConfig?.toolChoice).toEqual({ any: {} });
    expect(
      input({ ...base, tool_choice: { type: 'function', function: { name: 'get_weather' } } }).toolConfig?.toolChoice,
    ).toEqual({ tool: { name: 'get_weather' } });
    // none: the model is not given the tools at all (Converse has no "none").
    expect(input({ ...base, tool_choice: 'none' }).toolConfig).toBeUndefined();
  });

  it('sends a tool loop: assistant tool_calls as toolUse, parallel tool results as one user turn of toolResults', () => {
    const r = input({
      tools: [weather],
      messages: [
        user('Weather in Paris and Oslo?'),
        { role: 'assistant', content: null, tool_calls: [call, second] },
        { role: 'tool', tool_call_id: 'tooluse_1', content: '18 C' },
        { role: 'tool', tool_call_id: 'tooluse_2', content: [{ type: 'text', text: '4 C' }] },
      ],
    });
    expect(r.messages).toEqual([
      { role: 'user', content: [{ text: 'Weather in Paris and Oslo?' }] },
      {
        role: 'assistant',
        content: [
          { toolUse: { toolUseId: 'tooluse_1', name: 'get_weather', input: { city: 'Paris' } } },
          { toolUse: { toolUseId: 'tooluse_2', name: 'get_weather', input: { city: 'Oslo' } } },
        ],
      },
      {
        role: 'user',
        content: [
          { toolResult: { toolUseId: 'tooluse_1', content: [{ text: '18 C' }] } },
          { toolResult: { toolUseId: 'tooluse_2', content: [{ text: '4 C' }] } },
        ],
      },
    ]);
  });

  it.each([
    ['tools that are not functions', { tools: [{ type: 'retrieval' }] }, 'tools[0]'],
    [
      'a tool name Converse refuses',
      { tools: [{ type: 'function', function: { name: 'get weather' } }] },
      'tools[0].function.name',
    ],
    [
      'tool_choice naming no tool',
      { tools: [weather], tool_choice: { type: 'function', function: { name: 'x' } } },
      'tool_choice',
    ],
    ['tool_choice without tools', { tool_choice: 'required' }, 'tool_choice'],
    [
      'arguments that are not JSON',
      {
        tools: [weather],
        messages: [
          user('a'),
          { role: 'assistant', tool_calls: [{ ...call, function: { name: 'get_weather', arguments: '{city' } }] },
        ],
      },
      'messages[1].tool_calls[0].function.arguments',
    ],
    [
      'a tool message without tool_call_id',
      {
        tools: [weather],
        messages: [user('a'), { role: 'assistant', tool_calls: [call] }, { role: 'tool', content: 'x' }],
      },
      'messages[2].tool_call_id',
    ],
    [
      'tool history without tools',
      {
        messages: [
          user('a'),
          { role: 'assistant', tool_calls: [call] },
          { role: 'tool', tool_call_id: 'tooluse_1', content: 'x' },
        ],
      },
      'tools',
    ],
    [
      'tool_choice none with tool history',
      {
        tools: [weather],
        tool_choice: 'none',
        messages: [
          user('a'),
          { role: 'assistant', tool_calls: [call] },
          { role: 'tool', tool_call_id: 'tooluse_1', content: 'x' },
        ],
      },
      'tool_choice',
    ],
    ['parallel_tool_calls false', { tools: [weather], parallel_tool_calls: false }, 'parallel_tool_calls'],
  ])('refuses %s with 400 naming the field', (_name, body, param) => {
    const e = rejection({ messages: [user('a')], ...body });
    expect(e.status).toBe(400);
    expect(e.param).toBe(param);
  });

  it('answers toolUse blocks as tool_calls with content null and finish_reason tool_calls', () => {
    const r = fromConverseOutput(
      {
        stopReason: 'tool_use',
        usage: { inputTokens: 20, outputTokens: 9, totalTokens: 29 },
        metrics: { latencyMs: 1 },
        output: {
          message: {
            role: 'assistant',
            content: [{ toolUse: { toolUseId: 'tooluse_1', name: 'get_weather', input: { city: 'Paris' } } }],
          },
        },
      },
      'm',
      'id',
      0,
    );
    expect(r.body.choices[0]).toEqual({
      index: 0,
      message: { role: 'assistant', content: null, tool_calls: [call] },
      finish_reason: 'tool_calls',
      logprobs: null,
    });
  });

  const toolStream: ConverseStreamOutput[] = [
    { messageStart: { role: 'assistant' } },
    { contentBlockDelta: { contentBlockIndex: 0, delta: { text: 'Checking.' } } },
    { contentBlockStop: { contentBlockIndex: 0 } },
    {
      contentBlockStart: { contentBlockIndex: 1, start: { toolUse: { toolUseId: 'tooluse_1', name: 'get_weather' } } },
    },
    { contentBlockDelta: { contentBlockIndex: 1, delta: { toolUse: { input: '{"city":' } } } },
    { contentBlockDelta: { contentBlockIndex: 1, delta: { toolUse: { input: '"Paris"}' } } } },
    { contentBlockStop: { contentBlockIndex: 1 } },
    {
      contentBlockStart: { contentBlockIndex: 2, start: { toolUse: { toolUseId: 'tooluse_2', name: 'get_weather' } } },
    },
    { contentBlockDelta: { contentBlockIndex: 2, delta: { toolUse: { input: '{"city":"Oslo"}' } } } },
    { contentBlockStop: { contentBlockIndex: 2 } },
    { messageStop: { stopReason: 'tool_use' } },
    { metadata: { usage: { inputTokens: 20, outputTokens: 30, totalTokens: 50 }, metrics: { latencyMs: 1 } } },
  ];

  it('streams tool-use blocks as tool_calls deltas: id and name first, then the argument text, by tool index', () => {
    const t = new ConverseStreamTranslator('m', 'id', 0, false);
    const deltas = toolStream.flatMap((e) => t.chunks(e)).map((c) => c.choices[0]?.delta);
    expect(deltas).toEqual([
      { role: 'assistant', content: '' },
      { content: 'Checking.' },
      {
        tool_calls: [{ index: 0, id: 'tooluse_1', type: 'function', function: { name: 'get_weather', arguments: '' } }],
      },
      { tool_calls: [{ index: 0, function: { arguments: '{"city":' } }] },
      { tool_calls: [{ index: 0, function: { arguments: '"Paris"}' } }] },
      {
        tool_calls: [{ index: 1, id: 'tooluse_2', type: 'function', function: { name: 'get_weather', arguments: '' } }],
      },
      { tool_calls: [{ index: 1, function: { arguments: '{"city":"Oslo"}' } }] },
      {},
    ]);
    expect(t.finishReason()).toBe('tool_calls');
  });

  it('aggregates a tool-use stream into the answer Converse would give (non-streaming callers)', () => {
    const a = new ConverseStreamAggregator();
    for (const e of toolStream) a.push(e);
    expect(a.result('m', 'id', 0).body.choices[0]).toEqual({
      index: 0,
      message: { role: 'assistant', content: 'Checking.', tool_calls: [call, second] },
      finish_reason: 'tool_calls',
      logprobs: null,
    });
  });
});

describe('prompt-cache tokens', () => {
  it('count in prompt_tokens, cache reads in prompt_tokens_details (they were dropped before)', () => {
    const r = fromConverseOutput(
      {
        stopReason: 'end_turn',
        usage: {
          inputTokens: 10,
          outputTokens: 5,
          cacheReadInputTokens: 1500,
          cacheWriteInputTokens: 20,
          totalTokens: 1535,
        },
        metrics: { latencyMs: 1 },
        output: { message: { role: 'assistant', content: [{ text: 'ok' }] } },
      },
      'm',
      'id',
      0,
    );
    expect(r.body.usage).toEqual({
      prompt_tokens: 1530,
      completion_tokens: 5,
      total_tokens: 1535,
      prompt_tokens_details: { cached_tokens: 1500 },
    });
    expect(r.usage).toEqual({ promptTokens: 1530, completionTokens: 5, cachedTokens: 1500, cacheWriteTokens: 20 });
    const t = new ConverseStreamTranslator('m', 'id', 0, true);
    const [chunk] = t.chunks({
      metadata: {
        usage: { inputTokens: 10, outputTokens: 5, cacheReadInputTokens: 1500, totalTokens: 1515 },
        metrics: { latencyMs: 1 },
      },
    });
    expect(chunk?.usage).toEqual({
      prompt_tokens: 1510,
      completion_tokens: 5,
      total_tokens: 1515,
      prompt_tokens_details: { cached_tokens: 1500 },
    });
  });
});

describe('JSON output modes, as a forced tool', () => {
  const schema = { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] };

  it('sends json_object and json_schema as a tool the model must call', () => {
    expect(input({ messages: [user('a')], response_format: { type: 'json_object' } }).toolConfig).toEqual({
      tools: [
        {
          toolSpec: {
            name: JSON_TOOL,
            description: 'Give the answer as a JSON object.',
            inputSchema: { json: { type: 'object' } },
          },
        },
      ],
      toolChoice: { tool: { name: JSON_TOOL } },
    });
    const withSchema = input({
      messages: [user('a')],
      response_format: { type: 'json_schema', json_schema: { name: 'person', schema } },
    });
    const tool = withSchema.toolConfig?.tools?.[0];
    expect(tool && 'toolSpec' in tool ? tool.toolSpec.inputSchema : undefined).toEqual({ json: schema });
    expect(jsonMode(withSchema)).toBe(true);
    expect(jsonMode(input({ messages: [user('a')] }))).toBe(false);
  });

  const forced = { toolUse: { toolUseId: 't1', name: JSON_TOOL, input: { name: 'Ada' } } };

  it('answers the forced call as JSON content with finish_reason stop, whole, aggregated and streamed', () => {
    const whole = fromConverseOutput(
      {
        stopReason: 'tool_use',
        usage: { inputTokens: 3, outputTokens: 4, totalTokens: 7 },
        metrics: { latencyMs: 1 },
        output: { message: { role: 'assistant', content: [forced] } },
      },
      'm',
      'id',
      0,
      true,
    );
    expect(whole.body.choices[0]).toEqual({
      index: 0,
      message: { role: 'assistant', content: '{"name":"Ada"}' },
      finish_reason: 'stop',
      logprobs: null,
    });
    const events: ConverseStreamOutput[] = [
      { messageStart: { role: 'assistant' } },
      { contentBlockStart: { contentBlockIndex: 0, start: { toolUse: { toolUseId: 't1', name: JSON_TOOL } } } },
      { contentBlockDelta: { contentBlockIndex: 0, delta: { toolUse: { input: '{"name":' } } } },
      { contentBlockDelta: { contentBlockIndex: 0, delta: { toolUse: { input: '"Ada"}' } } } },
      { contentBlockStop: { contentBlockIndex: 0 } },
      { messageStop: { stopReason: 'tool_use' } },
      { metadata: { usage: { inputTokens: 3, outputTokens: 4, totalTokens: 7 }, metrics: { latencyMs: 1 } } },
    ];
    const a = new ConverseStreamAggregator();
    for (const e of events) a.push(e);
    expect(a.result('m', 'id', 0, true).body.choices[0]?.message).toEqual({
      role: 'assistant',
      content: '{"name":"Ada"}',
    });
    const t = new ConverseStreamTranslator('m', 'id', 0, false, true);
    const deltas = events.flatMap((e) => t.chunks(e)).map((c) => [c.choices[0]?.delta, c.choices[0]?.finish_reason]);
    expect(deltas).toEqual([
      [{ role: 'assistant', content: '' }, null],
      [{ content: '{"name":' }, null],
      [{ content: '"Ada"}' }, null],
      [{}, 'stop'],
    ]);
  });
});

describe('reasoning, as Anthropic extended thinking', () => {
  it('sends reasoning_effort as a thinking budget, for Anthropic models only', () => {
    expect(input({ messages: [user('a')], reasoning_effort: 'medium' }).additionalModelRequestFields).toEqual({
      thinking: { type: 'enabled', budget_tokens: 2048 },
    });
    const profile = toConverseInput('us.anthropic.claude-3-7-sonnet-20250219-v1:0', {
      messages: [user('a')],
      reasoning_effort: 'high',
      max_tokens: 8000,
    });
    expect(profile instanceof ProxyError ? profile.message : profile.additionalModelRequestFields).toEqual({
      thinking: { type: 'enabled', budget_tokens: 4096 },
    });
    expect(input({ messages: [user('a')], reasoning_effort: 'none' })).not.toHaveProperty(
      'additionalModelRequestFields',
    );
    const nova = toConverseInput('amazon.nova-lite-v1:0', { messages: [user('a')], reasoning_effort: 'low' });
    expect(nova instanceof ProxyError && [nova.status, nova.code, nova.param]).toEqual([
      400,
      'unsupported_parameter',
      'reasoning_effort',
    ]);
  });

  it.each([
    ['max_tokens within the budget', { reasoning_effort: 'low', max_tokens: 1024 }, 'max_tokens'],
    ['a temperature other than 1', { reasoning_effort: 'low', temperature: 0.2 }, 'temperature'],
    ['an unknown effort', { reasoning_effort: 'max' }, 'reasoning_effort'],
  ])('refuses %s with 400 naming the field', (_name, params, param) => {
    expect(rejection({ messages: [user('a')], ...params }).param).toBe(param);
  });

  it('answers reasoning blocks as reasoning_content, whole, aggregated and streamed', () => {
    const whole = fromConverseOutput(
      {
        stopReason: 'end_turn',
        usage: { inputTokens: 3, outputTokens: 9, totalTokens: 12 },
        metrics: { latencyMs: 1 },
        output: {
          message: {
            role: 'assistant',
            content: [{ reasoningContent: { reasoningText: { text: 'Think. ', signature: 's' } } }, { text: '42' }],
          },
        },
      },
      'm',
      'id',
      0,
    );
    expect(whole.body.choices[0]?.message).toEqual({
      role: 'assistant',
      content: '42',
      reasoning_content: 'Think. ',
      thinking_blocks: [{ type: 'thinking', thinking: 'Think. ', signature: 's' }],
    });
    const events: ConverseStreamOutput[] = [
      { messageStart: { role: 'assistant' } },
      { contentBlockDelta: { contentBlockIndex: 0, delta: { reasoningContent: { text: 'Think' } } } },
      { contentBlockDelta: { contentBlockIndex: 0, delta: { reasoningContent: { text: '. ' } } } },
      { contentBlockDelta: { contentBlockIndex: 0, delta: { reasoningContent: { signature: 'sig' } } } },
      { contentBlockStop: { contentBlockIndex: 0 } },
      { contentBlockDelta: { contentBlockIndex: 1, delta: { text: '42' } } },
      { messageStop: { stopReason: 'end_turn' } },
    ];
    const t = new ConverseStreamTranslator('m', 'id', 0, false);
    expect(events.flatMap((e) => t.chunks(e)).map((c) => c.choices[0]?.delta)).toEqual([
      { role: 'assistant', content: '' },
      { reasoning_content: 'Think' },
      { reasoning_content: '. ' },
      { thinking_blocks: [{ type: 'thinking', thinking: 'Think. ', signature: 'sig' }] },
      { content: '42' },
      {},
    ]);
    const a = new ConverseStreamAggregator();
    for (const e of events) a.push(e);
    expect(a.result('m', 'id', 0).body.choices[0]?.message).toEqual({
      role: 'assistant',
      content: '42',
      reasoning_content: 'Think. ',
      thinking_blocks: [{ type: 'thinking', thinking: 'Think. ', signature: 'sig' }],
    });
  });
});

describe('prompt caching, cache_control as cachePoint', () => {
  const cachePoint = { cachePoint: { type: 'default' } };
  it('puts a cachePoint after each marked system part, content part and tool', () => {
    const input = toConverseInput('anthropic.claude-3-7-sonnet-20250219-v1:0', {
      messages: [
        { role: 'system', content: [{ type: 'text', text: 'long rules', cache_control: { type: 'ephemeral' } }] },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'a long document', cache_control: { type: 'ephemeral' } },
            { type: 'text', text: 'the question' },
          ],
        },
      ],
      tools: [
        {
          type: 'function',
          function: { name: 'lookup', parameters: { type: 'object' } },
          cache_control: { type: 'ephemeral' },
        },
      ],
    });
    if (input instanceof ProxyError) throw input;
    expect(input.system).toEqual([{ text: 'long rules' }, cachePoint]);
    expect(input.messages?.[0]?.content).toEqual([{ text: 'a long document' }, cachePoint, { text: 'the question' }]);
    expect(input.toolConfig?.tools?.[1]).toEqual(cachePoint);
  });

  it('refuses a cache_control that is not ephemeral, naming where', () => {
    const err = toConverseInput('m', {
      messages: [{ role: 'user', content: [{ type: 'text', text: 'x', cache_control: { type: 'persistent' } }] }],
    });
    expect(err).toBeInstanceOf(ProxyError);
    expect((err as ProxyError).param).toBe('messages[0].content[0].cache_control');
  });
});

describe('per-model limits', () => {
  const messages = [{ role: 'user', content: 'hi' }];
  it.each([
    [
      'max_tokens above the model maximum',
      'amazon.nova-lite-v1:0',
      { max_tokens: 10_001 },
      'max_tokens',
      /maximum of 10000/,
    ],
    ['Llama max_gen_len', 'us.meta.llama3-1-8b-instruct-v1:0', { max_tokens: 4096 }, 'max_tokens', /maximum of 2048/],
    [
      'temperature with top_p on Claude 4.5',
      'global.anthropic.claude-sonnet-4-5-20250929-v1:0',
      { temperature: 0.5, top_p: 0.9 },
      'top_p',
      /temperature or top_p, not both/,
    ],
  ] as const)('refuses %s with a 400 before the upstream', (_name, model, params, param, message) => {
    const err = toConverseInput(model, { messages, ...params });
    expect(err).toBeInstanceOf(ProxyError);
    expect((err as ProxyError).status).toBe(400);
    expect((err as ProxyError).param).toBe(param);
    expect((err as ProxyError).message).toMatch(message);
  });

  it('checks an application profile against the model behind it', () => {
    const err = toConverseInput(
      'a1b2c3d4e5f6',
      { messages, max_tokens: 5000 },
      { baseModel: 'anthropic.claude-3-haiku-20240307-v1:0' },
    );
    expect((err as ProxyError).message).toMatch(/maximum of 4096/);
    expect(toConverseInput('a1b2c3d4e5f6', { messages, max_tokens: 5000 })).not.toBeInstanceOf(ProxyError);
    expect(
      toConverseInput('amazon.nova-lite-v1:0', { messages, max_tokens: 10_000, temperature: 0.5, top_p: 0.5 }),
    ).not.toBeInstanceOf(ProxyError);
  });
});

describe('signed reasoning, round-tripped as thinking_blocks', () => {
  const thinking = { type: 'thinking', thinking: 'Let me check the clock.', signature: 'c2lnbmVk' };
  const turn = [
    { role: 'user', content: 'What time is it?' },
    {
      role: 'assistant',
      content: null,
      tool_calls: [{ id: 't1', type: 'function', function: { name: 'clock', arguments: '{}' } }],
      thinking_blocks: [thinking, { type: 'redacted_thinking', data: 'AQID' }],
    },
    { role: 'tool', tool_call_id: 't1', content: '12:00' },
  ];
  const tools = [{ type: 'function', function: { name: 'clock', parameters: { type: 'object' } } }];

  it('puts an assistant turn’s thinking blocks first, as reasoningContent, for Anthropic models', () => {
    const r = toConverseInput(MODEL_ID, { messages: turn, tools });
    if (r instanceof ProxyError) throw r;
    const content = r.messages?.[1]?.content ?? [];
    expect(content[0]).toEqual({
      reasoningContent: { reasoningText: { text: 'Let me check the clock.', signature: 'c2lnbmVk' } },
    });
    expect(content[1]).toEqual({ reasoningContent: { redactedContent: 'AQID' } });
    expect(content[2]?.toolUse?.toolUseId).toBe('t1');
  });

  it('leaves them out for other families (a fallback cannot read another model’s signed reasoning)', () => {
    const r = toConverseInput('amazon.nova-lite-v1:0', { messages: turn, tools });
    if (r instanceof ProxyError) throw r;
    expect(r.messages?.[1]?.content?.some((b) => b.reasoningContent !== undefined)).toBe(false);
  });

  it('refuses malformed blocks and blocks on other roles, naming them', () => {
    const bad = structuredClone(turn) as Array<Record<string, unknown>>;
    (bad[1] as { thinking_blocks: unknown[] }).thinking_blocks = [{ type: 'thinking', thinking: 'x' }];
    expect(toConverseInput(MODEL_ID, { messages: bad, tools })).toMatchObject({
      status: 400,
      param: 'messages[1].thinking_blocks[0]',
    });
    expect(
      toConverseInput(MODEL_ID, { messages: [{ role: 'user', content: 'hi', thinking_blocks: [thinking] }] }),
    ).toMatchObject({ status: 400, param: 'messages[0].thinking_blocks' });
  });

  it('returns them in answers, whole in a stream once signed, and aggregated', () => {
    const out = fromConverseOutput(
      {
        stopReason: 'end_turn',
        usage: { inputTokens: 1, outputTokens: 1, totalTokens: 2 },
        metrics: { latencyMs: 1 },
        output: {
          message: {
            role: 'assistant',
            content: [{ reasoningContent: { reasoningText: { text: 'Hm.', signature: 'sig' } } }, { text: 'ok' }],
          },
        },
      },
      'm',
      'id',
      0,
    );
    expect(out.body.choices[0]?.message.thinking_blocks).toEqual([
      { type: 'thinking', thinking: 'Hm.', signature: 'sig' },
    ]);

    const events = [
      { contentBlockDelta: { contentBlockIndex: 0, delta: { reasoningContent: { text: 'H' } } } },
      { contentBlockDelta: { contentBlockIndex: 0, delta: { reasoningContent: { text: 'm.' } } } },
      { contentBlockDelta: { contentBlockIndex: 0, delta: { reasoningContent: { signature: 'sig' } } } },
      { contentBlockDelta: { contentBlockIndex: 1, delta: { text: 'ok' } } },
    ];
    const t = new ConverseStreamTranslator('m', 'id', 0, false);
    const deltas = events.flatMap((e) => t.chunks(e)).map((c) => c.choices[0]?.delta);
    expect(deltas).toContainEqual({ thinking_blocks: [{ type: 'thinking', thinking: 'Hm.', signature: 'sig' }] });
    const a = new ConverseStreamAggregator();
    for (const e of events) a.push(e);
    a.push({ messageStop: { stopReason: 'end_turn' } });
    expect(a.result('m', 'id', 0).body.choices[0]?.message).toMatchObject({
      content: 'ok',
      reasoning_content: 'Hm.',
      thinking_blocks: [{ type: 'thinking', thinking: 'Hm.', signature: 'sig' }],
    });
  });
});
