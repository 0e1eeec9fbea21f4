import type { MessageCreateParamsNonStreaming } from '@anthropic-ai/sdk/resources/messages';
import OpenAI from 'openai';
import type { ChatCompletion, ChatCompletionCreateParamsNonStreaming } from 'openai/resources/chat/completions';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { DIALECTS } from '../endpoints/dialects.js';
import { ProxyError } from '../endpoints/errors.js';
import { type StreamBody, webStream } from '../upstreams/chunk-source.js';
import { openaiChatToAnthropicMessages as translator } from './openai-chat_anthropic-messages.js';
import { translatorFor } from './table.js';
import { refusalOf, translationOf } from './translation-probe.js';

type Json = Record<string, unknown>;

const MODEL = 'claude-sonnet-4-5';
const base = (extra: Json = {}): Json => ({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], ...extra });
/** What base() becomes: Anthropic's required max_tokens, the text as a block. */
const translatedBase = (extra: Json = {}): Json => ({
  model: MODEL,
  max_tokens: 4096,
  messages: [{ role: 'user', content: [{ type: 'text', text: 'hi' }] }],
  stream: false,
  ...extra,
});

const begin = (body: Json, stream = false) => translationOf(translator, body, stream);
const refusal = (body: Json) => refusalOf(translator, body);

const PNG = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==';
const PDF = 'JVBERi0xLjQKJcfsj6IKMSAwIG9iago8PD4+CmVuZG9iagp0cmFpbGVyCjw8Pj4KJSVFT0YK';
const WEATHER_SCHEMA = { type: 'object', properties: { location: { type: 'string' } }, required: ['location'] };
const WEATHER_FN = {
  type: 'function',
  function: { name: 'get_weather', description: 'The weather at a place', parameters: WEATHER_SCHEMA },
};
const WEATHER_TOOL = { name: 'get_weather', description: 'The weather at a place', input_schema: WEATHER_SCHEMA };

describe('openai-chat -> anthropic-messages: the table', () => {
  it('is the translator for chat-completions callers of Claude at Anthropic and on Vertex AI', () => {
    expect(translatorFor('openai-chat', 'anthropic-messages')).toBe(translator);
  });
});

