import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { type HostedDouble, startHostedDouble } from '../e2e/doubles/hosted.js';
import { hostedProviderDoc, resourceDoc, startStandaloneGateway, type TestGateway } from '../e2e/support/gateway.js';
import { MemoryCacheStore } from './cache/cache-store.js';
import { MemoryUsage } from './usage/record.js';

/**
 * The response cache through the composed gateway, configured as a standalone user configures it,
 * in front of OpenAI's and Anthropic's doubles: a repeated request is answered from the cache
 * (whole, or its stream replayed) without a call, with X-Cache and a record of no cost and the
 * cost avoided; what the key, the request and its temperature say is honoured; nothing crosses
 * teams; a spoiled entry is dropped; a semantic hit needs the same parameters and a near text.
 */

const ML = 'sk-cache-ml-0001';
const ML2 = 'sk-cache-ml-0002';
const ML3 = 'sk-cache-ml-0003';
const OFF = 'sk-cache-off-0001';
const SOLO = 'sk-cache-solo-0001';
const SEM = 'sk-cache-sem-0001';
const WEB = 'sk-cache-web-0001';
const PLAIN = 'sk-cache-plain-0001';
const OPENAI_KEY = 'sk-openai-double-cache';
const ANTHROPIC_KEY = 'sk-anthropic-double-cache';
let hosted: HostedDouble;
let gateway: TestGateway;
const usage = new MemoryUsage();
const store = new MemoryCacheStore(8 * 1024 * 1024);

beforeAll(async () => {
  hosted = await startHostedDouble({ openaiKeys: [OPENAI_KEY], anthropicKeys: [ANTHROPIC_KEY] });
  const documents = [
    hostedProviderDoc('openai', ['gpt-4o-mini', 'text-embedding-3-small']),
    // The router's embedding model is the semantic lookup's (the double's vectors are all alike:
    // what a semantic lookup matches here is decided by its bucket alone).
    resourceDoc('RoutingPolicy', 'default', {
      models: [{ name: 'gpt-4o-mini', tier: 'Light' }],
      scorer: { semantic: { embeddingModel: 'text-embedding-3-small' } },
    }),
    resourceDoc('ExternalProvider', 'anthropic', {
      provider: 'anthropic',
      displayName: 'Anthropic',
      auth: { method: 'APIKey', secretRef: { name: 'anthropic-key' } },
      models: ['claude-haiku-4-5-20251001'],
    }),
    resourceDoc('ApiKey', 'ml', { team: 'ml', cache: { mode: 'Exact' } }),
    resourceDoc('ApiKey', 'sem', { team: 'sem', cache: { mode: 'Semantic', similarity: 0.9 } }),
    resourceDoc('ApiKey', 'ml-two', { team: 'ml' }),
    resourceDoc('ApiKey', 'web', { team: 'web', cache: { mode: 'Exact' } }),
    resourceDoc('ApiKey', 'ml-three', { team: 'ml' }),
    resourceDoc('ApiKey', 'off', { team: 'ml', cache: { mode: 'Off' } }),
    resourceDoc('ApiKey', 'solo', { team: 'ml', cache: { mode: 'Exact', scope: 'Key' } }),
    // ml-three's answers must not say tok0: a hit is checked as any answer is.
    resourceDoc('Guardrail', 'no-tok0', {
      selector: { apiKeys: ['ml-three'] },
      appliesTo: ['Answer'],
      detectors: { patterns: [{ name: 'Tok', regex: 'tok0' }] },
      action: 'Block',
    }),
  ];
  gateway = await startStandaloneGateway(
    {
      documents,
      keys: `ml=${ML}\nsem=${SEM}\nml-two=${ML2}\nml-three=${ML3}\noff=${OFF}\nsolo=${SOLO}\nweb=${WEB}\n${PLAIN}\n`,
      secrets: { 'openai-key': OPENAI_KEY, 'anthropic-key': ANTHROPIC_KEY },
      env: { ...process.env, ...hosted.env },
    },
    { usage, cacheStore: store },
  );
});

afterAll(async () => {
  await gateway?.stop();
  await hosted?.close();
});

beforeEach(() => {
  hosted.reset();
  usage.records.length = 0;
});

const post = (key: string, path: string, body: unknown, headers: Record<string, string> = {}) =>
  gateway.request(path, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });

/** Calls for answers (a semantic lookup's embeddings aside). */
const calls = () => hosted.calls.filter((c) => c.method === 'POST' && !c.path.endsWith('/embeddings')).length;
const chat = (content: string, extra: Record<string, unknown> = {}) => ({
  model: 'gpt-4o-mini',
  temperature: 0,
  messages: [{ role: 'user', content }],
  ...extra,
});

