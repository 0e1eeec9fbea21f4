import Anthropic from '@anthropic-ai/sdk';
import { describe, expect, it } from 'vitest';
import { conformAnswer } from '../conformance/conformance.js';
import { type StreamBody, webStream } from '../upstreams/chunk-source.js';
import { anthropicMessagesToOpenaiChat as translator } from './anthropic-messages_openai-chat.js';
import { translatorFor } from './table.js';
import { refusalOf, translationOf } from './translation-probe.js';

type Json = Record<string, unknown>;

const MODEL = 'amazon.nova-lite-v1:0';
const base = (extra: Json = {}): Json => ({
  model: MODEL,
  max_tokens: 100,
  messages: [{ role: 'user', content: 'hi' }],
  ...extra,
});

const begin = (body: Json, stream = false) => translationOf(translator, body, stream);
const refusal = (body: Json) => refusalOf(translator, body);

const PNG = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==';
const BASH = {
  name: 'Bash',
  description: 'Run a shell command',
  input_schema: { type: 'object', properties: { command: { type: 'string' } }, required: ['command'] },
};
const BASH_FN = {
  type: 'function',
  function: { name: 'Bash', description: 'Run a shell command', parameters: BASH.input_schema },
};

describe('anthropic-messages -> openai-chat: the table', () => {
  it('is the translator for Anthropic Messages callers of chat-only upstreams', () => {
    expect(translatorFor('anthropic-messages', 'openai-chat')).toBe(translator);
  });
});

