import { isRecord } from '../../crds/is-record.js';
import { conformEvent } from '../conformance/conformance.js';
import { DIALECTS } from '../endpoints/dialects.js';
import { invalidRequest, ProxyError } from '../endpoints/errors.js';
import type { ChunkSource, StreamBody } from '../upstreams/chunk-source.js';
import type { StreamOutcome } from '../upstreams/upstream.js';
import { type ChatChunk, type ChatToolCallDelta, type ChatUsage, chatChunkStream } from './chat-chunks.js';
import type { Translation, Translator } from './translator.js';

/**
 * OpenAI's Responses API for upstreams that speak chat completions only (Bedrock, through its
 * Converse translator). Stateless: the whole conversation is in `input` (the parser refused
 * references to stored items). Items map to messages: `instructions` and system/developer
 * messages to system, `function_call` to an assistant's tool call, `function_call_output` to a
 * tool message. Codex's free-form `custom` tools become function tools taking one string
 * `input`, and their calls come back as `custom_tool_call` items, so the agent sees its own
 * shapes. Reasoning items sent back are dropped (chat has nowhere to put an opaque one); other
 * tool kinds (web search, file search, computer use, ...) are hosted tools of OpenAI's and are
 * refused with a 400 naming them.
 */

type Json = Record<string, unknown>;

const unsupported = (message: string, param: string) => invalidRequest(message, param, 'unsupported_parameter');

/** Responses fields with no meaning once translated: not sent on. */
const DROPPED = new Set([
  'store',
  'include',
  'metadata',
  'prompt_cache_key',
  'safety_identifier',
  'service_tier',
  'truncation',
  'user',
  'background',
  'text',
  'reasoning',
  'max_output_tokens',
  'instructions',
  'input',
  'tools',
  'tool_choice',
  'stream',
  'parallel_tool_calls',
  'top_logprobs',
  // Codex's own request metadata (installation, session): for OpenAI's servers, not the model.
  'client_metadata',
  'model',
]);

/** Responses fields chat completions takes as they are. */
const PASSED = new Set(['temperature', 'top_p']);

function textOf(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content
    .map((p) =>
      isRecord(p) && typeof p.text === 'string'
        ? p.text
        : isRecord(p) && typeof p.refusal === 'string'
          ? p.refusal
          : '',
    )
    .join('');
}

function userContent(content: unknown, at: string): unknown | ProxyError {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return invalidRequest(`${at}.content must be a string or an array`, `${at}.content`);
  const parts: Json[] = [];
  for (const [i, p] of content.entries()) {
    if (!isRecord(p)) continue;
    if ((p.type === 'input_text' || p.type === 'output_text') && typeof p.text === 'string')
      parts.push({ type: 'text', text: p.text });
    else if (p.type === 'input_image' && typeof p.image_url === 'string')
      parts.push({ type: 'image_url', image_url: { url: p.image_url } });
    else
      return unsupported(`${at}.content[${i}] (${String(p.type)}) cannot be sent to this model`, `${at}.content[${i}]`);
  }
  return parts;
}

function messagesOf(body: Json): Json[] | ProxyError {
  const messages: Json[] = [];
  if (typeof body.instructions === 'string' && body.instructions !== '')
    messages.push({ role: 'system', content: body.instructions });
  const input = body.input;
  if (typeof input === 'string') {
    messages.push({ role: 'user', content: input });
    return messages;
  }
  // No input (the spec allows it: instructions alone): the upstream judges what is left.
  if (!Array.isArray(input)) return messages;
  let pendingCalls: Json[] | undefined;
  const flush = () => {
    if (pendingCalls) messages.push({ role: 'assistant', content: null, tool_calls: pendingCalls });
    pendingCalls = undefined;
  };
  for (const [i, item] of (input as Json[]).entries()) {
    const at = `input[${i}]`;
    const type = item.type ?? 'message';
    if (type === 'function_call' || type === 'custom_tool_call') {
      const args =
        type === 'function_call' ? String(item.arguments ?? '{}') : JSON.stringify({ input: String(item.input ?? '') });
      pendingCalls ??= [];
      pendingCalls.push({
        id: String(item.call_id),
        type: 'function',
        function: { name: String(item.name), arguments: args },
      });
      continue;
    }
    flush();
    if (type === 'message') {
      const role = item.role;
      if (role === 'system' || role === 'developer') messages.push({ role: 'system', content: textOf(item.content) });
      else if (role === 'assistant') messages.push({ role: 'assistant', content: textOf(item.content) });
      else if (role === 'user') {
        const content = userContent(item.content, at);
        if (content instanceof ProxyError) return content;
        messages.push({ role: 'user', content });
      } else return invalidRequest(`${at}.role must be user, assistant, system or developer`, `${at}.role`);
    } else if (type === 'function_call_output' || type === 'custom_tool_call_output') {
      const parts = Array.isArray(item.output) ? (item.output as unknown[]) : [];
      if (parts.some((p) => isRecord(p) && p.type !== 'input_text' && p.type !== 'output_text')) {
        return unsupported(
          `${at}.output holds images or files, which a tool result of this model's upstream (chat completions) cannot carry`,
          `${at}.output`,
        );
      }
      messages.push({
        role: 'tool',
        tool_call_id: String(item.call_id),
        content: typeof item.output === 'string' ? item.output : textOf(item.output),
      });
    } else if (type === 'reasoning') {
      // Opaque to chat completions: dropped (the model reasons afresh).
    } else {
      return unsupported(
        `${at} is a ${String(type)} item, which this model's upstream (chat completions) cannot take`,
        at,
      );
    }
  }
  flush();
  return messages;
}