describe('a repeated request', () => {
  it('is answered from the cache, whole, with no call, no cost and the cost it avoided', async () => {
    const body = chat(`whole ${Math.random()}`);
    const first = await post(ML, '/openai/v1/chat/completions', body);
    expect(first.headers.get('x-cache')).toBe('miss');
    const answer = await first.text();
    const paid = usage.records.at(-1)?.costUsd ?? 0;
    expect(paid).toBeGreaterThan(0);
    expect(calls()).toBe(1);
    // Key order and the caller's own fields do not make it another request.
    const again = await post(ML, '/openai/v1/chat/completions', { user: 'someone', ...body });
    expect(again.headers.get('x-cache')).toBe('hit; kind=exact');
    expect(await again.text()).toBe(answer);
    expect(calls()).toBe(1);
    expect(usage.records.at(-1)).toMatchObject({ costUsd: 0, cache: 'exact', cacheSavingsUsd: paid, promptTokens: 0 });
  });

  it('that streamed is replayed with the same events', async () => {
    const body = { ...chat(`stream ${Math.random()}`), stream: true, stream_options: { include_usage: true } };
    const first = await (await post(ML, '/openai/v1/chat/completions', body)).text();
    await expect
      .poll(() => post(ML, '/openai/v1/chat/completions', body).then((r) => r.headers.get('x-cache')), {
        timeout: 10_000,
      })
      .toBe('hit; kind=exact');
    const again = await post(ML, '/openai/v1/chat/completions', body);
    expect(again.headers.get('content-type')).toMatch(/^text\/event-stream/);
    expect(await again.text()).toBe(first);
    expect(calls()).toBe(1);
  });

  it("that streamed a kept Response is replayed under the hit's own id, never the keeper's", async () => {
    const body = { model: 'gpt-4o-mini', temperature: 0, input: `kept ${Math.random()}`, stream: true };
    const idsOf = (text: string) =>
      text
        .split('\n\n')
        .filter((e) => e.includes('"response":{'))
        .map((e) => (JSON.parse(e.slice(e.indexOf('data:') + 5)) as { response: { id: string } }).response.id);
    const first = await post(ML, '/openai/v1/responses', body);
    expect(first.headers.get('x-cache')).toBe('miss');
    const firstIds = new Set(idsOf(await first.text()));
    expect(firstIds.size).toBe(1);
    let hit: Response | undefined;
    await expect
      .poll(
        async () => {
          hit = await post(ML, '/openai/v1/responses', body);
          return hit.headers.get('x-cache');
        },
        { timeout: 10_000 },
      )
      .toBe('hit; kind=exact');
    const hitIds = new Set(idsOf(await (hit as Response).text()));
    expect(hitIds.size).toBe(1);
    const [firstId] = firstIds;
    const [hitId] = hitIds;
    expect(hitId).toMatch(/^resp_/);
    expect(hitId).not.toBe(firstId);
    for (const id of [firstId, hitId]) {
      const kept = await gateway.request(`/openai/v1/responses/${id}`, { headers: { authorization: `Bearer ${ML}` } });
      expect(kept.status).toBe(200);
      expect(((await kept.json()) as { id: string }).id).toBe(id);
    }
  });

  it('is answered from the cache on Messages too, and shared by the keys of the team, not by another team', async () => {
    const body = {
      model: 'claude-haiku-4-5-20251001',
      max_tokens: 16,
      temperature: 0,
      messages: [{ role: 'user', content: `team ${Math.random()}` }],
    };
    await post(ML, '/anthropic/v1/messages', body);
    // ml-two has no cache of its own: its request opts in, in its team's scope.
    await expect
      .poll(() =>
        post(ML2, '/anthropic/v1/messages', body, { 'x-gateway-cache': 'exact' }).then((r) => r.headers.get('x-cache')),
      )
      .toBe('hit; kind=exact');
    const web = await post(WEB, '/anthropic/v1/messages', body);
    expect(web.headers.get('x-cache')).toBe('miss');
    expect(calls()).toBe(2);
  });

  it('sampled at a temperature above 0, or none, is not cached unless the key allows any', async () => {
    const hot = { model: 'gpt-4o-mini', messages: [{ role: 'user', content: `hot ${Math.random()}` }] };
    for (let i = 0; i < 2; i++)
      expect((await post(ML, '/openai/v1/chat/completions', hot)).headers.get('x-cache')).toBeNull();
    expect(calls()).toBe(2);
  });

  it('honours Cache-Control: no-cache reads nothing but keeps, no-store neither; and the request opting out', async () => {
    const body = chat(`control ${Math.random()}`);
    await post(ML, '/openai/v1/chat/completions', body, { 'cache-control': 'no-store' });
    expect(
      (await post(ML, '/openai/v1/chat/completions', body, { 'cache-control': 'no-cache' })).headers.get('x-cache'),
    ).toBe('miss');
    await expect
      .poll(() => post(ML, '/openai/v1/chat/completions', body).then((r) => r.headers.get('x-cache')), {
        timeout: 10_000,
      })
      .toBe('hit; kind=exact');
    expect(
      (await post(ML, '/openai/v1/chat/completions', body, { 'x-gateway-cache': 'off' })).headers.get('x-cache'),
    ).toBeNull();
    expect(calls()).toBe(3);
  });

  it("is refused with 400 in the caller's dialect for an X-Gateway-Cache it does not know", async () => {
    const res = await post(PLAIN, '/openai/v1/chat/completions', chat('x'), { 'x-gateway-cache': 'always' });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('invalid_cache_header');
  });

  it('finds no spoiled entry: it is dropped and the request called', async () => {
    const body = chat(`spoiled ${Math.random()}`);
    await post(ML, '/openai/v1/chat/completions', body);
    await expect
      .poll(() => post(ML, '/openai/v1/chat/completions', body).then((r) => r.headers.get('x-cache')), {
        timeout: 10_000,
      })
      .toBe('hit; kind=exact');
    // Every entry overwritten with what no gateway wrote.
    for (const key of [...(store as unknown as { lru: Map<string, string> }).lru.keys()])
      await store.set(key, '{"v":1,"kind":"json"', 60_000);
    const res = await post(ML, '/openai/v1/chat/completions', body);
    expect(res.status).toBe(200);
    expect(res.headers.get('x-cache')).toBe('miss');
  });
});

