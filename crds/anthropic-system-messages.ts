import { isRecord } from './is-record.js';

/**
 * System messages inside an Anthropic Messages body's `messages`: the published spec
 * (2026-05-31, `InputMessage.role`) allows `"system"` there, and Claude Code sends it with its
 * Agent and Skill tools. Anthropic's API and vLLM take it; upstreams that do not (Ollama, Claude
 * on Bedrock and on Vertex, whose Messages APIs trail Anthropic's) get it folded: each such
 * message's text appended to the top-level `system` in the order the messages came, after what
 * `system` already said, so an instruction still reaches the model as an instruction, and is
 * never sent as something the user said.
 */

type Body = Record<string, unknown>;

/** A `system` (string or text blocks) or a system message's content, as text blocks. */
function blocksOf(content: unknown): Body[] {
  if (typeof content === 'string') return content === '' ? [] : [{ type: 'text', text: content }];
  return Array.isArray(content) ? content.filter(isRecord) : [];
}

/** Blocks that say no more than their text (no cache_control, no citations): sent as one string. */
const plain = (blocks: Body[]) =>
  blocks.every((b) => b.type === 'text' && typeof b.text === 'string' && Object.keys(b).length === 2);

const isSystem = (m: unknown) => isRecord(m) && m.role === 'system';

/** The body unchanged when no message is a system one (no copy on the hot path); else folded. */
export function foldSystemMessages(body: Body): Body {
  const { messages } = body;
  if (!Array.isArray(messages) || !messages.some(isSystem)) return body;
  const folded = messages.filter(isSystem).flatMap((m) => blocksOf((m as Body).content));
  const system = [...blocksOf(body.system), ...folded];
  const rest = messages.filter((m) => !isSystem(m));
  return {
    ...body,
    messages: rest,
    ...(system.length === 0
      ? {}
      : { system: plain(system) ? system.map((b) => b.text as string).join('\n\n') : system }),
  };
}

/**
 * The beta Claude Code sends with system messages inside messages: meaningless once they are
 * folded, and a flag an upstream that does not take them may refuse (Bedrock and Vertex check
 * theirs), so it goes with them.
 */
export const MID_CONVERSATION_SYSTEM_BETA = 'mid-conversation-system-2026-04-07';

export const foldedBetas = (betas: readonly string[] = []): readonly string[] =>
  betas.includes(MID_CONVERSATION_SYSTEM_BETA) ? betas.filter((b) => b !== MID_CONVERSATION_SYSTEM_BETA) : betas;
