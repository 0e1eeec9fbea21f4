import { createParser } from 'eventsource-parser';
import { isRecord } from '../../crds/is-record.js';
import { DIALECTS } from '../endpoints/dialects.js';
import { type ErrorType, invalidRequest, ProxyError } from '../endpoints/errors.js';
import { anthropicUsage } from '../upstreams/anthropic-stream.js';
import { type ChunkSource, chunksOf, type StreamBody } from '../upstreams/chunk-source.js';
import { sseFrame } from '../upstreams/stream-reader.js';
import type { StreamOutcome, Usage } from '../upstreams/upstream.js';
import { type FinishReason, openAIUsage, type ThinkingBlock } from './chat-completion.js';
import type { Translation, Translator } from './translator.js';

/**
 * OpenAI's chat completions for upstreams that speak Anthropic's Messages only (Claude at
 * Anthropic's API and on Vertex AI), so that chat-completions callers can reach Claude.
 * System and developer messages become `system`; the rest alternating user and assistant turns
 * (consecutive ones merged, as Anthropic wants them): an assistant's tool_calls its tool_use
 * blocks, tool messages tool_result blocks of the next user turn; images as base64 data or a
 * URL, PDFs as documents. reasoning_effort becomes a thinking budget, and the thinking comes back
 * as reasoning_content with thinking_blocks beside it (LiteLLM's convention, as the Bedrock
 * Converse answers give it), which a caller sends back on the assistant message to continue a
 * tool loop. What Claude cannot do is refused with a 400 naming the field (several choices,
 * log probabilities, audio, seeds and penalties, OpenAI's hosted tools); hints the answer is
 * right without are dropped. Answers come back as a chat.completion, and Anthropic's event
 * stream as chat.completion.chunk events ending in [DONE].
 */

type Json = Record<string, unknown>;

const unsupported = (message: string, param: string) => invalidRequest(message, param, 'unsupported_parameter');

/** Chat fields translated below (n, logprobs, top_logprobs, audio, modalities refused by value), or dropped because the answer is right without them. */
const HANDLED = new Set([
  'model',
  'messages',
  'max_tokens',
  'max_completion_tokens',
  'temperature',
  'top_p',
  'stop',
  'stream',
  'tools',
  'tool_choice',
  'parallel_tool_calls',
  'reasoning_effort',
  'response_format',
  'user',
  'safety_identifier',
  'n',
  'logprobs',
  'top_logprobs',
  'audio',
  'modalities',
  // Dropped: Anthropic's events carry the usage anyway; the usage chunk goes out as the caller asked.
  'stream_options',
  // Dropped: tags for OpenAI's stored completions, nothing the model sees.
  'metadata',
  // Dropped: OpenAI's caching hints; Anthropic caches at cache_control breakpoints, which are kept.
  'prompt_cache_key',
  'prompt_cache_retention',
  'prompt_cache_options',
  // Dropped: a predicted output only makes an answer faster.
  'prediction',
  // Dropped: a hint of length, as Claude's own effort is dropped the other way.
  'verbosity',
]);

/** Chat fields Claude has no counterpart for, refused with a 400 unless their value changes nothing. */
const REFUSED: Readonly<Record<string, { why: string; noOp?: (v: unknown) => boolean }>> = {
  functions: { why: 'the deprecated functions field is not translated: send tools' },
  function_call: { why: 'the deprecated function_call field is not translated: send tool_choice' },
  seed: { why: 'Anthropic has no sampling seed' },
  presence_penalty: { why: 'Anthropic has no presence penalty', noOp: (v) => v === 0 },
  frequency_penalty: { why: 'Anthropic has no frequency penalty', noOp: (v) => v === 0 },
  logit_bias: { why: 'Anthropic cannot bias tokens', noOp: (v) => isRecord(v) && Object.keys(v).length === 0 },
  store: { why: 'Anthropic does not store completions', noOp: (v) => v === false },
  // Anthropic's tiers are not OpenAI's (flex, scale, priority): only the default means the same.
  service_tier: { why: "OpenAI's service tiers are not Anthropic's", noOp: (v) => v === 'auto' || v === 'default' },
  web_search_options: { why: "web search is OpenAI's hosted tool" },
  moderation: { why: "moderation is OpenAI's" },
};

/** The default answer length: Anthropic requires max_tokens, chat does not. */
const DEFAULT_MAX_TOKENS = 4096;

/** Thinking budgets per reasoning_effort; 1024 is Anthropic's minimum. */
const THINKING_BUDGETS: Readonly<Record<string, number>> = { minimal: 1024, low: 1024, medium: 4096, high: 16384 };

const THINKING_BLOCKS = new Set(['thinking', 'redacted_thinking']);

const isBlank = (text: string) => text.trim() === '';

/** cache_control as Anthropic takes it (the Anthropic SDK's and LiteLLM's shape on chat parts and tools). */
function cacheControlOf(value: unknown, at: string): Json | ProxyError {
  if (value === undefined || value === null) return {};
  if (
    !isRecord(value) ||
    value.type !== 'ephemeral' ||
    (value.ttl !== undefined && value.ttl !== '5m' && value.ttl !== '1h')
  )
    return invalidRequest(`${at} must be {"type": "ephemeral"}, with a ttl of 5m or 1h if any`, at);
  return { cache_control: { type: 'ephemeral', ...(value.ttl ? { ttl: value.ttl } : {}) } };
}