describe('anthropic-messages -> openai-chat: requests', () => {
  const cases: Array<[string, Json, Json]> = [
    [
      'model, max_tokens, temperature, top_p, stop_sequences -> stop, metadata.user_id -> user',
      base({ temperature: 0.2, top_p: 0.9, stop_sequences: ['END', 'STOP'], metadata: { user_id: 'u-1' } }),
      {
        model: MODEL,
        max_tokens: 100,
        stream: false,
        temperature: 0.2,
        top_p: 0.9,
        stop: ['END', 'STOP'],
        user: 'u-1',
        messages: [{ role: 'user', content: 'hi' }],
      },
    ],
    [
      'system as a string: one system message',
      base({ system: 'You are terse.' }),
      {
        model: MODEL,
        max_tokens: 100,
        stream: false,
        messages: [
          { role: 'system', content: 'You are terse.' },
          { role: 'user', content: 'hi' },
        ],
      },
    ],
    [
      'system as text blocks: one system message, the texts joined, cache_control dropped',
      base({
        system: [
          { type: 'text', text: 'You are Claude Code.' },
          { type: 'text', text: 'Be brief.', cache_control: { type: 'ephemeral' } },
        ],
      }),
      {
        model: MODEL,
        max_tokens: 100,
        stream: false,
        messages: [
          { role: 'system', content: 'You are Claude Code.\nBe brief.' },
          { role: 'user', content: 'hi' },
        ],
      },
    ],
    [
      'a system message inside messages (Claude Code, with its Agent and Skill tools): a system message where it was',
      base({
        system: 'You are Claude Code.',
        messages: [
          { role: 'user', content: 'find the bug' },
          { role: 'system', content: [{ type: 'text', text: 'Skill: debugging' }] },
          { role: 'user', content: 'go' },
        ],
      }),
      {
        model: MODEL,
        max_tokens: 100,
        stream: false,
        messages: [
          { role: 'system', content: 'You are Claude Code.' },
          { role: 'user', content: 'find the bug' },
          { role: 'system', content: 'Skill: debugging' },
          { role: 'user', content: 'go' },
        ],
      },
    ],
    [
      'one text block becomes a plain string; several stay parts; cache_control dropped everywhere',
      base({
        cache_control: { type: 'ephemeral' },
        messages: [
          { role: 'user', content: [{ type: 'text', text: 'one', cache_control: { type: 'ephemeral' } }] },
          { role: 'assistant', content: [{ type: 'text', text: 'two' }] },
          {
            role: 'user',
            content: [
              { type: 'text', text: 'three' },
              { type: 'text', text: 'four', cache_control: { type: 'ephemeral', ttl: '1h' } },
            ],
          },
        ],
      }),
      {
        model: MODEL,
        max_tokens: 100,
        stream: false,
        messages: [
          { role: 'user', content: 'one' },
          { role: 'assistant', content: 'two' },
          {
            role: 'user',
            content: [
              { type: 'text', text: 'three' },
              { type: 'text', text: 'four' },
            ],
          },
        ],
      },
    ],
    [
      'images: base64 as a data: URL, url as it is',
      base({
        messages: [
          {
            role: 'user',
            content: [
              { type: 'image', source: { type: 'base64', media_type: 'image/png', data: PNG } },
              { type: 'image', source: { type: 'url', url: 'https://example.com/a.jpg' } },
              { type: 'text', text: 'What are these?' },
            ],
          },
        ],
      }),
      {
        model: MODEL,
        max_tokens: 100,
        stream: false,
        messages: [
          {
            role: 'user',
            content: [
              { type: 'image_url', image_url: { url: `data:image/png;base64,${PNG}` } },
              { type: 'image_url', image_url: { url: 'https://example.com/a.jpg' } },
              { type: 'text', text: 'What are these?' },
            ],
          },
        ],
      },
    ],
    [
      'a tool round: tool_use -> tool_calls; tool_result -> tool messages first (an error marked), then the rest of the turn; thinking dropped',
      base({
        tools: [BASH],
        messages: [
          { role: 'user', content: 'list files' },
          {
            role: 'assistant',
            content: [
              { type: 'thinking', thinking: 'I should list them.', signature: 'sig' },
              { type: 'redacted_thinking', data: 'opaque' },
              { type: 'text', text: 'Listing.' },
              { type: 'tool_use', id: 'toolu_1', name: 'Bash', input: { command: 'ls' } },
              { type: 'tool_use', id: 'toolu_2', name: 'Bash', input: { command: 'ls -a' } },
            ],
          },
          {
            role: 'user',
            content: [
              { type: 'text', text: 'Here you go.' },
              { type: 'tool_result', tool_use_id: 'toolu_1', content: 'a.txt\nb.txt' },
              {
                type: 'tool_result',
                tool_use_id: 'toolu_2',
                is_error: true,
                content: [
                  { type: 'text', text: 'ls: cannot open' },
                  { type: 'text', text: 'permission denied' },
                ],
              },
            ],
          },
          {
            role: 'assistant',
            content: [{ type: 'tool_use', id: 'toolu_3', name: 'Bash', input: {} }],
          },
          { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_3' }] },
        ],
      }),
      {
        model: MODEL,
        max_tokens: 100,
        stream: false,
        tools: [BASH_FN],
        messages: [
          { role: 'user', content: 'list files' },
          {
            role: 'assistant',
            content: 'Listing.',
            tool_calls: [
              { id: 'toolu_1', type: 'function', function: { name: 'Bash', arguments: '{"command":"ls"}' } },
              { id: 'toolu_2', type: 'function', function: { name: 'Bash', arguments: '{"command":"ls -a"}' } },
            ],
          },
          { role: 'tool', tool_call_id: 'toolu_1', content: 'a.txt\nb.txt' },
          { role: 'tool', tool_call_id: 'toolu_2', content: 'Error: ls: cannot open\npermission denied' },
          { role: 'user', content: 'Here you go.' },
          {
            role: 'assistant',
            content: null,
            tool_calls: [{ id: 'toolu_3', type: 'function', function: { name: 'Bash', arguments: '{}' } }],
          },
          { role: 'tool', tool_call_id: 'toolu_3', content: '' },
        ],
      },
    ],
    [
      'an assistant turn of thinking only is left out',
      base({
        messages: [
          { role: 'user', content: 'a' },
          { role: 'assistant', content: [{ type: 'thinking', thinking: 'hmm', signature: 's' }] },
          { role: 'user', content: 'b' },
        ],
      }),
      {
        model: MODEL,
        max_tokens: 100,
        stream: false,
        messages: [
          { role: 'user', content: 'a' },
          { role: 'user', content: 'b' },
        ],
      },
    ],
    [
      'tools: custom (type absent or "custom") as function tools, strict kept, a missing schema an empty object; tool_choice auto',
      base({
        tools: [
          { ...BASH, cache_control: { type: 'ephemeral' } },
          { type: 'custom', name: 'Noop', input_schema: undefined, strict: true },
        ],
        tool_choice: { type: 'auto' },
      }),
      {
        model: MODEL,
        max_tokens: 100,
        stream: false,
        messages: [{ role: 'user', content: 'hi' }],
        tools: [
          BASH_FN,
          {
            type: 'function',
            function: { name: 'Noop', parameters: { type: 'object', properties: {} }, strict: true },
          },
        ],
        tool_choice: 'auto',
      },
    ],
    [
      'tool_choice any -> required, disable_parallel_tool_use -> parallel_tool_calls false',
      base({ tools: [BASH], tool_choice: { type: 'any', disable_parallel_tool_use: true } }),
      {
        model: MODEL,
        max_tokens: 100,
        stream: false,
        messages: [{ role: 'user', content: 'hi' }],
        tools: [BASH_FN],
        tool_choice: 'required',
        parallel_tool_calls: false,
      },
    ],
    [
      'tool_choice tool -> that function',
      base({ tools: [BASH], tool_choice: { type: 'tool', name: 'Bash' } }),
      {
        model: MODEL,
        max_tokens: 100,
        stream: false,
        messages: [{ role: 'user', content: 'hi' }],
        tools: [BASH_FN],
        tool_choice: { type: 'function', function: { name: 'Bash' } },
      },
    ],
    [
      'tool_choice none -> none',
      base({ tools: [BASH], tool_choice: { type: 'none' } }),
      {
        model: MODEL,
        max_tokens: 100,
        stream: false,
        messages: [{ role: 'user', content: 'hi' }],
        tools: [BASH_FN],
        tool_choice: 'none',
      },
    ],
    [
      'tool_choice without tools is left out (nothing to choose from)',
      base({ tool_choice: { type: 'none' } }),
      { model: MODEL, max_tokens: 100, stream: false, messages: [{ role: 'user', content: 'hi' }] },
    ],
    [
      'thinking is dropped (the model just answers), and so are null fields',
      base({ thinking: { type: 'enabled', budget_tokens: 2048 }, top_k: null, container: null }),
      { model: MODEL, max_tokens: 100, stream: false, messages: [{ role: 'user', content: 'hi' }] },
    ],
    [
      "Claude Code's context editing that only clears thinking, and output_config's effort, are dropped",
      base({
        context_management: { edits: [{ type: 'clear_thinking_20251015', keep: 'all' }] },
        output_config: { effort: 'high' },
      }),
      { model: MODEL, max_tokens: 100, stream: false, messages: [{ role: 'user', content: 'hi' }] },
    ],
    [
      "output_config's JSON schema -> response_format json_schema",
      base({
        output_config: {
          effort: 'low',
          format: { type: 'json_schema', schema: { type: 'object', properties: { a: { type: 'string' } } } },
        },
      }),
      {
        model: MODEL,
        max_tokens: 100,
        stream: false,
        messages: [{ role: 'user', content: 'hi' }],
        response_format: {
          type: 'json_schema',
          json_schema: { name: 'output', schema: { type: 'object', properties: { a: { type: 'string' } } } },
        },
      },
    ],
  ];

  it.each(cases)('%s', (_name, body, expected) => {
    const t = begin(body);
    expect(t.body).toEqual(expected);
    expect(t.wantsUsage).toBe(true);
  });

  it('a stream asks for the usage chunk', () => {
    const t = begin(base({ stream: true }), true);
    expect(t.body).toMatchObject({ stream: true, stream_options: { include_usage: true } });
    expect(t.wantsUsage).toBe(true);
  });

  it('leaves the request it was given as it was', () => {
    const body = base({ system: [{ type: 'text', text: 's', cache_control: { type: 'ephemeral' } }], tools: [BASH] });
    const before = structuredClone(body);
    begin(body);
    expect(body).toEqual(before);
  });
});

describe('anthropic-messages -> openai-chat: refusals', () => {
  const user = (content: unknown) => base({ messages: [{ role: 'user', content }] });
  const cases: Array<[string, Json, string, string?]> = [
    ['top_k', base({ top_k: 5 }), 'top_k'],
    ['container', base({ container: 'cntr_1' }), 'container'],
    ['mcp_servers', base({ mcp_servers: [{ type: 'url', url: 'https://mcp', name: 'm' }] }), 'mcp_servers'],
    ['service_tier', base({ service_tier: 'auto' }), 'service_tier'],
    [
      'a task budget',
      base({ output_config: { effort: 'low', task_budget: { type: 'tokens', total: 1000 } } }),
      'output_config.task_budget',
    ],
    [
      'an output format other than a JSON schema',
      base({ output_config: { format: { type: 'xml' } } }),
      'output_config.format',
    ],
    [
      'context editing that clears tool results',
      base({
        context_management: {
          edits: [{ type: 'clear_thinking_20251015', keep: 'all' }, { type: 'clear_tool_uses_20250919' }],
        },
      }),
      'context_management.edits.1',
    ],
    ['an unknown field', base({ frobnicate: true }), 'frobnicate'],
    [
      'a server tool',
      base({ tools: [BASH, { type: 'web_search_20250305', name: 'web_search', max_uses: 3 }] }),
      'tools.1',
      'runs only on Claude models',
    ],
    ['the bash tool', base({ tools: [{ type: 'bash_20250124', name: 'bash' }] }), 'tools.0', 'Claude'],
    [
      'the text editor tool',
      base({ tools: [{ type: 'text_editor_20250728', name: 'str_replace_based_edit_tool' }] }),
      'tools.0',
      'Claude',
    ],
    [
      'code execution',
      base({ tools: [{ type: 'code_execution_20250825', name: 'code_execution' }] }),
      'tools.0',
      'Claude',
    ],
    [
      'a document block',
      user([
        { type: 'text', text: 'summarize' },
        { type: 'document', source: { type: 'base64', media_type: 'application/pdf', data: 'JVBERi0=' } },
      ]),
      'messages.0.content.1',
      'document',
    ],
    [
      'a search_result block',
      user([{ type: 'search_result', source: 's', title: 't', content: [{ type: 'text', text: 'x' }] }]),
      'messages.0.content.0',
    ],
    [
      'an image by file id',
      user([{ type: 'image', source: { type: 'file', file_id: 'file_1' } }]),
      'messages.0.content.0.source',
    ],
    [
      'an image in a tool result',
      base({
        tools: [BASH],
        messages: [
          { role: 'user', content: 'x' },
          { role: 'assistant', content: [{ type: 'tool_use', id: 't1', name: 'Bash', input: {} }] },
          {
            role: 'user',
            content: [
              {
                type: 'tool_result',
                tool_use_id: 't1',
                content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: PNG } }],
              },
            ],
          },
        ],
      }),
      'messages.2.content.0.content.0',
    ],
    [
      "a server tool's block in the history",
      base({
        messages: [
          { role: 'user', content: 'x' },
          {
            role: 'assistant',
            content: [{ type: 'server_tool_use', id: 'srvtoolu_1', name: 'web_search', input: { query: 'q' } }],
          },
        ],
      }),
      'messages.1.content.0',
    ],
    ['a non-text system block', base({ system: [{ type: 'image', source: {} }] }), 'system.0'],
    ['tool_choice of an unknown type', base({ tools: [BASH], tool_choice: { type: 'sometimes' } }), 'tool_choice.type'],
  ];

  it.each(cases)('%s -> a 400 naming it', (_name, body, param, says) => {
    const err = refusal(body);
    expect(err).toMatchObject({ status: 400, type: 'invalid_request_error', param });
    // Anthropic's error envelope has no param: the message must name the field.
    expect(err.message).toContain(param);
    if (says) expect(err.message).toContain(says);
  });
});

