import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { ProxyError } from '../endpoints/errors.js';
import { type StreamBody, webStream } from '../upstreams/chunk-source.js';
import { openaiResponsesToOpenaiChat as translator } from './openai-responses_openai-chat.js';
import { translatorFor } from './table.js';
import { refusalOf, translationOf } from './translation-probe.js';

type Json = Record<string, unknown>;

const MODEL = 'us.anthropic.claude-sonnet-4-5-20250929-v1:0';
const base = (extra: Json = {}): Json => ({ model: MODEL, input: 'hi', ...extra });
/** The chat request `base()` becomes, with `extra` on top. */
const chat = (extra: Json = {}): Json => ({
  model: MODEL,
  stream: false,
  messages: [{ role: 'user', content: 'hi' }],
  ...extra,
});

const begin = (body: Json, stream = false) => translationOf(translator, body, stream);
const refusal = (body: Json) => refusalOf(translator, body);

const PNG =
  'data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==';

/** Codex's shell tool: a Responses function tool (name, description and parameters at the top level). */
const SHELL = {
  type: 'function',
  name: 'shell',
  description: 'Runs a shell command and returns its output.',
  strict: false,
  parameters: {
    type: 'object',
    properties: { command: { type: 'array', items: { type: 'string' } }, workdir: { type: 'string' } },
    required: ['command'],
    additionalProperties: false,
  },
};
const SHELL_FN = {
  type: 'function',
  function: { name: 'shell', description: SHELL.description, parameters: SHELL.parameters },
};
/** Codex's free-form apply_patch tool: its input is the patch itself, in a grammar, not JSON. */
const APPLY_PATCH = {
  type: 'custom',
  name: 'apply_patch',
  description: 'Use the `apply_patch` tool to edit files.',
  format: { type: 'grammar', syntax: 'lark', definition: 'start: begin_patch hunk+ end_patch' },
};
const STRING_INPUT = { type: 'object', properties: { input: { type: 'string' } }, required: ['input'] };
const APPLY_PATCH_FN = {
  type: 'function',
  function: {
    name: 'apply_patch',
    description: 'Use the `apply_patch` tool to edit files. (Its whole input is one string argument "input".)',
    parameters: STRING_INPUT,
  },
};
const PATCH = '*** Begin Patch\n*** Add File: hello.txt\n+hello "world"\n*** End Patch\n';
const SEARCH = {
  type: 'function',
  name: 'search',
  description: 'Search the docs',
  parameters: { type: 'object', properties: { q: { type: 'string' } }, required: ['q'] },
};
/** Codex's grouping of an MCP server's tools. */
const DOCS_NAMESPACE = { type: 'namespace', name: 'mcp__docs__', description: 'The docs server', tools: [SEARCH] };

describe('openai-responses -> openai-chat: the table', () => {
  it('is the translator for Responses callers of chat-only upstreams', () => {
    expect(translatorFor('openai-responses', 'openai-chat')).toBe(translator);
  });
});

