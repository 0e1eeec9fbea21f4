import { isRecord } from '../../crds/is-record.js';
import { conformEvent } from '../conformance/conformance.js';
import { DIALECTS } from '../endpoints/dialects.js';
import { invalidRequest, ProxyError } from '../endpoints/errors.js';
import type { ChunkSource, StreamBody } from '../upstreams/chunk-source.js';
import type { StreamOutcome } from '../upstreams/upstream.js';
import { type ChatChunk, type ChatUsage, chatChunkStream } from './chat-chunks.js';
import type { Translation, Translator } from './translator.js';

/**
 * Anthropic's Messages API for upstreams that speak chat completions only (Bedrock's non-Claude
 * text models, through its Converse translator), so that Claude Code and the Anthropic SDKs can
 * call them. `system` becomes one system message; an assistant's tool_use blocks its tool_calls,
 * a user's tool_result blocks tool messages (ahead of the rest of that user turn, as chat wants
 * them right after the calls); images data: or plain URLs. What only Claude can do is dropped
 * where the answer stays right without it (thinking blocks in the history and the thinking
 * setting: a model that cannot think just answers; cache_control, a caching hint; the effort
 * of output_config) and refused with a 400 naming the field where it would not (Anthropic's own
 * tools, documents, top_k, containers, MCP servers, context editing beyond clearing thinking,
 * ...). Answers come back as Anthropic's message, and a chat stream as Anthropic's event
 * sequence (message_start, content blocks from index 0, message_delta with the usage,
 * message_stop).
 */

type Json = Record<string, unknown>;

const unsupported = (message: string, param: string) => invalidRequest(message, param, 'unsupported_parameter');

/** Top-level fields translated below, or dropped because the answer is right without them. */
const HANDLED = new Set([
  'model',
  'max_tokens',
  'messages',
  'system',
  'stream',
  'temperature',
  'top_p',
  'stop_sequences',
  'metadata',
  'tools',
  'tool_choice',
  // Dropped: a model that cannot think answers without thinking first.
  'thinking',
  // Dropped: request-level prompt caching, a hint (as cache_control on blocks is).
  'cache_control',
  // Dropped when it only clears thinking (contextManagementOf), which is dropped anyway.
  'context_management',
  // Its format as response_format; its effort dropped (outputConfigOf).
  'output_config',
]);

/** Blocks of Claude's own reasoning in the history: opaque to other models, dropped. */
const THINKING_BLOCKS = new Set(['thinking', 'redacted_thinking']);

const refusedBlock = (type: unknown, at: string) =>
  unsupported(`${at} is a ${String(type)} block, which this model's upstream (chat completions) cannot take`, at);

/**
 * Context editing (beta): Claude Code asks to clear thinking blocks (keep: all, a no-op), and
 * this model gets none anyway; clearing old tool results or compacting is Anthropic's server
 * work, and without it the model would see a different conversation: refused.
 */
function contextManagementOf(value: unknown): ProxyError | undefined {
  if (value === undefined || value === null) return undefined;
  const edits = isRecord(value) ? value.edits : undefined;
  if (!Array.isArray(edits))
    return invalidRequest('context_management.edits must be an array', 'context_management.edits');
  for (const [i, edit] of edits.entries()) {
    const type = isRecord(edit) ? String(edit.type) : typeof edit;
    if (!type.startsWith('clear_thinking_'))
      return unsupported(
        `context_management.edits.${i} (${type}) is context editing on Anthropic's servers, which this model's upstream (chat completions) cannot do`,
        `context_management.edits.${i}`,
      );
  }
  return undefined;
}

/**
 * output_config: a JSON schema the answer must follow as chat's response_format; the effort
 * (how much Claude thinks and writes, which Claude Code sends to any model) dropped as thinking
 * is; anything else refused, naming it.
 */
