import { describe, expect, it } from 'vitest';
import type { GuardrailCalls, ServiceTarget } from '../checker.js';
import { perText } from './per-text.js';
import { presidioAnalyzer } from './presidio-analyzer.js';
import { compileService } from './services.js';

const noModels = () => Promise.reject(new Error('no models here'));
const callsWith = (post: GuardrailCalls['post']): GuardrailCalls => ({ chat: noModels, embed: noModels, post });

describe('a Presidio analyzer', () => {
  it("is asked as its REST API takes it, and its code-point offsets cut the found text out of JavaScript's string", async () => {
    const asked: [ServiceTarget, unknown][] = [];
    const text = '😀 write to ann@example.org, card 4111 1111 1111 1111';
    const ask = presidioAnalyzer({ url: 'http://presidio:3000/', entities: ['EMAIL_ADDRESS', 'CREDIT_CARD'] });
    const points = Array.from(text);
    const at = (s: string) => points.join('').indexOf(s); // no astral character after the emoji
    const emailStart = Array.from(text.slice(0, at('ann@'))).length;
    const cardStart = Array.from(text.slice(0, at('4111'))).length;
    const verdict = await ask(
      text,
      'request',
      callsWith(async (to, body) => {
        asked.push([to, body]);
        return [
          { entity_type: 'EMAIL_ADDRESS', start: emailStart, end: emailStart + 15, score: 1 },
          { entity_type: 'CREDIT_CARD', start: cardStart, end: cardStart + 19, score: 1 },
          { entity_type: 'BROKEN', start: 5, end: 500, score: 1 },
        ];
      }),
      AbortSignal.timeout(1000),
    );
    expect(asked).toEqual([
      [
        { url: 'http://presidio:3000/analyze' },
        { text, language: 'en', score_threshold: 0.5, entities: ['EMAIL_ADDRESS', 'CREDIT_CARD'] },
      ],
    ]);
    expect(verdict).toEqual({
      whole: [],
      found: [
        { text: 'ann@example.org', category: 'EmailAddress' },
        { text: '4111 1111 1111 1111', category: 'CreditCard' },
      ],
    });
  });
});

describe('a service asked about each text', () => {
  const flagging = (asked: string[], delayMs = 0) =>
    perText({ name: 's', timeoutMs: 500, onFailure: 'Allow', local: true, leaves: false }, async (text) => {
      asked.push(text);
      if (delayMs) await new Promise((r) => setTimeout(r, delayMs));
      return { whole: text.includes('bad') ? ['Bad'] : [], found: [] };
    });

  it('asks about each distinct text once, skips blank ones, and remembers verdicts for the next request', async () => {
    const asked: string[] = [];
    const service = flagging(asked);
    const calls = callsWith(noModels);
    expect(await service.check(['hello', 'hello', '  ', 'bad one'], 'request', calls)).toEqual({
      whole: ['Bad'],
      found: [],
    });
    expect(await service.check(['hello', 'bad one', 'new'], 'request', calls)).toEqual({ whole: ['Bad'], found: [] });
    // An answer's text is asked about apart from the same text in a request.
    await service.check(['hello'], 'answer', calls);
    expect(asked).toEqual(['hello', 'bad one', 'new', 'hello']);
  });

  it('asks once about a text two requests carry at the same time', async () => {
    const asked: string[] = [];
    const service = flagging(asked, 20);
    const calls = callsWith(noModels);
    const both = await Promise.all([
      service.check(['the shared system prompt', 'bad one'], 'request', calls),
      service.check(['the shared system prompt', 'another'], 'request', calls),
    ]);
    expect(both).toEqual([
      { whole: ['Bad'], found: [] },
      { whole: [], found: [] },
    ]);
    expect(asked.sort()).toEqual(['another', 'bad one', 'the shared system prompt']);
  });

  it('asks at most 4 at a time', async () => {
    let now = 0;
    let most = 0;
    const service = perText(
      { name: 's', timeoutMs: 2000, onFailure: 'Allow', local: true, leaves: false },
      async () => {
        most = Math.max(most, ++now);
        await new Promise((r) => setTimeout(r, 5));
        now--;
        return { whole: [], found: [] };
      },
    );
    const texts = Array.from({ length: 20 }, (_, i) => `text ${i}`);
    await service.check(texts, 'request', callsWith(noModels));
    expect(most).toBe(4);
  });

  it('fails as a whole when a text fails or the time is up, and asks nothing more', async () => {
    const asked: string[] = [];
    const failing = perText(
      { name: 's', timeoutMs: 500, onFailure: 'Block', local: true, leaves: false },
      async (text) => {
        asked.push(text);
        throw new Error('the service answered 403 (AccessDeniedException)');
      },
    );
    const texts = Array.from({ length: 12 }, (_, i) => `t${i}`);
    expect(await failing.check(texts, 'request', callsWith(noModels))).toEqual({
      failed: 'the service answered 403 (AccessDeniedException)',
    });
    expect(asked.length).toBeLessThanOrEqual(4);
    const slow = perText(
      { name: 's', timeoutMs: 100, onFailure: 'Allow', local: true, leaves: false },
      (_t, _w, _c, signal) =>
        new Promise((_, reject) => signal.addEventListener('abort', () => reject(new Error('aborted')))),
    );
    expect(await slow.check(['a'], 'request', callsWith(noModels))).toEqual({ failed: 'no answer within 0.1s' });
  });

  it('is made from the spec’s one kind, named service/<name>, Allow by default', () => {
    const c = compileService({ name: 'pii', presidio: { url: 'http://p:3000' } });
    expect([c?.name, c?.onFailure]).toEqual(['service/pii', 'Allow']);
    expect(compileService({ name: 'none' })).toBeUndefined();
  });
});