describe('openai-chat -> anthropic-messages: requests', () => {
  const cases: Array<[string, Json, Json]> = [
    ['the least a chat request has: max_tokens 4096, which Anthropic requires', base(), translatedBase()],
    [
      'system and developer messages, wherever they are, as system text blocks; blank ones left out, cache_control kept; the user turns around them merged',
      base({
        messages: [
          { role: 'system', content: 'You are terse.' },
          {
            role: 'developer',
            content: [
              { type: 'text', text: 'Answer in French.' },
              { type: 'text', text: 'A long, cached preamble.', cache_control: { type: 'ephemeral' } },
            ],
          },
          { role: 'user', content: 'hi' },
          { role: 'system', content: '  ' },
          { role: 'user', content: [{ type: 'text', text: 'again' }] },
        ],
      }),
      translatedBase({
        system: [
          { type: 'text', text: 'You are terse.' },
          { type: 'text', text: 'Answer in French.' },
          { type: 'text', text: 'A long, cached preamble.', cache_control: { type: 'ephemeral' } },
        ],
        messages: [
          {
            role: 'user',
            content: [
              { type: 'text', text: 'hi' },
              { type: 'text', text: 'again' },
            ],
          },
        ],
      }),
    ],
    [
      'consecutive assistant messages merged, an empty one left out, a final one (a prefill) without its trailing whitespace',
      base({
        messages: [
          { role: 'user', content: 'Count to three.' },
          { role: 'assistant', content: 'One,' },
          { role: 'assistant', content: '' },
          { role: 'assistant', content: [{ type: 'text', text: 'two, ' }] },
        ],
      }),
      translatedBase({
        messages: [
          { role: 'user', content: [{ type: 'text', text: 'Count to three.' }] },
          {
            role: 'assistant',
            content: [
              { type: 'text', text: 'One,' },
              { type: 'text', text: 'two,' },
            ],
          },
        ],
      }),
    ],
    [
      'the stricter of max_completion_tokens and max_tokens; temperature clamped to 0..1; top_p; stop; user as metadata.user_id',
      base({ max_tokens: 500, max_completion_tokens: 300, temperature: 1.6, top_p: 0.9, stop: 'END', user: 'u-1' }),
      translatedBase({
        max_tokens: 300,
        temperature: 1,
        top_p: 0.9,
        stop_sequences: ['END'],
        metadata: { user_id: 'u-1' },
      }),
    ],
    [
      'stop as an array (empty ones left out), safety_identifier as the user id, hints and no-op values dropped',
      base({
        stop: ['A', '', 'B'],
        safety_identifier: 'hash-9',
        stream_options: { include_usage: true },
        metadata: { project: 'x' },
        prompt_cache_key: 'k',
        verbosity: 'low',
        presence_penalty: 0,
        frequency_penalty: 0,
        logit_bias: {},
        store: false,
        service_tier: 'auto',
        n: 1,
        logprobs: false,
        modalities: ['text'],
      }),
      translatedBase({ stop_sequences: ['A', 'B'], metadata: { user_id: 'hash-9' } }),
    ],
    [
      'function tools as Anthropic tools (a function without parameters gets an empty object schema); strict dropped',
      base({
        tools: [
          { ...WEATHER_FN, function: { ...WEATHER_FN.function, strict: true } },
          { type: 'function', function: { name: 'now' }, cache_control: { type: 'ephemeral', ttl: '1h' } },
        ],
        tool_choice: 'auto',
      }),
      translatedBase({
        tools: [
          WEATHER_TOOL,
          {
            name: 'now',
            input_schema: { type: 'object', properties: {} },
            cache_control: { type: 'ephemeral', ttl: '1h' },
          },
        ],
        tool_choice: { type: 'auto' },
      }),
    ],
    [
      'tool calls as tool_use blocks (arguments parsed, none as {}), tool messages as tool_result blocks leading the next user turn',
      base({
        tools: [WEATHER_FN],
        messages: [
          { role: 'user', content: 'Weather in SF and NYC?' },
          {
            role: 'assistant',
            content: 'Checking.',
            tool_calls: [
              { id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"location":"SF"}' } },
              { id: 'call_2', type: 'function', function: { name: 'get_weather', arguments: '' } },
            ],
          },
          { role: 'tool', tool_call_id: 'call_1', content: '18°C' },
          { role: 'tool', tool_call_id: 'call_2', content: [{ type: 'text', text: 'a location is required' }] },
          { role: 'user', content: 'Thanks.' },
        ],
      }),
      translatedBase({
        tools: [WEATHER_TOOL],
        messages: [
          { role: 'user', content: [{ type: 'text', text: 'Weather in SF and NYC?' }] },
          {
            role: 'assistant',
            content: [
              { type: 'text', text: 'Checking.' },
              { type: 'tool_use', id: 'call_1', name: 'get_weather', input: { location: 'SF' } },
              { type: 'tool_use', id: 'call_2', name: 'get_weather', input: {} },
            ],
          },
          {
            role: 'user',
            content: [
              { type: 'tool_result', tool_use_id: 'call_1', content: '18°C' },
              {
                type: 'tool_result',
                tool_use_id: 'call_2',
                content: [{ type: 'text', text: 'a location is required' }],
              },
              { type: 'text', text: 'Thanks.' },
            ],
          },
        ],
      }),
    ],
    [
      'images: data: URLs as base64 blocks (jpg as jpeg, MIME line breaks removed), http(s) URLs as URL blocks; a PDF file as a document',
      base({
        messages: [
          {
            role: 'user',
            content: [
              { type: 'text', text: 'What are these?' },
              { type: 'image_url', image_url: { url: `data:image/png;base64,${PNG}` } },
              { type: 'image_url', image_url: { url: 'https://example.com/cat.jpg', detail: 'high' } },
              { type: 'image_url', image_url: { url: `data:image/jpg;base64,${PNG.slice(0, 20)}\n${PNG.slice(20)}` } },
              { type: 'file', file: { filename: 'a.pdf', file_data: `data:application/pdf;base64,${PDF}` } },
            ],
          },
        ],
      }),
      translatedBase({
        messages: [
          {
            role: 'user',
            content: [
              { type: 'text', text: 'What are these?' },
              { type: 'image', source: { type: 'base64', media_type: 'image/png', data: PNG } },
              { type: 'image', source: { type: 'url', url: 'https://example.com/cat.jpg' } },
              { type: 'image', source: { type: 'base64', media_type: 'image/jpeg', data: PNG } },
              { type: 'document', source: { type: 'base64', media_type: 'application/pdf', data: PDF } },
            ],
          },
        ],
      }),
    ],
    [
      'json_object: an instruction at the end of the system prompt, not a refusal',
      base({
        messages: [{ role: 'system', content: 'Be brief.' }, ...(base().messages as Json[])],
        response_format: { type: 'json_object' },
      }),
      translatedBase({
        system: [
          { type: 'text', text: 'Be brief.' },
          {
            type: 'text',
            text: 'Answer with a single valid JSON object. Reply with the JSON only: no other text, no Markdown code fences.',
          },
        ],
      }),
    ],
    ['response_format text: nothing to add', base({ response_format: { type: 'text' } }), translatedBase()],
  ];

  it.each(cases)('%s', (_name, body, expected) => {
    const t = begin(body);
    expect(t.body).toEqual(expected);
    expect(t.wantsUsage).toBe(false);
  });

  it('json_schema: the schema and its description in the system instruction', () => {
    const schema = { type: 'object', properties: { answer: { type: 'integer' } }, required: ['answer'] };
    const t = begin(
      base({
        response_format: {
          type: 'json_schema',
          json_schema: { name: 'result', description: 'the sum', schema, strict: true },
        },
      }),
    );
    const system = t.body.system as Json[];
    expect(system).toHaveLength(1);
    expect(system[0]?.text).toBe(
      'Answer with a single valid JSON value (the sum) that conforms to this JSON Schema. Reply with the JSON only: no other text, no Markdown code fences.\n' +
        JSON.stringify(schema),
    );
  });

  it.each([
    ['auto', undefined, { type: 'auto' }],
    ['required', undefined, { type: 'any' }],
    ['none', undefined, { type: 'none' }],
    [{ type: 'function', function: { name: 'get_weather' } }, undefined, { type: 'tool', name: 'get_weather' }],
    ['required', false, { type: 'any', disable_parallel_tool_use: true }],
    [
      { type: 'function', function: { name: 'get_weather' } },
      false,
      { type: 'tool', name: 'get_weather', disable_parallel_tool_use: true },
    ],
    [undefined, false, { type: 'auto', disable_parallel_tool_use: true }],
    ['none', false, { type: 'none' }],
    [undefined, true, undefined],
  ])('tool_choice %j with parallel_tool_calls %j -> %j', (choice, parallel, expected) => {
    const t = begin(base({ tools: [WEATHER_FN], tool_choice: choice, parallel_tool_calls: parallel }));
    expect(t.body.tool_choice).toEqual(expected);
  });

  it('tool_choice none or auto without tools: nothing to say', () => {
    expect(begin(base({ tool_choice: 'none' })).body).toEqual(translatedBase());
    expect(begin(base({ tool_choice: 'auto', parallel_tool_calls: false })).body).toEqual(translatedBase());
  });

  it.each([
    ['minimal', undefined, 1024, 5120],
    ['low', undefined, 1024, 5120],
    ['medium', undefined, 4096, 8192],
    ['high', undefined, 16384, 20480],
    ['high', 32000, 16384, 32000],
    ['medium', 2000, 4096, 6096],
  ])(
    'reasoning_effort %s with max_completion_tokens %j: a thinking budget of %i, max_tokens %i (the default, or a limit at or below the budget, gets the budget on top)',
    (effort, max, budget, maxTokens) => {
      const t = begin(base({ reasoning_effort: effort, max_completion_tokens: max, temperature: 1 }));
      expect(t.body).toEqual(
        translatedBase({ max_tokens: maxTokens, temperature: 1, thinking: { type: 'enabled', budget_tokens: budget } }),
      );
    },
  );

  it('reasoning_effort none: no thinking', () => {
    expect(begin(base({ reasoning_effort: 'none' })).body).toEqual(translatedBase());
  });

  const toolLoop = (assistant: Json): Json =>
    base({
      reasoning_effort: 'low',
      tools: [WEATHER_FN],
      messages: [
        { role: 'user', content: 'Weather in SF?' },
        {
          role: 'assistant',
          content: null,
          tool_calls: [
            { id: 'toolu_1', type: 'function', function: { name: 'get_weather', arguments: '{"location":"SF"}' } },
          ],
          ...assistant,
        },
        { role: 'tool', tool_call_id: 'toolu_1', content: '18°C' },
      ],
    });

  it('thinking_blocks an answer gave come back first in their assistant turn, and the tool loop thinks on', () => {
    const thinking = [
      { type: 'thinking', thinking: 'The user wants SF.', signature: 'sig-1' },
      { type: 'redacted_thinking', data: 'opaque' },
    ];
    const t = begin(toolLoop({ reasoning_content: 'The user wants SF.', thinking_blocks: thinking }));
    expect((t.body.messages as Json[])[1]).toEqual({
      role: 'assistant',
      content: [...thinking, { type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { location: 'SF' } }],
    });
    expect(t.body.thinking).toEqual({ type: 'enabled', budget_tokens: 1024 });
  });

  it('a tool loop whose assistant turn came back without its thinking blocks is answered without thinking (Anthropic would refuse it)', () => {
    const t = begin(toolLoop({ reasoning_content: 'unsigned, dropped' }));
    expect(t.body.thinking).toBeUndefined();
    expect(t.body.max_tokens).toBe(4096);
    expect((t.body.messages as Json[])[1]).toEqual({
      role: 'assistant',
      content: [{ type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { location: 'SF' } }],
    });
  });

  it('a stream: stream true, no stream_options (usage comes in Anthropic events anyway), no usage asked of the upstream', () => {
    const t = begin(base({ stream: true, stream_options: { include_usage: true } }), true);
    expect(t.body).toEqual(translatedBase({ stream: true }));
    expect(t.wantsUsage).toBe(false);
  });

  it('leaves the request it was given as it was', () => {
    const body = toolLoop({ content: 'Checking. ' });
    const before = structuredClone(body);
    begin(body);
    expect(body).toEqual(before);
  });

  it('a translated request is what the Anthropic SDK types as MessageCreateParamsNonStreaming', () => {
    const chat: ChatCompletionCreateParamsNonStreaming = {
      model: MODEL,
      messages: [
        { role: 'system', content: 'You are terse.' },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'Weather here?' },
            { type: 'image_url', image_url: { url: `data:image/png;base64,${PNG}` } },
          ],
        },
        {
          role: 'assistant',
          content: null,
          tool_calls: [
            { id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"location":"SF"}' } },
          ],
        },
        { role: 'tool', tool_call_id: 'call_1', content: '18°C' },
      ],
      max_completion_tokens: 1000,
      stop: ['END'],
      tools: [
        {
          type: 'function',
          function: { name: 'get_weather', description: 'The weather at a place', parameters: WEATHER_SCHEMA },
        },
      ],
      tool_choice: 'required',
      parallel_tool_calls: false,
      user: 'u-1',
    };
    // Typed by the SDK: a field of the wrong name or shape here fails tsc.
    const expected: MessageCreateParamsNonStreaming = {
      model: MODEL,
      max_tokens: 1000,
      system: [{ type: 'text', text: 'You are terse.' }],
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'Weather here?' },
            { type: 'image', source: { type: 'base64', media_type: 'image/png', data: PNG } },
          ],
        },
        {
          role: 'assistant',
          content: [{ type: 'tool_use', id: 'call_1', name: 'get_weather', input: { location: 'SF' } }],
        },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'call_1', content: '18°C' }] },
      ],
      stream: false,
      // No temperature here: this SDK no longer types it (Claude's newest models refuse it).
      stop_sequences: ['END'],
      tools: [
        {
          name: 'get_weather',
          description: 'The weather at a place',
          input_schema: { type: 'object', properties: WEATHER_SCHEMA.properties, required: ['location'] },
        },
      ],
      tool_choice: { type: 'any', disable_parallel_tool_use: true },
      metadata: { user_id: 'u-1' },
    };
    expect(begin(chat as unknown as Json).body).toEqual(expected);
  });
});