/** A text part as a text block; none for blank text, which Anthropic refuses. */
function textBlocks(text: string, part: Json, at: string): Json[] | ProxyError {
  const cache = cacheControlOf(part.cache_control, `${at}.cache_control`);
  if (cache instanceof ProxyError) return cache;
  return isBlank(text) ? [] : [{ type: 'text', text, ...cache }];
}

/** System and developer messages' text, one block per part (Anthropic has one system prompt, at the top). */
function systemBlocks(content: unknown, at: string): Json[] | ProxyError {
  if (content === undefined || content === null) return [];
  if (typeof content === 'string') return textBlocks(content, {}, at);
  if (!Array.isArray(content))
    return invalidRequest(`${at}.content must be a string or an array of text parts`, `${at}.content`);
  const blocks: Json[] = [];
  for (const [j, part] of content.entries()) {
    const p = `${at}.content[${j}]`;
    if (!isRecord(part) || part.type !== 'text' || typeof part.text !== 'string')
      return unsupported(`${p}: system and developer messages carry text parts only for Claude models`, p);
    const text = textBlocks(part.text, part, p);
    if (text instanceof ProxyError) return text;
    blocks.push(...text);
  }
  return blocks;
}

// MIME-style base64 is wrapped at 76 characters: whitespace is removed first.
const DATA_IMAGE = /^data:image\/(png|jpeg|jpg|gif|webp);base64,([A-Za-z0-9+/]*={0,2})$/i;
const DATA_PDF = /^data:application\/pdf;base64,([A-Za-z0-9+/]*={0,2})$/i;

