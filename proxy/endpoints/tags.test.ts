import { describe, expect, it } from 'vitest';
import { ProxyError } from './errors.js';
import { formatTag, parseTags } from './tags.js';

const ok = (sources: Parameters<typeof parseTags>[0]) => {
  const r = parseTags(sources);
  if (r instanceof ProxyError) throw new Error(r.message);
  return r.map(formatTag);
};
const fail = (sources: Parameters<typeof parseTags>[0]) => {
  const r = parseTags(sources);
  if (!(r instanceof ProxyError)) throw new Error(`accepted ${JSON.stringify(r)}`);
  return r;
};

describe('parseTags', () => {
  it('merges X-Tags, X-Gateway-Tags and body tags in that order, trimmed and de-duplicated', () => {
    expect(
      ok({
        xTags: ' team:ml , project:chatbot',
        xGatewayTags: 'environment:prod,team:ml',
        body: ['project:chatbot', 'cost-center:42 '],
      }),
    ).toEqual(['team:ml', 'project:chatbot', 'environment:prod', 'cost-center:42']);
  });

  it('takes X-LiteLLM-Tags (where the CLI sends them) after X-Gateway-Tags, de-duplicated across all three headers', () => {
    expect(
      ok({
        xTags: 'team:ml',
        xGatewayTags: 'env:prod',
        xLitellmTags: ' team:ml, agent:cli ,env:prod,',
        body: ['agent:cli', 'project:x'],
      }),
    ).toEqual(['team:ml', 'env:prod', 'agent:cli', 'project:x']);
    expect(ok({ xLitellmTags: 'app:notebook' })).toEqual(['app:notebook']);
  });

  it('checks X-LiteLLM-Tags like the other headers, naming it in the error', () => {
    const err = fail({ xLitellmTags: 'agent:cli,bad' });
    expect(err).toMatchObject({ status: 400, param: 'tags', code: 'invalid_tag' });
    expect(err.message).toBe('tag "bad" from header X-LiteLLM-Tags is not of the form key:value');
    const many = Array.from({ length: 6 }, (_, i) => `l${i}:x`).join(',');
    const five = Array.from({ length: 5 }, (_, i) => `t${i}:x`).join(',');
    expect(fail({ xTags: five, xLitellmTags: many }).message).toBe(
      'too many tags: 11 after merging, at most 10 allowed',
    );
  });

  it('splits at the first colon, so values may hold colons', () => {
    expect(ok({ xTags: 'url:https://example.com:8080/x' })).toEqual(['url:https://example.com:8080/x']);
  });

  it('accepts no tags at all and skips empty header items', () => {
    expect(ok({})).toEqual([]);
    expect(ok({ xTags: '', xGatewayTags: 'a:b,' })).toEqual(['a:b']);
    // Body "tags": null is absent, like OpenAI's other null optional fields.
    expect(ok({ xTags: 'a:b', body: null })).toEqual(['a:b']);
  });

  it('accepts the limits exactly: 64-character keys and values, 10 tags', () => {
    const k = 'k'.repeat(64);
    const v = 'v'.repeat(64);
    expect(ok({ xTags: `${k}:${v}` })).toEqual([`${k}:${v}`]);
    const ten = Array.from({ length: 10 }, (_, i) => `t${i}:x`);
    expect(ok({ body: ten })).toHaveLength(10);
    expect(ok({ xTags: 'name:John Smith' })).toEqual(['name:John Smith']);
  });

  it.each([
    ['no colon', { xTags: 'team' }, 'tag "team" from header X-Tags is not of the form key:value'],
    ['empty key', { xTags: ':ml' }, 'tag ":ml" from header X-Tags: the key must be'],
    ['empty value', { body: ['team:'] }, 'tag "team:" from body tags[0]: the value must be'],
    ['bad key character', { xGatewayTags: 'te am:ml' }, 'tag "te am:ml" from header X-Gateway-Tags: the key must be'],
    ['key too long', { xTags: `${'k'.repeat(65)}:v` }, 'the key must be 1-64'],
    ['value too long', { xTags: `k:${'v'.repeat(65)}` }, 'the value must be 1-64'],
    ['non-ASCII value', { body: ['team:müller'] }, 'printable ASCII'],
    ['control character', { body: ['team:a\u0007b'] }, 'printable ASCII'],
    ['inner leading space', { body: ['team: ml'] }, 'without leading or trailing spaces'],
    ['comma in a body value', { body: ['team:a,b'] }, "without ','"],
    ['body not an array', { body: 'team:ml' }, 'tags must be an array'],
    ['body item not a string', { body: ['a:b', 3] }, 'tags[1] must be a string'],
  ])('rejects %s with a 400 naming the tag', (_name, sources, message) => {
    const err = fail(sources);
    expect(err.status).toBe(400);
    expect(err.param).toBe('tags');
    expect(err.message).toContain(message);
  });

  it('rejects more than 10 tags after merging, and floods before parsing them', () => {
    const eleven = Array.from({ length: 11 }, (_, i) => `t${i}:x`);
    expect(fail({ body: eleven }).message).toBe('too many tags: 11 after merging, at most 10 allowed');
    // Duplicates do not count against the limit.
    expect(ok({ body: [...Array.from({ length: 10 }, (_, i) => `t${i}:x`), 't0:x'] })).toHaveLength(10);
    const flood = Array.from({ length: 10_000 }, (_, i) => `t${i}:x`).join(',');
    expect(fail({ xTags: flood }).code).toBe('too_many_tags');
  });

  it('clips a huge offending tag in the message', () => {
    const err = fail({ xTags: 'x'.repeat(100_000) });
    expect(err.message.length).toBeLessThan(200);
  });
});
