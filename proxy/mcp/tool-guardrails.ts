import type { Caller } from '../access/auth.js';
import type { Tag } from '../endpoints/tags.js';
import { type Cause, type Checking, checkText } from '../guardrails/check-text.js';
import { Findings } from '../guardrails/findings.js';
import type { CompiledGuardrail, GuardrailSet } from '../guardrails/guardrail-set.js';
import { isObject, type JsonObject, type RpcAnswer, type RpcRequest } from './json-rpc.js';

/**
 * A tool call through the guardrails that select its caller (by key, team and tags; a selector's
 * models are matched against the tool's name as called): its arguments as a request's text (they
 * go to the tool's server), its result as an answer's (it goes back to the agent and its model).
 * A Block answers the call with a tool error naming the guardrail and the category, never the
 * text, so that the agent's model reads why; Redact and Mask change what passes.
 */

export interface ToolGuarding extends Checking {
  results: readonly CompiledGuardrail[];
}

export type GuardedCall = { req: RpcRequest; guarding?: ToolGuarding } | { blocked: RpcAnswer; guarding: ToolGuarding };

export function guardToolCall(
  set: GuardrailSet | undefined,
  caller: Caller,
  tags: readonly Tag[],
  req: RpcRequest,
): GuardedCall {
  if (!set || set.size === 0) return { req };
  const name = String(req.params?.name ?? '');
  const selected = set.select({ policy: caller.policy, tags, model: name });
  if (selected.length === 0) return { req };
  const guarding: ToolGuarding = { findings: new Findings(), results: selected.filter((g) => g.answer) };
  const checking = selected.filter((g) => g.request);
  const args = req.params?.arguments;
  if (checking.length === 0 || args === undefined) return { req, guarding };
  let blocked: Cause | undefined;
  const checked = strings(args, (text) => {
    if (blocked) return text;
    const c = checkText(checking, text, 'tool-arguments', guarding);
    if ('blocked' in c) blocked = c.blocked;
    return 'text' in c ? c.text : text;
  });
  if (blocked) return { blocked: toolError(req.id, blocked, 'tool arguments'), guarding };
  return checked === args
    ? { req, guarding }
    : { req: { ...req, params: { ...req.params, arguments: checked as JsonObject } }, guarding };
}

/** A call's answer through its guardrails: a result's texts, structured content and resources' text. */
export function guardToolResult(guarding: ToolGuarding | undefined, answer: RpcAnswer): RpcAnswer {
  if (!guarding || guarding.results.length === 0 || !('result' in answer)) return answer;
  let blocked: Cause | undefined;
  const result = strings(answer.result, (text) => {
    if (blocked) return text;
    const c = checkText(guarding.results, text, 'tool-result', guarding);
    if ('blocked' in c) blocked = c.blocked;
    return 'text' in c ? c.text : text;
  });
  if (blocked) return toolError(answer.id, blocked, 'tool result');
  return result === answer.result ? answer : { ...answer, result: result as JsonObject };
}

/** A Block as the call's answer: a tool error (isError), the agent's model told why. */
function toolError(id: RpcRequest['id'], cause: Cause, what: string): RpcAnswer {
  return {
    jsonrpc: '2.0',
    id,
    result: {
      content: [{ type: 'text', text: `blocked by guardrail ${cause.guardrail}: the ${what} carry ${cause.category}` }],
      isError: true,
    },
  };
}

/** Every string of a JSON value mapped (keys and a content part's type, mimeType and uri are not text). */
function strings(v: unknown, f: (s: string) => string, depth = 0): unknown {
  if (typeof v === 'string') return f(v);
  if (depth > 64) return v;
  if (Array.isArray(v)) {
    let out: unknown[] | undefined;
    for (const [i, x] of v.entries()) {
      const y = strings(x, f, depth + 1);
      if (y === x) continue;
      out ??= [...v];
      out[i] = y;
    }
    return out ?? v;
  }
  if (!isObject(v)) return v;
  let out: Record<string, unknown> | undefined;
  for (const [k, x] of Object.entries(v)) {
    if (NOT_TEXT.has(k)) continue;
    const y = strings(x, f, depth + 1);
    if (y === x) continue;
    out ??= { ...v };
    out[k] = y;
  }
  return out ?? v;
}

const NOT_TEXT = new Set(['type', 'mimeType', 'uri', 'blob', 'data', 'annotations', '_meta']);
