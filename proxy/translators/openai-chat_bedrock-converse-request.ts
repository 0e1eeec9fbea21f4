import { foundationModelOf } from '../../crds/catalog/prices.js';
import { isAnthropic } from '../../crds/providers/bedrock.js';
import { invalidRequest, ProxyError } from '../endpoints/errors.js';
import type {
  ConverseContentBlock as ContentBlock,
  ConverseRequest,
  ConverseImageFormat as ImageFormat,
  ConverseInferenceConfig as InferenceConfiguration,
  ConverseMessage as Message,
  ConverseSystemBlock as SystemContentBlock,
  ConverseTool as Tool,
  ConverseToolChoice as ToolChoice,
  ConverseToolConfig as ToolConfiguration,
} from '../upstreams/bedrock-converse.js';
import { limitsOf } from './openai-chat_bedrock-converse-limits.js';

/**
 * OpenAI chat completions -> Bedrock Converse, as pure functions: no network, so every mapping
 * is testable without AWS (the answers come back through openai-chat_bedrock-converse-response.ts
 * and -stream.ts). It refuses what it cannot translate faithfully instead of dropping it, because
 * a silently ignored `seed` or `response_format` gives the caller an answer that looks right and
 * is not. What the provider adds to every call (its guardrail) and what discovery knows of the
 * model (images) are the Bedrock module's (crds/providers/bedrock.ts).
 */

/** Accepted top-level fields and where each goes. */
export const MAPPED_FIELDS = {
  model: 'consumed: the route decides the Bedrock modelId',
  messages: 'system (system, developer) and messages (user, assistant)',
  max_completion_tokens: 'inferenceConfig.maxTokens',
  max_tokens: 'inferenceConfig.maxTokens (max_completion_tokens wins when both are set)',
  temperature: 'inferenceConfig.temperature',
  top_p: 'inferenceConfig.topP',
  stop: 'inferenceConfig.stopSequences',
  stream: 'consumed: the gateway decides how it calls Bedrock',
  stream_options: 'consumed: include_usage decides whether the usage chunk is sent',
  n: 'consumed: only 1 is accepted',
  user: 'consumed: not sent to Bedrock',
  tools: 'toolConfig.tools (toolSpec: name, description, inputSchema.json)',
  tool_choice: 'toolConfig.toolChoice: auto -> auto, required -> any, a function -> tool; none -> no toolConfig',
  parallel_tool_calls: 'consumed: Bedrock models may call several tools in one turn; false is refused',
  response_format:
    'json_object and json_schema: a tool the model must call with that schema, its input returned as the content',
  reasoning_effort:
    'Anthropic models: additionalModelRequestFields.thinking with budget_tokens low 1024, medium 2048, high 4096',
} as const satisfies Record<string, string>;

/** Thinking budgets per reasoning_effort (LiteLLM's mapping; Anthropic's minimum is 1024). */
const THINKING_BUDGETS: Readonly<Record<string, number>> = {
  minimal: 1024,
  low: 1024,
  medium: 2048,
  high: 4096,
};

/**
 * The tool a JSON output mode forces (Converse has no JSON mode of its own, so the schema goes
 * in as a tool the model must call, and the call's input comes back as the message content:
 * LiteLLM's and Portkey's approach too).
 */
export const JSON_TOOL = 'json_output';

/** OpenAI fields refused with 400 unsupported_parameter, and why. */
export const REJECTED_FIELDS = {
  functions: 'the deprecated functions field is not translated: send tools',
  function_call: 'the deprecated function_call field is not translated: send tool_choice',
  seed: 'Converse has no sampling seed',
  presence_penalty: 'Converse has no presence penalty',
  frequency_penalty: 'Converse has no frequency penalty',
  logit_bias: 'Converse cannot bias tokens',
  logprobs: 'Converse returns no log probabilities',
  top_logprobs: 'Converse returns no log probabilities',
  service_tier: 'the Bedrock service tier is not chosen per request',
  store: 'Bedrock does not store completions',
  metadata: 'request metadata is not passed to Bedrock',
} as const satisfies Record<string, string>;

type RejectedField = keyof typeof REJECTED_FIELDS;

/**
 * Values equal to OpenAI's defaults change nothing, and some client libraries always send
 * them, so refusing them would break those clients for no gain.
 */
