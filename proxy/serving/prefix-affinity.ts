import { hash } from 'node:crypto';
import type { CallerDialect } from '../../crds/constants.js';
import { isRecord } from '../../crds/is-record.js';

/**
 * The prefix key of a request: which requests share the start of their prompt, so that they can
 * go to the replica whose engine already holds it in its prefix (KV) cache (replica-pool.ts
 * places a key by rendezvous hashing, bounded by load).
 *
 * The key is a hash of the first PREFIX_CHARS characters of the prompt as the engine will render
 * it, in order: tool definitions, then the system part, then the turns. Two requests with the same
 * key share at least that much of their prompt. 2048 characters are about 512 tokens (32 of
 * vLLM's 16-token cache blocks): a shorter prompt is prefilled in a few milliseconds on a GPU, so
 * missing its cache costs less than sending it to a busier replica would, and it is balanced by
 * load alone (no key). A longer prefix would not help the requests it should: those that share a
 * long system prompt or tool list and then differ (the common case of agents and RAG) would get
 * different keys and lose the replica that holds their shared part.
 *
 * Only the characters the key needs are read: the walk stops at PREFIX_CHARS, nothing is
 * serialized but a tool call's input object while the key still lacks characters, and a huge
 * body costs no more than a small one.
 */

/** Characters of the prompt hashed into the key, and the least a prompt needs to get one. */
export const PREFIX_CHARS = 2048;

/** Collects the first PREFIX_CHARS characters of a prompt, then ignores the rest. */
class Prefix {
  private readonly parts: string[] = [];
  length = 0;

  get full(): boolean {
    return this.length >= PREFIX_CHARS;
  }

  add(text: string): void {
    if (this.full || text.length === 0) return;
    const part = text.length > PREFIX_CHARS - this.length ? text.slice(0, PREFIX_CHARS - this.length) : text;
    this.parts.push(part);
    this.length += part.length;
  }

  /** Token ids (completions' prompt as numbers): about 4 characters each, as counted here. */
  addTokens(tokens: readonly unknown[]): void {
    if (this.full) return;
    const n = Math.min(tokens.length, Math.ceil((PREFIX_CHARS - this.length) / 4));
    this.parts.push(`${tokens.slice(0, n).join(',')}\u0001`);
    this.length += n * 4;
  }

  key(): string | undefined {
    if (!this.full) return undefined;
    // 64 bits of SHA-1: a cheap digest, and plenty to tell a few thousand live prefixes apart.
    return hash('sha1', this.parts.join(''), 'base64url').slice(0, 11);
  }
}

/** A marker between the prompt's pieces, so that ["ab","c"] and ["a","bc"] differ, as rendered prompts do. */
const SEP = '\u0000';

/** Tool definitions: their names and descriptions (their schemas are objects, and mostly follow from those). */
function addTools(p: Prefix, tools: unknown): void {
  if (!Array.isArray(tools)) return;
  for (let i = 0; i < tools.length && !p.full; i++) {
    const t: unknown = tools[i];
    if (!isRecord(t)) continue;
    // OpenAI chat nests the function; Responses and Anthropic do not.
    const fn = isRecord(t.function) ? t.function : t;
    if (typeof fn.name === 'string') p.add(`${SEP}tool:${fn.name}${SEP}`);
    if (typeof fn.description === 'string') p.add(fn.description);
  }
}

/**
 * One content part or block of any dialect: its text, a tool call's arguments or result, or,
 * for an image, a short fingerprint (the end of its URL or data: a data URL's start is the same
 * header for every image of a format).
 */
function addPart(p: Prefix, part: unknown): void {
  if (p.full) return;
  if (typeof part === 'string') {
    p.add(part);
    return;
  }
  if (!isRecord(part)) return;
  // A text part reads as its text, as a plain string would (templates join them alike); any other
  // part is marked by its type.
  if (typeof part.text === 'string') p.add(part.text);
  else if (typeof part.type === 'string') p.add(`${SEP}${part.type}${SEP}`);
  if (typeof part.name === 'string') p.add(part.name);
  if (typeof part.arguments === 'string') p.add(part.arguments);
  // Anthropic's tool_use input is an object: serialized only while the key still needs characters.
  if (isRecord(part.input) && !p.full) p.add(JSON.stringify(part.input));
  if (part.output !== undefined) addContent(p, part.output);
  if (part.content !== undefined) addContent(p, part.content);
  const image = isRecord(part.image_url) ? part.image_url.url : (part.image_url ?? part.file_id);
  const source = isRecord(part.source) ? (part.source.data ?? part.source.url) : undefined;
  for (const ref of [image, source]) if (typeof ref === 'string') p.add(ref.slice(-64));
}

function addContent(p: Prefix, content: unknown): void {
  if (typeof content === 'string') p.add(content);
  else if (Array.isArray(content)) for (let i = 0; i < content.length && !p.full; i++) addPart(p, content[i]);
}

/** A turn of chat, Responses' input or Anthropic's messages: its role, content, and tool calls. */
function addTurn(p: Prefix, turn: unknown): void {
  // A Responses item without a role (function_call, its output) is read as a part.
  if (!isRecord(turn) || typeof turn.role !== 'string') {
    addPart(p, turn);
    return;
  }
  p.add(`${SEP}${turn.role}${SEP}`);
  addContent(p, turn.content);
  if (Array.isArray(turn.tool_calls)) {
    for (const call of turn.tool_calls) if (isRecord(call) && isRecord(call.function)) addPart(p, call.function);
  }
}

function addTurns(p: Prefix, turns: unknown): void {
  if (typeof turns === 'string') p.add(turns);
  if (!Array.isArray(turns)) return;
  // By index, checking first: a turn past the prefix is never even read.
  for (let i = 0; i < turns.length && !p.full; i++) addTurn(p, turns[i]);
}

/** The completions endpoint's prompt: text, token ids, or a batch of either (its first one leads). */
function addPrompt(p: Prefix, prompt: unknown): void {
  if (typeof prompt === 'string') p.add(prompt);
  else if (Array.isArray(prompt) && prompt.length > 0) {
    const first: unknown = prompt[0];
    if (typeof first === 'number') p.addTokens(prompt);
    else addPrompt(p, first);
  }
}

/**
 * The request's prefix key, or undefined where it has none worth routing by: a prompt shorter
 * than PREFIX_CHARS, embeddings (nothing is generated, no cache is kept), or a body without a
 * prompt where this dialect puts one.
 */
export function prefixKey(dialect: CallerDialect, body: Record<string, unknown>): string | undefined {
  const p = new Prefix();
  switch (dialect) {
    case 'openai-chat':
      addTools(p, body.tools);
      addTurns(p, body.messages);
      break;
    case 'openai-responses':
      addTools(p, body.tools);
      if (typeof body.instructions === 'string') p.add(`${SEP}instructions${SEP}${body.instructions}`);
      addTurns(p, body.input);
      break;
    case 'anthropic-messages':
      // Anthropic's own cache order: tools, then system, then messages.
      addTools(p, body.tools);
      if (body.system !== undefined) p.add(`${SEP}system${SEP}`);
      addContent(p, body.system);
      addTurns(p, body.messages);
      break;
    case 'openai-completions':
      addPrompt(p, body.prompt);
      break;
    case 'openai-embeddings':
      return undefined;
  }
  return p.key();
}
