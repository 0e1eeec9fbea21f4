import { isRecord } from '../endpoints/chat-request.js';
import { num, type StreamReader, sseFrame } from './stream-reader.js';
import type { Usage } from './upstream.js';

/**
 * Anthropic's Messages stream as any upstream sends it natively (Ollama's /v1/messages,
 * Bedrock's InvokeModelWithResponseStream for Claude): named events, the usage in message_start
 * and message_delta, message_stop last.
 */

/** Anthropic's usage: input_tokens excludes the cache's reads and writes, which the gateway counts as prompt tokens. */
export function anthropicUsage(u: unknown, into: Usage = { promptTokens: 0, completionTokens: 0 }): Usage {
  if (!isRecord(u)) return into;
  const read = num(u.cache_read_input_tokens);
  const write = num(u.cache_creation_input_tokens);
  const input = num(u.input_tokens) + read + write;
  // message_start carries the input (Ollama's an early guess), message_delta the cumulative output
  // and, from Ollama and lately Anthropic, the input again: a later count replaces an earlier one.
  const out: Usage = {
    promptTokens: input || into.promptTokens,
    completionTokens: num(u.output_tokens) || into.completionTokens,
  };
  const cached = read || (into.cachedTokens ?? 0);
  const written = write || (into.cacheWriteTokens ?? 0);
  const hour =
    (isRecord(u.cache_creation) ? num(u.cache_creation.ephemeral_1h_input_tokens) : 0) ||
    (into.cacheWrite1hTokens ?? 0);
  if (cached) out.cachedTokens = cached;
  if (written) out.cacheWriteTokens = written;
  if (hour) out.cacheWrite1hTokens = Math.min(hour, written);
  return out;
}

export const anthropicStream = (): StreamReader => {
  let usage: Usage | undefined;
  return {
    read(event, data) {
      if (data.charCodeAt(0) !== 123 /* { */) return undefined;
      const name = event ?? '';
      const out = sseFrame(data, event);
      if (name === 'content_block_delta') return { out, token: true, last: false };
      if (name !== 'message_start' && name !== 'message_delta')
        return { out, token: false, last: name === 'message_stop' || name === 'error' };
      let parsed: { message?: { usage?: unknown }; usage?: unknown };
      try {
        parsed = JSON.parse(data) as typeof parsed;
      } catch {
        return undefined;
      }
      usage = anthropicUsage(parsed.message?.usage ?? parsed.usage, usage);
      return { out, token: false, usage, last: false };
    },
  };
};