/** What the answer needs to know of the tools asked: which are free-form, and which namespace each came from. */
interface ToolNames {
  custom: ReadonlySet<string>;
  namespaceOf: ReadonlyMap<string, string>;
}

function toolsOf(tools: unknown): { tools: Json[]; names: ToolNames } | ProxyError {
  const out: Json[] = [];
  const custom = new Set<string>();
  const namespaceOf = new Map<string, string>();
  const names = { custom, namespaceOf };
  if (!Array.isArray(tools)) return { tools: out, names };
  // Codex groups some tools (MCP servers') in a namespace: chat has none, so its tools join the
  // others by name, and a call names its namespace again on the way back (Codex finds tools by both).
  const flat = (tools as Json[]).flatMap((t, i) =>
    t.type === 'namespace'
      ? (Array.isArray(t.tools) ? (t.tools as Json[]) : []).map((inner, j) => ({
          t: inner,
          at: `tools[${i}].tools[${j}]`,
          namespace: typeof t.name === 'string' ? t.name : undefined,
        }))
      : [{ t, at: `tools[${i}]`, namespace: undefined }],
  );
  const seen = new Set<string>();
  for (const { t, at, namespace } of flat) {
    if (t.type !== 'function' && t.type !== 'custom') {
      return unsupported(
        `${at} is a ${String(t.type)} tool, hosted by OpenAI; this model takes function and custom tools`,
        at,
      );
    }
    const name = String(t.name);
    if (seen.has(name)) {
      return unsupported(
        `${at}: a second tool named ${JSON.stringify(name.slice(0, 64))}; this model's upstream (chat completions) has one name space for tools`,
        at,
      );
    }
    seen.add(name);
    if (namespace) namespaceOf.set(name, namespace);
    if (t.type === 'function') {
      out.push({
        type: 'function',
        function: {
          name: t.name,
          ...(typeof t.description === 'string' ? { description: t.description } : {}),
          parameters: isRecord(t.parameters) ? t.parameters : { type: 'object', properties: {} },
        },
      });
    } else {
      custom.add(name);
      out.push({
        type: 'function',
        function: {
          name: t.name,
          description:
            `${typeof t.description === 'string' ? t.description : ''} (Its whole input is one string argument "input".)`.trim(),
          parameters: { type: 'object', properties: { input: { type: 'string' } }, required: ['input'] },
        },
      });
    }
  }
  return { tools: out, names };
}

function toolChoiceOf(choice: unknown): unknown {
  if (choice === undefined || choice === null || typeof choice === 'string') return choice ?? undefined;
  if (isRecord(choice) && (choice.type === 'function' || choice.type === 'custom') && typeof choice.name === 'string')
    return { type: 'function', function: { name: choice.name } };
  // allowed_tools keeps its obligation (chat cannot narrow the set: every tool asked is offered).
  if (isRecord(choice) && choice.type === 'allowed_tools' && choice.mode === 'required') return 'required';
  return 'auto';
}