const NO_OP_VALUES: Partial<Record<RejectedField, (v: unknown) => boolean>> = {
  presence_penalty: (v) => v === 0,
  frequency_penalty: (v) => v === 0,
  logprobs: (v) => v === false,
  store: (v) => v === false,
};

function isRecord(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

const unsupportedParameter = (message: string, param: string) =>
  invalidRequest(message, param, 'unsupported_parameter');
const unsupportedContent = (message: string, param: string) => invalidRequest(message, param, 'unsupported_content');

// Bedrock rejects text blocks that are empty or only whitespace.
const isBlank = (text: string) => text.trim() === '';

/**
 * A chat request as the body of a Converse call of `modelId` (the model goes in the path);
 * `baseModel`: the foundation model behind the id, whose limits and family apply (an inference
 * profile is checked as its model).
 */
export function toConverseInput(
  modelId: string,
  body: Record<string, unknown>,
  opts: { baseModel?: string } = {},
): ConverseRequest | ProxyError {
  for (const [name, value] of Object.entries(body)) {
    // JSON null is OpenAI's "not given".
    if (value === null || value === undefined || Object.hasOwn(MAPPED_FIELDS, name)) continue;
    if (Object.hasOwn(REJECTED_FIELDS, name)) {
      const field = name as RejectedField;
      if (NO_OP_VALUES[field]?.(value)) continue;
      return unsupportedParameter(`${name} is not supported for Bedrock models: ${REJECTED_FIELDS[field]}`, name);
    }
    return unsupportedParameter(
      `${name} is not supported for Bedrock models: the gateway only passes parameters it can translate to Converse`,
      name,
    );
  }
  if (body.n !== undefined && body.n !== null && body.n !== 1) {
    return unsupportedParameter('n must be 1: the gateway returns one choice per request', 'n');
  }
  if (body.parallel_tool_calls === false) {
    return unsupportedParameter(
      'parallel_tool_calls false is not supported for Bedrock models: they may call several tools in one turn',
      'parallel_tool_calls',
    );
  }
  const config = inferenceConfig(body);
  if (config instanceof ProxyError) return config;
  const limited = checkLimits(opts.baseModel ?? modelId, config);
  if (limited) return limited;
  const conv = conversation(body.messages);
  if (conv instanceof ProxyError) return conv;
  const json = jsonOutput(body.response_format, body.tools);
  if (json instanceof ProxyError) return json;
  const tools = json ?? toolConfig(body.tools, body.tool_choice, conv.usesTools);
  if (tools instanceof ProxyError) return tools;

  const thinking = thinkingOf(modelId, body.reasoning_effort, config);
  if (thinking instanceof ProxyError) return thinking;

  // Signed reasoning is the model's own: another family (a fallback, a switched model) cannot read it.
  const messages = isAnthropic(opts.baseModel ?? modelId)
    ? conv.messages
    : conv.messages.map((m) => ({ ...m, content: m.content.filter((b) => b.reasoningContent === undefined) }));
  const input: ConverseRequest = { messages };
  if (conv.system.length > 0) input.system = conv.system;
  if (Object.keys(config).length > 0) input.inferenceConfig = config;
  if (tools) input.toolConfig = tools;
  if (thinking) input.additionalModelRequestFields = { thinking };
  return input;
}

/** The model family's own limits (openai-chat_bedrock-converse-limits.ts), as a 400 naming the parameter. */
function checkLimits(model: string, config: InferenceConfiguration): ProxyError | undefined {
  const limits = limitsOf(foundationModelOf(model));
  if (!limits) return undefined;
  if (config.maxTokens !== undefined && config.maxTokens > limits.maxTokens) {
    return invalidRequest(
      `max_tokens ${config.maxTokens} is above ${model}'s maximum of ${limits.maxTokens} output tokens`,
      'max_tokens',
    );
  }
  if ((config.stopSequences?.length ?? 0) > limits.stopSequences) {
    return invalidRequest(`${model} takes at most ${limits.stopSequences} stop sequences`, 'stop');
  }
  if (limits.temperatureOrTopP && config.temperature !== undefined && config.topP !== undefined) {
    return invalidRequest(`${model} takes temperature or top_p, not both: send one of them`, 'top_p');
  }
  return undefined;
}

/**
 * reasoning_effort as Anthropic's extended thinking on Bedrock: a token budget, which the answer's
 * max tokens must exceed and which needs the default temperature. Other Bedrock models take
 * their reasoning settings in shapes of their own, not translated yet.
 */
function thinkingOf(
  modelId: string,
  effort: unknown,
  config: InferenceConfiguration,
): { type: 'enabled'; budget_tokens: number } | undefined | ProxyError {
  if (effort === undefined || effort === null || effort === 'none') return undefined;
  if (typeof effort !== 'string' || !Object.hasOwn(THINKING_BUDGETS, effort)) {
    return invalidRequest('reasoning_effort must be one of none, minimal, low, medium, high', 'reasoning_effort');
  }
  if (!isAnthropic(modelId)) {
    return unsupportedParameter(
      'reasoning_effort is translated for Anthropic models on Bedrock only (extended thinking)',
      'reasoning_effort',
    );
  }
  const budget = THINKING_BUDGETS[effort] ?? 1024;
  if (config.maxTokens !== undefined && config.maxTokens <= budget) {
    return invalidRequest(
      `max_tokens must be greater than the thinking budget of reasoning_effort ${effort} (${budget} tokens)`,
      'max_tokens',
    );
  }
  if (config.temperature !== undefined && config.temperature !== 1) {
    return invalidRequest(
      'temperature must be 1 (or left out) with reasoning_effort on Anthropic models',
      'temperature',
    );
  }
  return { type: 'enabled', budget_tokens: budget };
}

const TOOL_NAME = /^[a-zA-Z0-9_-]{1,64}$/;

/** response_format as a forced tool; undefined for text (or none). */
function jsonOutput(format: unknown, tools: unknown): ToolConfiguration | undefined | ProxyError {
  if (format === undefined || format === null) return undefined;
  if (!isRecord(format) || typeof format.type !== 'string') {
    return invalidRequest(
      'response_format must be {"type": "text" | "json_object" | "json_schema", ...}',
      'response_format',
    );
  }
  if (format.type === 'text') return undefined;
  let schema: Record<string, unknown> = { type: 'object' };
  let description = 'Give the answer as a JSON object.';
  if (format.type === 'json_schema') {
    const js = format.json_schema;
    if (!isRecord(js) || !isRecord(js.schema)) {
      return invalidRequest(
        'response_format.json_schema.schema must be a JSON Schema object',
        'response_format.json_schema.schema',
      );
    }
    schema = js.schema;
    if (typeof js.description === 'string' && js.description !== '') description = js.description;
  } else if (format.type !== 'json_object') {
    return invalidRequest(
      `response_format.type ${JSON.stringify(format.type)} is not one of text, json_object, json_schema`,
      'response_format.type',
    );
  }
  if (tools !== undefined && tools !== null) {
    return unsupportedParameter(
      'response_format JSON together with tools is not supported for Bedrock models: the JSON mode is itself a tool the model must call',
      'response_format',
    );
  }
  return {
    tools: [{ toolSpec: { name: JSON_TOOL, description, inputSchema: { json: schema } } }],
    toolChoice: { tool: { name: JSON_TOOL } },
  };
}

/** Whether a Converse input asks for JSON output (the forced JSON tool). */
export const jsonMode = (input: ConverseRequest): boolean => {
  const choice = input.toolConfig?.toolChoice;
  return choice !== undefined && 'tool' in choice && choice.tool.name === JSON_TOOL;
};

/**
 * OpenAI's tools and tool_choice as Converse's toolConfig. Converse has no "none": without tools
 * in the conversation the toolConfig is left out (the model cannot call what it is not given);
 * with tool calls or results in it Converse needs the toolConfig, so "none" is refused there
 * rather than silently letting the model call tools.
 */
function toolConfig(tools: unknown, choice: unknown, usesTools: boolean): ToolConfiguration | undefined | ProxyError {
  if (tools === undefined || tools === null) {
    if (choice !== undefined && choice !== null && choice !== 'none' && choice !== 'auto') {
      return invalidRequest('tool_choice needs tools', 'tool_choice');
    }
    if (usesTools) {
      return invalidRequest(
        'messages carry tool calls or tool results but the request has no tools: Bedrock models need the tools of the conversation',
        'tools',
      );
    }
    return undefined;
  }
  if (!Array.isArray(tools) || tools.length === 0 || tools.length > 128) {
    return invalidRequest('tools must be an array of 1 to 128 function tools', 'tools');
  }
  const specs: Tool[] = [];
  const names = new Set<string>();
  for (const [i, t] of tools.entries()) {
    const at = `tools[${i}]`;
    if (!isRecord(t) || t.type !== 'function' || !isRecord(t.function)) {
      return invalidRequest(`${at} must be {"type": "function", "function": {...}}`, at);
    }
    const { name, description, parameters } = t.function;
    if (typeof name !== 'string' || !TOOL_NAME.test(name)) {
      return invalidRequest(`${at}.function.name must be 1-64 letters, digits, '_' or '-'`, `${at}.function.name`);
    }
    if (names.has(name)) return invalidRequest(`${at}.function.name ${name} is given twice`, `${at}.function.name`);
    names.add(name);
    if (description !== undefined && typeof description !== 'string') {
      return invalidRequest(`${at}.function.description must be a string`, `${at}.function.description`);
    }
    if (parameters !== undefined && !isRecord(parameters)) {
      return invalidRequest(`${at}.function.parameters must be a JSON Schema object`, `${at}.function.parameters`);
    }
    specs.push({
      toolSpec: {
        name,
        ...(description ? { description } : {}),
        // Converse needs a schema; OpenAI allows none for a function without arguments.
        inputSchema: { json: parameters ?? { type: 'object', properties: {} } },
      },
    });
    const cache = cachePoint(t.cache_control, `${at}.cache_control`);
    if (cache instanceof ProxyError) return cache;
    if (cache) specs.push(cache);
  }
  let toolChoice: ToolChoice | undefined;
  if (choice === undefined || choice === null || choice === 'auto') toolChoice = undefined;
  else if (choice === 'required') toolChoice = { any: {} };
  else if (choice === 'none') {
    if (usesTools) {
      return unsupportedParameter(
        'tool_choice none is not supported for Bedrock models in a conversation that already has tool calls: Converse cannot forbid them',
        'tool_choice',
      );
    }
    return undefined;
  } else if (isRecord(choice) && choice.type === 'function' && isRecord(choice.function)) {
    const name = choice.function.name;
    if (typeof name !== 'string' || !names.has(name)) {
      return invalidRequest('tool_choice names a function that is not in tools', 'tool_choice');
    }
    toolChoice = { tool: { name } };
  } else {
    return invalidRequest(
      'tool_choice must be none, auto, required or {"type": "function", "function": {"name": ...}}',
      'tool_choice',
    );
  }
  return { tools: specs, ...(toolChoice ? { toolChoice } : {}) };
}

function inferenceConfig(body: Record<string, unknown>): InferenceConfiguration | ProxyError {
  const config: InferenceConfiguration = {};
  for (const name of ['max_completion_tokens', 'max_tokens'] as const) {
    const v = body[name];
    if (v === undefined || v === null) continue;
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 1) {
      return invalidRequest(`${name} must be a positive integer`, name);
    }
    config.maxTokens ??= v;
  }
  // Converse's own ranges (InferenceConfiguration in botocore's model: both 0 to 1), checked
  // here so that the caller gets a clear 400 rather than the upstream's; OpenAI allows
  // temperature up to 2.
  const ranges = [
    ['temperature', 'temperature', 1],
    ['top_p', 'topP', 1],
  ] as const;
  for (const [name, key, max] of ranges) {
    const v = body[name];
    if (v === undefined || v === null) continue;
    if (typeof v !== 'number' || !Number.isFinite(v) || v < 0 || v > max) {
      return invalidRequest(`${name} must be a number from 0 to ${max} for Bedrock models`, name);
    }
    config[key] = v;
  }
  const stop = body.stop;
  if (stop !== undefined && stop !== null) {
    const list = typeof stop === 'string' ? [stop] : stop;
    if (!Array.isArray(list) || list.length > 4 || !list.every((s) => typeof s === 'string' && s !== '')) {
      return invalidRequest('stop must be a non-empty string or an array of up to 4 non-empty strings', 'stop');
    }
    if (list.length > 0) config.stopSequences = list as string[];
  }
  return config;
}

