import { isRecord } from '../../crds/is-record.js';
import { modelOf, type ParsedRequest } from './chat-request.js';
import { invalidRequest, ProxyError } from './errors.js';

/**
 * OpenAI's Responses request (POST /openai/v1/responses) as the gateway checks it. Responses are
 * stateful here as at OpenAI (proxy/stored-responses/): `store` (default true) keeps the answer,
 * `previous_response_id` continues a stored one (then `input` may be left out), `background`
 * runs it detached. `prompt` (a template stored at OpenAI) may stand for the input too; only a
 * native OpenAI upstream can resolve it, which the route decides. `item_reference` items name
 * items of stored responses (resolved before the call). OpenAI's conversations are one 400.
 */

const MAX_ITEMS = 10_000;
const bad = (message: string, param: string, code = 'invalid_request') => invalidRequest(message, param, code);

export function parseResponsesRequest(body: unknown): ParsedRequest | ProxyError {
  if (!isRecord(body)) return invalidRequest('the request body must be a JSON object');
  const model = modelOf(body);
  if (typeof model !== 'string') return model;
  const { tags, ...forward } = body;
  const { input, instructions, stream, tools, previous_response_id, conversation, max_output_tokens } = forward;
  if (previous_response_id !== undefined && previous_response_id !== null) {
    if (typeof previous_response_id !== 'string')
      return bad('previous_response_id must be the id of a response (resp_...)', 'previous_response_id');
    // Any string is the spec's: one no response could have is one the store does not have (OpenAI's 404).
    if (!/^[A-Za-z0-9_-]{1,128}$/.test(previous_response_id))
      return new ProxyError(
        404,
        'invalid_request_error',
        'previous_response_not_found',
        `Previous response with id '${previous_response_id.slice(0, 100)}' not found.`,
        'previous_response_id',
      );
  }
  if (conversation !== undefined && conversation !== null)
    return bad(
      'conversation is not supported: continue a stored response with previous_response_id, or send the whole conversation in input',
      'conversation',
      'unsupported_parameter',
    );
  if (forward.prompt !== undefined && forward.prompt !== null && !isRecord(forward.prompt))
    return bad('prompt must be an object naming a prompt template ({id, version, variables})', 'prompt');
  for (const flag of ['store', 'background'] as const) {
    const v = forward[flag];
    if (v !== undefined && v !== null && typeof v !== 'boolean') return bad(`${flag} must be a boolean`, flag);
  }
  // No input is the spec's to allow (a conversation, a prompt template, instructions alone):
  // the upstream says whether it has anything to answer.
  if (input !== undefined && input !== null && typeof input !== 'string' && !Array.isArray(input))
    return bad('input must be a string, or an array of input items', 'input');
  if (Array.isArray(input)) {
    if (input.length > MAX_ITEMS) return bad(`input holds more than ${MAX_ITEMS} items`, 'input');
    for (const [i, item] of input.entries()) {
      const at = `input[${i}]`;
      if (!isRecord(item)) return bad(`${at} must be an object`, at);
      if (item.type === 'item_reference' && (typeof item.id !== 'string' || item.id === ''))
        return bad(`${at} is an item_reference: its id must name an item of a stored response`, `${at}.id`);
      if (item.type === undefined && (typeof item.role !== 'string' || item.content === undefined))
        return bad(`${at} must be a message ({role, content}) or an item with a type`, at);
    }
  }
  if (instructions !== undefined && instructions !== null && typeof instructions !== 'string')
    return bad('instructions must be a string', 'instructions');
  if (stream !== undefined && stream !== null && typeof stream !== 'boolean')
    return bad('stream must be a boolean', 'stream');
  if (tools !== undefined && tools !== null) {
    if (!Array.isArray(tools)) return bad('tools must be an array', 'tools');
    for (const [i, t] of tools.entries()) {
      if (!isRecord(t) || typeof t.type !== 'string')
        return bad(`tools[${i}] must be an object with a type`, `tools[${i}]`);
    }
  }
  if (
    max_output_tokens !== undefined &&
    max_output_tokens !== null &&
    !(typeof max_output_tokens === 'number' && Number.isInteger(max_output_tokens) && max_output_tokens > 0)
  )
    return bad('max_output_tokens must be a positive integer', 'max_output_tokens');
  // Responses streams always end with response.completed, which carries usage.
  return { model, stream: stream === true, includeUsage: true, tags, forward };
}
