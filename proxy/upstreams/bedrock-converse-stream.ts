import type { ConverseStreamOutput } from '@aws-sdk/client-bedrock-runtime';
import type { ProxyError } from '../endpoints/errors.js';
import { JSON_TOOL } from './bedrock-converse-request.js';
import {
  completion,
  type FinishReason,
  finishReasonOf,
  type OpenAIChatChunk,
  type OpenAIChatCompletion,
  type OpenAIToolCallDelta,
  openAIUsage,
  type ThinkingBlock,
  usageOf,
} from './bedrock-converse-response.js';
import { type BedrockErrorContext, mapBedrockError } from './bedrock-errors.js';
import type { Usage } from './upstream.js';

/**
 * ConverseStream events -> OpenAI chat answers, as small state machines: chunks as the events
 * arrive (streaming clients), or the whole completion once the stream ends (the others).
 */

/** The exception members of the stream union that name their error as is. */
const NAMED_EXCEPTIONS = [
  ['throttlingException', 'ThrottlingException'],
  ['validationException', 'ValidationException'],
  ['serviceUnavailableException', 'ServiceUnavailableException'],
] as const;

/**
 * An exception member of the stream union as a ProxyError; undefined for ordinary events. Runs for
 * every event of every stream: nothing is allocated unless the event is an exception.
 */
function streamException(event: ConverseStreamOutput, ctx: () => BedrockErrorContext): ProxyError | undefined {
  const failed = event.internalServerException ?? event.modelStreamErrorException;
  // Either way the answer broke off midway: the table's stream error.
  if (failed) return mapBedrockError({ name: 'ModelStreamErrorException', message: failed.message ?? '' }, ctx());
  for (const [member, name] of NAMED_EXCEPTIONS) {
    const value = event[member];
    if (value) return mapBedrockError({ name, message: value.message ?? '' }, ctx());
  }
  return undefined;
}

/**
 * Turns ConverseStream events into OpenAI chunks as they arrive. Usage is recorded whether or
 * not the client asked for the usage chunk: the gateway accounts for every call.
 */
export class ConverseStreamTranslator {
  private started = false;
  private contentSeen = false;
  private seenUsage: Usage | undefined;
  private finish: FinishReason | undefined;
  /** Converse content-block index -> OpenAI tool-call index, for the tool-use blocks seen so far. */
  private readonly toolIndex = new Map<number, number>();
  /** Reasoning text per content block, sent again whole with its signature. */
  private readonly thoughts = new Map<number, string>();

  constructor(
    private readonly model: string,
    private readonly id: string,
    private readonly created: number,
    private readonly includeUsage: boolean,
    /** Named in error messages only. */
    private readonly provider = '',
    /** JSON output mode: the forced tool's input streams as content. */
    private readonly json = false,
  ) {}

  private readonly errorContext = () => ({ model: this.model, provider: this.provider, streaming: true });

  /** The chunks to send for one event; throws a ProxyError for an exception event. */
  push(event: ConverseStreamOutput): OpenAIChatChunk[] {
    const failure = streamException(event, this.errorContext);
    if (failure) throw failure;
    if (event.messageStart) return this.opening();
    const start = event.contentBlockStart?.start?.toolUse;
    if (start && this.json) return this.opening();
    if (start) {
      const index = this.toolIndex.size;
      this.toolIndex.set(event.contentBlockStart?.contentBlockIndex ?? 0, index);
      this.contentSeen = true;
      const call: OpenAIToolCallDelta = {
        index,
        id: start.toolUseId ?? '',
        type: 'function',
        function: { name: start.name ?? '', arguments: '' },
      };
      return [...this.opening(), this.chunk({ tool_calls: [call] }, null)];
    }
    if (event.contentBlockDelta) {
      const toolInput = event.contentBlockDelta.delta?.toolUse?.input;
      if (toolInput && this.json) {
        this.contentSeen = true;
        return [...this.opening(), this.chunk({ content: toolInput }, null)];
      }
      const reasoning = event.contentBlockDelta.delta?.reasoningContent;
      const block = event.contentBlockDelta.contentBlockIndex ?? 0;
      if (reasoning?.text) {
        this.contentSeen = true;
        this.thoughts.set(block, (this.thoughts.get(block) ?? '') + reasoning.text);
        return [...this.opening(), this.chunk({ reasoning_content: reasoning.text }, null)];
      }
      if (reasoning?.signature) {
        // The block is complete once signed: sent whole, so that a client can return it next turn.
        const thinking = this.thoughts.get(block) ?? '';
        return [
          ...this.opening(),
          this.chunk({ thinking_blocks: [{ type: 'thinking', thinking, signature: reasoning.signature }] }, null),
        ];
      }
      if (reasoning?.redactedContent) {
        const data = Buffer.from(reasoning.redactedContent).toString('base64');
        return [...this.opening(), this.chunk({ thinking_blocks: [{ type: 'redacted_thinking', data }] }, null)];
      }
      if (toolInput) {
        const index = this.toolIndex.get(event.contentBlockDelta.contentBlockIndex ?? 0) ?? 0;
        return [...this.opening(), this.chunk({ tool_calls: [{ index, function: { arguments: toolInput } }] }, null)];
      }
      const text = event.contentBlockDelta.delta?.text;
      if (!text) return [];
      this.contentSeen = true;
      return [...this.opening(), this.chunk({ content: text }, null)];
    }
    if (event.messageStop) {
      const stop = event.messageStop.stopReason;
      this.finish = finishReasonOf(this.json && stop === 'tool_use' ? 'end_turn' : stop);
      return [...this.opening(), this.chunk({}, this.finish)];
    }
    if (event.metadata) {
      const usage = usageOf(event.metadata.usage);
      if (!usage) return [];
      this.seenUsage = usage;
      if (!this.includeUsage) return [];
      return [
        {
          id: this.id,
          object: 'chat.completion.chunk',
          created: this.created,
          model: this.model,
          choices: [],
          usage: openAIUsage(usage),
        },
      ];
    }
    return [];
  }

