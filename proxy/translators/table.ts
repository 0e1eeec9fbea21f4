import type { Dialect } from '../dialects.js';
import { anthropicMessagesToOpenaiChat } from './anthropic-messages_openai-chat.js';
import { openaiResponsesToOpenaiChat } from './openai-responses_openai-chat.js';
import type { Translator } from './translator.js';

/**
 * Every translator, by (caller's dialect, upstream's dialect). A pair absent here is served only
 * by upstreams that speak the caller's dialect natively; elsewhere it is one 400 from the
 * pipeline. Adding a dialect pair is a file beside these and a row here.
 */
const TRANSLATORS: readonly Translator[] = [openaiResponsesToOpenaiChat, anthropicMessagesToOpenaiChat];

const byPair = new Map(TRANSLATORS.map((t) => [`${t.from}>${t.to}`, t]));

export const translatorFor = (from: Dialect, to: Dialect): Translator | undefined => byPair.get(`${from}>${to}`);