describe('openai-responses -> openai-chat: requests', () => {
  const cases: Array<[string, Json, Json]> = [
    ['input as a string: one user message', base(), chat()],
    [
      'instructions -> a system message before the input',
      base({ instructions: 'You are Codex.' }),
      chat({
        messages: [
          { role: 'system', content: 'You are Codex.' },
          { role: 'user', content: 'hi' },
        ],
      }),
    ],
    ['empty instructions are left out', base({ instructions: '' }), chat()],
    [
      'message items: system and developer -> system, input_text and input_image parts, assistant output_text -> text',
      base({
        input: [
          { role: 'developer', content: 'Be brief.' },
          { type: 'message', role: 'system', content: [{ type: 'input_text', text: 'Use tools.' }] },
          {
            role: 'user',
            content: [
              { type: 'input_text', text: 'What are these?' },
              { type: 'input_image', image_url: PNG, detail: 'auto' },
              { type: 'input_image', image_url: 'https://example.com/a.jpg', detail: 'high' },
            ],
          },
          {
            type: 'message',
            id: 'msg_1',
            role: 'assistant',
            status: 'completed',
            content: [
              { type: 'output_text', text: 'Two ', annotations: [] },
              { type: 'output_text', text: 'pixels.', annotations: [] },
            ],
          },
          { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'thanks' }] },
        ],
      }),
      chat({
        messages: [
          { role: 'system', content: 'Be brief.' },
          { role: 'system', content: 'Use tools.' },
          {
            role: 'user',
            content: [
              { type: 'text', text: 'What are these?' },
              { type: 'image_url', image_url: { url: PNG } },
              { type: 'image_url', image_url: { url: 'https://example.com/a.jpg' } },
            ],
          },
          { role: 'assistant', content: 'Two pixels.' },
          { role: 'user', content: [{ type: 'text', text: 'thanks' }] },
        ],
      }),
    ],
    [
      'a tool round: consecutive function_calls -> one assistant message with tool_calls, outputs -> tool messages',
      base({
        tools: [SHELL],
        input: [
          { role: 'user', content: 'where am I, and what is here?' },
          { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'Looking.' }] },
          {
            type: 'function_call',
            id: 'fc_1',
            call_id: 'call_1',
            name: 'shell',
            arguments: '{"command":["pwd"]}',
            status: 'completed',
          },
          { type: 'function_call', call_id: 'call_2', name: 'shell', arguments: '{"command":["ls"]}' },
          { type: 'function_call_output', call_id: 'call_1', output: '/work' },
          {
            type: 'function_call_output',
            call_id: 'call_2',
            output: [
              { type: 'input_text', text: 'a.txt\n' },
              { type: 'input_text', text: 'b.txt' },
            ],
          },
          { type: 'function_call', call_id: 'call_3', name: 'shell' },
          { type: 'function_call_output', call_id: 'call_3', output: '' },
        ],
      }),
      chat({
        tools: [SHELL_FN],
        messages: [
          { role: 'user', content: 'where am I, and what is here?' },
          // Two assistant messages in a row: Converse merges them into one turn.
          { role: 'assistant', content: 'Looking.' },
          {
            role: 'assistant',
            content: null,
            tool_calls: [
              { id: 'call_1', type: 'function', function: { name: 'shell', arguments: '{"command":["pwd"]}' } },
              { id: 'call_2', type: 'function', function: { name: 'shell', arguments: '{"command":["ls"]}' } },
            ],
          },
          { role: 'tool', tool_call_id: 'call_1', content: '/work' },
          { role: 'tool', tool_call_id: 'call_2', content: 'a.txt\nb.txt' },
          {
            role: 'assistant',
            content: null,
            tool_calls: [{ id: 'call_3', type: 'function', function: { name: 'shell', arguments: '{}' } }],
          },
          { role: 'tool', tool_call_id: 'call_3', content: '' },
        ],
      }),
    ],
    [
      "Codex's custom_tool_call -> a call with its input as the one string argument; its output -> a tool message",
      base({
        tools: [APPLY_PATCH],
        input: [
          { role: 'user', content: 'add hello.txt' },
          { type: 'custom_tool_call', id: 'ctc_1', call_id: 'call_p', name: 'apply_patch', input: PATCH },
          { type: 'custom_tool_call_output', call_id: 'call_p', output: 'Success. Updated: A hello.txt' },
        ],
      }),
      chat({
        tools: [APPLY_PATCH_FN],
        messages: [
          { role: 'user', content: 'add hello.txt' },
          {
            role: 'assistant',
            content: null,
            tool_calls: [
              {
                id: 'call_p',
                type: 'function',
                function: { name: 'apply_patch', arguments: JSON.stringify({ input: PATCH }) },
              },
            ],
          },
          { role: 'tool', tool_call_id: 'call_p', content: 'Success. Updated: A hello.txt' },
        ],
      }),
    ],
    [
      'reasoning items sent back are dropped (the model reasons afresh)',
      base({
        include: ['reasoning.encrypted_content'],
        input: [
          { role: 'user', content: 'hi' },
          {
            type: 'reasoning',
            id: 'rs_1',
            summary: [{ type: 'summary_text', text: 'Greeting.' }],
            encrypted_content: 'gAAAAB-opaque',
          },
          { role: 'assistant', content: 'Hello.' },
          { role: 'user', content: 'bye' },
        ],
      }),
      chat({
        messages: [
          { role: 'user', content: 'hi' },
          { role: 'assistant', content: 'Hello.' },
          { role: 'user', content: 'bye' },
        ],
      }),
    ],
    [
      'tools: function tools (strict dropped, no parameters an empty object), custom tools as a function of one string, a namespace flattened',
      base({
        tools: [
          SHELL,
          { type: 'function', name: 'noop', parameters: null, strict: null },
          APPLY_PATCH,
          { type: 'custom', name: 'raw' },
          DOCS_NAMESPACE,
        ],
        tool_choice: 'auto',
      }),
      chat({
        tools: [
          SHELL_FN,
          { type: 'function', function: { name: 'noop', parameters: { type: 'object', properties: {} } } },
          APPLY_PATCH_FN,
          {
            type: 'function',
            function: {
              name: 'raw',
              description: '(Its whole input is one string argument "input".)',
              parameters: STRING_INPUT,
            },
          },
          {
            type: 'function',
            function: { name: 'search', description: 'Search the docs', parameters: SEARCH.parameters },
          },
        ],
        tool_choice: 'auto',
      }),
    ],
    [
      'text.format json_schema -> response_format json_schema (name, schema, strict); verbosity dropped',
      base({
        text: {
          verbosity: 'low',
          format: {
            type: 'json_schema',
            name: 'answer',
            schema: { type: 'object', properties: { a: { type: 'string' } } },
            strict: true,
          },
        },
      }),
      chat({
        response_format: {
          type: 'json_schema',
          json_schema: {
            name: 'answer',
            schema: { type: 'object', properties: { a: { type: 'string' } } },
            strict: true,
          },
        },
      }),
    ],
    [
      'text.format json_object -> response_format json_object',
      base({ text: { format: { type: 'json_object' } } }),
      chat({ response_format: { type: 'json_object' } }),
    ],
    ['text.format text: no response_format', base({ text: { format: { type: 'text' } } }), chat()],
    [
      'max_output_tokens -> max_tokens, reasoning.effort -> reasoning_effort (summary dropped), temperature and top_p as they are',
      base({ max_output_tokens: 2048, reasoning: { effort: 'high', summary: 'auto' }, temperature: 0.2, top_p: 0.9 }),
      chat({ max_tokens: 2048, reasoning_effort: 'high', temperature: 0.2, top_p: 0.9 }),
    ],
    // Converse would take minimal (a 1024-token thinking budget); here it means no reasoning at all.
    ['reasoning.effort other than low, medium or high is dropped', base({ reasoning: { effort: 'minimal' } }), chat()],
    [
      "fields with no meaning for chat, Codex's client_metadata among them, and null fields, are dropped",
      base({
        store: false,
        include: [],
        metadata: { run: '1' },
        prompt_cache_key: 'session-1',
        safety_identifier: 'u-1',
        service_tier: 'auto',
        truncation: 'auto',
        user: 'u-1',
        background: false,
        parallel_tool_calls: true,
        top_logprobs: 0,
        stream: false,
        client_metadata: { installation_id: 'inst-1', session_id: 'sess-1' },
        temperature: null,
        previous_response_id: null,
        conversation: null,
      }),
      chat(),
    ],
  ];

  it.each(cases)('%s', (_name, body, expected) => {
    const t = begin(body);
    expect(t.body).toEqual(expected);
    expect(t.wantsUsage).toBe(true);
  });

  it.each<[string, unknown, unknown]>([
    ['auto', 'auto', 'auto'],
    ['none', 'none', 'none'],
    ['required', 'required', 'required'],
    ['a function', { type: 'function', name: 'shell' }, { type: 'function', function: { name: 'shell' } }],
    ['a custom tool', { type: 'custom', name: 'apply_patch' }, { type: 'function', function: { name: 'apply_patch' } }],
    [
      'allowed_tools in auto mode',
      { type: 'allowed_tools', mode: 'auto', tools: [{ type: 'function', name: 'shell' }] },
      'auto',
    ],
  ])('tool_choice %s', (_name, choice, expected) => {
    expect(begin(base({ tools: [SHELL, APPLY_PATCH], tool_choice: choice })).body.tool_choice).toEqual(expected);
  });

  it("tool_choice allowed_tools in required mode keeps the obligation to call a tool ('required')", () => {
    const choice = { type: 'allowed_tools', mode: 'required', tools: [{ type: 'function', name: 'shell' }] };
    expect(begin(base({ tools: [SHELL], tool_choice: choice })).body.tool_choice).toBe('required');
  });

  it('tool_choice without tools is left out (nothing to choose from)', () => {
    expect(begin(base({ tool_choice: 'required' })).body).toEqual(chat());
  });

  it('a stream asks for the usage chunk', () => {
    const t = begin(base({ stream: true }), true);
    expect(t.body).toEqual(chat({ stream: true, stream_options: { include_usage: true } }));
    expect(t.wantsUsage).toBe(true);
  });

  it('a request without input (the spec allows it) becomes the instructions alone, for the upstream to judge', () => {
    const t = begin({ model: MODEL, instructions: 'Be brief.' });
    expect(t.body.messages).toEqual([{ role: 'system', content: 'Be brief.' }]);
  });

  it('leaves the request it was given as it was', () => {
    const body = base({
      instructions: 'x',
      tools: [SHELL, APPLY_PATCH, DOCS_NAMESPACE],
      input: [
        { role: 'user', content: [{ type: 'input_text', text: 'a' }] },
        { type: 'custom_tool_call', call_id: 'c', name: 'apply_patch', input: PATCH },
      ],
      text: { format: { type: 'json_schema', name: 'n', schema: {} } },
    });
    const before = structuredClone(body);
    begin(body);
    expect(body).toEqual(before);
  });

  it('a stored prompt template (prompt) is refused, not silently dropped', () => {
    const t = translator.begin(base({ prompt: { id: 'pmpt_123', version: '2', variables: { city: 'Paris' } } }), false);
    expect(t).toBeInstanceOf(ProxyError);
    expect(t).toMatchObject({ status: 400, param: 'prompt' });
  });
});