describe('openai-chat -> anthropic-messages: refusals', () => {
  const user = (content: unknown) => base({ messages: [{ role: 'user', content }] });
  const withCall = (args: string) =>
    base({
      tools: [WEATHER_FN],
      messages: [
        { role: 'user', content: 'hi' },
        {
          role: 'assistant',
          content: null,
          tool_calls: [{ id: 'c1', type: 'function', function: { name: 'get_weather', arguments: args } }],
        },
      ],
    });
  const cases: Array<[string, Json, string, string?]> = [
    ['n above 1', base({ n: 2 }), 'n', 'one choice'],
    ['logprobs', base({ logprobs: true }), 'logprobs'],
    ['top_logprobs', base({ top_logprobs: 3 }), 'top_logprobs'],
    ['audio output', base({ audio: { voice: 'alloy', format: 'mp3' } }), 'audio'],
    ['the audio modality', base({ modalities: ['text', 'audio'] }), 'modalities'],
    ['seed', base({ seed: 7 }), 'seed'],
    ['a presence penalty', base({ frequency_penalty: 0.5 }), 'frequency_penalty'],
    ['the flex service tier', base({ service_tier: 'flex' }), 'service_tier'],
    ['stored completions', base({ store: true }), 'store'],
    ['the deprecated functions', base({ functions: [{ name: 'f' }] }), 'functions'],
    ["OpenAI's web search", base({ web_search_options: {} }), 'web_search_options'],
    ['a field nobody knows', base({ frobnicate: true }), 'frobnicate'],
    [
      'tool call arguments that are not JSON',
      withCall('{"location": '),
      'messages[1].tool_calls[0].function.arguments',
      'not valid JSON',
    ],
    [
      'tool call arguments that are not an object',
      withCall('[1]'),
      'messages[1].tool_calls[0].function.arguments',
      'JSON object',
    ],
    [
      'an audio input part',
      user([{ type: 'input_audio', input_audio: { data: 'AAAA', format: 'wav' } }]),
      'messages[0].content[0]',
    ],
    [
      'an image URL of another scheme',
      user([{ type: 'image_url', image_url: { url: 'ftp://x/a.png' } }]),
      'messages[0].content[0].image_url.url',
    ],
    [
      'a bmp image',
      user([{ type: 'image_url', image_url: { url: 'data:image/bmp;base64,Qk0=' } }]),
      'messages[0].content[0].image_url.url',
    ],
    [
      'a file of OpenAI’s store',
      user([{ type: 'file', file: { file_id: 'file-1' } }]),
      'messages[0].content[0].file.file_data',
    ],
    ['a custom tool', base({ tools: [{ type: 'custom', custom: { name: 'grep' } }] }), 'tools[0]'],
    ['a named tool_choice without tools', base({ tool_choice: 'required' }), 'tool_choice', 'needs tools'],
    [
      'allowed_tools',
      base({ tools: [WEATHER_FN], tool_choice: { type: 'allowed_tools', allowed_tools: { mode: 'auto', tools: [] } } }),
      'tool_choice',
    ],
    ['reasoning with a temperature other than 1', base({ reasoning_effort: 'low', temperature: 0.3 }), 'temperature'],
    ['reasoning with a low top_p', base({ reasoning_effort: 'low', top_p: 0.5 }), 'top_p'],
    [
      'reasoning with a forced tool call',
      base({ reasoning_effort: 'low', tools: [WEATHER_FN], tool_choice: 'required' }),
      'tool_choice',
    ],
    ['a reasoning effort Claude has no budget for', base({ reasoning_effort: 'xhigh' }), 'reasoning_effort'],
    [
      'json_schema without a schema',
      base({ response_format: { type: 'json_schema', json_schema: { name: 'x' } } }),
      'response_format.json_schema.schema',
    ],
    ['max_tokens 0', base({ max_tokens: 0 }), 'max_tokens'],
    ['only system messages', base({ messages: [{ role: 'system', content: 'hi' }] }), 'messages'],
    ['a user message with blank text only', user('  '), 'messages[0].content'],
    [
      'a tool message without tool_call_id',
      base({
        messages: [
          { role: 'user', content: 'hi' },
          { role: 'tool', content: 'x' },
        ],
      }),
      'messages[1].tool_call_id',
    ],
    [
      'the deprecated function role',
      base({ messages: [{ role: 'function', name: 'f', content: 'x' }] }),
      'messages[0].role',
    ],
    [
      'a cache_control Anthropic does not know',
      user([{ type: 'text', text: 'x', cache_control: { type: 'forever' } }]),
      'messages[0].content[0].cache_control',
    ],
  ];

  it.each(cases)('%s -> a 400 naming it', (_name, body, param, says) => {
    const err = refusal(body);
    expect(err).toMatchObject({ status: 400, type: 'invalid_request_error', param });
    expect(err.message).toContain(param);
    if (says) expect(err.message).toContain(says);
  });
});