function imageBlock(part: Json, at: string): Json | ProxyError {
  const param = `${at}.image_url.url`;
  const url = isRecord(part.image_url) ? part.image_url.url : undefined;
  if (typeof url !== 'string') return invalidRequest(`${param} must be a string`, param);
  const cache = cacheControlOf(part.cache_control, `${at}.cache_control`);
  if (cache instanceof ProxyError) return cache;
  // Anthropic fetches a URL itself: it goes as one.
  if (/^https?:\/\//i.test(url)) return { type: 'image', source: { type: 'url', url }, ...cache };
  const match = DATA_IMAGE.exec(url.replace(/\s+/g, ''));
  if (!match || match[2] === '')
    return invalidRequest(
      `${param} must be an http(s) URL or a base64 data URL of a png, jpeg, gif or webp image (data:image/png;base64,...)`,
      param,
    );
  const subtype = (match[1] ?? '').toLowerCase();
  return {
    type: 'image',
    source: { type: 'base64', media_type: `image/${subtype === 'jpg' ? 'jpeg' : subtype}`, data: match[2] },
    ...cache,
  };
}

/** A file part: a PDF given inline, as Claude's document block; a file of OpenAI's store cannot be read. */
function documentBlock(part: Json, at: string): Json | ProxyError {
  const param = `${at}.file.file_data`;
  const data = isRecord(part.file) ? part.file.file_data : undefined;
  const match = typeof data === 'string' ? DATA_PDF.exec(data.replace(/\s+/g, '')) : null;
  if (!match || match[1] === '')
    return unsupported(
      `${param}: Claude models take files as inline PDFs (data:application/pdf;base64,...), not OpenAI file ids`,
      param,
    );
  const cache = cacheControlOf(part.cache_control, `${at}.cache_control`);
  if (cache instanceof ProxyError) return cache;
  return { type: 'document', source: { type: 'base64', media_type: 'application/pdf', data: match[1] }, ...cache };
}

function userBlocks(content: unknown, at: string): Json[] | ProxyError {
  if (content === undefined || content === null) return [];
  if (typeof content === 'string') return textBlocks(content, {}, at);
  if (!Array.isArray(content))
    return invalidRequest(`${at}.content must be a string or an array of content parts`, `${at}.content`);
  const blocks: Json[] = [];
  for (const [j, part] of content.entries()) {
    const p = `${at}.content[${j}]`;
    if (!isRecord(part)) return invalidRequest(`${p} must be an object with a type`, p);
    let block: Json[] | Json | ProxyError;
    if (part.type === 'text' && typeof part.text === 'string') block = textBlocks(part.text, part, p);
    else if (part.type === 'image_url') block = imageBlock(part, p);
    else if (part.type === 'file') block = documentBlock(part, p);
    else return unsupported(`${p} is a ${String(part.type)} part, which Claude models cannot take`, p);
    if (block instanceof ProxyError) return block;
    blocks.push(...(Array.isArray(block) ? block : [block]));
  }
  return blocks;
}

/** thinking_blocks returned by an earlier answer (LiteLLM's field): Claude needs them back, signed, in a tool loop. */
function thinkingBlocks(value: unknown, at: string): Json[] | ProxyError {
  const param = `${at}.thinking_blocks`;
  if (!Array.isArray(value)) return invalidRequest(`${param} must be an array`, param);
  const blocks: Json[] = [];
  for (const [j, b] of value.entries()) {
    if (isRecord(b) && b.type === 'thinking' && typeof b.thinking === 'string' && typeof b.signature === 'string')
      blocks.push({ type: 'thinking', thinking: b.thinking, signature: b.signature });
    else if (isRecord(b) && b.type === 'redacted_thinking' && typeof b.data === 'string')
      blocks.push({ type: 'redacted_thinking', data: b.data });
    else
      return invalidRequest(
        `${param}[${j}] must be {"type": "thinking", "thinking", "signature"} or {"type": "redacted_thinking", "data"}, as the answer gave it`,
        `${param}[${j}]`,
      );
  }
  return blocks;
}

/** An assistant's tool_calls as tool_use blocks; Anthropic takes the input as JSON, not as text. */
function toolUses(calls: unknown, at: string): Json[] | ProxyError {
  if (!Array.isArray(calls)) return invalidRequest(`${at}.tool_calls must be an array`, `${at}.tool_calls`);
  const blocks: Json[] = [];
  for (const [j, c] of calls.entries()) {
    const p = `${at}.tool_calls[${j}]`;
    if (isRecord(c) && c.type === 'custom')
      return unsupported(`${p} is a call of a custom (free-form) tool, which Claude models cannot take`, p);
    if (!isRecord(c) || typeof c.id !== 'string' || c.id === '' || !isRecord(c.function))
      return invalidRequest(`${p} must be {"id", "type": "function", "function": {"name", "arguments"}}`, p);
    const { name, arguments: args } = c.function;
    if (typeof name !== 'string' || name === '')
      return invalidRequest(`${p}.function.name must be a non-empty string`, `${p}.function.name`);
    let input: unknown = {};
    if (typeof args === 'string' && args.trim() !== '') {
      try {
        input = JSON.parse(args);
      } catch {
        return invalidRequest(`${p}.function.arguments is not valid JSON`, `${p}.function.arguments`);
      }
    }
    if (!isRecord(input))
      return invalidRequest(`${p}.function.arguments must be a JSON object`, `${p}.function.arguments`);
    blocks.push({ type: 'tool_use', id: c.id, name, input });
  }
  return blocks;
}

function assistantBlocks(m: Json, at: string): Json[] | ProxyError {
  if (m.function_call !== undefined && m.function_call !== null)
    return unsupported(`${at}.function_call is the deprecated form: send tool_calls`, `${at}.function_call`);
  // Reasoning comes first in the turn, as the model produced it; reasoning_content alone is unsigned and dropped.
  const blocks =
    m.thinking_blocks === undefined || m.thinking_blocks === null ? [] : thinkingBlocks(m.thinking_blocks, at);
  if (blocks instanceof ProxyError) return blocks;
  const content = m.content;
  if (typeof content === 'string') {
    const text = textBlocks(content, {}, at);
    if (text instanceof ProxyError) return text;
    blocks.push(...text);
  } else if (Array.isArray(content)) {
    for (const [j, part] of content.entries()) {
      const p = `${at}.content[${j}]`;
      const key = isRecord(part) && (part.type === 'text' || part.type === 'refusal') ? part.type : undefined;
      const text = key && isRecord(part) ? part[key] : undefined;
      if (!isRecord(part) || typeof text !== 'string')
        return unsupported(`${p}: assistant messages carry text and refusal parts only for Claude models`, p);
      const block = textBlocks(text, part, p);
      if (block instanceof ProxyError) return block;
      blocks.push(...block);
    }
  } else if (content !== undefined && content !== null)
    return invalidRequest(`${at}.content must be a string or an array of content parts`, `${at}.content`);
  if (m.tool_calls !== undefined && m.tool_calls !== null) {
    const calls = toolUses(m.tool_calls, at);
    if (calls instanceof ProxyError) return calls;
    blocks.push(...calls);
  }
  return blocks;
}

/** A tool message as a tool_result block (its text; an empty result has no content). */
function toolResult(m: Json, at: string): Json | ProxyError {
  if (typeof m.tool_call_id !== 'string' || m.tool_call_id === '')
    return invalidRequest(`${at}.tool_call_id is required on tool messages`, `${at}.tool_call_id`);
  const result: Json = { type: 'tool_result', tool_use_id: m.tool_call_id };
  if (typeof m.content === 'string') {
    if (m.content !== '') result.content = m.content;
  } else if (Array.isArray(m.content)) {
    const blocks: Json[] = [];
    for (const [j, part] of m.content.entries()) {
      const p = `${at}.content[${j}]`;
      if (!isRecord(part) || part.type !== 'text' || typeof part.text !== 'string')
        return unsupported(`${p}: a tool result carries text parts only`, p);
      const text = textBlocks(part.text, part, p);
      if (text instanceof ProxyError) return text;
      blocks.push(...text);
    }
    if (blocks.length > 0) result.content = blocks;
  } else if (m.content !== undefined && m.content !== null)
    return invalidRequest(`${at}.content must be a string or an array of text parts`, `${at}.content`);
  return result;
}

interface Turn {
  role: 'user' | 'assistant';
  content: Json[];
  /** The first chat message merged into it, for error messages. */
  from: number;
}

function conversation(messages: unknown): { system: Json[]; turns: Turn[] } | ProxyError {
  if (!Array.isArray(messages) || messages.length === 0)
    return invalidRequest('messages must be a non-empty array of {role, content} objects', 'messages');
  const system: Json[] = [];
  const turns: Turn[] = [];
  // Anthropic wants user and assistant turns to alternate: consecutive messages of a role are one turn.
  const add = (role: Turn['role'], blocks: Json[], from: number) => {
    const last = turns.at(-1);
    if (last?.role === role) last.content.push(...blocks);
    else turns.push({ role, content: blocks, from });
  };
  for (const [i, m] of messages.entries()) {
    const at = `messages[${i}]`;
    if (!isRecord(m)) return invalidRequest(`${at} must be an object with role and content`, at);
    let blocks: Json[] | ProxyError;
    if (m.role === 'system' || m.role === 'developer') {
      blocks = systemBlocks(m.content, at);
      if (blocks instanceof ProxyError) return blocks;
      system.push(...blocks);
      continue;
    }
    if (m.role === 'user') blocks = userBlocks(m.content, at);
    else if (m.role === 'tool') {
      const result = toolResult(m, at);
      blocks = result instanceof ProxyError ? result : [result];
    } else if (m.role === 'assistant') {
      blocks = assistantBlocks(m, at);
      // An empty assistant message says nothing (and Anthropic refuses empty turns): left out.
      if (Array.isArray(blocks) && blocks.length === 0) continue;
    } else if (m.role === 'function')
      return unsupported(`${at}.role function is the deprecated form: send tool messages`, `${at}.role`);
    else return invalidRequest(`${at}.role must be one of system, developer, user, assistant, tool`, `${at}.role`);
    if (blocks instanceof ProxyError) return blocks;
    add(m.role === 'assistant' ? 'assistant' : 'user', blocks, i);
  }
  if (turns.length === 0)
    return invalidRequest('messages has no user or assistant message: Claude models need at least one', 'messages');
  for (const t of turns) {
    if (t.content.length === 0)
      return invalidRequest(
        `messages[${t.from}].content is empty: Claude models refuse messages without non-blank text, an image or a document`,
        `messages[${t.from}].content`,
      );
    // Anthropic wants a turn's tool results ahead of anything else in it.
    if (t.role === 'user')
      t.content.sort((a, b) => Number(b.type === 'tool_result') - Number(a.type === 'tool_result'));
  }
  // A final assistant turn is a prefill, which Anthropic refuses when it ends in whitespace; the model continues the same.
  const last = turns.at(-1);
  const tail = last?.role === 'assistant' ? last.content.at(-1) : undefined;
  if (tail?.type === 'text') tail.text = String(tail.text).trimEnd();
  return { system, turns };
}

/** Function tools as Anthropic's custom tools; OpenAI's free-form custom tools have no counterpart. */
function toolsOf(tools: unknown): Json[] | ProxyError {
  if (tools === undefined || tools === null) return [];
  if (!Array.isArray(tools)) return invalidRequest('tools must be an array of function tools', 'tools');
  const out: Json[] = [];
  for (const [i, t] of tools.entries()) {
    const at = `tools[${i}]`;
    if (isRecord(t) && t.type === 'custom')
      return unsupported(`${at} is a custom (free-form) tool; Claude models take function tools`, at);
    if (!isRecord(t) || t.type !== 'function' || !isRecord(t.function) || typeof t.function.name !== 'string')
      return invalidRequest(`${at} must be {"type": "function", "function": {"name", "parameters"}}`, at);
    const { name, description, parameters } = t.function;
    if (parameters !== undefined && parameters !== null && !isRecord(parameters))
      return invalidRequest(`${at}.function.parameters must be a JSON Schema object`, `${at}.function.parameters`);
    const cache = cacheControlOf(t.cache_control, `${at}.cache_control`);
    if (cache instanceof ProxyError) return cache;
    // `strict` is left out: Anthropic takes it only on some models, and Claude follows the schema without it.
    out.push({
      name,
      ...(typeof description === 'string' && description !== '' ? { description } : {}),
      // Anthropic needs a schema; chat allows none for a function without arguments.
      input_schema: parameters ?? { type: 'object', properties: {} },
      ...cache,
    });
  }
  return out;
}

/** tool_choice as Anthropic's, parallel_tool_calls false as its disable_parallel_tool_use. */
function toolChoiceOf(choice: unknown, parallel: unknown, hasTools: boolean): Json | undefined | ProxyError {
  const single = parallel === false ? { disable_parallel_tool_use: true } : {};
  if (!hasTools) {
    if (choice === undefined || choice === null || choice === 'none' || choice === 'auto') return undefined;
    return invalidRequest('tool_choice needs tools', 'tool_choice');
  }
  if (choice === undefined || choice === null) return parallel === false ? { type: 'auto', ...single } : undefined;
  if (choice === 'auto') return { type: 'auto', ...single };
  if (choice === 'required') return { type: 'any', ...single };
  if (choice === 'none') return { type: 'none' };
  if (isRecord(choice) && choice.type === 'function' && isRecord(choice.function)) {
    if (typeof choice.function.name !== 'string')
      return invalidRequest('tool_choice.function.name must be a string', 'tool_choice.function.name');
    return { type: 'tool', name: choice.function.name, ...single };
  }
  if (isRecord(choice) && (choice.type === 'allowed_tools' || choice.type === 'custom'))
    return unsupported(`tool_choice of type ${choice.type} cannot be translated for Claude models`, 'tool_choice');
  return invalidRequest(
    'tool_choice must be none, auto, required or {"type": "function", "function": {"name": ...}}',
    'tool_choice',
  );
}

/**
 * response_format as an instruction at the end of the system prompt. Anthropic's own structured
 * outputs (output_config.format) exist only on its newer models and not on every platform that
 * serves Claude, and a forced tool (Bedrock Converse's way) would clash with the caller's own
 * tools and with thinking, which refuses forced tool use. Claude follows the instruction on
 * every model and the JSON streams as plain content; what is lost is the guarantee, which a
 * caller parsing the content checks anyway. Refusing instead would break the many clients that
 * ask for JSON by default.
 */
function jsonInstruction(format: unknown): string | undefined | ProxyError {
  if (format === undefined || format === null) return undefined;
  if (!isRecord(format) || typeof format.type !== 'string')
    return invalidRequest(
      'response_format must be {"type": "text" | "json_object" | "json_schema", ...}',
      'response_format',
    );
  const only = 'Reply with the JSON only: no other text, no Markdown code fences.';
  if (format.type === 'text') return undefined;
  if (format.type === 'json_object') return `Answer with a single valid JSON object. ${only}`;
  if (format.type !== 'json_schema')
    return invalidRequest(
      `response_format.type ${JSON.stringify(format.type)} is not one of text, json_object, json_schema`,
      'response_format.type',
    );
  const js = format.json_schema;
  if (!isRecord(js) || !isRecord(js.schema))
    return invalidRequest(
      'response_format.json_schema.schema must be a JSON Schema object',
      'response_format.json_schema.schema',
    );
  const about = typeof js.description === 'string' && js.description !== '' ? ` (${js.description})` : '';
  return `Answer with a single valid JSON value${about} that conforms to this JSON Schema. ${only}\n${JSON.stringify(js.schema)}`;
}

/** max_completion_tokens and max_tokens, the stricter winning; undefined when neither is set. */
function maxTokensOf(body: Json): number | undefined | ProxyError {
  let max: number | undefined;
  for (const name of ['max_completion_tokens', 'max_tokens'] as const) {
    const v = body[name];
    if (v === undefined || v === null) continue;
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 1)
      return invalidRequest(`${name} must be a positive integer`, name);
    max = Math.min(max ?? v, v);
  }
  return max;
}

