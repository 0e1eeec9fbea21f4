import { describe, expect, it } from 'vitest';
import { parseChatRequest } from './chat-request.js';
import { ProxyError } from './errors.js';

const valid = { model: 'llama3.1:8b', messages: [{ role: 'user', content: 'hi' }] };

describe('parseChatRequest', () => {
  it('keeps every field but tags for the upstream, and reads stream and include_usage', () => {
    const r = parseChatRequest({
      ...valid,
      tags: ['team:ml'],
      stream: true,
      stream_options: { include_usage: true },
      temperature: 0.2,
      top_p: 0.9,
      max_tokens: 10,
      stop: ['\n'],
      user: 'u1',
      seed: 7,
    });
    if (r instanceof ProxyError) throw r;
    expect(r).toMatchObject({ model: 'llama3.1:8b', stream: true, includeUsage: true, tags: ['team:ml'] });
    expect(r.forward).toEqual({
      model: 'llama3.1:8b',
      messages: valid.messages,
      stream: true,
      stream_options: { include_usage: true },
      temperature: 0.2,
      top_p: 0.9,
      max_tokens: 10,
      stop: ['\n'],
      user: 'u1',
      seed: 7,
    });
  });

  it('accepts the content-part array form', () => {
    const r = parseChatRequest({
      model: 'm',
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'what is this?' },
            { type: 'image_url', image_url: { url: 'data:image/png;base64,AAAA' } },
          ],
        },
      ],
    });
    expect(r).not.toBeInstanceOf(ProxyError);
  });

  it.each([
    ['not an object', [1, 2], 'the request body must be a JSON object'],
    ['no model', { messages: valid.messages }, 'model is required'],
    ['no messages', { model: 'm' }, 'messages must be a non-empty array'],
    ['empty messages', { model: 'm', messages: [] }, 'messages must be a non-empty array'],
    ['bad role', { model: 'm', messages: [{ role: 'wizard', content: 'x' }] }, 'messages[0].role must be one of'],
    ['missing content', { model: 'm', messages: [{ role: 'user' }] }, 'messages[0].content is required'],
    [
      'numeric content',
      { model: 'm', messages: [{ role: 'user', content: 5 }] },
      'messages[0].content must be a string',
    ],
    [
      'bad part',
      { model: 'm', messages: [{ role: 'user', content: [{ type: 'text' }] }] },
      'messages[0].content[0].text must be a string',
    ],
    ['stream not boolean', { ...valid, stream: 'yes' }, 'stream must be a boolean'],
    ['n 0', { ...valid, n: 0 }, 'n must be a whole number from 1 to 128'],
    ['n above 128', { ...valid, n: 129 }, 'n must be a whole number from 1 to 128'],
    ['n not whole', { ...valid, n: 1.5 }, 'n must be a whole number from 1 to 128'],
    ['n a string', { ...valid, n: '2' }, 'n must be a whole number from 1 to 128'],
  ])('rejects %s with 400', (_name, body, message) => {
    const r = parseChatRequest(body);
    expect(r).toBeInstanceOf(ProxyError);
    expect(r instanceof ProxyError && r.status).toBe(400);
    expect(r instanceof ProxyError && r.message).toContain(message);
  });

  it('takes n from 1 to 128 (and null, the default) and forwards it as asked', () => {
    for (const n of [1, 3, 128]) {
      const r = parseChatRequest({ ...valid, n });
      if (r instanceof ProxyError) throw r;
      expect(r.forward.n).toBe(n);
    }
    const none = parseChatRequest({ ...valid, n: null });
    if (none instanceof ProxyError) throw none;
    expect(none.forward.n).toBeNull();
  });
});
