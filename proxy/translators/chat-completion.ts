import type { Usage } from '../upstreams/upstream.js';

/**
 * OpenAI's chat completion and its chunks as the translators to chat callers build them (from
 * Converse, from Anthropic's Messages): the completion, the streamed chunks, the finish reasons,
 * the thinking blocks beside reasoning_content, the usage.
 */

export type FinishReason = 'stop' | 'length' | 'content_filter' | 'tool_calls';

export interface OpenAIUsage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details?: { cached_tokens: number };
}

export interface OpenAIToolCall {
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

/** OpenAI's prompt_tokens counts the cache's reads and writes too, the reads in prompt_tokens_details. */
export const openAIUsage = (u: Usage): OpenAIUsage => ({
  prompt_tokens: u.promptTokens,
  completion_tokens: u.completionTokens,
  total_tokens: u.promptTokens + u.completionTokens,
  ...(u.cachedTokens ? { prompt_tokens_details: { cached_tokens: u.cachedTokens } } : {}),
});