// ---------------------------------------------------------------------------------------------
// Answers

const CHAT_ID = 'chatcmpl-abc123';
/** One answer, as a whole completion: text, then a tool call; 40 prompt tokens of which 10 from the cache. */
const COMPLETION = {
  id: CHAT_ID,
  object: 'chat.completion',
  created: 1,
  model: MODEL,
  choices: [
    {
      index: 0,
      message: {
        role: 'assistant',
        content: 'Let me look.',
        tool_calls: [
          { id: 'tooluse_1', type: 'function', function: { name: 'Bash', arguments: '{"command":"ls -la"}' } },
        ],
      },
      finish_reason: 'tool_calls',
      logprobs: null,
    },
  ],
  usage: { prompt_tokens: 40, completion_tokens: 12, total_tokens: 52, prompt_tokens_details: { cached_tokens: 10 } },
};
const MESSAGE = {
  id: 'msg_abc123',
  type: 'message',
  role: 'assistant',
  model: MODEL,
  content: [
    { type: 'text', text: 'Let me look.' },
    { type: 'tool_use', id: 'tooluse_1', name: 'Bash', input: { command: 'ls -la' } },
  ],
  stop_reason: 'tool_use',
  stop_sequence: null,
  usage: { input_tokens: 30, output_tokens: 12, cache_read_input_tokens: 10, cache_creation_input_tokens: 0 },
};

