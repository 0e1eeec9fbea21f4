import type { CallerDialect } from '../../crds/constants.js';
import { isRecord } from '../../crds/is-record.js';

/**
 * What the routing policy's scorer reads of a request (proxy/routing-policy/scorer.ts), taken from
 * the body of any caller dialect. The body was checked by its endpoint's parser, but it is read
 * here as unknown JSON all the same: a field of an unexpected shape is skipped, never thrown on.
 * It runs on every routed request, so it walks only the fields that carry the conversation, at
 * most WALK_BUDGET values, and never serializes the body.
 */
export interface RequestFeatures {
  /** Estimated prompt tokens of the whole request: about 4 characters of text a token, images a fixed cost. */
  inputTokens: number;
  /** max_tokens | max_completion_tokens | max_output_tokens, as asked. */
  maxOutputTokens?: number;
  /** Tools offered. */
  tools: number;
  /** Their names: the cascade checks that a tool the model called exists. */
  toolNames: readonly string[];
  images: boolean;
  /** User and assistant turns of the conversation. */
  depth: number;
  /** reasoning_effort, reasoning.effort, or Anthropic's thinking (its budget mapped to a level). */
  reasoning?: 'minimal' | 'low' | 'medium' | 'high';
  /** JSON output asked: response_format (chat), text.format (responses), output_format (messages). */
  json: boolean;
  /** The latest user turn's text, at most PROMPT_CAP characters: what the scorer reads and embeds. */
  prompt: string;
  /**
   * The user's turn before it, at most CONTEXT_CAP characters, when the latest is short ("yes, do
   * that", "now the other one"): what the short turn refers to, embedded with it.
   */
  context?: string;
}

/** The text the scorer reads: the latest user turn, after what it refers to when it is short. */
export const scoredText = (f: RequestFeatures): string => (f.context ? `${f.context}\n${f.prompt}` : f.prompt);

type Reasoning = NonNullable<RequestFeatures['reasoning']>;

export const PROMPT_CAP = 8000;
/** Most values walked to size a request; a real conversation of thousands of turns stays below it. */
const WALK_BUDGET = 50_000;
/** What an image costs in tokens at the providers (a 512 px tile and its base, about). */
const IMAGE_TOKENS = 765;
const CHARS_PER_TOKEN = 4;
/** Part and block types that hold an image, in every dialect. */
const IMAGE_TYPES = new Set(['image_url', 'input_image', 'image']);
/** Fields of no text value to the model (ids, signatures, opaque state) left out of the size. */
const SKIPPED_KEYS = new Set([
  'id',
  'call_id',
  'tool_use_id',
  'tool_call_id',
  'signature',
  'encrypted_content',
  'type',
]);

/** The characters and images met by a walk over the conversation, and how many values it has visited. */
interface Tally {
  chars: number;
  images: boolean;
  visited: number;
}

/** Adds the text characters under `v` to the tally; images count as IMAGE_TOKENS, their (base64) URL not at all. */
function measure(v: unknown, t: Tally): void {
  if (++t.visited > WALK_BUDGET) return;
  if (typeof v === 'string') {
    t.chars += v.length;
    return;
  }
  if (Array.isArray(v)) {
    for (const x of v) measure(x, t);
    return;
  }
  if (!isRecord(v)) return;
  if (typeof v.type === 'string' && IMAGE_TYPES.has(v.type)) {
    t.images = true;
    t.chars += IMAGE_TOKENS * CHARS_PER_TOKEN;
    return;
  }
  for (const key in v) if (!SKIPPED_KEYS.has(key)) measure(v[key], t);
}

/** The text parts of a message's content (a string, or parts/blocks with `text`), joined, capped. */
function textOf(content: unknown): string {
  if (typeof content === 'string') return capped(content);
  if (!Array.isArray(content)) return '';
  const texts: string[] = [];
  let length = 0;
  for (const part of content) {
    if (!isRecord(part) || typeof part.text !== 'string') continue;
    // output_text is a model's own words replayed in a responses input, not the user's.
    if (part.type !== undefined && part.type !== 'text' && part.type !== 'input_text') continue;
    texts.push(part.text);
    length += part.text.length;
    if (length > PROMPT_CAP * 2) break;
  }
  return capped(texts.join('\n'));
}