// ---------------------------------------------------------------------------------------------
// Answers

const NOW = new Date('2025-06-01T12:00:00Z');
const CREATED = NOW.getTime() / 1000;
const MSG_ID = 'msg_01XFDUDYJgAACzvnptvVoYEL';
const TOOL_ID = 'toolu_01T1x1fJ34qAmk2tNTrN7Up6';

/** Claude's answer, whole: text, then a tool call; 592 prompt tokens of which 100 read from the cache and 20 written to it. */
const MESSAGE = {
  id: MSG_ID,
  type: 'message',
  role: 'assistant',
  model: 'claude-sonnet-4-5-20250929',
  content: [
    { type: 'text', text: 'Okay, let me check the weather.' },
    { type: 'tool_use', id: TOOL_ID, name: 'get_weather', input: { location: 'San Francisco, CA' } },
  ],
  stop_reason: 'tool_use',
  stop_sequence: null,
  usage: { input_tokens: 472, cache_creation_input_tokens: 20, cache_read_input_tokens: 100, output_tokens: 89 },
};

/** What a chat client gets for MESSAGE, typed by the OpenAI SDK: a field of the wrong name or shape here fails tsc. */
const COMPLETION: ChatCompletion = {
  id: MSG_ID,
  object: 'chat.completion',
  created: CREATED,
  model: MODEL,
  choices: [
    {
      index: 0,
      message: {
        role: 'assistant',
        content: 'Okay, let me check the weather.',
        refusal: null,
        tool_calls: [
          {
            id: TOOL_ID,
            type: 'function',
            function: { name: 'get_weather', arguments: '{"location":"San Francisco, CA"}' },
          },
        ],
      },
      finish_reason: 'tool_calls',
      logprobs: null,
    },
  ],
  usage: {
    prompt_tokens: 592,
    completion_tokens: 89,
    total_tokens: 681,
    prompt_tokens_details: { cached_tokens: 100 },
  },
};

