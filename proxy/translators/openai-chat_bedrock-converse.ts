import { isRecord } from '../../crds/is-record.js';
import { ProxyError } from '../endpoints/errors.js';
import type { ConverseAnswer } from '../upstreams/bedrock-converse.js';
import { EventStreamRelay } from '../upstreams/event-stream.js';
import { jsonMode, toConverseInput } from './openai-chat_bedrock-converse-request.js';
import { fromConverseOutput } from './openai-chat_bedrock-converse-response.js';
import { ConverseStreamTranslator } from './openai-chat_bedrock-converse-stream.js';
import type { Translation, Translator } from './translator.js';

/**
 * OpenAI's chat completions for Bedrock's text models, which speak Converse: the request as a
 * Converse body (-request.ts: messages, tools, JSON mode as a forced tool, reasoning as
 * Anthropic's thinking, cache points, each model family's limits), the answer as a chat
 * completion (-response.ts), the stream as chat chunks (-stream.ts). Responses and Anthropic
 * callers of a model that speaks only Converse come through chat (proxy/translators/table.ts
 * chains them).
 *
 * The stream is an AWS event stream, not SSE: its relay (proxy/upstreams/event-stream.ts)
 * decodes each event once and hands it, parsed, to this translator's per-event function
 * (ConverseStreamTranslator), whose chunks go straight to the caller. Nothing of it is written as
 * text to be parsed again here, which would double the per-event cost of the long streams the
 * gateway holds by the thousand.
 */

const completionId = () => `chatcmpl-${Math.random().toString(36).slice(2, 14)}`;

export const openaiChatToBedrockConverse: Translator = {
  from: 'openai-chat',
  to: 'bedrock-converse',
  begin(body, _stream, served): Translation | ProxyError {
    const model = served?.id ?? (typeof body.model === 'string' ? body.model : '');
    const input = toConverseInput(model, body, { baseModel: served?.base ?? model });
    if (input instanceof ProxyError) return input;
    const json = jsonMode(input);
    const id = completionId();
    const created = Math.floor(Date.now() / 1000);
    const includeUsage = isRecord(body.stream_options) && body.stream_options.include_usage === true;
    return {
      body: { ...input },
      // Converse streams its usage always: nothing to ask of it.
      wantsUsage: false,
      json: (answer) => fromConverseOutput(answer as ConverseAnswer, model, id, created, json).body,
      stream: (upstream) => {
        if (!(upstream instanceof EventStreamRelay)) {
          throw new Error(`a Converse stream of ${model} came as something other than an AWS event stream`);
        }
        return upstream.through(new ConverseStreamTranslator(model, id, created, includeUsage, json));
      },
    };
  },
};
