import type { StreamEvents } from './event-stream.js';
import type { Usage } from './upstream.js';

/**
 * Bedrock's Converse dialect as it travels: the request, the answer and the stream's events as
 * Converse's REST API takes and gives them (JSON, blobs in base64; botocore's bedrock-runtime
 * model names every shape), and the two ways between a stream and a whole answer. The provider
 * upstream calls ConverseStream also for callers that want the answer whole (it adds the events
 * up: ConverseWhole), and Converse for models that do not stream, whose answer a streaming
 * caller gets as the events ConverseStream would have sent (eventsOfAnswer); either way the
 * translator (proxy/translators/openai-chat_bedrock-converse.ts) reads one shape of each.
 */

export type ConverseImageFormat = 'png' | 'jpeg' | 'gif' | 'webp';

export interface ConverseContentBlock {
  text?: string;
  image?: { format: ConverseImageFormat; source: { bytes: string } };
  toolUse?: { toolUseId: string; name: string; input: unknown };
  toolResult?: { toolUseId: string; content: Array<{ text: string }> };
  reasoningContent?: { reasoningText?: { text: string; signature?: string }; redactedContent?: string };
  cachePoint?: { type: 'default' };
}

export interface ConverseMessage {
  role: 'user' | 'assistant';
  content: ConverseContentBlock[];
}

export type ConverseSystemBlock = { text: string } | { cachePoint: { type: 'default' } };

export interface ConverseInferenceConfig {
  maxTokens?: number;
  temperature?: number;
  topP?: number;
  stopSequences?: string[];
}

export type ConverseTool =
  | { toolSpec: { name: string; description?: string; inputSchema: { json: unknown } } }
  | { cachePoint: { type: 'default' } };

export type ConverseToolChoice =
  | { auto: Record<string, never> }
  | { any: Record<string, never> }
  | { tool: { name: string } };

export interface ConverseToolConfig {
  tools: ConverseTool[];
  toolChoice?: ConverseToolChoice;
}

/** The body of a Converse or ConverseStream call (the model is in the path; the guardrail the provider's). */
export interface ConverseRequest {
  messages: ConverseMessage[];
  system?: ConverseSystemBlock[];
  inferenceConfig?: ConverseInferenceConfig;
  toolConfig?: ConverseToolConfig;
  additionalModelRequestFields?: Record<string, unknown>;
}

export interface ConverseTokenUsage {
  inputTokens?: number;
  outputTokens?: number;
  totalTokens?: number;
  cacheReadInputTokens?: number;
  cacheWriteInputTokens?: number;
}

/** Converse's answer. */
export interface ConverseAnswer {
  output?: { message?: ConverseMessage };
  stopReason?: string;
  usage?: ConverseTokenUsage;
  metrics?: { latencyMs?: number };
}

/** One ConverseStream event, by its :event-type, as the SDK's union has it. */
export interface ConverseStreamEvent {
  messageStart?: { role?: string };
  contentBlockStart?: {
    contentBlockIndex?: number;
    /** A tool use's start; other kinds of block (an image) start with nothing to say. */
    start?: { toolUse?: { toolUseId?: string; name?: string } } & Record<string, unknown>;
  };
  contentBlockDelta?: {
    contentBlockIndex?: number;
    delta?: {
      text?: string;
      toolUse?: { input?: string };
      reasoningContent?: { text?: string; signature?: string; redactedContent?: string };
    };
  };
  contentBlockStop?: { contentBlockIndex?: number };
  messageStop?: { stopReason?: string };
  metadata?: { usage?: ConverseTokenUsage; metrics?: { latencyMs?: number } };
}

/** An event by its type and payload as the event stream carries it. */
export const converseEvent = (type: string, payload: Record<string, unknown>): ConverseStreamEvent =>
  ({ [type]: payload }) as ConverseStreamEvent;

/**
 * Converse's inputTokens leaves out the prompt tokens read from or written to the prompt cache;
 * the gateway's prompt tokens count them all, with the cache's reads and writes apart.
 */