/**
 * A long prompt keeps its head and its tail: the ask is usually at one end of a pasted document,
 * and the scorer's work stays bounded.
 */
function capped(text: string): string {
  if (text.length <= PROMPT_CAP) return text;
  const half = PROMPT_CAP / 2;
  return `${text.slice(0, half - 1)}\n${text.slice(text.length - half)}`;
}

/** A latest turn shorter than this is read with the user's turn before it. */
const SHORT_PROMPT = 160;
const CONTEXT_CAP = 2000;

/**
 * The latest message with the user's own words (walking back from the end, past tool results,
 * which Anthropic sends as user turns, and messages without text), and the one before it when
 * the latest is short.
 */
function latestUserText(messages: unknown): { prompt: string; context?: string } {
  if (!Array.isArray(messages)) return { prompt: '' };
  let prompt: string | undefined;
  for (let i = messages.length - 1; i >= 0; i--) {
    const m: unknown = messages[i];
    if (!isRecord(m) || m.role !== 'user') continue;
    if (m.type !== undefined && m.type !== 'message') continue;
    const text = textOf(m.content);
    if (text === '') continue;
    if (prompt === undefined) {
      prompt = text;
      if (text.length >= SHORT_PROMPT) break;
    } else {
      return { prompt, context: text.length > CONTEXT_CAP ? text.slice(text.length - CONTEXT_CAP) : text };
    }
  }
  return { prompt: prompt ?? '' };
}

/** Anthropic sends tool results as user messages: a message of tool_result blocks only is not a turn of the user's. */
function onlyToolResults(content: unknown): boolean {
  if (!Array.isArray(content) || content.length === 0) return false;
  for (const b of content) if (!isRecord(b) || b.type !== 'tool_result') return false;
  return true;
}

/**
 * User and assistant turns, counted alike in every dialect: a Responses function call (a run of
 * them, when parallel) is the assistant's turn, as a chat assistant message with tool_calls is;
 * tool results are not turns.
 */
function turns(messages: unknown): number {
  if (!Array.isArray(messages)) return 0;
  let n = 0;
  let calling = false;
  for (const m of messages) {
    if (!isRecord(m)) continue;
    const call = m.type === 'function_call' || m.type === 'custom_tool_call';
    if (call && !calling) n++;
    calling = call;
    if (m.role === 'assistant' || (m.role === 'user' && !onlyToolResults(m.content))) n++;
  }
  return n;
}

/** Names of the tools offered: OpenAI's function and custom tools (both shapes), and every named Anthropic tool. */
function toolNamesOf(tools: unknown): string[] {
  if (!Array.isArray(tools)) return [];
  const names: string[] = [];
  for (const t of tools) {
    if (!isRecord(t)) continue;
    const nested = isRecord(t.function) ? t.function : isRecord(t.custom) ? t.custom : t;
    if (typeof nested.name === 'string') names.push(nested.name);
  }
  return names;
}

const LEVELS: Record<string, Reasoning> = {
  minimal: 'minimal',
  low: 'low',
  medium: 'medium',
  high: 'high',
  xhigh: 'high',
  max: 'high',
};

/** Anthropic's thinking budget as a level: its documented minimum is 1,024 tokens; 16k and up is deep thinking. */
function budgetLevel(budget: unknown): Reasoning {
  if (typeof budget !== 'number') return 'medium';
  if (budget < 4096) return 'low';
  return budget < 16_384 ? 'medium' : 'high';
}

/**
 * Anthropic's output_config.effort is `high` when absent (its documented default), and Claude Code
 * sends it on every call: only `max` asks for more than a plain request, and a lower effort for less.
 */
const ANTHROPIC_EFFORT: Record<string, Reasoning | undefined> = {
  low: 'minimal',
  medium: 'low',
  high: undefined,
  max: 'high',
};

