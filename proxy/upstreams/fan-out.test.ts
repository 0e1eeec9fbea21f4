import { describe, expect, it } from 'vitest';
import { ProxyError } from '../endpoints/errors.js';
import type { RouteEntry } from '../serving/routes.js';
import { translatorFor } from '../translators/table.js';
import type { Backends } from './backend.js';
import type { ChunkSource } from './chunk-source.js';
import { fanOut, manyAnswersOf, mergeWhole, type Part, partsOf, sumJson, sumUsage } from './fan-out.js';
import { mergedStream } from './fan-out-stream.js';
import type { ManyAnswers } from './openai-compatible-dialects.js';
import type { StreamOutcome, UpstreamCall, UpstreamResult } from './upstream.js';

const NONE: ManyAnswers = { choices: false, promptLists: false, tokenPrompts: false };
const ALL: ManyAnswers = { choices: true, promptLists: true, tokenPrompts: true };
const CHOICES_ONLY: ManyAnswers = { choices: true, promptLists: false, tokenPrompts: false };

/** Each part's body and where its choice 0 and 1 go. */
const plan = (parts: Part[] | ProxyError | undefined) => {
  if (!Array.isArray(parts)) throw new Error(`no parts: ${String(parts)}`);
  return parts.map((p) => ({ prompt: p.body.prompt, n: p.body.n, at: [p.index(0), p.index(1)] }));
};

describe("manyAnswersOf: what a route's server takes natively, as data", () => {
  const backends = (system: string | undefined) =>
    ({
      'in-cluster': { who: () => ({ label: 'in-cluster', ...(system ? { system } : {}) }) },
      external: { who: () => ({ label: 'external', ...(system ? { system } : {}) }) },
      unavailable: { who: () => ({ label: 'unavailable' }) },
    }) as unknown as Backends;
  const route = { kind: 'in-cluster', model: 'm', baseUrl: 'http://x', provider: 'ns/m' } as RouteEntry;

  it.each([
    ['vllm', 'openai-completions', true],
    ['vllm', 'openai-chat', true],
    ['openai', 'openai-chat', true],
    ['azure.ai.openai', 'openai-completions', true],
    ['ollama', 'openai-chat', false],
    ['openai_compatible', 'openai-chat', false],
    ['aws.bedrock', 'openai-chat', false],
  ] as const)('%s, %s: native %s', (system, dialect, native) => {
    const { takes } = manyAnswersOf(backends(system), { route, plan: { dialect } });
    expect(takes).toEqual(native ? ALL : NONE);
  });

  it('through a translator, nothing: the caller dialect is the translator own', () => {
    const translator = translatorFor('openai-chat', 'anthropic-messages');
    if (!translator) throw new Error('no translator');
    expect(manyAnswersOf(backends('openai'), { route, plan: { dialect: 'anthropic-messages', translator } })).toEqual({
      dialect: 'openai-chat',
      takes: NONE,
    });
  });
});

