import { completionUsage, placeholderUsage } from './openai-usage.js';
import { eachRecord, edited, filled, ifRecord, type Json } from './shape.js';

/**
 * OpenAI's legacy completion (CreateCompletionResponse), whole and streamed alike (the spec
 * gives both one shape): each choice's `logprobs` is required (null unless asked for), and the
 * usage, typed CompletionUsage and not nullable, is absent from the chunks before the last
 * (Ollama writes zeros on each of them).
 */

const choice = (c: Json): Json => filled(c, { text: '', logprobs: null });

export const completion = (body: Json): Json =>
  edited(
    edited(body, 'choices', (list) => eachRecord(list, choice)),
    'usage',
    ifRecord(completionUsage),
  );

export function completionChunk(chunk: Json): Json {
  if (!placeholderUsage(chunk)) return completion(chunk);
  const { usage: _zero, ...rest } = chunk;
  return completion(rest);
}