interface Turn {
  role: 'user' | 'assistant';
  content: ContentBlock[];
  /** Indices of the first and last client message merged into this turn, for error messages. */
  from: number;
  to: number;
}

function conversation(
  messages: unknown,
): { system: SystemContentBlock[]; messages: Message[]; usesTools: boolean } | ProxyError {
  if (!Array.isArray(messages) || messages.length === 0) {
    return invalidRequest('messages must be a non-empty array of {role, content} objects', 'messages');
  }
  const system: SystemContentBlock[] = [];
  const turns: Turn[] = [];
  let usesTools = false;
  const add = (role: 'user' | 'assistant', blocks: ContentBlock[], i: number) => {
    const last = turns.at(-1);
    // Bedrock requires user and assistant turns to alternate: tool results are the user's turn.
    if (last?.role === role) {
      last.content.push(...blocks);
      last.to = i;
    } else {
      turns.push({ role, content: blocks, from: i, to: i });
    }
  };
  for (const [i, m] of messages.entries()) {
    const at = `messages[${i}]`;
    if (!isRecord(m)) return invalidRequest(`${at} must be an object with role and content`, at);
    const role = m.role;
    if (role === 'system' || role === 'developer') {
      const text = systemText(m.content, at);
      if (text instanceof ProxyError) return text;
      if (!isBlank(text.text)) system.push({ text: text.text });
      if (text.cache) system.push(text.cache);
      continue;
    }
    if (role === 'function') {
      return unsupportedParameter(
        `${at} has role function, the deprecated form: send tool messages with tool_call_id`,
        `${at}.role`,
      );
    }
    if (role === 'tool') {
      const result = toolResult(m, at);
      if (result instanceof ProxyError) return result;
      usesTools = true;
      add('user', [result], i);
      continue;
    }
    if (role !== 'user' && role !== 'assistant') {
      return invalidRequest(`${at}.role must be one of system, developer, user, assistant, tool`, `${at}.role`);
    }
    if (m.function_call !== undefined && m.function_call !== null) {
      return unsupportedParameter(`${at}.function_call is the deprecated form: send tool_calls`, `${at}.function_call`);
    }
    const content = contentBlocks(m.content, role, at);
    if (content instanceof ProxyError) return content;
    const thoughts =
      m.thinking_blocks === undefined || m.thinking_blocks === null ? [] : thinkingBlocks(m.thinking_blocks, role, at);
    if (thoughts instanceof ProxyError) return thoughts;
    // Reasoning comes first in the assistant turn, as the model produced it.
    const blocks = [...thoughts, ...content];
    if (m.tool_calls !== undefined && m.tool_calls !== null) {
      if (role !== 'assistant')
        return invalidRequest(`${at}.tool_calls: only assistant messages carry tool calls`, `${at}.tool_calls`);
      const calls = toolUses(m.tool_calls, at);
      if (calls instanceof ProxyError) return calls;
      if (calls.length > 0) usesTools = true;
      blocks.push(...calls);
    }
    add(role, blocks, i);
  }

  const first = turns[0];
  if (!first) {
    return invalidRequest('messages has no user message: Bedrock models need at least one', 'messages');
  }
  if (first.role === 'assistant') {
    return invalidRequest(
      `messages[${first.from}] is an assistant message before any user message: Bedrock requires the conversation to start with a user message`,
      `messages[${first.from}]`,
    );
  }
  for (const t of turns) {
    if (t.content.length === 0) {
      const which = t.from === t.to ? `messages[${t.from}]` : `messages[${t.from}] to messages[${t.to}]`;
      return invalidRequest(
        `${which} has no content: Bedrock rejects ${t.role} messages without non-blank text or an image`,
        `messages[${t.from}].content`,
      );
    }
  }
  return { system, messages: turns.map((t) => ({ role: t.role, content: t.content })), usesTools };
}