function responseFormatOf(text: unknown): unknown {
  const format = isRecord(text) ? text.format : undefined;
  if (!isRecord(format)) return undefined;
  if (format.type === 'json_object') return { type: 'json_object' };
  if (format.type === 'json_schema')
    return {
      type: 'json_schema',
      json_schema: {
        name: format.name ?? 'output',
        schema: format.schema,
        ...(format.strict !== undefined ? { strict: format.strict } : {}),
      },
    };
  return undefined;
}

const EFFORTS = new Set(['low', 'medium', 'high']);

// ---------------------------------------------------------------------------------------------
// Answers

interface ChatMessage {
  content?: string | null;
  reasoning_content?: string;
  tool_calls?: Array<{ id: string; function: { name: string; arguments: string } }>;
}

let counter = 0;
const newId = (prefix: string) => `${prefix}_${Date.now().toString(36)}${(counter++).toString(36).padStart(6, '0')}`;

function responsesUsage(u: ChatUsage | undefined): Json | null {
  if (!u) return null;
  const input = u.prompt_tokens ?? 0;
  const output = u.completion_tokens ?? 0;
  return {
    input_tokens: input,
    input_tokens_details: { cached_tokens: u.prompt_tokens_details?.cached_tokens ?? 0 },
    output_tokens: output,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: input + output,
  };
}

function callItem(call: { id: string; function: { name: string; arguments: string } }, names: ToolNames): Json {
  const namespace = names.namespaceOf.get(call.function.name);
  const where = namespace ? { namespace } : {};
  if (names.custom.has(call.function.name)) {
    let input = call.function.arguments;
    try {
      const parsed = JSON.parse(call.function.arguments) as { input?: unknown };
      if (typeof parsed.input === 'string') input = parsed.input;
    } catch {
      // not JSON: the model's text is the input as it is
    }
    return {
      type: 'custom_tool_call',
      id: newId('ctc'),
      call_id: call.id,
      name: call.function.name,
      ...where,
      input,
      status: 'completed',
    };
  }
  return {
    type: 'function_call',
    id: newId('fc'),
    call_id: call.id,
    name: call.function.name,
    ...where,
    arguments: call.function.arguments,
    status: 'completed',
  };
}

function messageItem(text: string, id = newId('msg')): Json {
  return {
    type: 'message',
    id,
    role: 'assistant',
    status: 'completed',
    content: [{ type: 'output_text', text, annotations: [], logprobs: [] }],
  };
}

function reasoningItem(text: string, id = newId('rs')): Json {
  return { type: 'reasoning', id, summary: [{ type: 'summary_text', text }] };
}

/** Why an answer stopped short, in Responses' words: its length, or a content filter (a Bedrock guardrail). */
const incompleteOf = (finish: string | undefined) =>
  finish === 'length'
    ? { reason: 'max_output_tokens' }
    : finish === 'content_filter'
      ? { reason: 'content_filter' }
      : null;
const statusOf = (finish: string | undefined) => (incompleteOf(finish) ? 'incomplete' : 'completed');

/** The response object around its output, as Responses answers and its stream's first and last events carry it. */
function responseObject(
  id: string,
  model: string,
  request: Json,
  status: string,
  output: Json[],
  usage: Json | null,
  finish?: string,
): Json {
  return {
    id,
    object: 'response',
    created_at: Math.floor(Date.now() / 1000),
    status,
    error: null,
    incomplete_details: incompleteOf(finish),
    instructions: request.instructions ?? null,
    max_output_tokens: request.max_output_tokens ?? null,
    model,
    output,
    parallel_tool_calls: request.parallel_tool_calls ?? true,
    temperature: request.temperature ?? null,
    tool_choice: request.tool_choice ?? 'auto',
    tools: request.tools ?? [],
    top_p: request.top_p ?? null,
    store: false,
    text: request.text ?? { format: { type: 'text' } },
    usage,
    metadata: {},
  };
}

function fromCompletion(body: unknown, request: Json, names: ToolNames): Json {
  const completion = body as {
    model?: string;
    choices?: Array<{ message?: ChatMessage; finish_reason?: string }>;
    usage?: ChatUsage;
  };
  const choice = completion.choices?.[0];
  const message = choice?.message ?? {};
  const output: Json[] = [];
  if (message.reasoning_content) output.push(reasoningItem(message.reasoning_content));
  if (message.content) output.push(messageItem(message.content));
  for (const call of message.tool_calls ?? []) output.push(callItem(call, names));
  const finish = choice?.finish_reason;
  return responseObject(
    newId('resp'),
    String(request.model ?? completion.model ?? ''),
    request,
    statusOf(finish),
    output,
    responsesUsage(completion.usage),
    finish,
  );
}