const message = (content: Json[], stop = 'end_turn', usage: Json = { input_tokens: 10, output_tokens: 5 }) => ({
  ...MESSAGE,
  content,
  stop_reason: stop,
  usage,
});
const answerOf = (body: unknown, request = base()) => begin(request).json(body) as ChatCompletion;

describe('openai-chat -> anthropic-messages: answers', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('text and a tool call, with cache reads and writes: the chat.completion the OpenAI SDK types', () => {
    vi.useFakeTimers({ toFake: ['Date'], now: NOW });
    expect(answerOf(MESSAGE)).toEqual(COMPLETION);
  });

  it('text only: content the texts joined, no tool_calls, usage without cache details', () => {
    const answer = answerOf(
      message([
        { type: 'text', text: 'Hello, ' },
        { type: 'text', text: 'world.' },
      ]),
    );
    expect(answer.choices[0]?.message).toEqual({ role: 'assistant', content: 'Hello, world.', refusal: null });
    expect(answer.choices[0]?.finish_reason).toBe('stop');
    expect(answer.usage).toEqual({ prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 });
  });

  it('tool calls only: content null', () => {
    const answer = answerOf(message([{ type: 'tool_use', id: 't1', name: 'now', input: {} }], 'tool_use'));
    expect(answer.choices[0]?.message).toEqual({
      role: 'assistant',
      content: null,
      refusal: null,
      tool_calls: [{ id: 't1', type: 'function', function: { name: 'now', arguments: '{}' } }],
    });
  });

  it('thinking: reasoning_content, and the blocks signed for the caller to send back', () => {
    const answer = answerOf(
      message([
        { type: 'thinking', thinking: 'Six times seven.', signature: 'sig-1' },
        { type: 'redacted_thinking', data: 'opaque' },
        { type: 'text', text: '42' },
      ]),
    );
    expect(answer.choices[0]?.message).toEqual({
      role: 'assistant',
      content: '42',
      refusal: null,
      reasoning_content: 'Six times seven.',
      thinking_blocks: [
        { type: 'thinking', thinking: 'Six times seven.', signature: 'sig-1' },
        { type: 'redacted_thinking', data: 'opaque' },
      ],
    });
  });

  it('cache writes count as prompt tokens, not as cached ones', () => {
    const answer = answerOf(
      message([{ type: 'text', text: 'x' }], 'end_turn', {
        input_tokens: 10,
        cache_creation_input_tokens: 1000,
        cache_read_input_tokens: 0,
        output_tokens: 5,
      }),
    );
    expect(answer.usage).toEqual({ prompt_tokens: 1010, completion_tokens: 5, total_tokens: 1015 });
  });

  it("the caller's model name, not the upstream's", () => {
    expect(answerOf(MESSAGE, base({ model: 'my-claude' })).model).toBe('my-claude');
  });

  it.each([
    ['end_turn', 'stop'],
    ['stop_sequence', 'stop'],
    ['pause_turn', 'stop'],
    ['max_tokens', 'length'],
    ['model_context_window_exceeded', 'length'],
    ['tool_use', 'tool_calls'],
    ['refusal', 'content_filter'],
  ])('stop_reason %s -> finish_reason %s', (stop, finish) => {
    expect(answerOf(message([{ type: 'text', text: 'x' }], stop)).choices[0]?.finish_reason).toBe(finish);
  });
});