describe('fanOut: the hook of the call stage', () => {
  const backendsOf = (system: string) =>
    ({
      'in-cluster': { who: () => ({ label: 'in-cluster', system }) },
      external: { who: () => ({ label: 'external', system }) },
      unavailable: { who: () => ({ label: 'unavailable' }) },
    }) as unknown as Backends;
  const route = { kind: 'in-cluster', model: 'm', baseUrl: 'http://x', provider: 'ns/m' } as RouteEntry;
  const whole = (n: number) => ({
    body: { model: 'm', messages: [{ role: 'user', content: 'hi' }], n },
    stream: false,
    clientWantsUsage: false,
    signal: new AbortController().signal,
  });
  const answer = (text: string) =>
    json(
      { id: text, object: 'chat.completion', choices: [{ index: 0, message: { role: 'assistant', content: text } }] },
      { promptTokens: 2, completionTokens: 1 },
    );

  it('sends n as asked, in one call, to a server that takes it (vLLM)', async () => {
    const sent: unknown[] = [];
    await fanOut(backendsOf('vllm'), { route, plan: { dialect: 'openai-chat' } }, whole(3), async (c) => {
      sent.push(c.body);
      return answer('x');
    });
    expect(sent).toEqual([{ model: 'm', messages: [{ role: 'user', content: 'hi' }], n: 3 }]);
  });

  it('on a server of one choice (Ollama), makes n calls and answers once, usage summed', async () => {
    let k = 0;
    const result = await fanOut(backendsOf('ollama'), { route, plan: { dialect: 'openai-chat' } }, whole(4), async () =>
      answer(`a${k++}`),
    );
    if (result.kind !== 'json') throw new Error('stream');
    expect((result.body as { choices: Array<{ index: number }> }).choices.map((c) => c.index)).toEqual([0, 1, 2, 3]);
    expect(result.usage).toEqual({ promptTokens: 8, completionTokens: 4 });
  });

  it('one call failing fails the request with its error, and cancels the calls still running', async () => {
    const refused = new ProxyError(400, 'invalid_request_error', 'upstream_rejected', 'no');
    const aborted: boolean[] = [];
    let k = 0;
    const attempt = fanOut(backendsOf('ollama'), { route, plan: { dialect: 'openai-chat' } }, whole(3), async (c) => {
      const i = k++;
      if (i === 1) {
        await new Promise((r) => setTimeout(r, 5));
        throw refused;
      }
      await new Promise((r) => setTimeout(r, 50));
      aborted.push(c.signal.aborted);
      return answer('late');
    });
    await expect(attempt).rejects.toBe(refused);
    await new Promise((r) => setTimeout(r, 80));
    expect(aborted).toEqual([true, true]);
  });

  it('a caller that left between calls ends it as client_closed, the remaining calls not made', async () => {
    const caller = new AbortController();
    let calls = 0;
    const attempt = fanOut(
      backendsOf('ollama'),
      { route, plan: { dialect: 'openai-chat' } },
      { ...whole(20), signal: caller.signal },
      async () => {
        calls++;
        caller.abort();
        return answer('x');
      },
    );
    await expect(attempt).rejects.toMatchObject({ status: 503, code: 'client_closed' });
    expect(calls).toBeLessThan(20);
  });
});

describe('partsOf: the calls a request becomes', () => {
  it('is one call, as sent, where the server takes what is asked (or nothing more than one answer is)', () => {
    expect(partsOf({ model: 'm', messages: [], n: 3 }, 'openai-chat', ALL)).toBeUndefined();
    expect(partsOf({ model: 'm', prompt: ['a', 'b'], n: 2 }, 'openai-completions', ALL)).toBeUndefined();
    expect(partsOf({ model: 'm', prompt: 'a' }, 'openai-completions', NONE)).toBeUndefined();
    expect(partsOf({ model: 'm', messages: [], n: 1 }, 'openai-chat', NONE)).toBeUndefined();
    // Responses and Messages have no n: never fanned out.
    expect(partsOf({ model: 'm', input: 'x', n: 3 }, 'openai-responses', NONE)).toBeUndefined();
  });

  it('chat n 3 on a server of one choice: three calls without n, choices 0, 1, 2', () => {
    expect(plan(partsOf({ model: 'm', messages: [], n: 3 }, 'openai-chat', NONE))).toEqual([
      { prompt: undefined, n: undefined, at: [0, 3] },
      { prompt: undefined, n: undefined, at: [1, 4] },
      { prompt: undefined, n: undefined, at: [2, 5] },
    ]);
  });

  it('prompts x n where neither is native: one call per prompt and choice, index prompt * n + i', () => {
    const parts = plan(partsOf({ model: 'm', prompt: ['a', 'b'], n: 2 }, 'openai-completions', NONE));
    expect(parts.map((p) => [p.prompt, p.n, p.at[0]])).toEqual([
      ['a', undefined, 0],
      ['a', undefined, 1],
      ['b', undefined, 2],
      ['b', undefined, 3],
    ]);
  });

  it('a list of prompts where only n is native: one call per prompt with n, its choices at prompt * n', () => {
    const parts = plan(partsOf({ model: 'm', prompt: ['a', 'b', 'c'], n: 2 }, 'openai-completions', CHOICES_ONLY));
    expect(parts).toEqual([
      { prompt: 'a', n: 2, at: [0, 1] },
      { prompt: 'b', n: 2, at: [2, 3] },
      { prompt: 'c', n: 2, at: [4, 5] },
    ]);
  });

  it('a list of prompts is native but n is not: n calls of the whole list, prompt i choice k at i * n + k', () => {
    const lists: ManyAnswers = { choices: false, promptLists: true, tokenPrompts: false };
    const parts = plan(partsOf({ model: 'm', prompt: ['a', 'b'], n: 3 }, 'openai-completions', lists));
    expect(parts).toEqual([
      { prompt: ['a', 'b'], n: undefined, at: [0, 3] },
      { prompt: ['a', 'b'], n: undefined, at: [1, 4] },
      { prompt: ['a', 'b'], n: undefined, at: [2, 5] },
    ]);
  });

  it('refuses token prompts on a server of text prompts with a 400 naming prompt', () => {
    for (const prompt of [
      [1, 2, 3],
      [[1], [2]],
    ]) {
      const e = partsOf({ model: 'm', prompt }, 'openai-completions', NONE);
      expect(e).toBeInstanceOf(ProxyError);
      expect(e).toMatchObject({ status: 400, param: 'prompt', code: 'unsupported_prompt' });
      expect((e as ProxyError).message).toContain("this model's server takes text prompts only");
    }
    // Token-id arrays on a server that takes tokens but one prompt per call: one call each.
    const tokensOnly: ManyAnswers = { choices: false, promptLists: false, tokenPrompts: true };
    expect(plan(partsOf({ model: 'm', prompt: [[1], [2]] }, 'openai-completions', tokensOnly))).toEqual([
      { prompt: [1], n: undefined, at: [0, 1] },
      { prompt: [2], n: undefined, at: [1, 2] },
    ]);
  });

  it('refuses more than 128 calls, naming what made them', () => {
    const e = partsOf({ model: 'm', prompt: Array(20).fill('p'), n: 10 }, 'openai-completions', NONE);
    expect(e).toMatchObject({ status: 400, param: 'n', code: 'too_many_answers' });
    expect((e as ProxyError).message).toContain('20 prompts x n 10 is 200');
    expect(plan(partsOf({ model: 'm', messages: [], n: 128 }, 'openai-chat', NONE))).toHaveLength(128);
  });
});

