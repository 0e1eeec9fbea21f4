/**
 * The AWS double's Claude models on InvokeModel / InvokeModelWithResponseStream / CountTokens,
 * answering Anthropic's Messages body as Bedrock does (its documented request: anthropic_version
 * "bedrock-2023-05-31", no `model` or `stream` key; its answers: Anthropic's message, or the
 * stream's events each as a `chunk` whose `bytes` are the event's JSON, with Bedrock's
 * invocation metrics added to message_stop). Deterministic: the answer is words of a fixed text;
 * a tool whose name the last user message mentions is called once (its required string
 * properties set to "gateway-double"), a tool_result then gets a text answer. With `thinking`
 * enabled the answer starts with a signed thinking block, which must come back unaltered.
 */
import { createHmac } from 'node:crypto';

type Json = Record<string, unknown>;
const isRecord = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

const WORDS = 'Claude answers through the Bedrock double with a steady deterministic text of plain words'.split(' ');
/** Keys Bedrock refuses in the body ("extraneous key [model] is not permitted"). */
const EXTRANEOUS = ['model', 'stream'];

export interface AnthropicAnswer {
  message: Json;
  inputTokens: number;
}

export const anthropicInputTokens = (body: Json): number =>
  Math.max(1, Math.ceil(JSON.stringify([body.system ?? '', body.messages ?? [], body.tools ?? []]).length / 4));

/** The double's signature of a thinking text: anything altered on the way back no longer matches. */
const sign = (thinking: string) => createHmac('sha256', 'aws-double-thinking').update(thinking).digest('base64');
const THINKING = 'The user wants a short answer; the double thinks this every time.';

/**
 * With thinking on, a thinking block sent back must be the one given: one whose signature does not
 * match its text is refused, as Anthropic refuses it. A tool turn sent back without its block is
 * not refused here: Claude Code 2.1.197 sends its tool turns back without them (with the
 * clear_thinking context-management edit on), and works against Bedrock itself.
 */
function thinkingRefusal(messages: Json[]): string | undefined {
  for (const [i, m] of messages.entries()) {
    if (m.role !== 'assistant' || !Array.isArray(m.content)) continue;
    for (const [j, b] of (m.content as Json[]).entries()) {
      if (b.type === 'thinking' && b.signature !== sign(String(b.thinking))) {
        return `messages.${i}.content.${j}: Invalid \`signature\` in \`thinking\` block`;
      }
    }
  }
  return undefined;
}

/** The text of a Messages body's last message (its text blocks joined): what the double's Claude reads. */
export function lastTextOf(messages: unknown): string {
  const last = Array.isArray(messages) ? (messages.at(-1) as Json | undefined) : undefined;
  if (!isRecord(last)) return '';
  if (typeof last.content === 'string') return last.content;
  return Array.isArray(last.content)
    ? (last.content as Json[]).map((b) => (typeof b.text === 'string' ? b.text : '')).join(' ')
    : '';
}

/**
 * What the double's Claude passes for a tool's required argument: Claude Code's built-in
 * general-purpose agent where it asks which subagent (as Claude picks it), else a marker the
 * test finds again in what the tool does with it.
 */
const argumentFor = (name: string) => (name === 'subagent_type' ? 'general-purpose' : 'gateway-double');