/** Sampling: temperature clamped to Anthropic's 0..1 (chat's goes to 2), top_p as it is, stop as stop_sequences. */
function samplingOf(body: Json): Json | ProxyError {
  const out: Json = {};
  const { temperature, top_p, stop } = body;
  if (temperature !== undefined && temperature !== null) {
    if (typeof temperature !== 'number' || !Number.isFinite(temperature))
      return invalidRequest('temperature must be a number', 'temperature');
    out.temperature = Math.min(1, Math.max(0, temperature));
  }
  if (top_p !== undefined && top_p !== null) {
    if (typeof top_p !== 'number' || !(top_p >= 0 && top_p <= 1))
      return invalidRequest('top_p must be a number from 0 to 1', 'top_p');
    out.top_p = top_p;
  }
  if (stop !== undefined && stop !== null) {
    const list = typeof stop === 'string' ? [stop] : stop;
    if (!Array.isArray(list) || !list.every((s) => typeof s === 'string'))
      return invalidRequest('stop must be a string or an array of strings', 'stop');
    const sequences = list.filter((s) => s !== '');
    if (sequences.length > 0) out.stop_sequences = sequences;
  }
  return out;
}

/** What Anthropic cannot do at all: several choices, log probabilities, audio; the rest of REFUSED. */
function refusal(body: Json): ProxyError | undefined {
  for (const [k, v] of Object.entries(body)) {
    if (v === undefined || v === null || HANDLED.has(k)) continue;
    const refused = Object.hasOwn(REFUSED, k) ? REFUSED[k] : undefined;
    if (refused?.noOp?.(v)) continue;
    if (refused) return unsupported(`${k} is not supported for Claude models: ${refused.why}`, k);
    return unsupported(`${k} cannot be translated for Claude models (their upstream speaks Anthropic Messages)`, k);
  }
  if (body.n !== undefined && body.n !== null && body.n !== 1)
    return unsupported('n must be 1: Claude models give one choice per request', 'n');
  if (body.logprobs === true)
    return unsupported('logprobs is not supported for Claude models: they return no log probabilities', 'logprobs');
  if (typeof body.top_logprobs === 'number' && body.top_logprobs > 0)
    return unsupported(
      'top_logprobs is not supported for Claude models: they return no log probabilities',
      'top_logprobs',
    );
  if (body.audio !== undefined && body.audio !== null)
    return unsupported('audio is not supported for Claude models: they answer in text only', 'audio');
  if (Array.isArray(body.modalities) && body.modalities.includes('audio'))
    return unsupported('modalities audio is not supported for Claude models: they answer in text only', 'modalities');
  return undefined;
}