describe('openai-responses -> openai-chat: refusals', () => {
  const hosted = (tool: Json) => base({ tools: [SHELL, tool] });
  const user = (content: unknown) => base({ input: [{ role: 'user', content }] });
  const cases: Array<[string, Json, string, string?]> = [
    ['web_search', hosted({ type: 'web_search' }), 'tools[1]', 'web_search tool, hosted by OpenAI'],
    ['web_search_preview', hosted({ type: 'web_search_preview' }), 'tools[1]', 'web_search_preview'],
    ['file_search', hosted({ type: 'file_search', vector_store_ids: ['vs_1'] }), 'tools[1]', 'file_search'],
    [
      'computer_use_preview',
      hosted({ type: 'computer_use_preview', display_width: 1024, display_height: 768, environment: 'browser' }),
      'tools[1]',
      'computer_use_preview',
    ],
    [
      'code_interpreter',
      hosted({ type: 'code_interpreter', container: { type: 'auto' } }),
      'tools[1]',
      'code_interpreter',
    ],
    ['image_generation', hosted({ type: 'image_generation' }), 'tools[1]', 'image_generation'],
    [
      'a remote MCP server',
      hosted({ type: 'mcp', server_label: 'docs', server_url: 'https://mcp.example.com' }),
      'tools[1]',
      'mcp',
    ],
    ['local_shell', hosted({ type: 'local_shell' }), 'tools[1]', 'local_shell'],
    ['shell', hosted({ type: 'shell' }), 'tools[1]', 'shell'],
    ['apply_patch (the hosted tool, not the custom one)', hosted({ type: 'apply_patch' }), 'tools[1]', 'apply_patch'],
    ['tool_search', hosted({ type: 'tool_search' }), 'tools[1]', 'tool_search'],
    ['an unknown field', base({ frobnicate: true }), 'frobnicate', 'frobnicate'],
    // proxy/endpoints/responses-request.ts refuses these first, with a message saying how to send the
    // input instead; the translator refuses them on its own too (as fields chat cannot take).
    ['previous_response_id', base({ previous_response_id: 'resp_1' }), 'previous_response_id'],
    ['conversation', base({ conversation: 'conv_1' }), 'conversation'],
    [
      'an item_reference',
      base({
        input: [
          { role: 'user', content: 'hi' },
          { type: 'item_reference', id: 'msg_1' },
        ],
      }),
      'input[1]',
      'item_reference',
    ],
    [
      "a hosted tool's call in the history",
      base({
        input: [
          { role: 'user', content: 'news?' },
          { type: 'web_search_call', id: 'ws_1', status: 'completed', action: { type: 'search', query: 'news' } },
        ],
      }),
      'input[1]',
      'web_search_call',
    ],
    [
      'a local_shell_call in the history',
      base({
        input: [
          {
            type: 'local_shell_call',
            id: 'lsc_1',
            call_id: 'c',
            status: 'completed',
            action: { type: 'exec', command: ['ls'], env: {} },
          },
        ],
      }),
      'input[0]',
    ],
    [
      'a file part',
      user([
        { type: 'input_text', text: 'summarize' },
        { type: 'input_file', file_id: 'file_1' },
      ]),
      'input[0].content[1]',
      'input_file',
    ],
    ['an image by file id', user([{ type: 'input_image', file_id: 'file_1', detail: 'auto' }]), 'input[0].content[0]'],
    ['audio', user([{ type: 'input_audio', input_audio: { data: 'AAAA', format: 'wav' } }]), 'input[0].content[0]'],
  ];

  it.each(cases)('%s -> a 400 naming it', (_name, body, param, says) => {
    const err = refusal(body);
    expect(err).toMatchObject({ status: 400, type: 'invalid_request_error', code: 'unsupported_parameter', param });
    expect(err.message).toContain(param);
    if (says) expect(err.message).toContain(says);
  });

  it.each<[string, Json, string]>([
    ['a role chat has not', base({ input: [{ role: 'tool', content: 'x' }] }), 'input[0].role'],
    ['user content neither a string nor parts', user({ type: 'input_text', text: 'x' }), 'input[0].content'],
  ])('%s -> a 400 invalid_request naming it', (_name, body, param) => {
    expect(refusal(body)).toMatchObject({ status: 400, code: 'invalid_request', param });
  });

  it("background is the parser's to refuse (proxy/endpoints/responses-request.ts): here it is dropped", () => {
    expect(begin(base({ background: true })).body).toEqual(chat());
  });

  it("a hosted tool after a namespace is named by its index in the caller's tools", () => {
    expect(
      refusal(base({ tools: [{ ...DOCS_NAMESPACE, tools: [SEARCH, SHELL] }, { type: 'web_search' }] })).param,
    ).toBe('tools[1]');
  });

  it('a function_call_output of an image only is refused, not sent as "[object Object]"', () => {
    const t = translator.begin(
      base({
        input: [
          { type: 'function_call', call_id: 'c1', name: 'screenshot', arguments: '{}' },
          { type: 'function_call_output', call_id: 'c1', output: [{ type: 'input_image', image_url: PNG }] },
        ],
      }),
      false,
    );
    if (!(t instanceof ProxyError)) expect(JSON.stringify(t.body)).not.toContain('[object Object]');
    expect(t).toBeInstanceOf(ProxyError);
  });
});

