import { DIALECTS } from '../endpoints/dialects.js';
import type { ProxyError } from '../endpoints/errors.js';
import {
  type ConverseStreamEvent,
  converseEvent,
  converseMissing,
  converseUsage,
} from '../upstreams/bedrock-converse.js';
import type { StreamEvents } from '../upstreams/event-stream.js';
import type { Usage } from '../upstreams/upstream.js';
import { type FinishReason, type OpenAIChatChunk, type OpenAIToolCallDelta, openAIUsage } from './chat-completion.js';
import { finishReasonOf } from './openai-chat_bedrock-converse-response.js';

/**
 * ConverseStream events -> OpenAI chat chunks, as a small state machine: the per-event function
 * the event-stream relay (proxy/upstreams/event-stream.ts) hands each decoded event to, its
 * chunks written to the caller as SSE. Usage is recorded whether or not the client asked for the
 * usage chunk: the gateway accounts for every call. Exceptions in the stream never reach it: the
 * relay maps them through the Bedrock module's error table.
 */

const chat = DIALECTS['openai-chat'];
const frame = (chunk: OpenAIChatChunk) => `data: ${JSON.stringify(chunk)}\n\n`;

export class ConverseStreamTranslator implements StreamEvents {
  private started = false;
  private contentSeen = false;
  private seenUsage: Usage | undefined;
  private finish: FinishReason | undefined;
  /** Converse content-block index -> OpenAI tool-call index, for the tool-use blocks seen so far. */
  private readonly toolIndex = new Map<number, number>();
  /** Reasoning text per content block, sent again whole with its signature. */
  private readonly thoughts = new Map<number, string>();
  readonly end = chat.streamEnd;

  constructor(
    private readonly model: string,
    private readonly id: string,
    private readonly created: number,
    private readonly includeUsage: boolean,
    /** JSON output mode: the forced tool's input streams as content. */
    private readonly json = false,
  ) {}

  /** One event as the caller's SSE. */
  push(type: string, payload: Record<string, unknown>): string {
    const chunks = this.chunks(converseEvent(type, payload));
    return chunks.length === 1 ? frame(chunks[0] as OpenAIChatChunk) : chunks.map(frame).join('');
  }

  /** The chunks to send for one event. */
  chunks(event: ConverseStreamEvent): OpenAIChatChunk[] {
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
    if (event.contentBlockDelta) return this.delta(event.contentBlockDelta);
    if (event.messageStop) {
      const stop = event.messageStop.stopReason;
      this.finish = finishReasonOf(this.json && stop === 'tool_use' ? 'end_turn' : stop);
      return [...this.opening(), this.chunk({}, this.finish)];
    }
    if (event.metadata) return this.metadata(event.metadata);
    return [];
  }

  private delta(d: NonNullable<ConverseStreamEvent['contentBlockDelta']>): OpenAIChatChunk[] {
    const toolInput = d.delta?.toolUse?.input;
    if (toolInput && this.json) {
      this.contentSeen = true;
      return [...this.opening(), this.chunk({ content: toolInput }, null)];
    }
    const reasoning = d.delta?.reasoningContent;
    const block = d.contentBlockIndex ?? 0;
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
      const data = reasoning.redactedContent;
      return [...this.opening(), this.chunk({ thinking_blocks: [{ type: 'redacted_thinking', data }] }, null)];
    }
    if (toolInput) {
      const index = this.toolIndex.get(block) ?? 0;
      return [...this.opening(), this.chunk({ tool_calls: [{ index, function: { arguments: toolInput } }] }, null)];
    }
    const text = d.delta?.text;
    if (!text) return [];
    this.contentSeen = true;
    return [...this.opening(), this.chunk({ content: text }, null)];
  }

  private metadata(m: NonNullable<ConverseStreamEvent['metadata']>): OpenAIChatChunk[] {
    const usage = converseUsage(m.usage);
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

  /** A stream that ends before messageStop, or without its usage, was cut off. */
  cut(): string | undefined {
    return converseMissing(this.finish !== undefined, this.seenUsage !== undefined);
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

  errorEvent(err: ProxyError): string {
    return chat.streamError(err);
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
