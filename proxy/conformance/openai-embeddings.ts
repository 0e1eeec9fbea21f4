import { eachRecord, edited, filled, ifRecord, type Json } from './shape.js';

/** OpenAI's embeddings list (CreateEmbeddingResponse): each embedding's object and index, the usage's two counts. */
export const embeddingList = (body: Json): Json =>
  edited(
    edited(filled(body, { object: 'list', data: [] }), 'data', (list) =>
      eachRecord(list, (e) => filled(e, { object: 'embedding' })),
    ),
    'usage',
    ifRecord((u) =>
      filled(u, { prompt_tokens: 0, total_tokens: typeof u.prompt_tokens === 'number' ? u.prompt_tokens : 0 }),
    ),
  );