/**
 * reasoning_effort as a thinking budget, with what Anthropic asks of thinking: a max_tokens above
 * the budget, the default temperature, a top_p of 0.95 at least, and no forced tool call.
 */
function thinkingOf(effort: unknown): { type: 'enabled'; budget_tokens: number } | undefined | ProxyError {
  if (effort === undefined || effort === null || effort === 'none') return undefined;
  if (typeof effort !== 'string' || !Object.hasOwn(THINKING_BUDGETS, effort))
    return invalidRequest(
      'reasoning_effort must be one of none, minimal, low, medium, high for Claude models',
      'reasoning_effort',
    );
  return { type: 'enabled', budget_tokens: THINKING_BUDGETS[effort] ?? 1024 };
}

function thinkingConflict(out: Json, choice: Json | undefined): ProxyError | undefined {
  if (out.temperature !== undefined && out.temperature !== 1)
    return invalidRequest('temperature must be 1 (or left out) with reasoning_effort on Claude models', 'temperature');
  if (typeof out.top_p === 'number' && out.top_p < 0.95)
    return invalidRequest('top_p must be 0.95 or more (or left out) with reasoning_effort on Claude models', 'top_p');
  if (choice?.type === 'any' || choice?.type === 'tool')
    return invalidRequest(
      'tool_choice required or a named function cannot go with reasoning_effort on Claude models: send auto, or no reasoning_effort',
      'tool_choice',
    );
  return undefined;
}