// ---------------------------------------------------------------------------------------------
// Answers

const CHAT_ID = 'chatcmpl-abc123';
const USAGE = {
  prompt_tokens: 40,
  completion_tokens: 12,
  total_tokens: 52,
  prompt_tokens_details: { cached_tokens: 10 },
};
const RESPONSES_USAGE = {
  input_tokens: 40,
  input_tokens_details: { cached_tokens: 10 },
  output_tokens: 12,
  output_tokens_details: { reasoning_tokens: 0 },
  total_tokens: 52,
};
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
          { id: 'call_1', type: 'function', function: { name: 'shell', arguments: '{"command":["ls","-la"]}' } },
        ],
      },
      finish_reason: 'tool_calls',
      logprobs: null,
    },
  ],
  usage: USAGE,
};

const answer = (message: Json, finish = 'stop', usage: Json | null = { prompt_tokens: 5, completion_tokens: 2 }) => ({
  id: CHAT_ID,
  object: 'chat.completion',
  created: 1,
  model: MODEL,
  choices: [{ index: 0, message: { role: 'assistant', ...message }, finish_reason: finish, logprobs: null }],
  ...(usage ? { usage } : {}),
});

const generated = (prefix: string) => expect.stringMatching(new RegExp(`^${prefix}_[0-9a-z]+$`));

/** COMPLETION as a Responses response, for a request of `base({ tools: [SHELL] })`. */
const RESPONSE = {
  id: generated('resp'),
  object: 'response',
  created_at: expect.any(Number),
  status: 'completed',
  error: null,
  incomplete_details: null,
  instructions: null,
  max_output_tokens: null,
  model: MODEL,
  output: [
    {
      type: 'message',
      id: generated('msg'),
      role: 'assistant',
      status: 'completed',
      content: [{ type: 'output_text', text: 'Let me look.', annotations: [], logprobs: [] }],
    },
    {
      type: 'function_call',
      id: generated('fc'),
      call_id: 'call_1',
      name: 'shell',
      arguments: '{"command":["ls","-la"]}',
      status: 'completed',
    },
  ],
  parallel_tool_calls: true,
  temperature: null,
  tool_choice: 'auto',
  tools: [SHELL],
  top_p: null,
  store: false,
  text: { format: { type: 'text' } },
  usage: RESPONSES_USAGE,
  metadata: {},
};

/** The OpenAI SDK reading `body` as the answer of /responses. */
const sdkClient = (body: string, contentType = 'text/event-stream; charset=utf-8') =>
  new OpenAI({
    apiKey: 'test',
    baseURL: 'http://gateway.test/openai/v1',
    maxRetries: 0,
    fetch: async () => new Response(body, { status: 200, headers: { 'content-type': contentType } }),
  });

/** `value` with what two translations of one answer may differ in (generated ids, the clock) blanked. */
const modIds = (value: unknown): unknown =>
  JSON.parse(JSON.stringify(value, (k, v) => (k === 'id' || k === 'created_at' ? '<generated>' : v)));