const json = (body: unknown, usage?: { promptTokens: number; completionTokens: number }): UpstreamResult => ({
  kind: 'json',
  status: 200,
  body,
  ...(usage ? { usage } : {}),
});

describe('mergeWhole: the calls answers as one', () => {
  it('re-indexes the choices in order, keeps the first id and created, sums usage as billed', () => {
    const parts = partsOf({ model: 'm', messages: [], n: 2 }, 'openai-chat', NONE) as Part[];
    const answer = (id: string, text: string, prompt: number, completion: number) =>
      json(
        {
          id,
          object: 'chat.completion',
          created: id === 'a' ? 1 : 2,
          model: 'm',
          choices: [{ index: 0, message: { role: 'assistant', content: text }, finish_reason: 'stop' }],
          usage: {
            prompt_tokens: prompt,
            completion_tokens: completion,
            total_tokens: prompt + completion,
            prompt_tokens_details: { cached_tokens: 1 },
          },
        },
        { promptTokens: prompt, completionTokens: completion },
      );
    const merged = mergeWhole(parts, [answer('a', 'one', 10, 3), answer('b', 'two', 10, 5)]);
    expect(merged).toEqual({
      kind: 'json',
      status: 200,
      usage: { promptTokens: 20, completionTokens: 8 },
      body: {
        id: 'a',
        object: 'chat.completion',
        created: 1,
        model: 'm',
        choices: [
          { index: 0, message: { role: 'assistant', content: 'one' }, finish_reason: 'stop' },
          { index: 1, message: { role: 'assistant', content: 'two' }, finish_reason: 'stop' },
        ],
        usage: {
          prompt_tokens: 20,
          completion_tokens: 8,
          total_tokens: 28,
          prompt_tokens_details: { cached_tokens: 2 },
        },
      },
    });
  });

  it('sums usage field by field, unknown where no call reported any', () => {
    expect(sumUsage([undefined, undefined])).toBeUndefined();
    expect(
      sumUsage([
        { promptTokens: 5, completionTokens: 1, cachedTokens: 2 },
        { promptTokens: 5, completionTokens: 2, counted: true },
        undefined,
      ]),
    ).toEqual({ promptTokens: 10, completionTokens: 3, cachedTokens: 2, counted: true });
    expect(
      sumJson([
        { a: 1, b: { c: 2 }, s: 'x' },
        { a: 2, b: { c: 3 } },
      ]),
    ).toEqual({ a: 3, b: { c: 5 }, s: 'x' });
  });
});