function outputConfigOf(value: unknown): Json | ProxyError {
  if (value === undefined || value === null) return {};
  if (!isRecord(value)) return invalidRequest('output_config must be an object', 'output_config');
  const out: Json = {};
  for (const [k, v] of Object.entries(value)) {
    if (v === undefined || v === null || k === 'effort') continue;
    if (k !== 'format')
      return unsupported(
        `output_config.${k} cannot be translated for this model (its upstream speaks chat completions)`,
        `output_config.${k}`,
      );
    if (!isRecord(v) || v.type !== 'json_schema' || !isRecord(v.schema))
      return invalidRequest(
        'output_config.format must be {"type": "json_schema", "schema": {...}}',
        'output_config.format',
      );
    out.response_format = { type: 'json_schema', json_schema: { name: 'output', schema: v.schema } };
  }
  return out;
}

function systemOf(system: unknown, at = 'system'): string | ProxyError {
  if (system === undefined || system === null) return '';
  if (typeof system === 'string') return system;
  const texts: string[] = [];
  for (const [i, block] of (system as Json[]).entries()) {
    if (block.type !== 'text') return refusedBlock(block.type, `${at}.${i}`);
    texts.push(String(block.text));
  }
  // Separate blocks are separate instructions: a newline keeps them apart.
  return texts.join('\n');
}

function imageUrlOf(source: unknown, at: string): string | ProxyError {
  if (isRecord(source) && source.type === 'base64' && typeof source.data === 'string')
    return `data:${String(source.media_type)};base64,${source.data}`;
  if (isRecord(source) && source.type === 'url' && typeof source.url === 'string') return source.url;
  const type = isRecord(source) ? String(source.type) : typeof source;
  return unsupported(
    `${at}.source is a ${type} image source; this model takes images as base64 data or a URL`,
    `${at}.source`,
  );
}

/** A tool_result's content as the tool message's text; an error result keeps its text, marked. */
function toolResultText(block: Json, at: string): string | ProxyError {
  const content = block.content;
  let text = '';
  if (typeof content === 'string') text = content;
  else if (Array.isArray(content)) {
    const texts: string[] = [];
    for (const [k, part] of content.entries()) {
      if (!isRecord(part) || part.type !== 'text' || typeof part.text !== 'string')
        return unsupported(
          `${at}.content.${k} is a ${isRecord(part) ? String(part.type) : typeof part} block; a tool result for this model carries text only`,
          `${at}.content.${k}`,
        );
      texts.push(part.text);
    }
    text = texts.join('\n');
  } else if (content !== undefined && content !== null)
    return invalidRequest(`${at}.content must be a string or an array of content blocks`, `${at}.content`);
  if (block.is_error !== true) return text;
  return text === '' ? 'Error' : `Error: ${text}`;
}

/** One user turn: its tool results first (each a tool message), then the rest as one user message. */
function userMessages(content: unknown, at: string): Json[] | ProxyError {
  if (typeof content === 'string') return [{ role: 'user', content }];
  const results: Json[] = [];
  const parts: Json[] = [];
  for (const [j, block] of (content as Json[]).entries()) {
    const p = `${at}.content.${j}`;
    if (block.type === 'text') parts.push({ type: 'text', text: block.text });
    else if (block.type === 'image') {
      const url = imageUrlOf(block.source, p);
      if (url instanceof ProxyError) return url;
      parts.push({ type: 'image_url', image_url: { url } });
    } else if (block.type === 'tool_result') {
      const text = toolResultText(block, p);
      if (text instanceof ProxyError) return text;
      results.push({ role: 'tool', tool_call_id: block.tool_use_id, content: text });
    } else if (!THINKING_BLOCKS.has(String(block.type))) return refusedBlock(block.type, p);
  }
  if (parts.length === 0) return results;
  const only = parts.length === 1 ? parts[0] : undefined;
  return [...results, { role: 'user', content: only?.type === 'text' ? only.text : parts }];
}

