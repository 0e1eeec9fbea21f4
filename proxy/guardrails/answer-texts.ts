import type { CallerDialect } from '../../crds/constants.js';
import { anthropicContent, chatMessage, each, field, type MapText, responsesItem, str } from './request-texts.js';

/**
 * Where each dialect's whole answer carries text the model wrote: its messages, refusals and
 * reasoning, and the arguments of the tools it calls. As REQUEST_TEXTS, each entry maps every such
 * text through `f` and returns the answer, the same object where nothing changed. An embeddings
 * answer has none. Log probabilities spell the answer out token by token, where a redaction
 * cannot follow them: an answer a guardrail checks leaves without them (withheld).
 */
export const ANSWER_TEXTS: Readonly<Record<CallerDialect, (body: unknown, f: MapText) => unknown>> = {
  'openai-chat': (body, f) =>
    field(body, 'choices', (cs) => each(cs, (c) => withheld(field(c, 'message', (m) => chatMessage(m, f))))),
  'openai-responses': (body, f) =>
    field(body, 'output', (items) =>
      each(items, (item) => field(responsesItem(item, f), 'content', (parts) => each(parts, withheldParts))),
    ),
  'anthropic-messages': (body, f) => field(body, 'content', (c) => anthropicContent(c, f)),
  'openai-completions': (body, f) =>
    field(body, 'choices', (cs) => each(cs, (c) => withheld(field(c, 'text', (t) => str(t, f))))),
  'openai-embeddings': (body) => body,
};

/** A choice without its log probabilities. */
const withheld = (c: unknown): unknown => field(c, 'logprobs', (l) => (l === null ? l : null));

/** An output_text part without its log probabilities. */
const withheldParts = (p: unknown): unknown =>
  field(p, 'logprobs', (l) => (Array.isArray(l) && l.length === 0 ? l : []));
