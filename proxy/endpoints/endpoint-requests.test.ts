import { describe, expect, it } from 'vitest';
import { parseCompletionRequest, parseEmbeddingRequest } from './endpoint-requests.js';
import { ProxyError } from './errors.js';

const ok = <T>(r: T | ProxyError): T => {
  if (r instanceof ProxyError) throw new Error(r.message);
  return r;
};
const refused = (r: unknown) => {
  if (!(r instanceof ProxyError)) throw new Error(`accepted ${JSON.stringify(r)}`);
  return r;
};

describe('parseCompletionRequest', () => {
  it.each([
    ['a string', 'Once upon a time'],
    ['an empty string', ''],
    ['an array of strings', ['a', 'b', 'c']],
    ['an array of token ids', [1, 2, 3]],
    ['an array of token-id arrays', [[1, 2], [3]]],
    // What the spec allows and the upstream may refuse (its refusal reaches the caller).
    ['null (the spec default)', null],
    ['an empty array of strings', []],
    ['a negative token id', [1, -2]],
  ])('takes a prompt that is %s, forwarded as sent', (_name, prompt) => {
    expect(ok(parseCompletionRequest({ model: 'm', prompt })).forward.prompt).toEqual(prompt);
  });

  it.each([
    ['absent', undefined],
    ['a number', 5],
    ['mixed strings and ids', ['a', 1]],
    ['an empty token-id array', [[1], []]],
    ['more than 2,048 prompts', Array.from({ length: 2049 }, () => 'x')],
  ])('refuses a prompt that is %s with 400 naming prompt', (_name, prompt) => {
    const e = refused(parseCompletionRequest({ model: 'm', prompt }));
    expect(e).toMatchObject({ status: 400, param: 'prompt', code: 'invalid_prompt' });
    expect(e.message).toContain('a string, an array of strings, an array of token ids, an array of token-id arrays');
  });

  it('takes n from 1 to 128 and forwards it; refuses others naming n', () => {
    expect(ok(parseCompletionRequest({ model: 'm', prompt: 'x', n: 4 })).forward.n).toBe(4);
    for (const n of [0, 129, 2.5, 'two']) {
      expect(refused(parseCompletionRequest({ model: 'm', prompt: 'x', n }))).toMatchObject({
        status: 400,
        param: 'n',
      });
    }
  });
});

describe('parseEmbeddingRequest', () => {
  it('takes dimensions from 1 to 65,536', () => {
    expect(ok(parseEmbeddingRequest({ model: 'm', input: 'x', dimensions: 65_536 })).forward.dimensions).toBe(65_536);
    expect(ok(parseEmbeddingRequest({ model: 'm', input: 'x', dimensions: 1 })).forward.dimensions).toBe(1);
  });

  it.each([
    ['ten million', 10_000_000],
    ['65,537', 65_537],
    ['zero', 0],
    ['negative', -5],
    ['fractional', 2.5],
    ['a string', '256'],
  ])('refuses dimensions %s with 400 naming dimensions and the maximum', (_name, dimensions) => {
    const e = refused(parseEmbeddingRequest({ model: 'm', input: 'x', dimensions }));
    expect(e).toMatchObject({ status: 400, param: 'dimensions', code: 'invalid_dimensions' });
    expect(e.message).toContain('from 1 to 65536');
  });
});
