import type { Caller } from '../access/auth.js';
import type { Tag } from '../endpoints/tags.js';
import { type Cause, type Checking, checkAll } from '../guardrails/check-text.js';
import { NO_CALLS } from '../guardrails/checker.js';
import { type FindingPlace, Findings } from '../guardrails/findings.js';
import type { GuardDeps } from '../guardrails/guard-deps.js';
import type { CompiledGuardrail } from '../guardrails/guardrail-set.js';
import { judgeTexts } from '../guardrails/judging.js';
import { deepStrings, type MapText } from '../guardrails/request-texts.js';
import type { JsonObject, RpcAnswer, RpcRequest } from './json-rpc.js';

/**
 * A tool call through the guardrails that select its caller (by key, team and tags; a selector's
 * models are matched against the tool's name as called): its arguments as a request's text (they
 * go to the tool's server), its result as an answer's (it goes back to the agent and its model).
 * A Block answers the call with a tool error naming the guardrail and the category, never the
 * text, so that the agent's model reads why; Redact and Mask change what passes. Their judges and
 * services are asked after the detectors, as on a model request; one that fails closed and could
 * not answer refuses the call the same way.
 */

export interface ToolGuarding extends Checking {
  results: readonly CompiledGuardrail[];
}

export type GuardedCall = { req: RpcRequest; guarding?: ToolGuarding } | { blocked: RpcAnswer; guarding: ToolGuarding };

export async function guardToolCall(
  guard: GuardDeps | undefined,
  caller: Caller,
  tags: readonly Tag[],
  req: RpcRequest,
): Promise<GuardedCall> {
  const set = guard?.guardrails;
  if (!set || set.size === 0) return { req };
  const name = String(req.params?.name ?? '');
  const selected = set.select({ policy: caller.policy, tags, model: name });
  if (selected.length === 0) return { req };
  const guarding: ToolGuarding = { findings: new Findings(), results: selected.filter((g) => g.answer) };
  const checking = selected.filter((g) => g.request);
  const args = req.params?.arguments;
  if (checking.length === 0 || args === undefined) return { req, guarding };
  const checked = await checkTool(guard, args, checking, 'tool-arguments', guarding);
  if (!('body' in checked)) return { blocked: toolError(req.id, checked, 'tool arguments'), guarding };
  return checked.body === args
    ? { req, guarding }
    : { req: { ...req, params: { ...req.params, arguments: checked.body as JsonObject } }, guarding };
}

/** A call's answer through its guardrails: a result's texts, structured content and resources' text. */
export async function guardToolResult(
  guard: GuardDeps | undefined,
  guarding: ToolGuarding | undefined,
  answer: RpcAnswer,
): Promise<RpcAnswer> {
  if (!guarding || guarding.results.length === 0 || !('result' in answer)) return answer;
  const checked = await checkTool(guard, answer.result, guarding.results, 'tool-result', guarding);
  if (!('body' in checked)) return toolError(answer.id, checked, 'tool result');
  const result = checked.body;
  return result === answer.result ? answer : { ...answer, result: result as JsonObject };
}

/** A tool call's strings through the detectors, then the judges and services; a check that fails closed blocks. */
async function checkTool(
  guard: GuardDeps | undefined,
  value: unknown,
  guardrails: readonly CompiledGuardrail[],
  where: FindingPlace,
  checking: Checking,
): Promise<{ body: unknown } | { blocked: Cause } | { unchecked: Cause }> {
  const checked = checkAll(toolStrings, value, guardrails, where, checking);
  if ('blocked' in checked) return checked;
  const judged = await judgeTexts(
    guardrails,
    toolStrings,
    checked.body,
    where,
    checking,
    guard?.judges ?? NO_CALLS,
    guard?.onJudgeFailed ?? (() => {}),
  );
  if ('unavailable' in judged) return { unchecked: judged.unavailable };
  return judged;
}

/** A Block, or a check that failed closed, as the call's answer: a tool error (isError), the agent's model told why. */
function toolError(id: RpcRequest['id'], refused: { blocked: Cause } | { unchecked: Cause }, what: string): RpcAnswer {
  const text =
    'blocked' in refused
      ? `blocked by guardrail ${refused.blocked.guardrail}: the ${what} carry ${refused.blocked.category}`
      : `guardrail ${refused.unchecked.guardrail} could not check the ${what} (its ${refused.unchecked.category} did not answer) and refuses what it cannot check; try again`;
  return { jsonrpc: '2.0', id, result: { content: [{ type: 'text', text }], isError: true } };
}

/** What in an MCP result is not text: a content part's type, its media type and URI, binary data, annotations. */
const NOT_TEXT = new Set(['type', 'mimeType', 'uri', 'blob', 'data', 'annotations', '_meta']);

/** Every text of a tool call's arguments or result. */
const toolStrings = (v: unknown, f: MapText): unknown => deepStrings(v, f, 0, NOT_TEXT);