/** One assistant turn: its text, and its tool_use blocks as tool_calls; nothing when only thinking is left. */
function assistantMessages(content: unknown, at: string): Json[] | ProxyError {
  if (typeof content === 'string') return [{ role: 'assistant', content }];
  let text = '';
  const calls: Json[] = [];
  for (const [j, block] of (content as Json[]).entries()) {
    if (block.type === 'text') text += String(block.text);
    else if (block.type === 'tool_use')
      calls.push({
        id: block.id,
        type: 'function',
        function: { name: block.name, arguments: JSON.stringify(block.input ?? {}) },
      });
    else if (!THINKING_BLOCKS.has(String(block.type))) return refusedBlock(block.type, `${at}.content.${j}`);
  }
  if (calls.length === 0) return text === '' ? [] : [{ role: 'assistant', content: text }];
  return [{ role: 'assistant', content: text === '' ? null : text, tool_calls: calls }];
}

function messagesOf(body: Json): Json[] | ProxyError {
  const messages: Json[] = [];
  const system = systemOf(body.system);
  if (system instanceof ProxyError) return system;
  if (system !== '') messages.push({ role: 'system', content: system });
  for (const [i, m] of (body.messages as Json[]).entries()) {
    const at = `messages.${i}`;
    if (m.role === 'system') {
      // A system message where the caller put it: chat takes system messages anywhere.
      const text = systemOf(m.content, `${at}.content`);
      if (text instanceof ProxyError) return text;
      if (text !== '') messages.push({ role: 'system', content: text });
      continue;
    }
    const turn = m.role === 'assistant' ? assistantMessages(m.content, at) : userMessages(m.content, at);
    if (turn instanceof ProxyError) return turn;
    messages.push(...turn);
  }
  return messages;
}

/** Custom tools as function tools; Anthropic's own tools (server tools, bash, text editor, computer use) are Claude's only. */
function toolsOf(tools: unknown): Json[] | ProxyError {
  const out: Json[] = [];
  if (!Array.isArray(tools)) return out;
  for (const [i, t] of (tools as Json[]).entries()) {
    if (t.type !== undefined && t.type !== null && t.type !== 'custom')
      return unsupported(
        `tools.${i} (${String(t.name)}) is Anthropic's ${String(t.type)} tool, which runs only on Claude models; this model takes custom tools (name, description, input_schema)`,
        `tools.${i}`,
      );
    out.push({
      type: 'function',
      function: {
        name: t.name,
        ...(typeof t.description === 'string' ? { description: t.description } : {}),
        parameters: isRecord(t.input_schema) ? t.input_schema : { type: 'object', properties: {} },
        ...(typeof t.strict === 'boolean' ? { strict: t.strict } : {}),
      },
    });
  }
  return out;
}

/** tool_choice as chat's, and disable_parallel_tool_use as parallel_tool_calls. */
function toolChoiceOf(choice: unknown): Json | ProxyError {
  if (!isRecord(choice)) return {};
  const parallel = choice.disable_parallel_tool_use === true ? { parallel_tool_calls: false } : {};
  switch (choice.type) {
    case 'auto':
      return { tool_choice: 'auto', ...parallel };
    case 'any':
      return { tool_choice: 'required', ...parallel };
    case 'none':
      return { tool_choice: 'none' };
    case 'tool':
      if (typeof choice.name !== 'string')
        return invalidRequest('tool_choice.name is required with type tool', 'tool_choice.name');
      return { tool_choice: { type: 'function', function: { name: choice.name } }, ...parallel };
    default:
      return invalidRequest('tool_choice.type must be auto, any, tool or none', 'tool_choice.type');
  }
}

// ---------------------------------------------------------------------------------------------
// Answers

interface ChatToolCall {
  id: string;
  function: { name: string; arguments: string };
}

let counter = 0;
const newId = (prefix: string) => `${prefix}_${Date.now().toString(36)}${(counter++).toString(36).padStart(6, '0')}`;

/** The message id from the completion's (chatcmpl-abc -> msg_abc), so that one answer keeps one id. */
const messageId = (chatId: unknown): string =>
  typeof chatId === 'string' && chatId !== '' ? `msg_${chatId.replace(/^chatcmpl-/, '')}` : newId('msg');