describe('openai-responses -> openai-chat: answers', () => {
  it('maps a completion with text, a tool call and cached prompt tokens to a response', () => {
    const response = begin(base({ tools: [SHELL] })).json(COMPLETION) as Json;
    expect(response).toEqual(RESPONSE);
    expect(response.created_at).toBeCloseTo(Date.now() / 1000, -1);
  });

  it("the OpenAI SDK reads it, adding output_text (the SDK's convenience, not the wire's)", async () => {
    const json = begin(base({ tools: [SHELL] })).json(COMPLETION);
    const read = await sdkClient(JSON.stringify(json), 'application/json').responses.create({
      model: MODEL,
      input: 'hi',
    });
    expect(read.output_text).toBe('Let me look.');
    expect(read).toEqual({ ...(json as Json), output_text: 'Let me look.' });
  });

  it('echoes the request: instructions, max_output_tokens, temperature, top_p, tool_choice, tools, text, parallel_tool_calls', () => {
    const request = base({
      instructions: 'Be brief.',
      max_output_tokens: 100,
      temperature: 0.5,
      top_p: 0.8,
      tool_choice: 'required',
      tools: [SHELL],
      text: { format: { type: 'json_object' } },
      parallel_tool_calls: false,
    });
    expect(begin(request).json(answer({ content: '{}' }))).toMatchObject({
      instructions: 'Be brief.',
      max_output_tokens: 100,
      temperature: 0.5,
      top_p: 0.8,
      tool_choice: 'required',
      tools: [SHELL],
      text: { format: { type: 'json_object' } },
      parallel_tool_calls: false,
    });
  });

  it('ids are new per response and per item', () => {
    const t = begin(base({ tools: [SHELL] }));
    const a = t.json(COMPLETION) as { id: string; output: Json[] };
    const b = t.json(COMPLETION) as { id: string; output: Json[] };
    const ids = [a.id, b.id, ...a.output.map((o) => o.id), ...b.output.map((o) => o.id)];
    expect(new Set(ids).size).toBe(ids.length);
  });

  it.each<[string, Json, Json[]]>([
    [
      'text only: one message item',
      answer({ content: 'Hello.' }),
      [
        {
          type: 'message',
          id: generated('msg'),
          role: 'assistant',
          status: 'completed',
          content: [{ type: 'output_text', text: 'Hello.', annotations: [], logprobs: [] }],
        },
      ],
    ],
    [
      'tool calls without text: function_call items only, arguments as written',
      answer(
        {
          content: null,
          tool_calls: [
            { id: 'c1', type: 'function', function: { name: 'shell', arguments: '{"command":["pwd"]}' } },
            { id: 'c2', type: 'function', function: { name: 'search', arguments: '{"q": ' } },
          ],
        },
        'tool_calls',
      ),
      [
        {
          type: 'function_call',
          id: generated('fc'),
          call_id: 'c1',
          name: 'shell',
          arguments: '{"command":["pwd"]}',
          status: 'completed',
        },
        {
          type: 'function_call',
          id: generated('fc'),
          call_id: 'c2',
          name: 'search',
          arguments: '{"q": ',
          status: 'completed',
        },
      ],
    ],
    [
      "a custom tool's call -> a custom_tool_call with its input unwrapped",
      answer(
        {
          content: null,
          tool_calls: [
            {
              id: 'c1',
              type: 'function',
              function: { name: 'apply_patch', arguments: JSON.stringify({ input: PATCH }) },
            },
          ],
        },
        'tool_calls',
      ),
      [
        {
          type: 'custom_tool_call',
          id: generated('ctc'),
          call_id: 'c1',
          name: 'apply_patch',
          input: PATCH,
          status: 'completed',
        },
      ],
    ],
    [
      "a custom tool's call whose arguments are not the JSON asked for: the model's text is the input",
      answer(
        {
          content: null,
          tool_calls: [{ id: 'c1', type: 'function', function: { name: 'apply_patch', arguments: PATCH } }],
        },
        'tool_calls',
      ),
      [
        {
          type: 'custom_tool_call',
          id: generated('ctc'),
          call_id: 'c1',
          name: 'apply_patch',
          input: PATCH,
          status: 'completed',
        },
      ],
    ],
    [
      "the model's reasoning (Bedrock's reasoning_content) -> a reasoning item first, with its text as the summary",
      answer({ content: 'Hi.', reasoning_content: 'A greeting.' }),
      [
        { type: 'reasoning', id: generated('rs'), summary: [{ type: 'summary_text', text: 'A greeting.' }] },
        {
          type: 'message',
          id: generated('msg'),
          role: 'assistant',
          status: 'completed',
          content: [{ type: 'output_text', text: 'Hi.', annotations: [], logprobs: [] }],
        },
      ],
    ],
    ['empty content: no items', answer({ content: '' }), []],
  ])('%s', (_name, completion, output) => {
    const response = begin(base({ tools: [SHELL, APPLY_PATCH] })).json(completion) as Json;
    expect(response.output).toEqual(output);
    expect(response).toMatchObject({ status: 'completed', incomplete_details: null });
  });

  it('finish_reason length -> status incomplete, incomplete_details max_output_tokens', () => {
    const response = begin(base({ max_output_tokens: 2 })).json(answer({ content: 'Hel' }, 'length'));
    expect(response).toMatchObject({
      status: 'incomplete',
      incomplete_details: { reason: 'max_output_tokens' },
      max_output_tokens: 2,
    });
  });

  it('usage: total is input plus output; no cache details -> 0 cached; no usage -> null', () => {
    const t = begin(base());
    expect((t.json(answer({ content: 'x' })) as Json).usage).toEqual({
      input_tokens: 5,
      input_tokens_details: { cached_tokens: 0 },
      output_tokens: 2,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: 7,
    });
    expect((t.json(answer({ content: 'x' }, 'stop', null)) as Json).usage).toBeNull();
  });

  it('finish_reason content_filter -> status incomplete, incomplete_details content_filter', () => {
    expect(begin(base()).json(answer({ content: 'I cannot' }, 'content_filter'))).toMatchObject({
      status: 'incomplete',
      incomplete_details: { reason: 'content_filter' },
    });
  });

  it("a call to a namespaced tool carries the tool's namespace", () => {
    const response = begin(base({ tools: [SHELL, DOCS_NAMESPACE] })).json(
      answer(
        {
          content: null,
          tool_calls: [{ id: 'c1', type: 'function', function: { name: 'search', arguments: '{"q":"x"}' } }],
        },
        'tool_calls',
      ),
    ) as { output: Json[] };
    expect(response.output[0]).toMatchObject({ type: 'function_call', name: 'search', namespace: 'mcp__docs__' });
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
const usageChunk = (usage: Json) => ({
  id: CHAT_ID,
  object: 'chat.completion.chunk',
  created: 1,
  model: MODEL,
  choices: [],
  usage,
});
const call = (index: number, id: string, name: string, args = '') =>
  chunk({ tool_calls: [{ index, id, type: 'function', function: { name, arguments: args } }] });
const args = (index: number, piece: string) => chunk({ tool_calls: [{ index, function: { arguments: piece } }] });
const wire = (...chunks: unknown[]) => chunks.map(sse).join('');

/** COMPLETION as OpenAI streams it: role, text in pieces, the tool call split across chunks, finish, usage, [DONE]. */
const STREAM = wire(
  chunk({ role: 'assistant', content: '' }),
  chunk({ content: 'Let ' }),
  chunk({ content: 'me look.' }),
  call(0, 'call_1', 'shell'),
  args(0, '{"command":'),
  args(0, '["ls","-la"]}'),
  chunk({}, 'tool_calls'),
  usageChunk(USAGE),
  '[DONE]',
);

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

async function translated(text: string, body: Json = base({ stream: true, tools: [SHELL] })): Promise<string> {
  const out = begin(body, true).stream(upstream(text), Promise.resolve({}));
  return new Response(webStream(out)).text();
}

type Event = Json & { type: string; sequence_number: number };
const events = (text: string): Event[] =>
  text
    .trim()
    .split('\n\n')
    .map((frame) => {
      const [event, data, ...rest] = frame.split('\n');
      expect(rest).toEqual([]);
      expect(data?.startsWith('data: ')).toBe(true);
      const parsed = JSON.parse((data ?? '').slice('data: '.length)) as Event;
      expect(event).toBe(`event: ${parsed.type}`);
      return parsed;
    });

const itemOf = (e: Event | undefined): Json => (e?.item ?? {}) as Json;
const responseOf = (e: Event | undefined): Json => (e?.response ?? {}) as Json;

/** The events the OpenAI SDK parses out of a translated stream (`responses.create({ stream: true })`). */
async function sdkEvents(text: string): Promise<OpenAI.Responses.ResponseStreamEvent[]> {
  const out: OpenAI.Responses.ResponseStreamEvent[] = [];
  for await (const e of await sdkClient(text).responses.create({ model: MODEL, input: 'hi', stream: true }))
    out.push(e);
  return out;
}

/** The response the OpenAI SDK's stream helper accumulates from a translated stream. */
const sdkFinal = (text: string) => sdkClient(text).responses.stream({ model: MODEL, input: 'hi' }).finalResponse();

/** What the OpenAI SDK makes of a translated stream: its events' types, and its stream helper's final response. */
async function sdkRead(text: string): Promise<{ types: string[]; final: OpenAI.Responses.Response }> {
  return { types: (await sdkEvents(text)).map((e) => e.type), final: await sdkFinal(text) };
}

/** The whole answer's translation as the SDK's stream helper returns a response (output_text, parsed fields). */
async function sdkWhole(json: unknown): Promise<unknown> {
  return sdkClient(JSON.stringify(json), 'application/json').responses.parse({ model: MODEL, input: 'hi' });
}

describe('openai-responses -> openai-chat: streams', () => {
  it("emits the Responses event sequence: created, in_progress, the message's events, the call's, completed with usage", async () => {
    const out = events(await translated(STREAM));
    expect(out.map((e) => e.type)).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
      'response.output_text.delta',
      'response.output_text.delta',
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.output_item.added',
      'response.function_call_arguments.delta',
      'response.function_call_arguments.delta',
      'response.function_call_arguments.done',
      'response.output_item.done',
      'response.completed',
    ]);
    expect(out.map((e) => e.sequence_number)).toEqual(out.map((_, i) => i));

    const [created, inProgress] = out;
    expect(created?.response).toMatchObject({ id: generated('resp'), status: 'in_progress', output: [] });
    // No usage yet: the spec's Response has usage or none, never null.
    expect(created?.response).not.toHaveProperty('usage');
    expect(inProgress?.response).toEqual(created?.response);

    const added = out.filter((e) => e.type === 'response.output_item.added');
    expect(added).toEqual([
      {
        type: 'response.output_item.added',
        sequence_number: 2,
        output_index: 0,
        item: { type: 'message', id: generated('msg'), role: 'assistant', status: 'in_progress', content: [] },
      },
      {
        type: 'response.output_item.added',
        sequence_number: 9,
        output_index: 1,
        item: {
          type: 'function_call',
          id: generated('fc'),
          call_id: 'call_1',
          name: 'shell',
          arguments: '',
          status: 'in_progress',
        },
      },
    ]);
    const msgId = itemOf(added[0]).id;
    const fcId = itemOf(added[1]).id;
    const textEvents = out.slice(3, 8);
    for (const e of textEvents) expect(e).toMatchObject({ item_id: msgId, output_index: 0, content_index: 0 });
    expect(textEvents.map((e) => e.delta ?? e.text ?? e.part)).toEqual([
      { type: 'output_text', text: '', annotations: [], logprobs: [] },
      'Let ',
      'me look.',
      'Let me look.',
      { type: 'output_text', text: 'Let me look.', annotations: [], logprobs: [] },
    ]);
    const callEvents = out.slice(10, 13);
    for (const e of callEvents) expect(e).toMatchObject({ item_id: fcId, output_index: 1 });
    expect(callEvents.map((e) => e.delta ?? e.arguments)).toEqual([
      '{"command":',
      '["ls","-la"]}',
      '{"command":["ls","-la"]}',
    ]);

    const completed = responseOf(out.at(-1));
    expect(completed).toEqual({ ...RESPONSE, id: responseOf(created).id });
    expect(completed.output).toEqual(out.filter((e) => e.type === 'response.output_item.done').map((e) => e.item));
    expect((completed.output as Json[]).map((o) => o.id)).toEqual([msgId, fcId]);
  });

  it('the OpenAI SDK parses every event, and its stream helper makes of them the response the whole answer translates to', async () => {
    const text = await translated(STREAM);
    const { types, final } = await sdkRead(text);
    expect(types).toEqual(events(text).map((e) => e.type));
    expect(final.output_text).toBe('Let me look.');
    expect(modIds(final)).toEqual(modIds(await sdkWhole(begin(base({ tools: [SHELL] })).json(COMPLETION))));
  });

  /** One answer, streamed and whole: the SDK must read the same response from both. */
  const same: Array<[string, Json, string, Json]> = [
    [
      'reasoning, then text (Bedrock streams reasoning_content first)',
      base(),
      wire(
        chunk({ role: 'assistant', content: '' }),
        chunk({ reasoning_content: 'The user ' }),
        chunk({ reasoning_content: 'greets me.' }),
        chunk({ content: 'Hello' }),
        chunk({ content: '!' }),
        chunk({}, 'stop'),
        usageChunk({ prompt_tokens: 9, completion_tokens: 20 }),
        '[DONE]',
      ),
      answer({ content: 'Hello!', reasoning_content: 'The user greets me.' }, 'stop', {
        prompt_tokens: 9,
        completion_tokens: 20,
      }),
    ],
    [
      "a custom tool's call, its JSON argument split across chunks",
      base({ tools: [APPLY_PATCH] }),
      wire(
        call(0, 'call_p', 'apply_patch'),
        args(0, '{"input":"*** Begin Patch\\n'),
        args(0, JSON.stringify({ input: PATCH }).slice('{"input":"*** Begin Patch\\n'.length)),
        chunk({}, 'tool_calls'),
        usageChunk(USAGE),
        '[DONE]',
      ),
      answer(
        {
          content: null,
          tool_calls: [
            {
              id: 'call_p',
              type: 'function',
              function: { name: 'apply_patch', arguments: JSON.stringify({ input: PATCH }) },
            },
          ],
        },
        'tool_calls',
        USAGE,
      ),
    ],
    [
      'two parallel calls, the second split across chunks',
      base({ tools: [SHELL, SEARCH] }),
      wire(
        chunk({ role: 'assistant', content: null }),
        call(0, 'c1', 'shell', '{"command":["pwd"]}'),
        call(1, 'c2', 'search'),
        args(1, '{"q":'),
        args(1, '"x"}'),
        chunk({}, 'tool_calls'),
        usageChunk(USAGE),
        '[DONE]',
      ),
      answer(
        {
          content: null,
          tool_calls: [
            { id: 'c1', type: 'function', function: { name: 'shell', arguments: '{"command":["pwd"]}' } },
            { id: 'c2', type: 'function', function: { name: 'search', arguments: '{"q":"x"}' } },
          ],
        },
        'tool_calls',
        USAGE,
      ),
    ],
    [
      'cut off at max_output_tokens: response.incomplete',
      base({ max_output_tokens: 3 }),
      wire(
        chunk({ content: 'One two' }),
        chunk({}, 'length'),
        usageChunk({ prompt_tokens: 4, completion_tokens: 3 }),
        '[DONE]',
      ),
      answer({ content: 'One two' }, 'length', { prompt_tokens: 4, completion_tokens: 3 }),
    ],
  ];

  it.each(same)('%s: the same response as the whole answer', async (_name, request, stream, completion) => {
    const text = await translated(stream, { ...request, stream: true });
    const out = events(text);
    expect(out.map((e) => e.sequence_number)).toEqual(out.map((_, i) => i));
    const { types, final } = await sdkRead(text);
    expect(types).toEqual(out.map((e) => e.type));
    expect(modIds(final)).toEqual(modIds(await sdkWhole(begin(request).json(completion))));
  });

  it('a custom tool call streams as a custom_tool_call: no argument deltas, its input whole at the end', async () => {
    const [, request, stream] = same[1] as (typeof same)[number];
    const out = events(await translated(stream, { ...request, stream: true }));
    expect(out.map((e) => e.type)).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.custom_tool_call_input.done',
      'response.output_item.done',
      'response.completed',
    ]);
    expect(out[2]?.item).toEqual({
      type: 'custom_tool_call',
      id: generated('ctc'),
      call_id: 'call_p',
      name: 'apply_patch',
      input: '',
      status: 'in_progress',
    });
    const id = itemOf(out[2]).id;
    expect(out[3]).toMatchObject({ item_id: id, output_index: 0, input: PATCH });
    expect(out[4]?.item).toEqual({
      type: 'custom_tool_call',
      id,
      call_id: 'call_p',
      name: 'apply_patch',
      input: PATCH,
      status: 'completed',
    });
  });

  it('reasoning streams as a reasoning item with one summary part, closed before the message begins', async () => {
    const [, request, stream] = same[0] as (typeof same)[number];
    const out = events(await translated(stream, { ...request, stream: true }));
    expect(out.map((e) => e.type).slice(2, 9)).toEqual([
      'response.output_item.added',
      'response.reasoning_summary_part.added',
      'response.reasoning_summary_text.delta',
      'response.reasoning_summary_text.delta',
      'response.reasoning_summary_text.done',
      'response.output_item.done',
      'response.output_item.added',
    ]);
    expect(out[2]).toMatchObject({ output_index: 0, item: { type: 'reasoning', summary: [] } });
    expect(out[6]).toMatchObject({ output_index: 0, summary_index: 0, text: 'The user greets me.' });
    expect(out[8]).toMatchObject({ output_index: 1, item: { type: 'message' } });
  });

  it('numbers items in the order they begin: text after the calls is a message item after them', async () => {
    const text = await translated(
      wire(
        call(0, 'c1', 'shell', '{"command":["pwd"]}'),
        chunk({ content: 'Done.' }),
        chunk({}, 'tool_calls'),
        '[DONE]',
      ),
    );
    const out = events(text);
    const added = out.filter((e) => e.type === 'response.output_item.added');
    expect(added.map((e) => [e.output_index, (e.item as Json).type])).toEqual([
      [0, 'function_call'],
      [1, 'message'],
    ]);
    for (const e of out.filter(
      (e) => e.type.startsWith('response.output_text') || e.type.startsWith('response.content_part'),
    ))
      expect(e).toMatchObject({ output_index: 1, content_index: 0, item_id: itemOf(added[1]).id });
    const { final } = await sdkRead(text);
    expect(final.output.map((o) => o.type)).toEqual(['function_call', 'message']);
    expect(final.output_text).toBe('Done.');
  });

  it('an empty answer is still a whole response (no items)', async () => {
    const out = events(await translated(wire(chunk({ role: 'assistant', content: '' }), chunk({}, 'stop'), '[DONE]')));
    expect(out.map((e) => e.type)).toEqual(['response.created', 'response.in_progress', 'response.completed']);
    expect(out[2]?.response).toMatchObject({ status: 'completed', output: [] });
    // The upstream reported no usage: none, rather than the null the spec does not allow.
    expect(out[2]?.response).not.toHaveProperty('usage');
  });

  it('an upstream that ends without [DONE] still ends with response.completed', async () => {
    const out = events(await translated(wire(chunk({ content: 'Hi' }), chunk({}, 'stop'))));
    expect(out.at(-1)).toMatchObject({ type: 'response.completed', response: { status: 'completed' } });
  });

  it('an upstream error closes the open items and ends with the error event (no response.completed)', async () => {
    const error = {
      error: { message: 'Bedrock broke off', type: 'api_error', param: null, code: 'upstream_stream_broken' },
    };
    const text = await translated(
      wire(
        chunk({ content: 'Let ' }),
        call(0, 'call_1', 'shell', '{"com'),
        error,
        chunk({ content: 'lost' }),
        '[DONE]',
      ),
    );
    const out = events(text);
    expect(out.map((e) => e.type)).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
      'response.output_text.delta',
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.output_item.added',
      'response.function_call_arguments.delta',
      'response.function_call_arguments.done',
      'response.output_item.done',
      'error',
    ]);
    expect(out.at(-1)).toMatchObject({ type: 'error', code: 'upstream_stream_broken', message: 'Bedrock broke off' });
    // The SDK yields the error event, and its stream helper rejects with it.
    expect((await sdkEvents(text)).at(-1)).toMatchObject({ type: 'error', message: 'Bedrock broke off' });
    await expect(sdkFinal(text)).rejects.toMatchObject({ type: 'error', message: 'Bedrock broke off' });
  });

  it('reads the upstream only as the client reads, and passes a cancel on', async () => {
    let reads = 0;
    let cancelled = false;
    const parts = [sse(chunk({ content: 'a' })), sse(chunk({ content: 'b' }))].map((c) => new TextEncoder().encode(c));
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
    // response.created and response.in_progress need nothing from the upstream.
    const first = new TextDecoder().decode(await out.read());
    expect(events(first).map((e) => e.type)).toEqual(['response.created', 'response.in_progress']);
    expect(reads).toBe(0);
    await out.read();
    expect(reads).toBe(1);
    out.cancel();
    expect(cancelled).toBe(true);
  });

  it('response.function_call_arguments.done names the function', async () => {
    const done = events(await translated(STREAM)).find((e) => e.type === 'response.function_call_arguments.done');
    expect(done).toMatchObject({ name: 'shell' });
  });

  it("a streamed call to a namespaced tool carries the tool's namespace", async () => {
    const text = await translated(
      wire(call(0, 'c1', 'search', '{"q":"x"}'), chunk({}, 'tool_calls'), '[DONE]'),
      base({ stream: true, tools: [DOCS_NAMESPACE] }),
    );
    const done = events(text).find((e) => e.type === 'response.output_item.done');
    expect(done?.item).toMatchObject({ name: 'search', namespace: 'mcp__docs__' });
  });
});
