import { isRecord } from '../../crds/is-record.js';
import { filled, type Json } from './shape.js';

/** CompletionUsage: its three counts required; a total where a server left it out. */
export function completionUsage(u: Json): Json {
  if (Object.hasOwn(u, 'total_tokens')) return filled(u, { prompt_tokens: 0, completion_tokens: 0 });
  const prompt = typeof u.prompt_tokens === 'number' ? u.prompt_tokens : 0;
  const completion = typeof u.completion_tokens === 'number' ? u.completion_tokens : 0;
  return { prompt_tokens: prompt, completion_tokens: completion, ...u, total_tokens: prompt + completion };
}

/**
 * A stream chunk with choices whose usage is all zeros (Ollama's completions stream writes one on
 * each chunk when asked for usage): not the usage, which only the last chunk, without choices, carries.
 */
export function placeholderUsage(chunk: Json): boolean {
  const u = chunk.usage;
  if (!isRecord(u) || !Array.isArray(chunk.choices) || chunk.choices.length === 0) return false;
  return !u.prompt_tokens && !u.completion_tokens && !u.total_tokens;
}
