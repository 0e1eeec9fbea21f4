import type { Caller } from '../access/auth.js';
import type { Tag } from '../endpoints/tags.js';
import { type Cause, type Checking, checkAll } from '../guardrails/check-text.js';
import { Findings } from '../guardrails/findings.js';
import type { CompiledGuardrail, GuardrailSet } from '../guardrails/guardrail-set.js';
import { deepStrings, type MapText } from '../guardrails/request-texts.js';
import type { JsonObject, RpcAnswer, RpcRequest } from './json-rpc.js';

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
  const checked = checkAll(toolStrings, args, checking, 'tool-arguments', guarding);
  if ('blocked' in checked) return { blocked: toolError(req.id, checked.blocked, 'tool arguments'), guarding };
  return checked.body === args
    ? { req, guarding }
    : { req: { ...req, params: { ...req.params, arguments: checked.body as JsonObject } }, guarding };
}

/** A call's answer through its guardrails: a result's texts, structured content and resources' text. */
export function guardToolResult(guarding: ToolGuarding | undefined, answer: RpcAnswer): RpcAnswer {
  if (!guarding || guarding.results.length === 0 || !('result' in answer)) return answer;
  const checked = checkAll(toolStrings, answer.result, guarding.results, 'tool-result', guarding);
  if ('blocked' in checked) return toolError(answer.id, checked.blocked, 'tool result');
  const result = checked.body;
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

/** What in an MCP result is not text: a content part's type, its media type and URI, binary data, annotations. */
const NOT_TEXT = new Set(['type', 'mimeType', 'uri', 'blob', 'data', 'annotations', '_meta']);

/** Every text of a tool call's arguments or result. */
const toolStrings = (v: unknown, f: MapText): unknown => deepStrings(v, f, 0, NOT_TEXT);
