import { describe, expect, it } from 'vitest';
import { ProxyError } from '../endpoints/errors.js';
import { ApiKeys, authenticate, sha256 } from './auth.js';

describe('ApiKeys', () => {
  const keys = ApiKeys.parse(
    ['# gateway keys', 'sk-alpha', '', `sha256:${sha256('sk-beta').toString('hex')}`].join('\n'),
  );

  it('accepts keys given in clear text and as SHA-256 digests, and nothing else', () => {
    expect(keys.size).toBe(2);
    expect(keys.verify('sk-alpha')?.keyHashPrefix).toBe(sha256('sk-alpha').toString('hex').slice(0, 12));
    expect(keys.verify('sk-beta')).toBeDefined();
    expect(keys.verify('sk-gamma')).toBeUndefined();
    expect(keys.verify('')).toBeUndefined();
    expect(keys.verify(`sha256:${sha256('sk-beta').toString('hex')}`)).toBeUndefined();
  });

  it('takes X-API-Key or a Bearer token, and answers 401 without or with a wrong key', async () => {
    expect(await authenticate(keys, { apiKey: 'sk-alpha' })).not.toBeInstanceOf(ProxyError);
    expect(await authenticate(keys, { authorization: 'Bearer sk-beta' })).not.toBeInstanceOf(ProxyError);
    expect(await authenticate(keys, { authorization: 'bearer   sk-beta ' })).not.toBeInstanceOf(ProxyError);
    const missing = await authenticate(keys, {});
    expect(missing instanceof ProxyError && [missing.status, missing.code]).toEqual([401, 'missing_api_key']);
    const wrong = await authenticate(keys, { authorization: 'Basic c2stYWxwaGE=' });
    expect(wrong instanceof ProxyError && wrong.code).toBe('missing_api_key');
    const bad = await authenticate(keys, { apiKey: 'sk-wrong' });
    expect(bad instanceof ProxyError && [bad.status, bad.code]).toEqual([401, 'invalid_api_key']);
    expect(bad instanceof ProxyError && bad.message).not.toContain('sk-wrong');
  });

  it('swaps the key set in place', () => {
    const live = ApiKeys.fromKeys(['old']);
    live.replace(ApiKeys.fromKeys(['new']));
    expect(live.verify('old')).toBeUndefined();
    expect(live.verify('new')).toBeDefined();
  });
});