/** A relay's stream of these SSE events (split across chunks at awkward places), its outcome once read to the end. */
function fakeStream(events: string[], usage?: { promptTokens: number; completionTokens: number }): UpstreamResult {
  const text = events.map((e) => `data: ${e}\n\n`).join('');
  const chunks = [text.slice(0, 7), text.slice(7, 30), text.slice(30)].filter((c) => c !== '');
  let done!: (o: StreamOutcome) => void;
  const outcome = new Promise<StreamOutcome>((r) => {
    done = r;
  });
  let at = 0;
  const source: ChunkSource = {
    read: async () => {
      await new Promise((r) => setTimeout(r, 1));
      const c = chunks[at++];
      if (c === undefined) done({ ...(usage ? { usage } : {}), firstTokenMs: 10 + at });
      return c === undefined ? undefined : Buffer.from(c);
    },
    cancel: () => done({ clientAborted: true }),
  };
  return { kind: 'stream', body: source, outcome };
}

const chunk = (id: string, content: string, finish: string | null = null) =>
  JSON.stringify({
    id,
    object: 'chat.completion.chunk',
    created: id === 'c0' ? 100 : 200,
    model: 'm',
    choices: [{ index: 0, delta: { content }, finish_reason: finish }],
  });
const usageChunk = (id: string, p: number, c: number) =>
  JSON.stringify({
    id,
    object: 'chat.completion.chunk',
    created: 1,
    model: 'm',
    choices: [],
    usage: { prompt_tokens: p, completion_tokens: c, total_tokens: p + c },
  });

async function readAll(body: unknown): Promise<string[]> {
  const source = body as ChunkSource;
  let text = '';
  for (let c = await source.read(); c !== undefined; c = await source.read()) text += Buffer.from(c).toString();
  return text
    .split('\n\n')
    .filter((e) => e !== '')
    .map((e) => e.replace(/^data: /, ''));
}

const call = (clientWantsUsage: boolean): Omit<UpstreamCall, 'route' | 'dialect'> => ({
  body: { model: 'm', messages: [], n: 3, stream: true },
  stream: true,
  clientWantsUsage,
  signal: new AbortController().signal,
});