/** An assistant message's tool_calls as Converse toolUse blocks (arguments parsed: Converse takes JSON). */
function toolUses(calls: unknown, at: string): ContentBlock[] | ProxyError {
  if (!Array.isArray(calls)) return invalidRequest(`${at}.tool_calls must be an array`, `${at}.tool_calls`);
  const blocks: ContentBlock[] = [];
  for (const [j, c] of calls.entries()) {
    const p = `${at}.tool_calls[${j}]`;
    if (!isRecord(c) || typeof c.id !== 'string' || c.id === '' || !isRecord(c.function)) {
      return invalidRequest(`${p} must be {"id", "type": "function", "function": {"name", "arguments"}}`, p);
    }
    const { name, arguments: args } = c.function;
    if (typeof name !== 'string' || !TOOL_NAME.test(name)) {
      return invalidRequest(`${p}.function.name must be 1-64 letters, digits, '_' or '-'`, `${p}.function.name`);
    }
    let input: unknown = {};
    if (typeof args === 'string' && args.trim() !== '') {
      try {
        input = JSON.parse(args);
      } catch {
        return invalidRequest(`${p}.function.arguments is not valid JSON`, `${p}.function.arguments`);
      }
    }
    if (!isRecord(input)) {
      return invalidRequest(`${p}.function.arguments must be a JSON object`, `${p}.function.arguments`);
    }
    blocks.push({ toolUse: { toolUseId: c.id, name, input } });
  }
  return blocks;
}

