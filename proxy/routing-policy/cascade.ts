import type { CallerDialect } from '../../crds/constants.js';
import { isRecord } from '../../crds/is-record.js';
import type { CascadeTrigger } from '../../crds/routing-policy.js';
import type { ChunkSource, StreamBody } from '../upstreams/chunk-source.js';
import { chunksOf } from '../upstreams/chunk-source.js';
import { sseData } from '../upstreams/stream-reader.js';
import type { RequestFeatures } from './features.js';

/**
 * The cascade's judge: whether an answer failed in a way the next model of the pool may not (an
 * empty answer, one cut by the model's own limit, a refusal, invalid JSON where JSON was asked, a
 * call to a tool the request does not offer). Whole answers are judged whole; a stream only until
 * its first content, held back from the caller meanwhile, so an escalation never shows the caller
 * two answers. Upstream errors are the call's business (proxy/call.ts): they escalate as 'Error'.
 */

/** What one dialect's answer says, as far as the judge reads it. */
interface Said {
  text: string;
  tools: string[];
  refused: boolean;
  cut: boolean;
}

const arr = (v: unknown): unknown[] => (Array.isArray(v) ? v : []);
const str = (v: unknown): string => (typeof v === 'string' ? v : '');

/** A refusal as models word one at the start of an answer (they seldom set a refusal field). */
const REFUSAL =
  /^\s*(?:(?:i'?m|i am) sorry|i apologi[sz]e|sorry|unfortunately)?[,.!]?\s*(?:but\s+)?(?:as an ai[^.]{0,40},\s*)?i\s+(?:can(?:'|no)t|can not|am unable to|am not able to|won'?t|will not|must decline to)\s+(?:help|assist|comply|provide|do that|fulfil|answer|create|write)/i;

const WHOLE: Readonly<Record<'openai-chat' | 'openai-responses' | 'anthropic-messages', (body: unknown) => Said>> = {
  'openai-chat': (body) => {
    const choice = isRecord(body) ? arr(body.choices)[0] : undefined;
    const msg = isRecord(choice) && isRecord(choice.message) ? choice.message : {};
    return {
      text: str(msg.content),
      tools: arr(msg.tool_calls).map((c) => (isRecord(c) && isRecord(c.function) ? str(c.function.name) : '')),
      refused: str(msg.refusal) !== '',
      cut: isRecord(choice) && choice.finish_reason === 'length',
    };
  },
  'openai-responses': (body) => {
    const said: Said = { text: '', tools: [], refused: false, cut: false };
    if (!isRecord(body)) return said;
    for (const item of arr(body.output)) {
      if (!isRecord(item)) continue;
      if (item.type === 'function_call') said.tools.push(str(item.name));
      for (const part of arr(item.content)) {
        if (!isRecord(part)) continue;
        if (part.type === 'output_text') said.text += str(part.text);
        if (part.type === 'refusal') said.refused = true;
      }
    }
    said.cut = isRecord(body.incomplete_details) && body.incomplete_details.reason === 'max_output_tokens';
    return said;
  },
  'anthropic-messages': (body) => {
    const said: Said = { text: '', tools: [], refused: false, cut: false };
    if (!isRecord(body)) return said;
    for (const block of arr(body.content)) {
      if (!isRecord(block)) continue;
      if (block.type === 'text') said.text += str(block.text);
      if (block.type === 'tool_use') said.tools.push(str(block.name));
    }
    said.refused = body.stop_reason === 'refusal';
    said.cut = body.stop_reason === 'max_tokens';
    return said;
  },
};

const judged = (dialect: CallerDialect): dialect is keyof typeof WHOLE => Object.hasOwn(WHOLE, dialect);

/**
 * The dialects routing serves (chat, Responses, Messages): those whose answers the cascade can
 * judge, so a routed request can always escalate.
 */
export const cascades = judged;

/** Why a whole answer failed, among the triggers the policy escalates on; undefined when it served. */
export function judgeAnswer(
  dialect: CallerDialect,
  body: unknown,
  f: RequestFeatures,
  on: ReadonlySet<CascadeTrigger>,
  completionTokens?: number,
): CascadeTrigger | undefined {
  if (!judged(dialect)) return undefined;
  const said = WHOLE[dialect](body);
  const failed: CascadeTrigger | undefined =
    said.refused || REFUSAL.test(said.text.slice(0, 300))
      ? 'Refusal'
      : said.tools.some((t) => !f.toolNames.includes(t))
        ? 'UnknownTool'
        : // A cut at the caller's own maximum is what it asked for; below it (the model's window,
          // or the gateway's cap for it), the model's limit.
          said.cut && (f.maxOutputTokens === undefined || (completionTokens ?? f.maxOutputTokens) < f.maxOutputTokens)
          ? 'Length'
          : said.text.trim() === '' && said.tools.length === 0
            ? 'Empty'
            : f.json && said.tools.length === 0 && !parses(said.text)
              ? 'InvalidJson'
              : undefined;
  return failed && on.has(failed) ? failed : undefined;
}

function parses(text: string): boolean {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}

/** What one stream event says before the answer's first content: go on reading, content began, or failed. */
type EventVerdict = 'more' | 'content' | CascadeTrigger;

function chatEvent(e: Record<string, unknown>, f: RequestFeatures): EventVerdict {
  const choice = arr(e.choices)[0];
  if (!isRecord(choice)) return isRecord(e.error) ? 'Error' : 'more';
  const delta = isRecord(choice.delta) ? choice.delta : {};
  if (str(delta.refusal) !== '') return 'Refusal';
  for (const c of arr(delta.tool_calls)) {
    const name = isRecord(c) && isRecord(c.function) ? str(c.function.name) : '';
    if (name !== '') return f.toolNames.includes(name) ? 'content' : 'UnknownTool';
  }
  if (str(delta.content) !== '' || str(delta.reasoning_content) !== '' || str(delta.reasoning) !== '') return 'content';
  return 'more';
}

function responsesEvent(e: Record<string, unknown>, f: RequestFeatures): EventVerdict {
  switch (e.type) {
    case 'response.output_text.delta':
    case 'response.reasoning_text.delta':
    case 'response.reasoning_summary_text.delta':
      return str(e.delta) !== '' ? 'content' : 'more';
    case 'response.output_item.added': {
      const item = isRecord(e.item) ? e.item : {};
      if (item.type !== 'function_call') return 'more';
      return f.toolNames.includes(str(item.name)) ? 'content' : 'UnknownTool';
    }
    case 'response.refusal.delta':
      return 'Refusal';
    case 'response.failed':
    case 'error':
      return 'Error';
    default:
      return 'more';
  }
}

function messagesEvent(e: Record<string, unknown>, f: RequestFeatures): EventVerdict {
  if (e.type === 'error') return 'Error';
  if (e.type === 'content_block_start' && isRecord(e.content_block) && e.content_block.type === 'tool_use')
    return f.toolNames.includes(str(e.content_block.name)) ? 'content' : 'UnknownTool';
  if (e.type === 'content_block_delta' && isRecord(e.delta)) {
    const d = e.delta;
    if (str(d.text) !== '' || str(d.thinking) !== '' || str(d.partial_json) !== '') return 'content';
  }
  return 'more';
}

const EVENTS: Readonly<Record<keyof typeof WHOLE, (e: Record<string, unknown>, f: RequestFeatures) => EventVerdict>> = {
  'openai-chat': chatEvent,
  'openai-responses': responsesEvent,
  'anthropic-messages': messagesEvent,
};

/** Bytes held back while waiting for a stream's first content; past it the stream goes on unjudged. */
const MAX_HELD_BYTES = 256 * 1024;

/**
 * Reads a stream until its first content, holding what it read. Served: the stream as the caller
 * gets it (what was held, then the rest). Failed: why, the stream cancelled.
 */
export async function judgeStream(
  dialect: CallerDialect,
  body: StreamBody,
  f: RequestFeatures,
  on: ReadonlySet<CascadeTrigger>,
): Promise<{ body: StreamBody } | { failed: CascadeTrigger }> {
  if (!judged(dialect)) return { body };
  const source = chunksOf(body);
  const held: Uint8Array[] = [];
  const decoder = new TextDecoder();
  let text = '';
  let size = 0;
  for (;;) {
    const chunk = await source.read();
    if (chunk === undefined) {
      // Ended before any content: an empty answer, or the error the relay ended it with (its last
      // event may lack the blank line that closes it).
      const tail = text.trim() === '' ? 'more' : verdictOf(dialect, text, f);
      if (tail === 'content') return { body: replay(held, source) };
      const why: CascadeTrigger = tail === 'more' ? 'Empty' : tail;
      return on.has(why) ? { failed: why } : { body: replay(held, source) };
    }
    held.push(chunk);
    size += chunk.byteLength;
    text += decoder.decode(chunk, { stream: true });
    const events = text.split(/\r?\n\r?\n/);
    text = events.pop() ?? '';
    for (const raw of events) {
      const verdict = verdictOf(dialect, raw, f);
      if (verdict === 'more') continue;
      if (verdict === 'content' || !on.has(verdict)) return { body: replay(held, source) };
      source.cancel();
      return { failed: verdict };
    }
    if (size > MAX_HELD_BYTES) return { body: replay(held, source) };
  }
}

function verdictOf(dialect: keyof typeof WHOLE, raw: string, f: RequestFeatures): EventVerdict {
  const data = sseData(raw);
  if (data === '' || data === '[DONE]') return 'more';
  let event: unknown;
  try {
    event = JSON.parse(data);
  } catch {
    return 'more';
  }
  return isRecord(event) ? EVENTS[dialect](event, f) : 'more';
}

/** The held chunks, then the rest of the source. */
function replay(held: Uint8Array[], source: ChunkSource): ChunkSource {
  let i = 0;
  return {
    read: () => (i < held.length ? Promise.resolve(held[i++]) : source.read()),
    cancel: () => source.cancel(),
  };
}
