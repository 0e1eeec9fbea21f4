import type { CallerDialect } from '../../crds/constants.js';
import { anthropicContent, content, each, field, type MapText, str } from './request-texts.js';

/**
 * Where each dialect's whole answer carries text the model wrote: its messages and the arguments
 * of the tools it calls. As REQUEST_TEXTS, each entry maps every such text through `f` and returns
 * the answer, the same object where nothing changed. An embeddings answer has none.
 */
export const ANSWER_TEXTS: Readonly<Record<CallerDialect, (body: unknown, f: MapText) => unknown>> = {
  'openai-chat': (body, f) =>
    field(body, 'choices', (cs) =>
      each(cs, (c) =>
        field(c, 'message', (m) =>
          field(
            field(m, 'content', (x) => str(x, f)),
            'tool_calls',
            (calls) => each(calls, (call) => field(call, 'function', (fn) => field(fn, 'arguments', (a) => str(a, f)))),
          ),
        ),
      ),
    ),
  'openai-responses': (body, f) => field(body, 'output', (items) => each(items, (item) => responseItem(item, f))),
  'anthropic-messages': (body, f) => field(body, 'content', (c) => anthropicContent(c, f)),
  'openai-completions': (body, f) =>
    field(body, 'choices', (cs) => each(cs, (c) => field(c, 'text', (t) => str(t, f)))),
  'openai-embeddings': (body) => body,
};

/** A Responses output item: a message's parts, a function call's arguments. */
const responseItem = (item: unknown, f: MapText): unknown =>
  field(
    field(item, 'content', (c) => content(c, f)),
    'arguments',
    (a) => str(a, f),
  );