/** A tool message as a Converse toolResult block (its text parts as text content). */
function toolResult(m: Record<string, unknown>, at: string): ContentBlock | ProxyError {
  if (typeof m.tool_call_id !== 'string' || m.tool_call_id === '') {
    return invalidRequest(`${at}.tool_call_id is required on tool messages`, `${at}.tool_call_id`);
  }
  let text = '';
  if (typeof m.content === 'string') text = m.content;
  else if (Array.isArray(m.content)) {
    for (const [j, part] of m.content.entries()) {
      if (!isRecord(part) || part.type !== 'text' || typeof part.text !== 'string') {
        return unsupportedContent(
          `${at}.content[${j}]: tool results can only carry text for Bedrock models`,
          `${at}.content[${j}]`,
        );
      }
      text += part.text;
    }
  } else if (m.content !== undefined && m.content !== null) {
    return invalidRequest(`${at}.content must be a string or an array of text parts`, `${at}.content`);
  }
  // Converse refuses empty text blocks; an empty result is still a result.
  return { toolResult: { toolUseId: m.tool_call_id, content: [{ text: text === '' ? ' ' : text }] } };
}

function systemText(content: unknown, at: string): { text: string; cache?: CachePointBlock } | ProxyError {
  if (content === undefined || content === null) return { text: '' };
  if (typeof content === 'string') return { text: content };
  if (!Array.isArray(content)) {
    return invalidRequest(`${at}.content must be a string or an array of content parts`, `${at}.content`);
  }
  const texts: string[] = [];
  let cache: CachePointBlock | undefined;
  for (const [j, part] of content.entries()) {
    const p = `${at}.content[${j}]`;
    if (!isRecord(part) || part.type !== 'text' || typeof part.text !== 'string') {
      return unsupportedContent(`${p}: system and developer messages can only carry text parts for Bedrock models`, p);
    }
    if (!isBlank(part.text)) texts.push(part.text);
    const point = cachePoint(part.cache_control, `${p}.cache_control`);
    if (point instanceof ProxyError) return point;
    cache ??= point;
  }
  // Bedrock takes the parts as one system block; a newline keeps separate parts from running together.
  // A cache breakpoint on any part marks the end of that block (Converse caches up to a cachePoint).
  return cache ? { text: texts.join('\n'), cache } : { text: texts.join('\n') };
}

