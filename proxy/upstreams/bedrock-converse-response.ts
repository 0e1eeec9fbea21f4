import type { ConverseCommandOutput, StopReason, TokenUsage } from '@aws-sdk/client-bedrock-runtime';
import { JSON_TOOL } from './bedrock-converse-request.js';
import type { Usage } from './upstream.js';

/**
 * Bedrock Converse answers -> OpenAI chat completions: the OpenAI shapes the gateway answers
 * Bedrock calls in, and how a Converse answer fills them. The streaming side
 * (bedrock-converse-stream.ts) builds the same shapes from ConverseStream events.
 */

export type FinishReason = 'stop' | 'length' | 'content_filter' | 'tool_calls';

/** Keyed by the SDK's StopReason so that a new stop reason fails the type check until mapped. */
const FINISH_REASONS: Readonly<Record<StopReason, FinishReason>> = {
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
  return stop !== undefined && Object.hasOwn(FINISH_REASONS, stop) ? FINISH_REASONS[stop as StopReason] : 'stop';
}

interface OpenAIUsage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details?: { cached_tokens: number };
}

interface OpenAIToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

/** A tool call as streamed: the first chunk of each carries id, type and name; later ones argument text. */
export interface OpenAIToolCallDelta {
  index: number;
  id?: string;
  type?: 'function';
  function: { name?: string; arguments: string };
}

export interface OpenAIChatCompletion {
  id: string;
  object: 'chat.completion';
  created: number;
  model: string;
  choices: Array<{
    index: 0;
    message: {
      role: 'assistant';
      content: string | null;
      tool_calls?: OpenAIToolCall[];
      reasoning_content?: string;
      thinking_blocks?: ThinkingBlock[];
    };
    finish_reason: FinishReason;
    logprobs: null;
  }>;
  usage?: OpenAIUsage;
}

export interface OpenAIChatChunk {
  id: string;
  object: 'chat.completion.chunk';
  created: number;
  model: string;
  choices: Array<{
    index: 0;
    delta: {
      role?: 'assistant';
      content?: string;
      tool_calls?: OpenAIToolCallDelta[];
      reasoning_content?: string;
      thinking_blocks?: ThinkingBlock[];
    };
    finish_reason: FinishReason | null;
    logprobs: null;
  }>;
  /** With include_usage OpenAI sends null on every chunk but the last, which has choices []. */
  usage?: OpenAIUsage | null;
}

/**
 * A model's signed reasoning, as LiteLLM returns it beside reasoning_content: Anthropic models
 * on Bedrock need these blocks back, unchanged, in the assistant turn of a tool-use loop while
 * thinking is on, and OpenAI's format has no field for a signature.
 */
export type ThinkingBlock =
  | { type: 'thinking'; thinking: string; signature: string }
  | { type: 'redacted_thinking'; data: string };

/**
 * Bedrock's inputTokens leaves out the prompt tokens read from or written to the prompt cache;
 * OpenAI's prompt_tokens counts them all, with the cache reads in prompt_tokens_details.
 */
export function usageOf(u: TokenUsage | undefined): Usage | undefined {
  if (!u || typeof u.inputTokens !== 'number' || typeof u.outputTokens !== 'number') return undefined;
  const read = u.cacheReadInputTokens ?? 0;
  const written = u.cacheWriteInputTokens ?? 0;
  return {
    promptTokens: u.inputTokens + read + written,
    completionTokens: u.outputTokens,
    ...(read > 0 ? { cachedTokens: read } : {}),
    ...(written > 0 ? { cacheWriteTokens: written } : {}),
  };
}

export const openAIUsage = (u: Usage): OpenAIUsage => ({
  prompt_tokens: u.promptTokens,
  completion_tokens: u.completionTokens,
  total_tokens: u.promptTokens + u.completionTokens,
  ...(u.cachedTokens ? { prompt_tokens_details: { cached_tokens: u.cachedTokens } } : {}),
});

export function completion(
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

/** Text and tool calls; reasoning and other blocks are left out: nothing in the request asks for them. */
export function fromConverseOutput(
  out: ConverseCommandOutput,
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
    return completion(model, id, created, use ? JSON.stringify(use.input ?? {}) : '', stop, usageOf(out.usage));
  }
  const text = blocks.map((b) => b.text ?? '').join('');
  const reasoning = blocks.map((b) => b.reasoningContent?.reasoningText?.text ?? '').join('');
  const calls = blocks.flatMap((b) =>
    b.toolUse
      ? [
          {
            id: b.toolUse.toolUseId ?? '',
            type: 'function' as const,
            function: { name: b.toolUse.name ?? '', arguments: JSON.stringify(b.toolUse.input ?? {}) },
          },
        ]
      : [],
  );
  const thinking = blocks.flatMap((b): ThinkingBlock[] => {
    const r = b.reasoningContent;
    if (r?.reasoningText) {
      return [{ type: 'thinking', thinking: r.reasoningText.text ?? '', signature: r.reasoningText.signature ?? '' }];
    }
    if (r?.redactedContent)
      return [{ type: 'redacted_thinking', data: Buffer.from(r.redactedContent).toString('base64') }];
    return [];
  });
  return completion(model, id, created, text, out.stopReason, usageOf(out.usage), calls, reasoning, thinking);
}
