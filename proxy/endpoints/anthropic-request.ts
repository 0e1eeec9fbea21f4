import { isRecord } from '../../crds/is-record.js';
import { modelOf, type ParsedRequest } from './chat-request.js';
import { invalidRequest, type ProxyError } from './errors.js';

/**
 * Anthropic's Messages request (POST /anthropic/v1/messages) as the gateway checks it: what it
 * must see to route and account for the call, and the shape of what a translator reads, so a
 * malformed body is one 400 naming the field (as Anthropic names it, `messages.0.content`)
 * instead of a failure somewhere upstream. Fields the gateway does not read pass on untouched.
 */

/** `system` inside messages is in the published spec (2026-05-31, InputMessage.role): Claude Code sends it with its Agent and Skill tools. */
const ROLES = new Set(['user', 'assistant', 'system']);
const MAX_MESSAGES = 10_000;

const bad = (message: string, param: string) => invalidRequest(message, param);

function checkBlocks(content: unknown, at: string): ProxyError | undefined {
  if (typeof content === 'string') return undefined;
  if (!Array.isArray(content)) return bad(`${at} must be a string or an array of content blocks`, at);
  for (const [i, block] of content.entries()) {
    const p = `${at}.${i}`;
    if (!isRecord(block) || typeof block.type !== 'string') return bad(`${p} must be an object with a type`, p);
    if (block.type === 'text' && typeof block.text !== 'string') return bad(`${p}.text must be a string`, `${p}.text`);
    if (block.type === 'tool_use' && (typeof block.id !== 'string' || typeof block.name !== 'string'))
      return bad(`${p} (tool_use) needs a string id and name`, p);
    if (block.type === 'tool_result' && typeof block.tool_use_id !== 'string')
      return bad(`${p}.tool_use_id must be a string`, `${p}.tool_use_id`);
    if (block.type === 'image' && !isRecord(block.source)) return bad(`${p}.source must be an object`, `${p}.source`);
  }
  return undefined;
}

export function parseAnthropicRequest(body: unknown): ParsedRequest | ProxyError {
  if (!isRecord(body)) return invalidRequest('the request body must be a JSON object');
  const model = modelOf(body);
  if (typeof model !== 'string') return model;
  const { tags, ...forward } = body;
  const { max_tokens, messages, system, stream, tools, tool_choice, stop_sequences, metadata, thinking } = forward;
  // 0 is the spec's (it warms the prompt cache without generating); an upstream may refuse it.
  if (typeof max_tokens !== 'number' || !Number.isInteger(max_tokens) || max_tokens < 0)
    return bad('max_tokens is required: a whole number, 0 or more', 'max_tokens');
  // Empty is the spec's to allow (no minItems) and the upstream's to refuse.
  if (!Array.isArray(messages)) return bad('messages must be an array of {role, content}', 'messages');
  if (messages.length > MAX_MESSAGES) return bad(`messages holds more than ${MAX_MESSAGES} messages`, 'messages');
  for (const [i, m] of messages.entries()) {
    const at = `messages.${i}`;
    if (!isRecord(m)) return bad(`${at} must be an object`, at);
    if (typeof m.role !== 'string' || !ROLES.has(m.role))
      return bad(`${at}.role must be "user", "assistant" or "system"`, `${at}.role`);
    const content = checkBlocks(m.content, `${at}.content`);
    if (content) return content;
  }
  if (system !== undefined) {
    const s = checkBlocks(system, 'system');
    if (s) return s;
  }
  if (stream !== undefined && typeof stream !== 'boolean') return bad('stream must be a boolean', 'stream');
  if (tools !== undefined) {
    if (!Array.isArray(tools)) return bad('tools must be an array', 'tools');
    for (const [i, t] of tools.entries()) {
      if (!isRecord(t) || typeof t.name !== 'string')
        return bad(`tools.${i} must be an object with a name`, `tools.${i}`);
    }
  }
  if (tool_choice !== undefined && !(isRecord(tool_choice) && typeof tool_choice.type === 'string'))
    return bad('tool_choice must be an object with a type (auto, any, tool, none)', 'tool_choice');
  if (
    stop_sequences !== undefined &&
    !(Array.isArray(stop_sequences) && stop_sequences.every((s) => typeof s === 'string'))
  )
    return bad('stop_sequences must be an array of strings', 'stop_sequences');
  if (metadata !== undefined && !isRecord(metadata)) return bad('metadata must be an object', 'metadata');
  if (thinking !== undefined && !(isRecord(thinking) && typeof thinking.type === 'string'))
    return bad('thinking must be an object with a type', 'thinking');
  // Anthropic's streams always carry usage (message_start and message_delta).
  return { model, stream: stream === true, includeUsage: true, tags, forward };
}

/**
 * Anthropic's POST /v1/messages/count_tokens: a Messages body without max_tokens (it is set to 1
 * when absent, so the one parser checks both; providers that count are sent it without).
 */
export function parseCountTokensRequest(body: unknown): ParsedRequest | ProxyError {
  const req = parseAnthropicRequest(isRecord(body) ? { max_tokens: 1, ...body } : body);
  return req instanceof Error ? req : { ...req, stream: false };
}

/**
 * count_tokens where the upstream cannot count: about four characters of JSON text per token, the
 * ratio Anthropic and OpenAI document for English; an estimate, and answered as one.
 */
export function estimateInputTokens(body: Record<string, unknown>): number {
  const { messages, system, tools } = body;
  const text = JSON.stringify([system ?? '', messages ?? [], tools ?? []]);
  return Math.max(1, Math.ceil(text.length / 4));
}

/** The anthropic-beta flags a request sends (comma-separated in one header): what an Anthropic upstream is told, and what changes its answer. */
export const anthropicBetas = (header: string | undefined): string[] =>
  (header ?? '')
    .split(',')
    .map((b) => b.trim())
    .filter((b) => b !== '');