/** A chat completions stream (SSE bytes) as the Responses event sequence. */
function streamFrom(upstream: StreamBody, request: Json, names: ToolNames): ChunkSource {
  const events = new ResponsesEvents(request, names);
  return chatChunkStream(
    upstream,
    events.out,
    (chunk) => events.chunk(chunk),
    (error) => events.end(error),
    () => events.ended,
  );
}

/**
 * The Responses events one chat stream becomes, as it arrives: each output item (reasoning,
 * the message, each tool call) opened when its first delta comes, closed when the next kind of
 * item begins or the stream ends, then the response's final event with every item whole.
 */
class ResponsesEvents {
  readonly out: string[] = [];
  ended = false;
  private readonly model: string;
  private readonly id = newId('resp');
  private sequence = 0;
  private readonly items: Json[] = [];
  private text: { id: string; index: number; text: string } | undefined;
  private reasoning: { id: string; index: number; text: string } | undefined;
  private readonly calls = new Map<number, { index: number; id: string; callId: string; name: string; args: string }>();
  private usage: ChatUsage | undefined;
  private finish: string | undefined;

  constructor(
    private readonly request: Json,
    private readonly names: ToolNames,
  ) {
    this.model = String(request.model ?? '');
    const response = responseObject(this.id, this.model, request, 'in_progress', [], null);
    this.emit('response.created', { response });
    this.emit('response.in_progress', { response });
  }

  private emit(type: string, data: Json): void {
    const event = conformEvent('openai-responses', type, { type, sequence_number: this.sequence++, ...data });
    this.out.push(`event: ${type}\ndata: ${JSON.stringify(event)}\n\n`);
  }

  private closeReasoning(): void {
    const { reasoning } = this;
    if (!reasoning) return;
    const item = reasoningItem(reasoning.text, reasoning.id);
    this.emit('response.reasoning_summary_text.done', {
      item_id: reasoning.id,
      output_index: reasoning.index,
      summary_index: 0,
      text: reasoning.text,
    });
    this.emit('response.output_item.done', { output_index: reasoning.index, item });
    this.items[reasoning.index] = item;
    this.reasoning = undefined;
  }

  private closeText(): void {
    const { text } = this;
    if (!text) return;
    const part = { type: 'output_text', text: text.text, annotations: [], logprobs: [] };
    this.emit('response.output_text.done', {
      item_id: text.id,
      output_index: text.index,
      content_index: 0,
      text: text.text,
      logprobs: [],
    });
    this.emit('response.content_part.done', { item_id: text.id, output_index: text.index, content_index: 0, part });
    const item = messageItem(text.text, text.id);
    this.emit('response.output_item.done', { output_index: text.index, item });
    this.items[text.index] = item;
    this.text = undefined;
  }

  end(error?: ProxyError): void {
    if (this.ended) return;
    this.ended = true;
    this.closeReasoning();
    this.closeText();
    for (const c of this.calls.values()) {
      const item = callItem({ id: c.callId, function: { name: c.name, arguments: c.args } }, this.names);
      item.id = c.id;
      if (item.type === 'function_call')
        this.emit('response.function_call_arguments.done', {
          item_id: c.id,
          output_index: c.index,
          name: c.name,
          arguments: c.args,
        });
      else
        this.emit('response.custom_tool_call_input.done', { item_id: c.id, output_index: c.index, input: item.input });
      this.emit('response.output_item.done', { output_index: c.index, item });
      this.items[c.index] = item;
    }
    if (error) {
      this.out.push(DIALECTS['openai-responses'].streamError(error));
      return;
    }
    const status = statusOf(this.finish);
    const items = this.items.filter(Boolean);
    this.emit(`response.${status}`, {
      response: responseObject(
        this.id,
        this.model,
        this.request,
        status,
        items,
        responsesUsage(this.usage),
        this.finish,
      ),
    });
  }

  chunk(chunk: ChatChunk): void {
    if (chunk.usage) this.usage = chunk.usage;
    for (const choice of chunk.choices ?? []) {
      const delta = choice.delta ?? {};
      if (delta.reasoning_content) this.reasoningDelta(delta.reasoning_content);
      if (delta.content) this.textDelta(delta.content);
      for (const tc of delta.tool_calls ?? []) this.toolCallDelta(tc);
      if (choice.finish_reason) this.finish = choice.finish_reason;
    }
  }

