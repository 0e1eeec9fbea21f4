import { describe, expect, it } from 'vitest';
import { COHERE_BATCH, type EmbeddingPlan, fromEmbeddingAnswers, toEmbeddingCalls } from './bedrock-embeddings.js';
import type { Refusal } from './provider.js';

/** The plan of a request that must be planned. */
function planOf(model: string, body: Record<string, unknown>): EmbeddingPlan {
  const plan = toEmbeddingCalls(model, body);
  if ('refused' in plan) throw new Error(`expected a plan, got ${plan.refused}`);
  return plan;
}

const TITAN = 'amazon.titan-embed-text-v2:0';
const COHERE = 'cohere.embed-english-v3';

describe('OpenAI embeddings -> InvokeModel bodies', () => {
  it('makes one Titan call per text, with dimensions and normalization', () => {
    const plan = planOf(TITAN, { model: TITAN, input: ['a b', 'c'], dimensions: 256 });
    expect(plan.calls).toEqual([
      { body: { inputText: 'a b', dimensions: 256, normalize: true }, count: 1 },
      { body: { inputText: 'c', dimensions: 256, normalize: true }, count: 1 },
    ]);
  });

  it('batches Cohere texts 96 at a time with search_document by default', () => {
    const input = Array.from({ length: 200 }, (_, i) => `text ${i}`);
    const plan = planOf(COHERE, { model: COHERE, input });
    expect(plan.calls.map((c) => c.count)).toEqual([COHERE_BATCH, COHERE_BATCH, 8]);
    expect(plan.calls[0]?.body).toMatchObject({ input_type: 'search_document', truncate: 'END' });
    const query = toEmbeddingCalls(COHERE, { model: COHERE, input: 'q', input_type: 'search_query' });
    expect((query as { calls: Array<{ body: unknown }> }).calls[0]?.body).toMatchObject({ input_type: 'search_query' });
  });

  it.each([
    [TITAN, { input: 'x', dimensions: 300 }, 'dimensions'],
    [COHERE, { input: 'x', dimensions: 512 }, 'dimensions'],
    [TITAN, { input: [[1, 2, 3]] }, 'input'],
    [TITAN, { input: ['ok', ''] }, 'input'],
    [TITAN, { input: 'x', input_type: 'search_query' }, 'input_type'],
    [COHERE, { input: 'x', input_type: 'poems' }, 'input_type'],
    [TITAN, { input: 'x', encoding_format: 'int8' }, 'encoding_format'],
    [TITAN, { input: 'x', truncate_prompt_tokens: 5 }, 'truncate_prompt_tokens'],
    ['amazon.nova-lite-v1:0', { input: 'x' }, 'model'],
  ] as const)('%s refuses %j naming %s (a 400 to the caller)', (model, body, param) => {
    const err = toEmbeddingCalls(model, { model, ...body });
    expect(err).toHaveProperty('refused');
    expect((err as Refusal).param).toBe(param);
  });
});

describe('InvokeModel answers -> OpenAI embeddings', () => {
  it('lists the vectors in input order with the tokens Bedrock counted', () => {
    const plan = planOf(TITAN, { model: TITAN, input: ['a b', 'c'] });
    const out = fromEmbeddingAnswers(
      plan,
      [
        { json: { embedding: [0.6, 0.8], inputTextTokenCount: 2 } },
        { json: { embedding: [1, 0], inputTextTokenCount: 1 } },
      ],
      TITAN,
    );
    expect(out).toEqual({
      body: {
        object: 'list',
        data: [
          { object: 'embedding', index: 0, embedding: [0.6, 0.8] },
          { object: 'embedding', index: 1, embedding: [1, 0] },
        ],
        model: TITAN,
        usage: { prompt_tokens: 3, total_tokens: 3 },
      },
    });
  });

  it('encodes base64 as little-endian float32, as OpenAI does (the SDKs ask for it by default)', () => {
    const plan = planOf(COHERE, { model: COHERE, input: ['a'], encoding_format: 'base64' });
    const out = fromEmbeddingAnswers(plan, [{ json: { embeddings: [[0.5, -0.25]] }, inputTokens: 1 }], COHERE);
    if (!('body' in out)) throw new Error(out.unreadable);
    const body = out.body as { data: Array<{ embedding: string }>; usage: { prompt_tokens: number } };
    const buf = Buffer.from(body.data[0]?.embedding ?? '', 'base64');
    expect([buf.readFloatLE(0), buf.readFloatLE(4)]).toEqual([0.5, -0.25]);
    expect(body.usage.prompt_tokens).toBe(1);
  });

  it('is unreadable (a 502 to the caller) when Bedrock answers with fewer vectors than texts', () => {
    const plan = planOf(COHERE, { model: COHERE, input: ['a', 'b'] });
    const out = fromEmbeddingAnswers(plan, [{ json: { embeddings: [[1]] } }], COHERE);
    expect(out).toEqual({ unreadable: `Bedrock answered ${COHERE} in a shape the gateway does not know` });
  });
});