const STOP_REASONS = new Map([
  ['stop', 'end_turn'],
  ['length', 'max_tokens'],
  ['tool_calls', 'tool_use'],
  ['function_call', 'tool_use'],
  ['content_filter', 'refusal'],
]);

/**
 * Chat's finish_reason as Anthropic's stop_reason. Chat does not say whether a stop sequence
 * ended the answer (Converse's stop_sequence is chat's stop): end_turn, stop_sequence null.
 * Some upstreams finish a turn of tool calls with "stop": it is a tool_use turn all the same.
 */
function stopReasonOf(finish: string | null | undefined, calledTools: boolean): string {
  const reason = (finish ? STOP_REASONS.get(finish) : undefined) ?? 'end_turn';
  return calledTools && reason === 'end_turn' ? 'tool_use' : reason;
}

/** Anthropic's usage: input_tokens leaves out the cache reads, which chat counts in prompt_tokens. */
function usageOf(u: ChatUsage | undefined): Json {
  const cached = u?.prompt_tokens_details?.cached_tokens ?? 0;
  return {
    input_tokens: Math.max(0, (u?.prompt_tokens ?? 0) - cached),
    output_tokens: u?.completion_tokens ?? 0,
    cache_creation_input_tokens: 0,
    cache_read_input_tokens: cached,
  };
}

/** Where a tool call's arguments are not a JSON object, the text as the model wrote it. */
const RAW_ARGUMENTS = '_raw_arguments';

/** A tool call's arguments as tool_use input: {} for none, the raw text under RAW_ARGUMENTS when not a JSON object. */
function inputOf(args: string): Json {
  if (args.trim() === '') return {};
  try {
    const parsed: unknown = JSON.parse(args);
    if (isRecord(parsed)) return parsed;
  } catch {
    // not JSON: kept as written, below
  }
  return { [RAW_ARGUMENTS]: args };
}

function fromCompletion(body: unknown, request: Json): Json {
  const completion = body as {
    id?: string;
    model?: string;
    choices?: Array<{ message?: { content?: string | null; tool_calls?: ChatToolCall[] }; finish_reason?: string }>;
    usage?: ChatUsage;
  };
  const choice = completion.choices?.[0];
  const message = choice?.message ?? {};
  const calls = message.tool_calls ?? [];
  const content: Json[] = [];
  if (message.content) content.push({ type: 'text', text: message.content });
  for (const call of calls)
    content.push({ type: 'tool_use', id: call.id, name: call.function.name, input: inputOf(call.function.arguments) });
  return {
    id: messageId(completion.id),
    type: 'message',
    role: 'assistant',
    model: String(request.model ?? completion.model ?? ''),
    content,
    stop_reason: stopReasonOf(choice?.finish_reason, calls.length > 0),
    stop_sequence: null,
    usage: usageOf(completion.usage),
  };
}