  private reasoningDelta(piece: string): void {
    if (!this.reasoning) {
      this.reasoning = { id: newId('rs'), index: this.items.length, text: '' };
      this.items.push({});
      this.emit('response.output_item.added', {
        output_index: this.reasoning.index,
        item: { type: 'reasoning', id: this.reasoning.id, summary: [] },
      });
      this.emit('response.reasoning_summary_part.added', {
        item_id: this.reasoning.id,
        output_index: this.reasoning.index,
        summary_index: 0,
        part: { type: 'summary_text', text: '' },
      });
    }
    this.reasoning.text += piece;
    this.emit('response.reasoning_summary_text.delta', {
      item_id: this.reasoning.id,
      output_index: this.reasoning.index,
      summary_index: 0,
      delta: piece,
    });
  }

  private textDelta(piece: string): void {
    this.closeReasoning();
    if (!this.text) {
      this.text = { id: newId('msg'), index: this.items.length, text: '' };
      this.items.push({});
      this.emit('response.output_item.added', {
        output_index: this.text.index,
        item: { type: 'message', id: this.text.id, role: 'assistant', status: 'in_progress', content: [] },
      });
      this.emit('response.content_part.added', {
        item_id: this.text.id,
        output_index: this.text.index,
        content_index: 0,
        part: { type: 'output_text', text: '', annotations: [], logprobs: [] },
      });
    }
    this.text.text += piece;
    this.emit('response.output_text.delta', {
      item_id: this.text.id,
      output_index: this.text.index,
      content_index: 0,
      delta: piece,
      logprobs: [],
    });
  }

  private toolCallDelta(tc: ChatToolCallDelta): void {
    let call = this.calls.get(tc.index);
    if (!call) {
      this.closeReasoning();
      this.closeText();
      const name = tc.function?.name ?? '';
      const isCustom = this.names.custom.has(name);
      call = {
        index: this.items.length,
        id: newId(isCustom ? 'ctc' : 'fc'),
        callId: tc.id ?? newId('call'),
        name,
        args: '',
      };
      this.items.push({});
      this.calls.set(tc.index, call);
      this.emit('response.output_item.added', {
        output_index: call.index,
        item: isCustom
          ? { type: 'custom_tool_call', id: call.id, call_id: call.callId, name, input: '', status: 'in_progress' }
          : { type: 'function_call', id: call.id, call_id: call.callId, name, arguments: '', status: 'in_progress' },
      });
    }
    const piece = tc.function?.arguments ?? '';
    if (!piece) return;
    call.args += piece;
    // A custom tool's input is known whole only at the end (it is inside a JSON argument).
    if (!this.names.custom.has(call.name))
      this.emit('response.function_call_arguments.delta', { item_id: call.id, output_index: call.index, delta: piece });
  }
}

export const openaiResponsesToOpenaiChat: Translator = {
  from: 'openai-responses',
  to: 'openai-chat',
  begin(body, stream): Translation | ProxyError {
    const tools = toolsOf(body.tools);
    if (tools instanceof ProxyError) return tools;
    const messages = messagesOf(body);
    if (messages instanceof ProxyError) return messages;
    const chat: Json = { model: body.model, messages, stream };
    for (const [k, v] of Object.entries(body)) {
      if (v === undefined || v === null || DROPPED.has(k)) continue;
      if (!PASSED.has(k))
        return unsupported(`${k} cannot be translated for this model (its upstream speaks chat completions)`, k);
      chat[k] = v;
    }
    if (typeof body.max_output_tokens === 'number') chat.max_tokens = body.max_output_tokens;
    if (tools.tools.length > 0) {
      chat.tools = tools.tools;
      const choice = toolChoiceOf(body.tool_choice);
      if (choice !== undefined) chat.tool_choice = choice;
    }
    const format = responseFormatOf(body.text);
    if (format) chat.response_format = format;
    const effort = isRecord(body.reasoning) ? body.reasoning.effort : undefined;
    if (typeof effort === 'string' && EFFORTS.has(effort)) chat.reasoning_effort = effort;
    if (stream) chat.stream_options = { include_usage: true };
    return {
      body: chat,
      wantsUsage: true,
      json: (answer) => fromCompletion(answer, body, tools.names),
      stream: (upstream: StreamBody, _outcome: Promise<StreamOutcome>) => streamFrom(upstream, body, tools.names),
    };
  },
};