function reasoningOf(dialect: CallerDialect, body: Record<string, unknown>): Reasoning | undefined {
  if (dialect === 'anthropic-messages') {
    const effort = isRecord(body.output_config) ? body.output_config.effort : undefined;
    const level =
      typeof effort === 'string' && Object.hasOwn(ANTHROPIC_EFFORT, effort) ? ANTHROPIC_EFFORT[effort] : undefined;
    if (level) return level;
    const thinking = body.thinking;
    if (!isRecord(thinking)) return undefined;
    if (thinking.type === 'enabled') return budgetLevel(thinking.budget_tokens);
    return thinking.type === 'adaptive' ? 'medium' : undefined;
  }
  const effort = typeof body.reasoning_effort === 'string' ? body.reasoning_effort : undefined;
  const nested = isRecord(body.reasoning) ? body.reasoning.effort : undefined;
  const level = effort ?? (typeof nested === 'string' ? nested : undefined);
  return level === undefined ? undefined : LEVELS[level];
}

const JSON_FORMATS = new Set(['json_object', 'json_schema']);
const formatIsJson = (format: unknown): boolean => isRecord(format) && JSON_FORMATS.has(format.type as string);

function jsonAsked(dialect: CallerDialect, body: Record<string, unknown>): boolean {
  if (dialect === 'anthropic-messages')
    return (
      formatIsJson(body.output_format) || (isRecord(body.output_config) && formatIsJson(body.output_config.format))
    );
  if (dialect === 'openai-responses') return isRecord(body.text) && formatIsJson(body.text.format);
  return formatIsJson(body.response_format);
}

function maxOutputOf(body: Record<string, unknown>): number | undefined {
  for (const v of [body.max_completion_tokens, body.max_tokens, body.max_output_tokens])
    if (typeof v === 'number' && Number.isFinite(v) && v > 0) return v;
  return undefined;
}

/** Where each dialect keeps the conversation: the values to size, the messages, and the prompt when it is a string. */
function conversationOf(
  dialect: CallerDialect,
  body: Record<string, unknown>,
): { sized: unknown[]; messages: unknown; prompt?: string } {
  switch (dialect) {
    case 'openai-chat':
      return { sized: [body.messages, body.tools], messages: body.messages };
    case 'anthropic-messages':
      return { sized: [body.system, body.messages, body.tools], messages: body.messages };
    case 'openai-responses': {
      const { input } = body;
      const sized = [body.instructions, input, body.tools];
      if (typeof input === 'string') return { sized, messages: undefined, prompt: capped(input) };
      return { sized, messages: input };
    }
    case 'openai-completions': {
      const { prompt } = body;
      return { sized: [prompt], messages: undefined, prompt: typeof prompt === 'string' ? capped(prompt) : '' };
    }
    default:
      return { sized: [body.input], messages: undefined, prompt: '' };
  }
}

export function featuresOf(dialect: CallerDialect, body: Record<string, unknown>): RequestFeatures {
  const conversation = conversationOf(dialect, body);
  const tally: Tally = { chars: 0, images: false, visited: 0 };
  for (const v of conversation.sized) measure(v, tally);
  const toolNames =
    dialect === 'openai-chat' || dialect === 'openai-responses' || dialect === 'anthropic-messages'
      ? toolNamesOf(body.tools)
      : [];
  const reasoning = reasoningOf(dialect, body);
  const maxOutputTokens = maxOutputOf(body);
  const stringInput = conversation.prompt !== undefined && dialect === 'openai-responses';
  const latest =
    conversation.prompt !== undefined ? { prompt: conversation.prompt } : latestUserText(conversation.messages);
  return {
    inputTokens: Math.ceil(tally.chars / CHARS_PER_TOKEN),
    ...(maxOutputTokens !== undefined ? { maxOutputTokens } : {}),
    tools: toolNames.length,
    toolNames,
    images: tally.images,
    depth: stringInput ? 1 : turns(conversation.messages),
    ...(reasoning !== undefined ? { reasoning } : {}),
    json: jsonAsked(dialect, body),
    prompt: latest.prompt,
    ...(latest.context !== undefined ? { context: latest.context } : {}),
  };
}