// ---------------------------------------------------------------------------------------------
// Streams

const event = (data: Json) => `event: ${String(data.type)}\ndata: ${JSON.stringify(data)}\n\n`;
const start = (usage: Json = MESSAGE.usage, id = MSG_ID) =>
  event({
    type: 'message_start',
    message: { ...MESSAGE, id, content: [], stop_reason: null, usage: { ...usage, output_tokens: 1 } },
  });
const blockStart = (index: number, block: Json) => event({ type: 'content_block_start', index, content_block: block });
const delta = (index: number, d: Json) => event({ type: 'content_block_delta', index, delta: d });
const blockStop = (index: number) => event({ type: 'content_block_stop', index });
const end = (stop: string, outputTokens = 89) =>
  event({
    type: 'message_delta',
    delta: { stop_reason: stop, stop_sequence: null },
    usage: { output_tokens: outputTokens },
  }) + event({ type: 'message_stop' });

/** MESSAGE as Anthropic streams it: a ping, the text in two pieces, the tool input in three (an empty one first). */
const STREAM = [
  start(),
  event({ type: 'ping' }),
  blockStart(0, { type: 'text', text: '' }),
  delta(0, { type: 'text_delta', text: 'Okay, let me check' }),
  delta(0, { type: 'text_delta', text: ' the weather.' }),
  blockStop(0),
  blockStart(1, { type: 'tool_use', id: TOOL_ID, name: 'get_weather', input: {} }),
  delta(1, { type: 'input_json_delta', partial_json: '' }),
  delta(1, { type: 'input_json_delta', partial_json: '{"location": "San Fra' }),
  delta(1, { type: 'input_json_delta', partial_json: 'ncisco, CA"}' }),
  blockStop(1),
  end('tool_use'),
].join('');

/** The upstream's bytes, cut at arbitrary places (events split across reads). */
function upstream(text: string, size = 37): StreamBody {
  const bytes = new TextEncoder().encode(text);
  let at = 0;
  return {
    read: async () => {
      if (at >= bytes.length) return undefined;
      const piece = bytes.slice(at, at + size);
      at += size;
      return piece;
    },
    cancel: () => {},
  };
}

async function translated(text: string, request: Json = base({ stream: true })): Promise<string> {
  const out = begin(request, true).stream(upstream(text), Promise.resolve({}));
  return new Response(webStream(out)).text();
}

/** The SSE events a chat client parses: each `data:` JSON, and [DONE] as it is. */
const frames = (text: string): Array<Json | '[DONE]'> =>
  text
    .trim()
    .split('\n\n')
    .map((frame) => {
      expect(frame.startsWith('data: ')).toBe(true);
      const data = frame.slice('data: '.length);
      return data === '[DONE]' ? '[DONE]' : (JSON.parse(data) as Json);
    });

