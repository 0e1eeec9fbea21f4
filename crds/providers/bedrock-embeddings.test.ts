import { describe, expect, it } from 'vitest';
import { ProxyError } from '../endpoints/errors.js';
import { COHERE_BATCH, fromEmbeddingAnswers, toEmbeddingCalls } from './bedrock-embeddings.js';

const TITAN = 'amazon.titan-embed-text-v2:0';
const COHERE = 'cohere.embed-english-v3';

describe('OpenAI embeddings -> InvokeModel bodies', () => {
  it('makes one Titan call per text, with dimensions and normalization', () => {
    const plan = toEmbeddingCalls(TITAN, { model: TITAN, input: ['a b', 'c'], dimensions: 256 });
    if (plan instanceof ProxyError) throw plan;
    expect(plan.calls).toEqual([
      { body: { inputText: 'a b', dimensions: 256, normalize: true }, count: 1 },
      { body: { inputText: 'c', dimensions: 256, normalize: true }, count: 1 },
    ]);
  });

  it('batches Cohere texts 96 at a time with search_document by default', () => {
    const input = Array.from({ length: 200 }, (_, i) => `text ${i}`);
    const plan = toEmbeddingCalls(COHERE, { model: COHERE, input });
    if (plan instanceof ProxyError) throw plan;
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
  ] as const)('%s refuses %j naming %s', (model, body, param) => {
    const err = toEmbeddingCalls(model, { model, ...body });
    expect(err).toBeInstanceOf(ProxyError);
    expect((err as ProxyError).status).toBe(400);
    expect((err as ProxyError).param).toBe(param);
  });
});

describe('InvokeModel answers -> OpenAI embeddings', () => {
  it('lists the vectors in input order with the tokens Bedrock counted', () => {
    const plan = toEmbeddingCalls(TITAN, { model: TITAN, input: ['a b', 'c'] });
    if (plan instanceof ProxyError) throw plan;
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
      usage: { promptTokens: 3, completionTokens: 0 },
    });
  });

  it('encodes base64 as little-endian float32, as OpenAI does (the SDKs ask for it by default)', () => {
    const plan = toEmbeddingCalls(COHERE, { model: COHERE, input: ['a'], encoding_format: 'base64' });
    if (plan instanceof ProxyError) throw plan;
    const out = fromEmbeddingAnswers(plan, [{ json: { embeddings: [[0.5, -0.25]] }, inputTokens: 1 }], COHERE);
    if (out instanceof ProxyError) throw out;
    const encoded = (out.body as { data: Array<{ embedding: string }> }).data[0]?.embedding ?? '';
    const buf = Buffer.from(encoded, 'base64');
    expect([buf.readFloatLE(0), buf.readFloatLE(4)]).toEqual([0.5, -0.25]);
    expect(out.usage.promptTokens).toBe(1);
  });

  it('is a 502 when Bedrock answers with fewer vectors than texts', () => {
    const plan = toEmbeddingCalls(COHERE, { model: COHERE, input: ['a', 'b'] });
    if (plan instanceof ProxyError) throw plan;
    const out = fromEmbeddingAnswers(plan, [{ json: { embeddings: [[1]] } }], COHERE);
    expect((out as ProxyError).status).toBe(502);
  });
});