/**
 * A tool loop whose last assistant turn came back without its thinking blocks (a caller that
 * keeps only OpenAI's fields): Anthropic refuses to think on in it, so this turn is answered
 * without thinking rather than refused.
 */
function loopLostItsThinking(turns: Turn[]): boolean {
  const last = turns.at(-1);
  if (last?.role !== 'user' || !last.content.some((b) => b.type === 'tool_result')) return false;
  const assistant = turns.at(-2);
  return assistant !== undefined && !THINKING_BLOCKS.has(String(assistant.content[0]?.type));
}

// ---------------------------------------------------------------------------------------------
// Answers

let counter = 0;
const newId = (prefix: string) => `${prefix}-${Date.now().toString(36)}${(counter++).toString(36).padStart(6, '0')}`;
const nowSeconds = () => Math.floor(Date.now() / 1000);

const FINISH_REASONS: Readonly<Record<string, FinishReason>> = {
  end_turn: 'stop',
  stop_sequence: 'stop',
  // Only Anthropic's server tools pause a turn, and none are asked: the turn is over for the caller.
  pause_turn: 'stop',
  max_tokens: 'length',
  // The answer was cut off because the context filled up: for the caller that is a length stop.
  model_context_window_exceeded: 'length',
  tool_use: 'tool_calls',
  refusal: 'content_filter',
};

const finishReasonOf = (stop: unknown): FinishReason =>
  typeof stop === 'string' && Object.hasOwn(FINISH_REASONS, stop) ? (FINISH_REASONS[stop] ?? 'stop') : 'stop';

interface AnthropicBlock {
  type?: string;
  text?: string;
  thinking?: string;
  signature?: string;
  data?: string;
  id?: string;
  name?: string;
  input?: unknown;
}

/** Anthropic's message as a chat.completion: text joined, tool_use blocks as tool_calls, thinking as reasoning_content. */
function fromMessage(body: unknown, request: Json): Json {
  const message = (isRecord(body) ? body : {}) as {
    id?: string;
    model?: string;
    content?: AnthropicBlock[];
    stop_reason?: string | null;
    usage?: unknown;
  };
  const blocks = Array.isArray(message.content) ? message.content : [];
  const texts: string[] = [];
  const calls: Json[] = [];
  const reasoning: string[] = [];
  const thinking: ThinkingBlock[] = [];
  for (const b of blocks) {
    if (b.type === 'text' && typeof b.text === 'string') texts.push(b.text);
    else if (b.type === 'tool_use')
      calls.push({
        id: String(b.id ?? ''),
        type: 'function',
        function: { name: String(b.name ?? ''), arguments: JSON.stringify(b.input ?? {}) },
      });
    else if (b.type === 'thinking') {
      reasoning.push(b.thinking ?? '');
      thinking.push({ type: 'thinking', thinking: b.thinking ?? '', signature: b.signature ?? '' });
    } else if (b.type === 'redacted_thinking') thinking.push({ type: 'redacted_thinking', data: b.data ?? '' });
  }
  const out: Json = { role: 'assistant', content: texts.length > 0 ? texts.join('') : null, refusal: null };
  if (calls.length > 0) out.tool_calls = calls;
  if (reasoning.length > 0) out.reasoning_content = reasoning.join('');
  if (thinking.length > 0) out.thinking_blocks = thinking;
  return {
    id: typeof message.id === 'string' && message.id !== '' ? message.id : newId('chatcmpl'),
    object: 'chat.completion',
    created: nowSeconds(),
    model: String(request.model ?? message.model ?? ''),
    choices: [{ index: 0, message: out, finish_reason: finishReasonOf(message.stop_reason), logprobs: null }],
    usage: openAIUsage(anthropicUsage(message.usage)),
  };
}

/** One event of Anthropic's stream, as far as the chat chunks need it. */
interface AnthropicEvent {
  type?: string;
  message?: { id?: string; usage?: unknown };
  index?: number;
  content_block?: AnthropicBlock;
  delta?: {
    type?: string;
    text?: string;
    partial_json?: string;
    thinking?: string;
    signature?: string;
    stop_reason?: string | null;
  };
  usage?: unknown;
  error?: unknown;
}