const answer = (message: Json, finish: string, usage: Json = { prompt_tokens: 5, completion_tokens: 2 }) => ({
  id: CHAT_ID,
  choices: [{ index: 0, message: { role: 'assistant', ...message }, finish_reason: finish }],
  usage,
});

describe('anthropic-messages -> openai-chat: answers', () => {
  it('maps a completion with text, a tool call and cached prompt tokens to a message', () => {
    expect(begin(base()).json(COMPLETION)).toEqual(MESSAGE);
  });

  it.each([
    ['stop', 'end_turn'],
    ['length', 'max_tokens'],
    ['tool_calls', 'tool_use'],
    ['content_filter', 'refusal'],
  ])('finish_reason %s -> stop_reason %s', (finish, stop) => {
    const message = begin(base()).json(answer({ content: 'x' }, finish)) as Json;
    expect(message).toMatchObject({ stop_reason: stop, stop_sequence: null });
  });

  it('a text-only answer: one text block, usage without cache reads', () => {
    expect(begin(base()).json(answer({ content: 'Hello.' }, 'stop'))).toEqual({
      id: 'msg_abc123',
      type: 'message',
      role: 'assistant',
      model: MODEL,
      content: [{ type: 'text', text: 'Hello.' }],
      stop_reason: 'end_turn',
      stop_sequence: null,
      usage: { input_tokens: 5, output_tokens: 2, cache_read_input_tokens: 0, cache_creation_input_tokens: 0 },
    });
  });

  it('tool calls without text: tool_use blocks only, a tool_use turn even where the upstream says stop', () => {
    const message = begin(base()).json(
      answer(
        {
          content: null,
          tool_calls: [
            { id: 'c1', type: 'function', function: { name: 'A', arguments: '' } },
            { id: 'c2', type: 'function', function: { name: 'B', arguments: '{"x": [1, 2]}' } },
          ],
        },
        'stop',
      ),
    ) as Json;
    expect(message.content).toEqual([
      { type: 'tool_use', id: 'c1', name: 'A', input: {} },
      { type: 'tool_use', id: 'c2', name: 'B', input: { x: [1, 2] } },
    ]);
    expect(message.stop_reason).toBe('tool_use');
  });

  it('arguments that are not a JSON object reach the caller as written, under _raw_arguments', () => {
    const message = begin(base()).json(
      answer(
        {
          content: null,
          tool_calls: [
            { id: 'c1', type: 'function', function: { name: 'A', arguments: '{"x": ' } },
            { id: 'c2', type: 'function', function: { name: 'B', arguments: '[1]' } },
          ],
        },
        'tool_calls',
      ),
    ) as Json;
    expect(message.content).toEqual([
      { type: 'tool_use', id: 'c1', name: 'A', input: { _raw_arguments: '{"x": ' } },
      { type: 'tool_use', id: 'c2', name: 'B', input: { _raw_arguments: '[1]' } },
    ]);
  });
});