/** The body checked as Bedrock checks it: a message for a ValidationException, or the answer. */
export function anthropicAnswer(body: unknown, modelId: string, maxWords: number): AnthropicAnswer | string {
  if (!isRecord(body)) return 'Malformed input request, please reformat your input and try again.';
  for (const key of EXTRANEOUS)
    if (key in body) return `extraneous key [${key}] is not permitted, please reformat your input and try again.`;
  if (body.anthropic_version !== 'bedrock-2023-05-31')
    return 'Invalid API version: anthropic_version must be bedrock-2023-05-31';
  const messages = body.messages;
  if (!Array.isArray(messages) || messages.length === 0) return 'messages: field required';
  if (typeof body.max_tokens !== 'number' || body.max_tokens < 1) return 'max_tokens: field required';
  const last = messages[messages.length - 1] as Json;
  const thinking = isRecord(body.thinking) && body.thinking.type === 'enabled';
  if (thinking) {
    const refused = thinkingRefusal(messages as Json[]);
    if (refused) return refused;
  }
  const thought = thinking ? [{ type: 'thinking', thinking: THINKING, signature: sign(THINKING) }] : [];
  const inputTokens = anthropicInputTokens(body);
  const id = `msg_bdrk_${Math.random().toString(36).slice(2, 12)}`;
  const base = { id, type: 'message', role: 'assistant', model: modelId, stop_sequence: null };
  const lastText = lastTextOf(messages);
  const answeredTool = Array.isArray(last.content) && (last.content as Json[]).some((b) => b.type === 'tool_result');
  const tools = Array.isArray(body.tools) ? (body.tools as Json[]) : [];
  const tool = answeredTool ? undefined : tools.find((t) => typeof t.name === 'string' && lastText.includes(t.name));
  if (tool) {
    const schema = isRecord(tool.input_schema) ? tool.input_schema : {};
    const required = Array.isArray(schema.required) ? (schema.required as string[]) : [];
    const input = Object.fromEntries(required.map((k) => [k, argumentFor(k)]));
    return {
      inputTokens,
      message: {
        ...base,
        content: [...thought, { type: 'tool_use', id: `toolu_bdrk_${id.slice(9)}`, name: tool.name, input }],
        stop_reason: 'tool_use',
        usage: { input_tokens: inputTokens, output_tokens: 5 },
      },
    };
  }
  const n = Math.min(maxWords, body.max_tokens);
  const words = Array.from({ length: n }, (_, i) => WORDS[i % WORDS.length] as string);
  return {
    inputTokens,
    message: {
      ...base,
      content: [...thought, { type: 'text', text: words.join(' ') }],
      stop_reason: n === body.max_tokens ? 'max_tokens' : 'end_turn',
      usage: { input_tokens: inputTokens, output_tokens: n },
    },
  };
}

/** The answer as Anthropic's stream events, in order, as InvokeModelWithResponseStream sends them (one per chunk). */
export function anthropicEvents(answer: AnthropicAnswer, latencyMs: () => number): Json[] {
  const m = answer.message;
  const usage = m.usage as { input_tokens: number; output_tokens: number };
  const events: Json[] = [
    {
      type: 'message_start',
      message: { ...m, content: [], stop_reason: null, usage: { input_tokens: usage.input_tokens, output_tokens: 1 } },
    },
  ];
  for (const [index, block] of (m.content as Json[]).entries()) {
    if (block.type === 'text') {
      events.push({ type: 'content_block_start', index, content_block: { type: 'text', text: '' } });
      const words = String(block.text).split(' ');
      for (const [i, w] of words.entries())
        events.push({
          type: 'content_block_delta',
          index,
          delta: { type: 'text_delta', text: i < words.length - 1 ? `${w} ` : w },
        });
    } else if (block.type === 'thinking') {
      events.push({
        type: 'content_block_start',
        index,
        content_block: { type: 'thinking', thinking: '', signature: '' },
      });
      events.push({ type: 'content_block_delta', index, delta: { type: 'thinking_delta', thinking: block.thinking } });
      events.push({
        type: 'content_block_delta',
        index,
        delta: { type: 'signature_delta', signature: block.signature },
      });
    } else {
      events.push({ type: 'content_block_start', index, content_block: { ...block, input: {} } });
      events.push({
        type: 'content_block_delta',
        index,
        delta: { type: 'input_json_delta', partial_json: JSON.stringify(block.input) },
      });
    }
    events.push({ type: 'content_block_stop', index });
  }
  events.push({
    type: 'message_delta',
    delta: { stop_reason: m.stop_reason, stop_sequence: null },
    usage: { output_tokens: usage.output_tokens },
  });
  events.push({
    type: 'message_stop',
    'amazon-bedrock-invocationMetrics': {
      inputTokenCount: usage.input_tokens,
      outputTokenCount: usage.output_tokens,
      invocationLatency: latencyMs(),
      firstByteLatency: 1,
    },
  });
  return events;
}
