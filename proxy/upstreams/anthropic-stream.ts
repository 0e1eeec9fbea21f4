import { isRecord } from '../../crds/is-record.js';
import { conformingReader } from '../conformance/conformance.js';
import { DIALECTS } from '../endpoints/dialects.js';
import type { StreamEvents } from './event-stream.js';
import { NO_TOKEN, num, type StreamReader, sseFrame, TOKEN } from './stream-reader.js';
import type { Usage } from './upstream.js';

/**
 * Anthropic's Messages stream as any upstream sends it natively (Ollama's /v1/messages,
 * Anthropic's, Claude on Vertex; Bedrock's InvokeModelWithResponseStream frames the same events
 * in an AWS event stream): named events, the usage in message_start and message_delta,
 * message_stop last.
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
    // The deltas (most of a stream) and the blocks' stops pass unchanged; the usage's and the last events are read.
    fast: (_raw, name) =>
      name === 'content_block_delta' ? TOKEN : name === 'content_block_stop' ? NO_TOKEN : undefined,
    read(event, data) {
      if (data.charCodeAt(0) !== 123 /* { */) return undefined;
      const name = event ?? '';
      const out = sseFrame(data, event);
      if (name === 'content_block_delta') return { out, token: true, last: false };
      if (name !== 'message_start' && name !== 'message_delta')
        return { out, token: false, last: name === 'message_stop' || name === 'error' };
      let parsed: unknown;
      try {
        parsed = JSON.parse(data);
      } catch {
        return undefined;
      }
      if (!isRecord(parsed)) return undefined;
      usage = anthropicUsage((isRecord(parsed.message) ? parsed.message.usage : undefined) ?? parsed.usage, usage);
      // Parsed whole: handed on, so the conformance does not parse it again.
      return { out, token: false, usage, last: false, data: parsed };
    },
  };
};

/** Bedrock's additions to the last event, which Anthropic's own stream does not carry. */
const BEDROCK_METRICS = 'amazon-bedrock-invocationMetrics';

/**
 * Anthropic's Messages stream as Bedrock's InvokeModelWithResponseStream frames it: each `chunk`
 * event's `bytes` (base64) hold one Messages event, relayed as the SSE event Anthropic's own API
 * sends, without Bedrock's invocation metrics.
 */
export function anthropicEvents(): StreamEvents {
  const reader = conformingReader('anthropic-messages', anthropicStream());
  let usage: Usage | undefined;
  let token = false;
  let complete = false;
  return {
    push(_type, payload) {
      if (typeof payload.bytes !== 'string') return '';
      let data = Buffer.from(payload.bytes, 'base64').toString('utf8');
      let parsed: { type?: unknown; [BEDROCK_METRICS]?: unknown };
      try {
        parsed = JSON.parse(data) as typeof parsed;
      } catch {
        return undefined;
      }
      if (parsed[BEDROCK_METRICS] !== undefined) {
        delete parsed[BEDROCK_METRICS];
        data = JSON.stringify(parsed);
      }
      const read = reader.read(typeof parsed.type === 'string' ? parsed.type : undefined, data);
      if (!read) return undefined;
      if (read.usage) usage = read.usage;
      if (read.token) token = true;
      if (read.last) complete = true;
      return read.out;
    },
    cut: () => (complete ? undefined : 'message_stop'),
    usage: () => usage,
    firstContentSeen: () => token,
    errorEvent: (err) => DIALECTS['anthropic-messages'].streamError(err),
    end: '',
  };
}
