import { type ConverseAnswer, converseUsage } from '../upstreams/bedrock-converse.js';
import type { Usage } from '../upstreams/upstream.js';
import {
  type FinishReason,
  type OpenAIChatCompletion,
  type OpenAIToolCall,
  openAIUsage,
  type ThinkingBlock,
} from './chat-completion.js';
import { JSON_TOOL } from './openai-chat_bedrock-converse-request.js';

/**
 * Bedrock Converse answers -> OpenAI chat completions (chat-completion.ts has the shapes): how a
 * Converse answer fills them. The streaming side (openai-chat_bedrock-converse-stream.ts) builds
 * the chunks from ConverseStream events.
 */

/** Converse's stopReason values (botocore's StopReason), each as OpenAI's finish_reason. */
const FINISH_REASONS: Readonly<Record<string, FinishReason>> = {
  end_turn: 'stop',
  stop_sequence: 'stop',
  max_tokens: 'length',
  // The answer was cut off because the context filled up: for the caller that is a length stop.
  model_context_window_exceeded: 'length',
  content_filtered: 'content_filter',
  guardrail_intervened: 'content_filter',
  tool_use: 'tool_calls',
  malformed_model_output: 'stop',
  malformed_tool_use: 'stop',
};

export function finishReasonOf(stop: string | undefined): FinishReason {
  return (stop !== undefined && Object.hasOwn(FINISH_REASONS, stop) ? FINISH_REASONS[stop] : undefined) ?? 'stop';
}

function completion(
  model: string,
  id: string,
  created: number,
  content: string,
  stop: string | undefined,
  usage: Usage | undefined,
  toolCalls: OpenAIToolCall[] = [],
  reasoning = '',
  thinking: ThinkingBlock[] = [],
): { body: OpenAIChatCompletion; usage?: Usage } {
  // With tool calls and no text OpenAI sends content null.
  const message: OpenAIChatCompletion['choices'][number]['message'] =
    toolCalls.length > 0
      ? { role: 'assistant', content: content === '' ? null : content, tool_calls: toolCalls }
      : { role: 'assistant', content };
  if (reasoning !== '') message.reasoning_content = reasoning;
  if (thinking.length > 0) message.thinking_blocks = thinking;
  const body: OpenAIChatCompletion = {
    id,
    object: 'chat.completion',
    created,
    model,
    choices: [{ index: 0, message, finish_reason: finishReasonOf(stop), logprobs: null }],
  };
  if (!usage) return { body };
  body.usage = openAIUsage(usage);
  return { body, usage };
}

/**
 * Text, tool calls and reasoning (its text as reasoning_content, each signed or redacted block as
 * a thinking block to send back); other blocks are left out: nothing in the request asks for them.
 */
export function fromConverseOutput(
  out: ConverseAnswer,
  model: string,
  id: string,
  created: number,
  json = false,
): { body: OpenAIChatCompletion; usage?: Usage } {
  const blocks = out.output?.message?.content ?? [];
  if (json) {
    // The forced tool's input is the answer; the call itself is an artifact of the translation.
    const use = blocks.find((b) => b.toolUse?.name === JSON_TOOL)?.toolUse;
    const stop = out.stopReason === 'tool_use' ? 'end_turn' : out.stopReason;
    return completion(model, id, created, use ? argumentsOf(use.input) : '', stop, converseUsage(out.usage));
  }
  const text = blocks.map((b) => b.text ?? '').join('');
  const reasoning = blocks.map((b) => b.reasoningContent?.reasoningText?.text ?? '').join('');
  const calls = blocks.flatMap((b) =>
    b.toolUse
      ? [
          {
            id: b.toolUse.toolUseId ?? '',
            type: 'function' as const,
            function: { name: b.toolUse.name ?? '', arguments: argumentsOf(b.toolUse.input) },
          },
        ]
      : [],
  );
  // Only signed reasoning can go back (an unsigned block would be refused), as in a stream.
  const thinking = blocks.flatMap((b): ThinkingBlock[] => {
    const r = b.reasoningContent;
    if (r?.reasoningText?.signature !== undefined) {
      return [{ type: 'thinking', thinking: r.reasoningText.text, signature: r.reasoningText.signature }];
    }
    if (r?.redactedContent !== undefined) return [{ type: 'redacted_thinking', data: r.redactedContent }];
    return [];
  });
  return completion(model, id, created, text, out.stopReason, converseUsage(out.usage), calls, reasoning, thinking);
}

/** A tool's input as OpenAI's arguments: JSON text (an aggregated stream's input that was not JSON stays its text). */
const argumentsOf = (input: unknown): string => (typeof input === 'string' ? input : JSON.stringify(input ?? {}));