const chunk = (d: Json, finish: string | null = null, extra: Json = {}) => ({
  id: MSG_ID,
  object: 'chat.completion.chunk',
  created: CREATED,
  model: MODEL,
  choices: [{ index: 0, delta: d, finish_reason: finish, logprobs: null }],
  ...extra,
});

/** The chunks of STREAM, as OpenAI would send them. */
const CHUNKS = [
  chunk({ role: 'assistant', content: '' }),
  chunk({ content: 'Okay, let me check' }),
  chunk({ content: ' the weather.' }),
  chunk({
    tool_calls: [{ index: 0, id: TOOL_ID, type: 'function', function: { name: 'get_weather', arguments: '' } }],
  }),
  chunk({ tool_calls: [{ index: 0, function: { arguments: '{"location": "San Fra' } }] }),
  chunk({ tool_calls: [{ index: 0, function: { arguments: 'ncisco, CA"}' } }] }),
  chunk({}, 'tool_calls'),
];

/** The OpenAI SDK reading `text` as the answer of /v1/chat/completions. */
const sdkClient = (text: string) =>
  new OpenAI({
    apiKey: 'test',
    baseURL: 'http://gateway.test/v1',
    maxRetries: 0,
    fetch: async () =>
      new Response(text, { status: 200, headers: { 'content-type': 'text/event-stream; charset=utf-8' } }),
  });