  usage(): Usage | undefined {
    return this.seenUsage;
  }

  firstContentSeen(): boolean {
    return this.contentSeen;
  }

  /** Undefined until messageStop: a stream that ends without it was cut off. */
  finishReason(): FinishReason | undefined {
    return this.finish;
  }

  /** OpenAI clients expect the role chunk first, even if Bedrock skipped messageStart. */
  private opening(): OpenAIChatChunk[] {
    if (this.started) return [];
    this.started = true;
    return [this.chunk({ role: 'assistant', content: '' }, null)];
  }

  private chunk(delta: OpenAIChatChunk['choices'][number]['delta'], finish: FinishReason | null): OpenAIChatChunk {
    const chunk: OpenAIChatChunk = {
      id: this.id,
      object: 'chat.completion.chunk',
      created: this.created,
      model: this.model,
      choices: [{ index: 0, delta, finish_reason: finish, logprobs: null }],
    };
    if (this.includeUsage) chunk.usage = null;
    return chunk;
  }
}

/** Collects a ConverseStream into the answer Converse would have given, for non-streaming clients. */
export class ConverseStreamAggregator {
  private readonly texts = new Map<number, string>();
  private readonly tools = new Map<number, { id: string; name: string; input: string }>();
  private reasoning = '';
  /** Per content block: its reasoning text, signature or redacted bytes. */
  private readonly thoughts = new Map<number, { text: string; signature?: string; redacted?: string }>();
  private stop: string | undefined;
  private seenUsage: Usage | undefined;

  /** model and provider are named in error messages only. */
  constructor(private readonly errorContext: { model: string; provider: string } = { model: '', provider: '' }) {}

  private readonly streamingContext = () => ({ ...this.errorContext, streaming: true });

  /** Throws a ProxyError for an exception event. */
  push(event: ConverseStreamOutput): void {
    const failure = streamException(event, this.streamingContext);
    if (failure) throw failure;
    const start = event.contentBlockStart?.start?.toolUse;
    if (start) {
      const index = event.contentBlockStart?.contentBlockIndex ?? 0;
      this.tools.set(index, { id: start.toolUseId ?? '', name: start.name ?? '', input: '' });
    } else if (event.contentBlockDelta) {
      const index = event.contentBlockDelta.contentBlockIndex ?? 0;
      const toolInput = event.contentBlockDelta.delta?.toolUse?.input;
      const tool = this.tools.get(index);
      if (toolInput && tool) {
        tool.input += toolInput;
        return;
      }
      const reasoning = event.contentBlockDelta.delta?.reasoningContent;
      if (reasoning) {
        const thought = this.thoughts.get(index) ?? { text: '' };
        if (reasoning.text) {
          this.reasoning += reasoning.text;
          thought.text += reasoning.text;
        }
        if (reasoning.signature) thought.signature = reasoning.signature;
        if (reasoning.redactedContent) thought.redacted = Buffer.from(reasoning.redactedContent).toString('base64');
        this.thoughts.set(index, thought);
        return;
      }
      const text = event.contentBlockDelta.delta?.text;
      if (!text) return;
      this.texts.set(index, (this.texts.get(index) ?? '') + text);
    } else if (event.messageStop) {
      this.stop = event.messageStop.stopReason;
    } else if (event.metadata) {
      this.seenUsage = usageOf(event.metadata.usage) ?? this.seenUsage;
    }
  }

  usage(): Usage | undefined {
    return this.seenUsage;
  }

  /** Undefined until messageStop: a stream that ends without it was cut off. */
  finishReason(): FinishReason | undefined {
    return this.stop === undefined ? undefined : finishReasonOf(this.stop);
  }

  result(model: string, id: string, created: number, json = false): { body: OpenAIChatCompletion; usage?: Usage } {
    if (json) {
      const tool = [...this.tools.values()].find((t) => t.name === JSON_TOOL);
      const stop = this.stop === 'tool_use' ? 'end_turn' : this.stop;
      return completion(model, id, created, tool ? tool.input || '{}' : '', stop, this.seenUsage);
    }
    // Blocks are joined in block order, as fromConverseOutput joins the content array.
    const text = [...this.texts.entries()]
      .sort(([a], [b]) => a - b)
      .map(([, t]) => t)
      .join('');
    const calls = [...this.tools.entries()]
      .sort(([a], [b]) => a - b)
      .map(([, t]) => ({
        id: t.id,
        type: 'function' as const,
        // Converse streams the input as JSON text: what OpenAI's arguments are (empty input: {}).
        function: { name: t.name, arguments: t.input === '' ? '{}' : t.input },
      }));
    const thinking = [...this.thoughts.entries()]
      .sort(([a], [b]) => a - b)
      .flatMap(([, t]): ThinkingBlock[] => {
        if (t.redacted !== undefined) return [{ type: 'redacted_thinking', data: t.redacted }];
        return t.signature !== undefined ? [{ type: 'thinking', thinking: t.text, signature: t.signature }] : [];
      });
    return completion(model, id, created, text, this.stop, this.seenUsage, calls, this.reasoning, thinking);
  }
}
