import { eachRecord, edited, filled, ifRecord, type Json } from './shape.js';

/** Each embedding's object, and its index where a server left it out: its place in the list. */
function embeddings(list: unknown): unknown {
  let at = 0;
  return eachRecord(list, (e) => filled(e, { object: 'embedding', index: at++ }));
}

const usage = ifRecord((u) =>
  filled(u, { prompt_tokens: 0, total_tokens: typeof u.prompt_tokens === 'number' ? u.prompt_tokens : 0 }),
);

/** OpenAI's embeddings list (CreateEmbeddingResponse): each embedding's object and index, the usage's two counts. */
export const embeddingList = (body: Json): Json =>
  edited(
    edited(
      filled(body, { object: 'list', data: [], usage: { prompt_tokens: 0, total_tokens: 0 } }),
      'data',
      embeddings,
    ),
    'usage',
    usage,
  );