describe('a semantic lookup', () => {
  it('answers the same question put otherwise, with the same system text and parameters only', async () => {
    const ask = (question: string, system = 'You are terse.', extra: Record<string, unknown> = {}) =>
      chat('', {
        messages: [
          { role: 'system', content: system },
          { role: 'user', content: question },
        ],
        ...extra,
      });
    await post(SEM, '/openai/v1/chat/completions', ask('What is the capital city of France?'));
    await expect
      .poll(
        () =>
          post(SEM, '/openai/v1/chat/completions', ask('capital city of France?')).then((r) =>
            r.headers.get('x-cache'),
          ),
        { timeout: 10_000 },
      )
      .toBe('hit; kind=semantic');
    expect(usage.records.at(-1)).toMatchObject({ cache: 'semantic', costUsd: 0 });
    const otherSystem = await post(
      ML,
      '/openai/v1/chat/completions',
      ask('capital city of France?', 'Answer in German.'),
    );
    expect(otherSystem.headers.get('x-cache')).toBe('miss');
    const otherParameters = await post(
      ML,
      '/openai/v1/chat/completions',
      ask('capital city of France?', 'You are terse.', { max_tokens: 5 }),
    );
    expect(otherParameters.headers.get('x-cache')).toBe('miss');
  });

  it('is not made where the request has tools, nor for embeddings', async () => {
    const tools = [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: {} } } }];
    await post(SEM, '/openai/v1/chat/completions', chat('Tell me the capital of Spain', { tools }));
    await new Promise((r) => setTimeout(r, 50));
    const near = await post(SEM, '/openai/v1/chat/completions', chat('tell me the capital of spain', { tools }));
    expect(near.headers.get('x-cache')).toBe('miss');
    const embed = (input: string) => post(SEM, '/openai/v1/embeddings', { model: 'text-embedding-3-small', input });
    await embed('running shoes');
    await new Promise((r) => setTimeout(r, 50));
    expect((await embed('shoes running')).headers.get('x-cache')).toBe('miss');
  });
});

describe("a key's own settings", () => {
  it('Off is final: a request cannot opt in; Key scope is not shared with the team', async () => {
    const body = chat(`settings ${Math.random()}`);
    await post(OFF, '/openai/v1/chat/completions', body, { 'x-gateway-cache': 'exact' });
    expect(
      (await post(OFF, '/openai/v1/chat/completions', body, { 'x-gateway-cache': 'exact' })).headers.get('x-cache'),
    ).toBeNull();
    await post(SOLO, '/openai/v1/chat/completions', body);
    await expect
      .poll(() => post(SOLO, '/openai/v1/chat/completions', body).then((r) => r.headers.get('x-cache')), {
        timeout: 10_000,
      })
      .toBe('hit; kind=exact');
    expect((await post(ML, '/openai/v1/chat/completions', body)).headers.get('x-cache')).toBe('miss');
  });

  it("a hit passes the answer's guardrails of the caller, not the keeper's", async () => {
    const body = chat(`guarded ${Math.random()}`);
    await post(ML, '/openai/v1/chat/completions', body);
    await expect
      .poll(() => post(ML, '/openai/v1/chat/completions', body).then((r) => r.headers.get('x-cache')), {
        timeout: 10_000,
      })
      .toBe('hit; kind=exact');
    const three = await post(ML3, '/openai/v1/chat/completions', body, { 'x-gateway-cache': 'exact' });
    expect(three.status).toBe(400);
    expect(((await three.json()) as { error: { code: string } }).error.code).toBe('guardrail_blocked');
  });
});

describe('the memory store', () => {
  it('stays within its bound under a flood of unique answers, the oldest out first', async () => {
    const small = new MemoryCacheStore(256 * 1024);
    for (let i = 0; i < 5_000; i++) await small.set(`k${i}`, 'x'.repeat(1000), 60_000);
    expect(small.bytes).toBeLessThanOrEqual(256 * 1024);
    expect(await small.get('k4999')).toBeDefined();
    expect(await small.get('k0')).toBeUndefined();
  });
});