// ---------------------------------------------------------------------------------------------
// Streams

const sse = (data: unknown) => `data: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`;
const chunk = (delta: Json, finish: string | null = null) => ({
  id: CHAT_ID,
  object: 'chat.completion.chunk',
  created: 1,
  model: MODEL,
  choices: [{ index: 0, delta, finish_reason: finish, logprobs: null }],
});

/** COMPLETION as OpenAI streams it: role, text in pieces, the tool call split across chunks, finish, usage, [DONE]. */
const CHUNKS = [
  chunk({ role: 'assistant', content: '' }),
  chunk({ content: 'Let ' }),
  chunk({ content: 'me look.' }),
  chunk({
    tool_calls: [{ index: 0, id: 'tooluse_1', type: 'function', function: { name: 'Bash', arguments: '' } }],
  }),
  chunk({ tool_calls: [{ index: 0, function: { arguments: '{"command":' } }] }),
  chunk({ tool_calls: [{ index: 0, function: { arguments: '"ls -la"}' } }] }),
  chunk({}, 'tool_calls'),
  { id: CHAT_ID, object: 'chat.completion.chunk', created: 1, model: MODEL, choices: [], usage: COMPLETION.usage },
].map(sse);

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

async function translated(text: string, body: Json = base({ stream: true })): Promise<string> {
  const out = begin(body, true).stream(upstream(text), Promise.resolve({}));
  return new Response(webStream(out)).text();
}