/** An assistant message's thinking_blocks, returned by an earlier answer, as reasoningContent blocks. */
function thinkingBlocks(value: unknown, role: string, at: string): ContentBlock[] | ProxyError {
  const param = `${at}.thinking_blocks`;
  if (role !== 'assistant') return invalidRequest(`${param}: only assistant messages carry thinking blocks`, param);
  if (!Array.isArray(value)) return invalidRequest(`${param} must be an array`, param);
  const blocks: ContentBlock[] = [];
  for (const [j, b] of value.entries()) {
    const p = `${param}[${j}]`;
    if (isRecord(b) && b.type === 'thinking' && typeof b.thinking === 'string' && typeof b.signature === 'string') {
      blocks.push({ reasoningContent: { reasoningText: { text: b.thinking, signature: b.signature } } });
    } else if (isRecord(b) && b.type === 'redacted_thinking' && typeof b.data === 'string') {
      blocks.push({ reasoningContent: { redactedContent: Buffer.from(b.data, 'base64').toString('base64') } });
    } else {
      return invalidRequest(
        `${p} must be {"type": "thinking", "thinking", "signature"} or {"type": "redacted_thinking", "data"}, as the answer gave it`,
        p,
      );
    }
  }
  return blocks;
}

/** Converse's prompt-cache breakpoint: everything before it is cached. */
type CachePointBlock = { cachePoint: { type: 'default' } };