/** Anthropic's error types as the gateway's, for the caller's SDK to pick its exception. */
const ERROR_TYPES: Readonly<Record<string, ErrorType>> = {
  invalid_request_error: 'invalid_request_error',
  request_too_large: 'invalid_request_error',
  authentication_error: 'authentication_error',
  permission_error: 'permission_error',
  not_found_error: 'not_found_error',
  rate_limit_error: 'rate_limit_error',
  timeout_error: 'timeout_error',
  overloaded_error: 'server_error',
  api_error: 'api_error',
};

/** The gateway's own errors travel in Anthropic's envelope with the code at the end of the message (dialects.ts). */
const OWN_CODE = /^(.*) \(([a-z0-9]+(?:_[a-z0-9]+)+)\)$/s;

/** An error event of the stream (Anthropic's, or the gateway's for a stream that broke) as a ProxyError. */
function streamErrorOf(error: unknown): ProxyError {
  const e = isRecord(error) ? error : {};
  const type = typeof e.type === 'string' ? e.type : 'api_error';
  const text = typeof e.message === 'string' && e.message !== '' ? e.message : 'the upstream failed';
  const own = OWN_CODE.exec(text);
  const mapped = Object.hasOwn(ERROR_TYPES, type) ? ERROR_TYPES[type] : undefined;
  return new ProxyError(502, mapped ?? 'api_error', own?.[2] ?? type, own?.[1] ?? text);
}

/** Anthropic's event stream (SSE bytes) as chat.completion.chunk events, ending in [DONE]. */
function streamFrom(upstream: StreamBody, request: Json, includeUsage: boolean): ChunkSource {
  const chunks = new ChatChunksOfAnthropic(String(request.model ?? ''), includeUsage);
  const source = chunksOf(upstream);
  const encoder = new TextEncoder();
  const decoder = new TextDecoder();
  const parser = createParser({
    onEvent: ({ event, data }) => {
      if (chunks.ended) return;
      let parsed: unknown;
      try {
        parsed = JSON.parse(data);
      } catch {
        return;
      }
      if (!isRecord(parsed)) return;
      const e = parsed as AnthropicEvent;
      chunks.event({ ...e, type: e.type ?? event });
    },
  });
  let drained = false;
  return {
    // Pulled: the upstream is read only while nothing is queued for the caller, so backpressure holds.
    read: async () => {
      while (chunks.out.length === 0 && !drained) {
        const chunk = await source.read();
        if (chunk === undefined) {
          drained = true;
          if (!chunks.ended) parser.feed(decoder.decode());
          chunks.end(
            new ProxyError(
              502,
              'api_error',
              'upstream_stream_broken',
              'the upstream ended the stream before message_stop; the answer may be incomplete, retry',
            ),
          );
          break;
        }
        // After the last event the upstream is still read to its end, unparsed: only then does it
        // settle its outcome (the usage the gateway bills) and release its connection.
        if (!chunks.ended) parser.feed(decoder.decode(chunk, { stream: true }));
      }
      return chunks.out.length > 0 ? encoder.encode(chunks.out.splice(0).join('')) : undefined;
    },
    cancel: () => source.cancel(),
  };
}

/** The chat chunks Anthropic's events become, one event at a time. */
class ChatChunksOfAnthropic {
  readonly out: string[] = [];
  ended = false;
  private readonly created = nowSeconds();
  private id = '';
  private started = false;
  private usage: Usage | undefined;
  private stop: string | undefined;
  /** Anthropic's block index -> the tool call's index among the answer's calls (chat counts calls, not blocks). */
  private readonly calls = new Map<number, number>();
  /** The thinking text of the blocks open, sent again whole once signed, so that a caller can return it. */
  private readonly thoughts = new Map<number, string>();
  /** Tool-use blocks whose input has not streamed a fragment yet. */
  private readonly argsPending = new Set<number>();

  constructor(
    private readonly model: string,
    private readonly includeUsage: boolean,
  ) {}

  private push(choices: Json[], extra: Json = {}): void {
    const chunk = { id: this.id, object: 'chat.completion.chunk', created: this.created, model: this.model, choices };
    // With include_usage OpenAI sends usage null on every chunk but the last.
    this.out.push(sseFrame(JSON.stringify({ ...chunk, ...(this.includeUsage ? { usage: null } : {}), ...extra })));
  }

  /** OpenAI clients expect the role first, even if an upstream skipped message_start. */
  private open(messageId?: string): void {
    if (this.started) return;
    this.started = true;
    this.id = messageId || newId('chatcmpl');
    this.push([{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null, logprobs: null }]);
  }

  private emit(delta: Json, finish: FinishReason | null = null): void {
    this.open();
    this.push([{ index: 0, delta, finish_reason: finish, logprobs: null }]);
  }

  end(error?: ProxyError): void {
    if (this.ended) return;
    this.ended = true;
    const chat = DIALECTS['openai-chat'];
    if (error) {
      // As an OpenAI stream that fails midway: its error event, then [DONE] (the SDKs raise the error).
      this.out.push(chat.streamError(error), chat.streamEnd);
      return;
    }
    this.emit({}, finishReasonOf(this.stop));
    if (this.includeUsage)
      this.push([], { usage: openAIUsage(this.usage ?? { promptTokens: 0, completionTokens: 0 }) });
    this.out.push(chat.streamEnd);
  }

