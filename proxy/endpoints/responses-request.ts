import { isRecord, modelOf, type ParsedRequest } from './chat-request.js';
import { invalidRequest, type ProxyError } from './errors.js';

/**
 * OpenAI's Responses request (POST /openai/v1/responses) as the gateway checks it. The gateway is
 * stateless: it keeps no responses, so a request must carry its whole input. A reference to a
 * stored response or item is one 400 saying so (and how to send the input instead), never a
 * silent answer that lost the conversation.
 */

const MAX_ITEMS = 10_000;
const bad = (message: string, param: string, code = 'invalid_request') => invalidRequest(message, param, code);

export function parseResponsesRequest(body: unknown): ParsedRequest | ProxyError {
  if (!isRecord(body)) return invalidRequest('the request body must be a JSON object');
  const model = modelOf(body);
  if (typeof model !== 'string') return model;
  const { tags, ...forward } = body;
  const { input, instructions, stream, tools, previous_response_id, background, conversation, max_output_tokens } =
    forward;
  if (previous_response_id !== undefined && previous_response_id !== null) {
    return bad(
      'previous_response_id is not supported: this gateway keeps no responses (store is ignored); send the whole conversation in input, with store: false',
      'previous_response_id',
      'unsupported_parameter',
    );
  }
  if (conversation !== undefined && conversation !== null)
    return bad(
      'conversation is not supported: send the whole conversation in input',
      'conversation',
      'unsupported_parameter',
    );
  if (forward.prompt !== undefined && forward.prompt !== null)
    return bad(
      'prompt (a stored prompt template) is not supported: the templates live at OpenAI and this gateway keeps none; send the instructions and input themselves',
      'prompt',
      'unsupported_parameter',
    );
  if (background === true)
    return bad(
      'background responses are not supported: this gateway keeps no responses',
      'background',
      'unsupported_parameter',
    );
  if (typeof input !== 'string' && !Array.isArray(input))
    return bad('input is required: a string, or an array of input items', 'input');
  if (Array.isArray(input)) {
    if (input.length > MAX_ITEMS) return bad(`input holds more than ${MAX_ITEMS} items`, 'input');
    for (const [i, item] of input.entries()) {
      const at = `input[${i}]`;
      if (!isRecord(item)) return bad(`${at} must be an object`, at);
      if (item.type === 'item_reference') {
        return bad(
          `${at} is an item_reference: this gateway keeps no items; send the item itself (with the AI SDK: providerOptions.openai.store = false)`,
          at,
          'unsupported_parameter',
        );
      }
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
