import type { CallerDialect, Dialect } from '../endpoints/dialects.js';
import { ProxyError } from '../endpoints/errors.js';
import { anthropicMessagesToOpenaiChat } from './anthropic-messages_openai-chat.js';
import { openaiChatToAnthropicMessages } from './openai-chat_anthropic-messages.js';
import { openaiChatToBedrockConverse } from './openai-chat_bedrock-converse.js';
import { openaiResponsesToOpenaiChat } from './openai-responses_openai-chat.js';
import type { Translator } from './translator.js';

/**
 * Every translator, by (caller's dialect, upstream's dialect). A pair absent here is served by
 * upstreams that speak the caller's dialect natively, or through two translators that meet in
 * a dialect between (Responses -> chat -> Anthropic Messages, for a Responses caller of a Claude
 * model at Anthropic; Responses or Anthropic -> chat -> Converse, for a caller of a Bedrock text
 * model); elsewhere it is one 400 from the pipeline. Adding a dialect pair is a
 * file beside these and a row here.
 */
const TRANSLATORS: readonly Translator[] = [
  openaiResponsesToOpenaiChat,
  anthropicMessagesToOpenaiChat,
  openaiChatToAnthropicMessages,
  openaiChatToBedrockConverse,
];

const byPair = new Map(TRANSLATORS.map((t) => [`${t.from}>${t.to}`, t]));

/** Two translators, one after the other: the request through both, the answer back through both. */
function chain(first: Translator, second: Translator): Translator {
  return {
    from: first.from,
    to: second.to,
    begin(body, stream, served) {
      const a = first.begin(body, stream, served);
      if (a instanceof ProxyError) return a;
      const b = second.begin(a.body, stream, served);
      if (b instanceof ProxyError) return b;
      return {
        body: b.body,
        wantsUsage: b.wantsUsage,
        json: (answer) => a.json(b.json(answer)),
        stream: (upstream, outcome) => a.stream(b.stream(upstream, outcome), outcome),
      };
    },
  };
}

const chained = new Map<string, Translator | undefined>();

export function translatorFor(from: CallerDialect, to: Dialect): Translator | undefined {
  const direct = byPair.get(`${from}>${to}`);
  if (direct) return direct;
  const key = `${from}>${to}`;
  if (!chained.has(key)) {
    const first = TRANSLATORS.find((t) => t.from === from && byPair.has(`${t.to}>${to}`) && t.to !== to);
    const second = first ? byPair.get(`${first.to}>${to}`) : undefined;
    chained.set(key, first && second && first.from !== to ? chain(first, second) : undefined);
  }
  return chained.get(key);
}