export function converseUsage(u: ConverseTokenUsage | undefined): Usage | undefined {
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

/** Why a ConverseStream is incomplete: no messageStop, or no usage after it. */
export const converseMissing = (stopped: boolean, usage: boolean): string | undefined =>
  stopped && usage ? undefined : `it finished (${stopped ? 'no usage metadata' : 'no messageStop'})`;

/** A block's text, tool use or reasoning, as the stream gave it. */
interface BlockParts {
  text?: string;
  tool?: { toolUseId: string; name: string; input: string };
  thought?: { text: string; signature?: string; redacted?: string };
}

/**
 * A ConverseStream added up into the answer Converse would have given, for callers that want it
 * whole: each content block in block order, a tool's input parsed (Converse streams it as JSON
 * text; text that is not JSON stays the text the model sent).
 */
export class ConverseWhole implements StreamEvents {
  private readonly blocks = new Map<number, BlockParts>();
  private stop: string | undefined;
  private seenUsage: ConverseTokenUsage | undefined;
  private metrics: { latencyMs?: number } | undefined;
  private contentSeen = false;
  readonly end = '';

  private block(index: number | undefined): BlockParts {
    const i = index ?? 0;
    let b = this.blocks.get(i);
    if (!b) {
      b = {};
      this.blocks.set(i, b);
    }
    return b;
  }

  push(type: string, payload: Record<string, unknown>): string {
    const event = converseEvent(type, payload);
    const start = event.contentBlockStart?.start?.toolUse;
    if (start) {
      this.block(event.contentBlockStart?.contentBlockIndex).tool = {
        toolUseId: start.toolUseId ?? '',
        name: start.name ?? '',
        input: '',
      };
    } else if (event.contentBlockDelta) {
      this.delta(event.contentBlockDelta);
    } else if (event.messageStop) {
      this.stop = event.messageStop.stopReason;
    } else if (event.metadata) {
      this.seenUsage = event.metadata.usage ?? this.seenUsage;
      this.metrics = event.metadata.metrics ?? this.metrics;
    }
    return '';
  }

  private delta(d: NonNullable<ConverseStreamEvent['contentBlockDelta']>): void {
    const b = this.block(d.contentBlockIndex);
    const toolInput = d.delta?.toolUse?.input;
    if (toolInput && b.tool) {
      b.tool.input += toolInput;
      this.contentSeen = true;
      return;
    }
    const reasoning = d.delta?.reasoningContent;
    if (reasoning) {
      b.thought ??= { text: '' };
      if (reasoning.text) b.thought.text += reasoning.text;
      if (reasoning.signature) b.thought.signature = reasoning.signature;
      if (reasoning.redactedContent) b.thought.redacted = reasoning.redactedContent;
      this.contentSeen = true;
      return;
    }
    const text = d.delta?.text;
    if (!text) return;
    b.text = (b.text ?? '') + text;
    this.contentSeen = true;
  }

  cut(): string | undefined {
    return converseMissing(this.stop !== undefined, converseUsage(this.seenUsage) !== undefined);
  }

  usage(): Usage | undefined {
    return converseUsage(this.seenUsage);
  }

  firstContentSeen(): boolean {
    return this.contentSeen;
  }

  errorEvent(): string {
    return '';
  }

  answer(): ConverseAnswer {
    const content = [...this.blocks.entries()]
      .sort(([a], [b]) => a - b)
      .flatMap(([, b]): ConverseContentBlock[] => [
        ...(b.thought?.redacted !== undefined ? [{ reasoningContent: { redactedContent: b.thought.redacted } }] : []),
        ...(b.thought && b.thought.redacted === undefined
          ? [
              {
                reasoningContent: {
                  reasoningText: {
                    text: b.thought.text,
                    ...(b.thought.signature !== undefined ? { signature: b.thought.signature } : {}),
                  },
                },
              },
            ]
          : []),
        ...(b.text !== undefined ? [{ text: b.text }] : []),
        ...(b.tool ? [{ toolUse: { ...b.tool, input: toolInput(b.tool.input) } }] : []),
      ]);
    return {
      output: { message: { role: 'assistant', content } },
      ...(this.stop !== undefined ? { stopReason: this.stop } : {}),
      ...(this.seenUsage ? { usage: this.seenUsage } : {}),
      ...(this.metrics ? { metrics: this.metrics } : {}),
    };
  }
}

/** A streamed tool input as Converse's answer has it: JSON ({} for none). */
function toolInput(text: string): unknown {
  if (text === '') return {};
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return text;
  }
}

/**
 * A whole answer as the events ConverseStream would have sent for it, for a streaming caller of a
 * model the gateway calls through Converse (one that does not stream, or a provider with
 * streaming off): the caller gets it as one stream.
 */
export function eventsOfAnswer(json: unknown): Array<[string, Record<string, unknown>]> {
  const answer = (json ?? {}) as ConverseAnswer;
  const events: Array<[string, Record<string, unknown>]> = [['messageStart', { role: 'assistant' }]];
  for (const [contentBlockIndex, b] of (answer.output?.message?.content ?? []).entries()) {
    if (b.toolUse) {
      const { toolUseId, name, input } = b.toolUse;
      events.push(['contentBlockStart', { contentBlockIndex, start: { toolUse: { toolUseId, name } } }]);
      events.push([
        'contentBlockDelta',
        { contentBlockIndex, delta: { toolUse: { input: JSON.stringify(input ?? {}) } } },
      ]);
    }
    const r = b.reasoningContent;
    if (r?.reasoningText) {
      const { text, signature } = r.reasoningText;
      events.push(['contentBlockDelta', { contentBlockIndex, delta: { reasoningContent: { text } } }]);
      if (signature)
        events.push(['contentBlockDelta', { contentBlockIndex, delta: { reasoningContent: { signature } } }]);
    }
    if (r?.redactedContent) {
      events.push([
        'contentBlockDelta',
        { contentBlockIndex, delta: { reasoningContent: { redactedContent: r.redactedContent } } },
      ]);
    }
    if (b.text) events.push(['contentBlockDelta', { contentBlockIndex, delta: { text: b.text } }]);
    events.push(['contentBlockStop', { contentBlockIndex }]);
  }
  events.push(['messageStop', { stopReason: answer.stopReason ?? 'end_turn' }]);
  events.push(['metadata', { usage: answer.usage ?? {}, metrics: answer.metrics ?? {} }]);
  return events;
}