/** A chat completions stream (SSE bytes) as Anthropic's Messages event sequence. */
function streamFrom(upstream: StreamBody, request: Json): ChunkSource {
  const model = String(request.model ?? '');
  const out: string[] = [];
  const emit = (type: string, data: Json) => {
    out.push(
      `event: ${type}\ndata: ${JSON.stringify(conformEvent('anthropic-messages', type, { type, ...data }))}\n\n`,
    );
  };
  let started = false;
  let blocks = 0;
  /** The block open for deltas: text, or a tool call by its chat index. */
  let open: { index: number; text: boolean } | undefined;
  const calls = new Map<number, { index: number }>();
  let usage: ChatUsage | undefined;
  let finish: string | undefined;
  let ended = false;

  // Deferred to the first chunk: the message id comes from the completion's.
  const start = (chatId?: string) => {
    if (started) return;
    started = true;
    emit('message_start', {
      message: {
        id: messageId(chatId),
        type: 'message',
        role: 'assistant',
        model,
        content: [],
        stop_reason: null,
        stop_sequence: null,
        usage: usageOf(usage),
      },
    });
  };
  const close = () => {
    if (!open) return;
    emit('content_block_stop', { index: open.index });
    open = undefined;
  };
  const end = (error?: ProxyError) => {
    if (ended) return;
    ended = true;
    if (error) {
      // As Anthropic's stream breaks off: an error event, no message_stop (the SDKs raise it).
      out.push(DIALECTS['anthropic-messages'].streamError(error));
      return;
    }
    start();
    close();
    emit('message_delta', {
      delta: { stop_reason: stopReasonOf(finish, calls.size > 0), stop_sequence: null },
      usage: usageOf(usage),
    });
    emit('message_stop', {});
  };

  const onChunk = (chunk: ChatChunk) => {
    if (chunk.usage) usage = chunk.usage;
    start(chunk.id);
    for (const choice of chunk.choices ?? []) {
      const delta = choice.delta ?? {};
      if (delta.content) {
        if (!open?.text) {
          close();
          open = { index: blocks++, text: true };
          emit('content_block_start', { index: open.index, content_block: { type: 'text', text: '' } });
        }
        emit('content_block_delta', { index: open.index, delta: { type: 'text_delta', text: delta.content } });
      }
      for (const tc of delta.tool_calls ?? []) {
        let call = calls.get(tc.index);
        if (!call) {
          close();
          call = { index: blocks++ };
          calls.set(tc.index, call);
          open = { index: call.index, text: false };
          emit('content_block_start', {
            index: call.index,
            content_block: {
              type: 'tool_use',
              id: tc.id ?? newId('toolu'),
              name: tc.function?.name ?? '',
              input: {},
            },
          });
        }
        const piece = tc.function?.arguments ?? '';
        // Chat streams one call after another; a late piece of an earlier one still goes to its block.
        if (piece)
          emit('content_block_delta', {
            index: call.index,
            delta: { type: 'input_json_delta', partial_json: piece },
          });
      }
      if (choice.finish_reason) finish = choice.finish_reason;
    }
  };

  return chatChunkStream(upstream, out, onChunk, end, () => ended);
}

export const anthropicMessagesToOpenaiChat: Translator = {
  from: 'anthropic-messages',
  to: 'openai-chat',
  begin(body, stream): Translation | ProxyError {
    for (const [k, v] of Object.entries(body)) {
      if (v === undefined || v === null || HANDLED.has(k)) continue;
      return unsupported(`${k} cannot be translated for this model (its upstream speaks chat completions)`, k);
    }
    const context = contextManagementOf(body.context_management);
    if (context) return context;
    const output = outputConfigOf(body.output_config);
    if (output instanceof ProxyError) return output;
    const tools = toolsOf(body.tools);
    if (tools instanceof ProxyError) return tools;
    const messages = messagesOf(body);
    if (messages instanceof ProxyError) return messages;
    const chat: Json = { model: body.model, messages, max_tokens: body.max_tokens, stream };
    for (const k of ['temperature', 'top_p'] as const) if (body[k] !== undefined && body[k] !== null) chat[k] = body[k];
    if (Array.isArray(body.stop_sequences) && body.stop_sequences.length > 0) chat.stop = body.stop_sequences;
    if (isRecord(body.metadata) && typeof body.metadata.user_id === 'string') chat.user = body.metadata.user_id;
    if (tools.length > 0) {
      chat.tools = tools;
      const choice = toolChoiceOf(body.tool_choice);
      if (choice instanceof ProxyError) return choice;
      Object.assign(chat, choice);
    }
    Object.assign(chat, output);
    if (stream) chat.stream_options = { include_usage: true };
    return {
      body: chat,
      wantsUsage: true,
      json: (answer) => fromCompletion(answer, body),
      stream: (upstream: StreamBody, _outcome: Promise<StreamOutcome>) => streamFrom(upstream, body),
    };
  },
};