const events = (text: string) =>
  text
    .trim()
    .split('\n\n')
    .map((frame) => {
      const [event, data] = frame.split('\n');
      const parsed = JSON.parse((data ?? '').slice('data: '.length)) as Json;
      expect(event).toBe(`event: ${String(parsed.type)}`);
      return parsed;
    });

/** The Anthropic SDK reading `text` as the answer of /v1/messages. */
const sdkClient = (text: string) =>
  new Anthropic({
    apiKey: 'test',
    baseURL: 'http://gateway.test/anthropic',
    maxRetries: 0,
    fetch: async () =>
      new Response(text, { status: 200, headers: { 'content-type': 'text/event-stream; charset=utf-8' } }),
  });

describe('anthropic-messages -> openai-chat: streams', () => {
  it("emits Anthropic's event sequence: message_start, text and tool_use blocks from index 0, message_delta with the usage, message_stop", async () => {
    const out = events(await translated(`${CHUNKS.join('')}${sse('[DONE]')}`));
    expect(out.map((e) => e.type)).toEqual([
      'message_start',
      'content_block_start',
      'content_block_delta',
      'content_block_delta',
      'content_block_stop',
      'content_block_start',
      'content_block_delta',
      'content_block_delta',
      'content_block_stop',
      'message_delta',
      'message_stop',
    ]);
    expect(out[0]).toEqual({
      type: 'message_start',
      message: {
        id: 'msg_abc123',
        type: 'message',
        role: 'assistant',
        model: MODEL,
        content: [],
        stop_reason: null,
        stop_sequence: null,
        // What the spec's Message requires beside (proxy/conformance/): null where there is nothing to say.
        stop_details: null,
        container: null,
        usage: {
          input_tokens: 0,
          output_tokens: 0,
          cache_read_input_tokens: 0,
          cache_creation_input_tokens: 0,
          cache_creation: null,
          inference_geo: null,
          output_tokens_details: null,
          server_tool_use: null,
          service_tier: null,
        },
      },
    });
    expect(out.filter((e) => e.type === 'content_block_start')).toEqual([
      { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '', citations: null } },
      {
        type: 'content_block_start',
        index: 1,
        content_block: { type: 'tool_use', id: 'tooluse_1', name: 'Bash', input: {}, caller: { type: 'direct' } },
      },
    ]);
    expect(out.filter((e) => e.type === 'content_block_delta')).toEqual([
      { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Let ' } },
      { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'me look.' } },
      { type: 'content_block_delta', index: 1, delta: { type: 'input_json_delta', partial_json: '{"command":' } },
      { type: 'content_block_delta', index: 1, delta: { type: 'input_json_delta', partial_json: '"ls -la"}' } },
    ]);
    expect(out.at(-2)).toEqual({
      type: 'message_delta',
      delta: { stop_reason: 'tool_use', stop_sequence: null, stop_details: null, container: null },
      usage: { ...MESSAGE.usage, output_tokens_details: null, server_tool_use: null },
    });
  });

  it("the Anthropic SDK's stream accumulator makes of it the message the whole answer translates to", async () => {
    const text = await translated(`${CHUNKS.join('')}${sse('[DONE]')}`, base({ stream: true }));
    const final = await sdkClient(text)
      .messages.stream({ model: MODEL, max_tokens: 100, messages: [{ role: 'user', content: 'hi' }] })
      .finalMessage();
    // parsed_output is the SDK's own (structured outputs), not the wire's.
    // The whole answer as the caller gets it: through the conformance layer at the exit (account.ts).
    const whole = conformAnswer('anthropic-messages', begin(base()).json(COMPLETION)) as Json;
    expect(final).toEqual({ ...whole, parsed_output: null });
  });

  it('numbers blocks consecutively across several tool calls, text after them included', async () => {
    const call = (index: number, id: string, name: string, args: string) =>
      chunk({ tool_calls: [{ index, id, type: 'function', function: { name, arguments: args } }] });
    const text = await translated(
      [
        call(0, 'c1', 'A', '{}'),
        call(1, 'c2', 'B', ''),
        chunk({ tool_calls: [{ index: 1, function: { arguments: '{"n":1}' } }] }),
        chunk({ content: 'done' }),
        chunk({}, 'tool_calls'),
        sse('[DONE]'),
      ]
        .map((c) => (typeof c === 'string' ? c : sse(c)))
        .join(''),
    );
    const out = events(text);
    const starts = out.filter((e) => e.type === 'content_block_start').map((e) => e.index);
    const stops = out.filter((e) => e.type === 'content_block_stop').map((e) => e.index);
    expect(starts).toEqual([0, 1, 2]);
    expect(stops).toEqual([0, 1, 2]);
    const final = await sdkClient(text)
      .messages.stream({ model: MODEL, max_tokens: 100, messages: [{ role: 'user', content: 'hi' }] })
      .finalMessage();
    expect(final.content).toEqual([
      { type: 'tool_use', id: 'c1', name: 'A', input: {}, caller: { type: 'direct' } },
      { type: 'tool_use', id: 'c2', name: 'B', input: { n: 1 }, caller: { type: 'direct' } },
      { type: 'text', text: 'done', citations: null },
    ]);
    expect(final.stop_reason).toBe('tool_use');
  });

  it('an empty answer is still a whole message (no blocks)', async () => {
    const out = events(await translated(`${sse(chunk({}, 'stop'))}${sse('[DONE]')}`));
    expect(out.map((e) => e.type)).toEqual(['message_start', 'message_delta', 'message_stop']);
    expect(out[1]).toMatchObject({ delta: { stop_reason: 'end_turn' } });
  });

  it("an upstream error ends the stream with Anthropic's error event, which the SDK raises", async () => {
    const error = {
      error: { message: 'Bedrock broke off', type: 'api_error', param: null, code: 'upstream_stream_broken' },
    };
    const text = await translated(`${CHUNKS.slice(0, 3).join('')}${sse(error)}${sse('[DONE]')}`);
    const out = events(text);
    expect(out.map((e) => e.type)).toEqual([
      'message_start',
      'content_block_start',
      'content_block_delta',
      'content_block_delta',
      'error',
    ]);
    expect(out.at(-1)).toEqual({
      type: 'error',
      error: { type: 'api_error', message: 'Bedrock broke off (upstream_stream_broken)' },
    });
    const stream = sdkClient(text).messages.stream({
      model: MODEL,
      max_tokens: 100,
      messages: [{ role: 'user', content: 'hi' }],
    });
    await expect(stream.finalMessage()).rejects.toBeInstanceOf(Anthropic.APIError);
  });

  it('reads the upstream only as the client reads, and passes a cancel on', async () => {
    let reads = 0;
    let cancelled = false;
    const parts = CHUNKS.map((c) => new TextEncoder().encode(c));
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
    await out.read();
    expect(reads).toBe(1);
    out.cancel();
    expect(cancelled).toBe(true);
  });
});