describe('mergedStream: the calls streams as one', () => {
  it('re-indexes every chunk, one id, one summed usage chunk where asked, one [DONE]; usage summed in the outcome', async () => {
    const parts = partsOf({ model: 'm', messages: [], n: 3, stream: true }, 'openai-chat', NONE) as Part[];
    let k = 0;
    const sent: unknown[] = [];
    const result = await mergedStream(
      parts,
      call(true),
      async (c) => {
        sent.push(c.body);
        const i = k++;
        return fakeStream(
          [chunk(`c${i}`, `a${i}`), chunk(`c${i}`, `b${i}`, 'stop'), usageChunk(`c${i}`, 4, 2), '[DONE]'],
          {
            promptTokens: 4,
            completionTokens: 2,
          },
        );
      },
      8,
    );
    expect(sent).toEqual(Array(3).fill({ model: 'm', messages: [], stream: true }));
    if (result.kind !== 'stream') throw new Error('whole');
    const events = await readAll(result.body);
    expect(events.at(-1)).toBe('[DONE]');
    expect(events.filter((e) => e === '[DONE]')).toHaveLength(1);
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e) as Record<string, unknown>);
    const content = chunks.filter((c) => (c.choices as unknown[]).length > 0);
    expect(new Set(content.map((c) => c.id))).toEqual(new Set([content[0]?.id]));
    expect(new Set(content.map((c) => c.created)).size).toBe(1);
    const byIndex = new Map<number, string>();
    for (const c of content) {
      for (const ch of c.choices as Array<{ index: number; delta: { content: string } }>) {
        byIndex.set(ch.index, (byIndex.get(ch.index) ?? '') + ch.delta.content);
      }
    }
    // Each call's text under one index (which call got which is the order they opened in).
    expect([...byIndex.keys()].sort()).toEqual([0, 1, 2]);
    expect(new Set(byIndex.values())).toEqual(new Set(['a0b0', 'a1b1', 'a2b2']));
    const usage = chunks.filter((c) => c.usage !== undefined);
    expect(usage).toHaveLength(1);
    expect(usage[0]).toMatchObject({
      choices: [],
      usage: { prompt_tokens: 12, completion_tokens: 6, total_tokens: 18 },
    });
    expect(chunks.at(-1)).toBe(usage[0]);
    const outcome = await result.outcome;
    expect(outcome.usage).toEqual({ promptTokens: 12, completionTokens: 6 });
    expect(outcome.firstTokenMs).toBeGreaterThan(0);
  });

  it('carries no usage chunk where the caller did not ask, but still sums it for the record', async () => {
    const parts = partsOf({ model: 'm', messages: [], n: 2 }, 'openai-chat', NONE) as Part[];
    const result = await mergedStream(
      parts,
      call(false),
      async () => fakeStream([chunk('x', 'hi', 'stop'), '[DONE]'], { promptTokens: 3, completionTokens: 1 }),
      1,
    );
    if (result.kind !== 'stream') throw new Error('whole');
    const events = await readAll(result.body);
    expect(events.filter((e) => e.includes('"usage"'))).toEqual([]);
    expect(events).toHaveLength(3);
    expect((await result.outcome).usage).toEqual({ promptTokens: 6, completionTokens: 2 });
  });

  it('a call failing before the answer started is the request error; the calls already open are cancelled', async () => {
    const parts = partsOf({ model: 'm', messages: [], n: 3 }, 'openai-chat', NONE) as Part[];
    const cancelled: number[] = [];
    let k = 0;
    const refused = new ProxyError(429, 'rate_limit_error', 'upstream_rate_limited', 'busy', null, {
      'Retry-After': '1',
    });
    const attempt = mergedStream(
      parts,
      call(true),
      async () => {
        const i = k++;
        if (i === 0) throw refused;
        await new Promise((r) => setTimeout(r, 20));
        const s = fakeStream([chunk('c', 'x'), '[DONE]']);
        const body = s.kind === 'stream' ? (s.body as ChunkSource) : undefined;
        return {
          ...s,
          body: { read: () => body?.read() ?? Promise.resolve(undefined), cancel: () => cancelled.push(i) },
        } as UpstreamResult;
      },
      8,
    );
    await expect(attempt).rejects.toBe(refused);
    // The two others were asked at once; each is cancelled once it opens, never read.
    await expect.poll(() => [...cancelled].sort()).toEqual([1, 2]);
  });

  it('a call failing mid-stream ends the merged stream with its error event and one [DONE]', async () => {
    const parts = partsOf({ model: 'm', messages: [], n: 2 }, 'openai-chat', NONE) as Part[];
    let k = 0;
    const result = await mergedStream(
      parts,
      call(true),
      async () =>
        k++ === 0
          ? fakeStream([chunk('a', 'x'), JSON.stringify({ error: { message: 'broke', type: 'api_error' } }), '[DONE]'])
          : fakeStream([chunk('b', 'y'), chunk('b', 'z', 'stop'), '[DONE]']),
      1,
    );
    if (result.kind !== 'stream') throw new Error('whole');
    const events = await readAll(result.body);
    expect(events.at(-1)).toBe('[DONE]');
    expect(events.filter((e) => e === '[DONE]')).toHaveLength(1);
    expect(events.some((e) => e.includes('"broke"'))).toBe(true);
    expect((await result.outcome).error).toBeDefined();
  });

  it('keeps a character whose bytes two reads split whole', async () => {
    const parts = partsOf({ model: 'm', messages: [], n: 2, stream: true }, 'openai-chat', NONE) as Part[];
    const bytes = Buffer.from(`data: ${chunk('c0', 'héllo ✓', 'stop')}\n\ndata: [DONE]\n\n`);
    const cut = bytes.indexOf(Buffer.from('✓')) + 1;
    const split = (): ChunkSource => {
      const reads = [bytes.subarray(0, cut), bytes.subarray(cut)];
      return { read: async () => reads.shift(), cancel: () => {} };
    };
    const result = await mergedStream(
      parts,
      call(false),
      async () => ({ kind: 'stream', body: split(), outcome: Promise.resolve({}) }),
      1,
    );
    if (result.kind !== 'stream') throw new Error('whole');
    const events = await readAll(result.body);
    const texts = events.slice(0, -1).map((e) => JSON.parse(e) as { choices: Array<{ delta: { content: string } }> });
    expect(texts.map((c) => c.choices[0]?.delta.content)).toEqual(['héllo ✓', 'héllo ✓']);
  });
});