/**
 * Anthropic-style `cache_control: {"type": "ephemeral"}` on a content part or a tool (as the
 * Anthropic SDK and LiteLLM send it) as a Converse cachePoint after that block.
 */
function cachePoint(control: unknown, at: string): CachePointBlock | undefined | ProxyError {
  if (control === undefined || control === null) return undefined;
  if (!isRecord(control) || control.type !== 'ephemeral') {
    return invalidRequest(`${at} must be {"type": "ephemeral"}`, at);
  }
  return { cachePoint: { type: 'default' } };
}

function contentBlocks(content: unknown, role: 'user' | 'assistant', at: string): ContentBlock[] | ProxyError {
  if (content === undefined || content === null) return [];
  if (typeof content === 'string') return isBlank(content) ? [] : [{ text: content }];
  if (!Array.isArray(content)) {
    return invalidRequest(`${at}.content must be a string or an array of content parts`, `${at}.content`);
  }
  const blocks: ContentBlock[] = [];
  for (const [j, part] of content.entries()) {
    const p = `${at}.content[${j}]`;
    if (!isRecord(part) || typeof part.type !== 'string') {
      return invalidRequest(`${p} must be an object with a type`, p);
    }
    if (part.type === 'text' || (part.type === 'refusal' && role === 'assistant')) {
      const key = part.type;
      const text = part[key];
      if (typeof text !== 'string') return invalidRequest(`${p}.${key} must be a string`, `${p}.${key}`);
      if (!isBlank(text)) blocks.push({ text });
    } else if (part.type === 'image_url' && role === 'user') {
      const image = imageBlock(part.image_url, p);
      if (image instanceof ProxyError) return image;
      blocks.push(image);
    } else {
      return unsupportedContent(`${p} has type ${part.type}, which ${role} messages to Bedrock models cannot carry`, p);
    }
    const cache = cachePoint(part.cache_control, `${p}.cache_control`);
    if (cache instanceof ProxyError) return cache;
    if (cache) blocks.push(cache);
  }
  return blocks;
}

const DATA_URL = /^data:image\/(png|jpeg|jpg|gif|webp);base64,([A-Za-z0-9+/_-]*={0,2})$/i;

function imageBlock(imageUrl: unknown, p: string): ContentBlock | ProxyError {
  const url = isRecord(imageUrl) ? imageUrl.url : undefined;
  const param = `${p}.image_url.url`;
  if (typeof url !== 'string') return invalidRequest(`${param} must be a string`, param);
  if (/^https?:/i.test(url)) {
    return unsupportedContent(
      `${param} is a remote URL: Bedrock takes the image bytes, not a link; send the image inline as a data:image/png;base64,... URL (png, jpeg, gif or webp)`,
      param,
    );
  }
  // MIME-style base64 is wrapped at 76 characters.
  const match = DATA_URL.exec(url.replace(/\s+/g, ''));
  if (!match) {
    return unsupportedContent(
      `${param} must be a base64 data URL of a png, jpeg, gif or webp image (data:image/png;base64,...)`,
      param,
    );
  }
  const subtype = (match[1] ?? '').toLowerCase();
  const format: ImageFormat = subtype === 'jpg' ? 'jpeg' : (subtype as ImageFormat);
  const buf = Buffer.from(match[2] ?? '', 'base64');
  if (buf.byteLength === 0) return invalidRequest(`${param} holds no image data`, param);
  // Converse's JSON carries the bytes in standard base64, whichever alphabet and wrapping came in.
  return { image: { format, source: { bytes: buf.toString('base64') } } };
}