  event(e: AnthropicEvent): void {
    const index = e.index ?? 0;
    switch (e.type) {
      case 'message_start':
        this.usage = anthropicUsage(e.message?.usage, this.usage);
        this.open(e.message?.id);
        return;
      case 'content_block_start':
        this.blockStart(e.content_block ?? {}, index);
        return;
      case 'content_block_delta':
        this.blockDelta(e.delta ?? {}, index);
        return;
      case 'content_block_stop':
        this.blockStop(index);
        return;
      case 'message_delta':
        if (e.delta?.stop_reason) this.stop = e.delta.stop_reason;
        this.usage = anthropicUsage(e.usage, this.usage);
        return;
      case 'message_stop':
        this.end();
        return;
      case 'error':
        this.end(streamErrorOf(e.error));
        return;
      default:
      // ping, and anything newer: nothing for the caller.
    }
  }

  private blockStart(block: NonNullable<AnthropicEvent['content_block']>, index: number): void {
    if (block.type === 'tool_use') {
      const call = this.calls.size;
      this.calls.set(index, call);
      this.argsPending.add(index);
      this.emit({
        tool_calls: [
          { index: call, id: block.id ?? '', type: 'function', function: { name: block.name ?? '', arguments: '' } },
        ],
      });
    } else if (block.type === 'thinking') {
      this.thoughts.set(index, block.thinking ?? '');
      if (block.thinking) this.emit({ reasoning_content: block.thinking });
    } else if (block.type === 'redacted_thinking')
      this.emit({ thinking_blocks: [{ type: 'redacted_thinking', data: block.data ?? '' }] });
    else if (block.type === 'text' && block.text) this.emit({ content: block.text });
  }

  private blockDelta(d: NonNullable<AnthropicEvent['delta']>, index: number): void {
    if (d.type === 'text_delta' && d.text) this.emit({ content: d.text });
    else if (d.type === 'input_json_delta' && d.partial_json) {
      this.argsPending.delete(index);
      const call = this.calls.get(index);
      if (call !== undefined) this.emit({ tool_calls: [{ index: call, function: { arguments: d.partial_json } }] });
    } else if (d.type === 'thinking_delta' && d.thinking) {
      this.thoughts.set(index, (this.thoughts.get(index) ?? '') + d.thinking);
      this.emit({ reasoning_content: d.thinking });
    } else if (d.type === 'signature_delta' && d.signature)
      this.emit({
        thinking_blocks: [{ type: 'thinking', thinking: this.thoughts.get(index) ?? '', signature: d.signature }],
      });
  }

  private blockStop(index: number): void {
    this.thoughts.delete(index);
    // A tool called with no input streams no fragment: OpenAI's clients parse "{}", never "".
    const call = this.calls.get(index);
    if (this.argsPending.delete(index) && call !== undefined)
      this.emit({ tool_calls: [{ index: call, function: { arguments: '{}' } }] });
  }
}

export const openaiChatToAnthropicMessages: Translator = {
  from: 'openai-chat',
  to: 'anthropic-messages',
  begin(body, stream): Translation | ProxyError {
    const refused = refusal(body);
    if (refused) return refused;
    const conv = conversation(body.messages);
    if (conv instanceof ProxyError) return conv;
    const max = maxTokensOf(body);
    if (max instanceof ProxyError) return max;
    const sampling = samplingOf(body);
    if (sampling instanceof ProxyError) return sampling;
    const tools = toolsOf(body.tools);
    if (tools instanceof ProxyError) return tools;
    const choice = toolChoiceOf(body.tool_choice, body.parallel_tool_calls, tools.length > 0);
    if (choice instanceof ProxyError) return choice;
    const json = jsonInstruction(body.response_format);
    if (json instanceof ProxyError) return json;
    let thinking = thinkingOf(body.reasoning_effort);
    if (thinking instanceof ProxyError) return thinking;
    if (thinking && loopLostItsThinking(conv.turns)) thinking = undefined;
    if (thinking) {
      const conflict = thinkingConflict(sampling, choice);
      if (conflict) return conflict;
    }

    // Thinking counts toward max_tokens, which must exceed the budget: the budget comes on top of
    // the default (the answer keeps its room), and of a caller's limit that would leave none.
    const budget = thinking?.budget_tokens ?? 0;
    const limit = max ?? DEFAULT_MAX_TOKENS;
    const anthropic: Json = {
      model: body.model,
      max_tokens: thinking && (max === undefined || max <= budget) ? limit + budget : limit,
      messages: conv.turns.map((t) => ({ role: t.role, content: t.content })),
    };
    const system = json ? [...conv.system, { type: 'text', text: json }] : conv.system;
    if (system.length > 0) anthropic.system = system;
    anthropic.stream = stream;
    Object.assign(anthropic, sampling);
    if (tools.length > 0) anthropic.tools = tools;
    if (choice) anthropic.tool_choice = choice;
    if (thinking) anthropic.thinking = thinking;
    const user = typeof body.user === 'string' && body.user !== '' ? body.user : body.safety_identifier;
    if (typeof user === 'string' && user !== '') anthropic.metadata = { user_id: user };
    const includeUsage = isRecord(body.stream_options) && body.stream_options.include_usage === true;
    return {
      body: anthropic,
      wantsUsage: false,
      json: (answer) => fromMessage(answer, body),
      stream: (upstream: StreamBody, _outcome: Promise<StreamOutcome>) => streamFrom(upstream, body, includeUsage),
    };
  },
};
