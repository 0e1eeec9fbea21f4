import { completionUsage, placeholderUsage } from './openai-usage.js';
import { eachRecord, edited, filled, ifRecord, type Json } from './shape.js';

/**
 * OpenAI's chat completion (CreateChatCompletionResponse) and its stream's chunks
 * (CreateChatCompletionStreamResponse) as the spec has them. Ollama leaves out what the API
 * sends as null: each choice's `logprobs` and its message's `refusal`; its legacy completions
 * stream writes zero usage on every chunk, which chat servers may copy: the spec's chunks before
 * the last carry `usage: null` (only the last, with `choices: []`, carries the usage).
 */

const MESSAGE = { content: null, refusal: null };

/** Logprobs the caller asked for: Ollama's have their content only, the spec's their refusal beside (null). */
const logprobs = ifRecord((l) => filled(l, { content: null, refusal: null }));

const choice = (c: Json): Json =>
  edited(
    edited(filled(c, { logprobs: null }), 'logprobs', logprobs),
    'message',
    ifRecord((m) => filled(m, MESSAGE)),
  );

/** A chunk's choice: its logprobs, where it has any, as in a whole answer (the chunk schema does not require them). */
const chunkChoice = (c: Json): Json => edited(c, 'logprobs', logprobs);

export const chatCompletion = (body: Json): Json =>
  edited(
    edited(body, 'choices', (list) => eachRecord(list, choice)),
    'usage',
    ifRecord(completionUsage),
  );

/** A chunk: zero usage on a chunk that still has choices is a placeholder, null in the spec's words. */
export function chatChunk(chunk: Json): Json {
  const mended = edited(chunk, 'choices', (list) => eachRecord(list, chunkChoice));
  if (!placeholderUsage(mended)) return edited(mended, 'usage', ifRecord(completionUsage));
  return { ...mended, usage: null };
}