describe('openai-chat -> anthropic-messages: streams', () => {
  it('a tool called with no input streams "{}" as its arguments, as OpenAI does, never ""', async () => {
    const text = [
      start(),
      blockStart(0, { type: 'tool_use', id: TOOL_ID, name: 'get_time', input: {} }),
      delta(0, { type: 'input_json_delta', partial_json: '' }),
      blockStop(0),
      end('tool_use'),
    ].join('');
    const calls = frames(await translated(text)).flatMap((f) =>
      f === '[DONE]'
        ? []
        : ((f.choices as Array<{ delta: { tool_calls?: Array<{ function: { arguments?: string } }> } }>)[0]?.delta
            .tool_calls ?? []),
    );
    expect(calls.map((c) => c.function.arguments).join('')).toBe('{}');
  });

  afterEach(() => {
    vi.useRealTimers();
  });

  it('text and a tool call: the role first, the text, the call and its argument pieces, the finish, [DONE]; no usage unasked', async () => {
    vi.useFakeTimers({ toFake: ['Date'], now: NOW });
    expect(frames(await translated(STREAM))).toEqual([...CHUNKS, '[DONE]']);
  });

  it('include_usage: usage null on every chunk, then the usage chunk with no choices, then [DONE]', async () => {
    vi.useFakeTimers({ toFake: ['Date'], now: NOW });
    const out = frames(await translated(STREAM, base({ stream: true, stream_options: { include_usage: true } })));
    expect(out).toEqual([
      ...CHUNKS.map((c) => ({ ...c, usage: null })),
      {
        id: MSG_ID,
        object: 'chat.completion.chunk',
        created: CREATED,
        model: MODEL,
        choices: [],
        usage: COMPLETION.usage,
      },
      '[DONE]',
    ]);
  });

  it("the OpenAI SDK's stream accumulator makes of it the completion the whole answer translates to", async () => {
    vi.useFakeTimers({ toFake: ['Date'], now: NOW });
    const request = base({ stream: true, stream_options: { include_usage: true } });
    const final = await sdkClient(await translated(STREAM, request))
      .chat.completions.stream({ model: MODEL, messages: [{ role: 'user', content: 'hi' }] })
      .finalChatCompletion();
    // The arguments as Claude wrote them, spaces included; the same JSON.
    const call = final.choices[0]?.message.tool_calls?.[0];
    expect(call?.type === 'function' && JSON.parse(call.function.arguments)).toEqual({ location: 'San Francisco, CA' });
    const whole = COMPLETION.choices[0]?.message.tool_calls?.[0];
    if (call?.type === 'function' && whole?.type === 'function') call.function.arguments = whole.function.arguments;
    expect(final).toMatchObject(COMPLETION);
  });

  it('thinking: reasoning_content as it comes, the signed block whole; tool calls counted apart from blocks', async () => {
    const text = [
      start(),
      blockStart(0, { type: 'thinking', thinking: '', signature: '' }),
      delta(0, { type: 'thinking_delta', thinking: 'Two cities, ' }),
      delta(0, { type: 'thinking_delta', thinking: 'two calls.' }),
      delta(0, { type: 'signature_delta', signature: 'sig-1' }),
      blockStop(0),
      blockStart(1, { type: 'redacted_thinking', data: 'opaque' }),
      blockStop(1),
      blockStart(2, { type: 'tool_use', id: 't1', name: 'get_weather', input: {} }),
      delta(2, { type: 'input_json_delta', partial_json: '{"location":"SF"}' }),
      blockStop(2),
      blockStart(3, { type: 'tool_use', id: 't2', name: 'get_weather', input: {} }),
      delta(3, { type: 'input_json_delta', partial_json: '{"location":"NYC"}' }),
      blockStop(3),
      end('tool_use'),
    ].join('');
    const deltas = frames(await translated(text))
      .filter((f): f is Json => f !== '[DONE]')
      .map((f) => (f.choices as Json[])[0]?.delta);
    expect(deltas).toEqual([
      { role: 'assistant', content: '' },
      { reasoning_content: 'Two cities, ' },
      { reasoning_content: 'two calls.' },
      { thinking_blocks: [{ type: 'thinking', thinking: 'Two cities, two calls.', signature: 'sig-1' }] },
      { thinking_blocks: [{ type: 'redacted_thinking', data: 'opaque' }] },
      { tool_calls: [{ index: 0, id: 't1', type: 'function', function: { name: 'get_weather', arguments: '' } }] },
      { tool_calls: [{ index: 0, function: { arguments: '{"location":"SF"}' } }] },
      { tool_calls: [{ index: 1, id: 't2', type: 'function', function: { name: 'get_weather', arguments: '' } }] },
      { tool_calls: [{ index: 1, function: { arguments: '{"location":"NYC"}' } }] },
      {},
    ]);
  });

  it.each([
    ['end_turn', 'stop'],
    ['max_tokens', 'length'],
    ['refusal', 'content_filter'],
  ])('stop_reason %s ends the stream with finish_reason %s', async (stop, finish) => {
    const out = frames(await translated(`${start()}${end(stop)}`));
    expect(out.at(-2)).toMatchObject({ choices: [{ delta: {}, finish_reason: finish }] });
    expect(out.at(-1)).toBe('[DONE]');
  });

  it("Anthropic's error event midway: the chunks so far, OpenAI's error event, [DONE]; the SDK raises it", async () => {
    const text = [
      start(),
      blockStart(0, { type: 'text', text: '' }),
      delta(0, { type: 'text_delta', text: 'Okay' }),
      event({ type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } }),
    ].join('');
    const out = frames(await translated(text));
    expect(out.slice(-2)).toEqual([
      { error: { message: 'Overloaded', type: 'server_error', param: null, code: 'overloaded_error' } },
      '[DONE]',
    ]);
    expect(out.slice(0, -2)).toMatchObject([
      { choices: [{ delta: { role: 'assistant' } }] },
      { choices: [{ delta: { content: 'Okay' } }] },
    ]);
    const stream = await sdkClient(await translated(text)).chat.completions.create({
      model: MODEL,
      messages: [{ role: 'user', content: 'hi' }],
      stream: true,
    });
    const seen: string[] = [];
    await expect(
      (async () => {
        for await (const c of stream) seen.push(c.choices[0]?.delta.content ?? '');
      })(),
    ).rejects.toMatchObject({ message: expect.stringContaining('Overloaded') });
    expect(seen.join('')).toBe('Okay');
  });

  it("the gateway's own error event (a stream that broke upstream) keeps its code", async () => {
    const broke = new ProxyError(502, 'api_error', 'upstream_stream_broken', 'Bedrock ended the stream early');
    const out = frames(await translated(`${start()}${DIALECTS['anthropic-messages'].streamError(broke)}`));
    expect(out.slice(-2)).toEqual([
      {
        error: {
          message: 'Bedrock ended the stream early',
          type: 'api_error',
          param: null,
          code: 'upstream_stream_broken',
        },
      },
      '[DONE]',
    ]);
  });

  it('an upstream that ends before message_stop: an error, not a finish', async () => {
    const out = frames(
      await translated(
        `${start()}${blockStart(0, { type: 'text', text: '' })}${delta(0, { type: 'text_delta', text: 'Ok' })}`,
      ),
    );
    expect(out.slice(-2)).toEqual([
      { error: expect.objectContaining({ type: 'api_error', code: 'upstream_stream_broken' }) },
      '[DONE]',
    ]);
    expect(out.some((f) => f !== '[DONE]' && (f.choices as Json[] | undefined)?.[0]?.finish_reason)).toBe(false);
  });

  it('reads the upstream only as the client reads, passes a cancel on, and reads it to its end after the last event', async () => {
    const parts = STREAM.split(/(?<=\n\n)/).map((e) => new TextEncoder().encode(e));
    let reads = 0;
    let cancelled = false;
    const source: StreamBody = {
      read: async () => {
        reads++;
        return parts.shift();
      },
      cancel: () => {
        cancelled = true;
      },
    };
    const out = begin(base({ stream: true }), true).stream(source, Promise.resolve({}));
    if (out instanceof ReadableStream) throw new Error('expected a chunk source');
    // message_start: the role chunk, at once, from one read.
    expect(new TextDecoder().decode(await out.read())).toContain('"role":"assistant"');
    expect(reads).toBe(1);
    while ((await out.read()) !== undefined);
    // Every event, then the read that found the end: the upstream settles its outcome only there.
    expect(parts).toHaveLength(0);
    expect(reads).toBe(STREAM.split('\n\n').length);
    out.cancel();
    expect(cancelled).toBe(true);
  });
});
