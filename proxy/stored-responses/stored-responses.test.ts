import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { ApiKey } from '../../crds/api-key.js';
import type { ExternalProvider } from '../../crds/external-provider.js';
import type { ModelDeployment } from '../../crds/model-deployment.js';
import { type OllamaDouble, startOllamaDouble } from '../../e2e/doubles/ollama.js';
import { startGateway, type TestGateway } from '../../e2e/support/gateway.js';
import { ApiKeys, policyOf, sha256 } from '../access/auth.js';
import { buildRoutes, type ExternalRoute, type InClusterRoute, RouteTable } from '../serving/routes.js';
import { OpenAICompatibleUpstream } from '../upstreams/openai-compatible.js';
import type { Upstream, UpstreamCall } from '../upstreams/upstream.js';
import { MemoryUsage } from '../usage/record.js';

/**
 * Stateful Responses through the composed gateway over real sockets: turns chained with
 * previous_response_id across an upstream that speaks Responses natively (the Ollama double)
 * and one reached through the responses->chat translator (a chat-only provider double), the
 * stored objects read back, listed, deleted and kept to their team, and background responses
 * polled and cancelled.
 */

const ADMIN = 'sk-stored-admin-000000000000000000';
const TEAM_A = 'sk-stored-team-a-00000000000000000';
const TEAM_A2 = 'sk-stored-team-a2-0000000000000000';
const TEAM_B = 'sk-stored-team-b-00000000000000000';
const LLAMA = 'llama3.1:8b';
const CLAUDE = 'claude-sonnet-4-5';
const MAX_BYTES = 16_000;

const md: ModelDeployment = {
  apiVersion: 'ai.platform/v1beta1',
  kind: 'ModelDeployment',
  metadata: { name: 'llama', namespace: 'platform-llms' },
  spec: { model: LLAMA, serviceName: 'llama', port: 11434, replicas: 1 },
};
const provider: ExternalProvider = {
  apiVersion: 'ai.platform/v1beta1',
  kind: 'ExternalProvider',
  metadata: { name: 'anthropic', namespace: 'platform-agent' },
  spec: {
    provider: 'anthropic',
    displayName: 'Anthropic',
    auth: { method: 'APIKey', secretRef: { name: 'k' } },
    includeInCLI: true,
    streaming: true,
    models: [CLAUDE],
  },
};

const GPT = 'gpt-4o';
const openaiProvider: ExternalProvider = {
  apiVersion: 'ai.platform/v1beta1',
  kind: 'ExternalProvider',
  metadata: { name: 'openai', namespace: 'platform-agent' },
  spec: {
    provider: 'openai',
    displayName: 'OpenAI',
    auth: { method: 'APIKey', secretRef: { name: 'k' } },
    includeInCLI: true,
    streaming: true,
    models: [GPT],
  },
};

const apiKey = (name: string, team: string, key: string): ApiKey => ({
  apiVersion: 'ai.platform/v1beta1',
  kind: 'ApiKey',
  metadata: { name, namespace: 'platform-agent' },
  spec: { team, role: 'User', rotation: 0 },
  status: { digest: `sha256:${sha256(key).toString('hex')}` },
});

type Json = Record<string, unknown>;

/** Bodies the upstreams were sent, in order. */
const sent: Array<{ model: string; body: Json }> = [];

/** A provider that speaks chat completions only: the gateway translates Responses to chat for it. */
let hold: ((call: UpstreamCall) => Promise<void>) | undefined;
const chatOnly: Upstream<ExternalRoute> = {
  dialects: () => ['openai-chat'],
  send: async (call) => {
    sent.push({ model: call.route.model, body: call.body });
    await hold?.(call);
    return {
      kind: 'json',
      status: 200,
      body: {
        id: 'chatcmpl-1',
        object: 'chat.completion',
        created: 1,
        model: CLAUDE,
        choices: [{ index: 0, message: { role: 'assistant', content: 'it was kiwi' }, finish_reason: 'stop' }],
        usage: { prompt_tokens: 30, completion_tokens: 3, total_tokens: 33 },
      },
      usage: { promptTokens: 30, completionTokens: 3 },
    };
  },
};

/** OpenAI itself, as far as Responses go: it resolves prompt templates (a Responses body, recorded). */
const openaiNative: Upstream<ExternalRoute> = {
  dialects: () => ['openai-responses'],
  send: async (call) => {
    sent.push({ model: call.route.model, body: call.body });
    return {
      kind: 'json',
      status: 200,
      body: {
        id: 'resp_openai_own',
        object: 'response',
        created_at: 1,
        status: 'completed',
        model: GPT,
        output: [
          {
            type: 'message',
            id: 'msg_o',
            status: 'completed',
            role: 'assistant',
            content: [{ type: 'output_text', text: 'templated', annotations: [] }],
          },
        ],
        usage: { input_tokens: 5, output_tokens: 1, total_tokens: 6 },
      },
      usage: { promptTokens: 5, completionTokens: 1 },
    };
  },
};

let double: OllamaDouble;
let gateway: TestGateway;
const usage = new MemoryUsage();

beforeAll(async () => {
  double = await startOllamaDouble({ models: [LLAMA] });
  const routes = new RouteTable();
  routes.set(
    buildRoutes([{ ...md, spec: { ...md.spec, endpoint: double.url } }], { standalone: true }, [
      provider,
      openaiProvider,
    ]),
  );
  const keys = ApiKeys.fromKeys([ADMIN]);
  keys.setManaged(
    [apiKey('a', 'team-a', TEAM_A), apiKey('a2', 'team-a', TEAM_A2), apiKey('b', 'team-b', TEAM_B)].flatMap(
      (k) => policyOf(k) ?? [],
    ),
  );
  const native = new OpenAICompatibleUpstream();
  const inCluster: Upstream<InClusterRoute> = {
    dialects: (r) => native.dialects(r),
    send: (call) => {
      sent.push({ model: call.route.model, body: call.body });
      return native.send(call);
    },
  };
  gateway = await startGateway(
    { storedResponses: { maxResponseBytes: MAX_BYTES } },
    { routes, keys, usage, inCluster, providers: { anthropic: chatOnly, openai: openaiNative } },
  );
});

afterAll(async () => {
  await gateway?.stop();
  await double?.close();
});

beforeEach(() => {
  sent.length = 0;
  hold = undefined;
});

const create = (key: string, body: Json) =>
  gateway.request('/openai/v1/responses', {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
    body: JSON.stringify(body),
  });
const get = (key: string, path: string, method = 'GET') =>
  gateway.request(`/openai/v1/responses/${path}`, { method, headers: { authorization: `Bearer ${key}` } });
const created = async (key: string, body: Json): Promise<Json> => {
  const res = await create(key, body);
  expect(res.status, await res.clone().text()).toBe(200);
  return (await res.json()) as Json;
};
/** The text of a message item's first part. */
const textOf = (item: Json): string => String(((item.content as Json[])[0] as Json).text);
/** Every text of a body the upstream was sent, in order (Responses input or chat messages). */
const textsOf = (body: Json): string => JSON.stringify(body.input ?? body.messages);

describe('chaining across upstreams', () => {
  it('keeps each turn under the id the caller saw and sends the whole conversation to the next model, whatever it speaks', async () => {
    const first = await created(TEAM_A, { model: LLAMA, input: 'the secret word is kiwi' });
    expect(first.id).toMatch(/^resp_[0-9a-f]{48}$/);
    expect(first.previous_response_id).toBeNull();
    const firstText = JSON.stringify(first.output);
    // The upstream was asked to keep nothing (the gateway keeps it) and never saw a previous_response_id.
    expect(sent[0]?.body.store).toBe(false);

    const stored = await get(TEAM_A, String(first.id));
    expect(stored.status).toBe(200);
    expect(await stored.json()).toEqual(first);

    // Turn 2 on a model behind the responses->chat translator.
    const second = await created(TEAM_A2, { model: CLAUDE, previous_response_id: first.id, input: 'what was it?' });
    expect(second.previous_response_id).toBe(first.id);
    const chat = sent.find((s) => s.model === CLAUDE)?.body as Json;
    expect(chat.messages).toEqual([
      { role: 'user', content: [{ type: 'text', text: 'the secret word is kiwi' }] },
      { role: 'assistant', content: expect.any(String) },
      { role: 'user', content: 'what was it?' },
    ]);
    expect(JSON.stringify(chat)).not.toContain('previous_response_id');
    expect(firstText).toContain(((chat.messages as Json[])[1] as Json).content as string);

    // Turn 3 back on the native upstream, streamed: the chain is walked back to turn 1.
    sent.length = 0;
    const res = await create(TEAM_A, {
      model: LLAMA,
      previous_response_id: second.id,
      input: [{ role: 'user', content: 'and again?' }],
      stream: true,
    });
    expect(res.status).toBe(200);
    const events = (await res.text())
      .split('\n\n')
      .filter((e) => e.includes('data:'))
      .map((e) => JSON.parse(e.slice(e.indexOf('data:') + 5)) as Json);
    const completed = events.find((e) => e.type === 'response.completed')?.response as Json;
    const createdEvent = events.find((e) => e.type === 'response.created')?.response as Json;
    expect(completed.id).toMatch(/^resp_/);
    expect(createdEvent.id).toBe(completed.id);
    expect(completed.previous_response_id).toBe(second.id);
    const upstream = sent[0]?.body as Json;
    expect(upstream.previous_response_id).toBeUndefined();
    const input = textsOf(upstream);
    for (const said of ['the secret word is kiwi', 'what was it?', 'it was kiwi', 'and again?'])
      expect(input).toContain(said);
    expect(input.indexOf('kiwi')).toBeLessThan(input.indexOf('and again?'));
    // The stream's final Response is what GET serves.
    expect(await (await get(TEAM_A, String(completed.id))).json()).toEqual(completed);
  });

  it("keeps each team's responses to itself: another team's id is as missing as a deleted one", async () => {
    const mine = await created(TEAM_A, { model: LLAMA, input: 'private' });
    const theirs = await get(TEAM_B, String(mine.id));
    expect(theirs.status).toBe(404);
    expect(((await theirs.json()) as { error: Json }).error).toMatchObject({ code: 'not_found' });
    expect((await get(TEAM_B, `${mine.id}/input_items`)).status).toBe(404);
    expect((await get(TEAM_B, String(mine.id), 'DELETE')).status).toBe(404);
    expect((await get(ADMIN, String(mine.id))).status).toBe(200);

    const chained = await create(TEAM_B, { model: LLAMA, previous_response_id: mine.id, input: 'go on' });
    expect(chained.status).toBe(404);
    expect(await chained.json()).toEqual({
      error: {
        message: `Previous response with id '${mine.id}' not found.`,
        type: 'invalid_request_error',
        param: 'previous_response_id',
        code: 'previous_response_not_found',
      },
    });
    expect(sent).toHaveLength(1);
  });

  it('deletes: the deletion object, then 404 to read it or to chain from it', async () => {
    const r = await created(TEAM_A, { model: LLAMA, input: 'forget me' });
    const del = await get(TEAM_A, String(r.id), 'DELETE');
    expect(del.status).toBe(200);
    expect(await del.json()).toEqual({ id: r.id, object: 'response', deleted: true });
    expect((await get(TEAM_A, String(r.id))).status).toBe(404);
    expect((await get(TEAM_A, String(r.id), 'DELETE')).status).toBe(404);
    const chained = await create(TEAM_A, { model: CLAUDE, previous_response_id: r.id, input: 'go on' });
    expect(chained.status).toBe(404);
  });

  it("resolves item_reference items from the team's stored responses, for any upstream", async () => {
    const first = await created(TEAM_A, { model: LLAMA, input: 'the secret word is fig' });
    const answer = (first.output as Json[])[0] as Json;
    const input = [
      { role: 'user', content: 'the secret word is fig' },
      { type: 'item_reference', id: answer.id },
      { role: 'user', content: 'which fruit?' },
    ];
    sent.length = 0;
    const second = await created(TEAM_A2, { model: CLAUDE, input });
    const chat = sent[0]?.body as Json;
    expect(chat.messages).toEqual([
      { role: 'user', content: 'the secret word is fig' },
      { role: 'assistant', content: textOf(answer) },
      { role: 'user', content: 'which fruit?' },
    ]);
    // Stored with the item itself, its id kept: a later reference or a chain finds it again.
    const items = (await (await get(TEAM_A, `${second.id}/input_items?order=asc`)).json()) as { data: Json[] };
    expect(items.data[1]).toMatchObject({ id: answer.id, type: 'message', role: 'assistant' });

    const theirs = await create(TEAM_B, { model: CLAUDE, input });
    expect(theirs.status).toBe(404);
    expect(((await theirs.json()) as { error: Json }).error).toMatchObject({
      code: 'item_not_found',
      param: 'input[1]',
    });
    const missing = await create(TEAM_A, { model: LLAMA, input: [{ type: 'item_reference', id: 'msg_nope' }] });
    expect(missing.status).toBe(404);
  });

  it('lists input items a page at a time, as the spec orders them', async () => {
    const input = ['one', 'two', 'three'].map((t) => ({ role: 'user', content: t }));
    const r = await created(TEAM_A, { model: LLAMA, input });
    const page = async (query: string) => (await (await get(TEAM_A, `${r.id}/input_items${query}`)).json()) as Json;
    const desc = await page('');
    expect((desc.data as Json[]).map((i) => (i.content as Json[])[0]?.text)).toEqual(['three', 'two', 'one']);
    expect(desc).toMatchObject({ object: 'list', has_more: false });
    const first = await page('?order=asc&limit=2');
    expect((first.data as Json[]).map((i) => (i.content as Json[])[0])).toEqual([
      { type: 'input_text', text: 'one' },
      { type: 'input_text', text: 'two' },
    ]);
    expect(first.has_more).toBe(true);
    expect(first.first_id).toMatch(/^msg_/);
    const next = await page(`?order=asc&limit=2&after=${first.last_id}`);
    expect((next.data as Json[]).map((i) => i.role)).toEqual(['user']);
    expect(next).toMatchObject({ has_more: false, first_id: (next.data as Json[])[0]?.id });
    expect((await get(TEAM_A, `${r.id}/input_items?limit=0`)).status).toBe(400);
  });

  it('keeps nothing with store: false, and serves but does not keep a response past the bound', async () => {
    const gauge = async () =>
      Number(
        (await gateway.metrics.registry.getSingleMetricAsString('pao_gateway_stored_responses_bytes'))
          .split(' ')
          .at(-1),
      );
    const before = await gauge();
    const first = await created(TEAM_A, { model: LLAMA, input: 'hi' });
    const firstBytes = (await gauge()) - before;
    const unstored = await created(TEAM_A, { model: LLAMA, input: 'hi', store: false, previous_response_id: first.id });
    // Not kept, but answered as the API does: the gateway's own id, the response it continues.
    expect(unstored).toMatchObject({ store: false, previous_response_id: first.id });
    expect(String(unstored.id)).toMatch(/^resp_[0-9a-f]{48}$/);
    expect((await get(TEAM_A, String(unstored.id))).status).toBe(404);
    const large = await create(TEAM_A, { model: LLAMA, input: 'x '.repeat(MAX_BYTES) });
    expect(large.status).toBe(200);
    expect(large.headers.get('x-gateway-response-stored')).toMatch(/^false; too large/);
    expect((await get(TEAM_A, String(((await large.json()) as Json).id))).status).toBe(404);
    expect(await gauge()).toBe(before + firstBytes);
    await created(TEAM_A, { model: LLAMA, input: 'kept' });
    expect(await gauge()).toBeGreaterThan(before + 100);
  });

  it('refuses what it cannot honour, naming the field', async () => {
    const cases: Array<[Json, number, string]> = [
      [{ model: LLAMA, prompt: { id: 'pmpt_1' } }, 400, 'prompt'],
      // Any string is the spec's: one no response could have is not found, as OpenAI answers it.
      [{ model: LLAMA, previous_response_id: '', input: 'hi' }, 404, 'previous_response_id'],
      [
        { model: LLAMA, input: 'hi', tools: [{ type: 'function', name: 'f' }, { type: 'web_search' }] },
        400,
        'tools[1]',
      ],
      [{ model: LLAMA, input: 'hi', background: true, stream: true }, 400, 'stream'],
      [{ model: LLAMA, input: 'hi', background: true, store: false }, 400, 'store'],
      [{ model: LLAMA, previous_response_id: 'resp_nope', input: 'hi' }, 404, 'previous_response_id'],
    ];
    for (const [body, status, param] of cases) {
      const res = await create(TEAM_A, body);
      expect(res.status, JSON.stringify(body)).toBe(status);
      expect(((await res.json()) as { error: Json }).error.param).toBe(param);
    }
    expect(sent).toHaveLength(0);
    const wrong = await get(TEAM_A, 'resp_x', 'PUT');
    expect(wrong.status).toBe(405);
    expect(wrong.headers.get('allow')).toBe('GET, DELETE');
  });
});

describe('prompt templates', () => {
  it("pass to OpenAI's own Responses API, which resolves them; the answer is kept under the gateway's id", async () => {
    const prompt = { id: 'pmpt_123', variables: { city: 'Paris' } };
    const r = await created(TEAM_A, { model: GPT, prompt });
    expect(sent).toEqual([{ model: GPT, body: expect.objectContaining({ prompt, store: false }) }]);
    expect(sent[0]?.body.input).toBeUndefined();
    expect(r.id).not.toBe('resp_openai_own');
    expect(await (await get(TEAM_A, String(r.id))).json()).toEqual(r);
  });

  it("hosted tools pass to OpenAI's own Responses API, which runs them", async () => {
    const tools = [{ type: 'code_interpreter', container: { type: 'auto' } }];
    await created(TEAM_A, { model: GPT, input: 'hi', tools });
    expect(sent).toEqual([{ model: GPT, body: expect.objectContaining({ tools }) }]);
  });
});

describe('background responses', () => {
  const poll = async (id: string, until: (status: string) => boolean): Promise<Json> => {
    for (let i = 0; i < 200; i++) {
      const r = (await (await get(TEAM_A, id)).json()) as Json;
      if (until(String(r.status))) return r;
      await new Promise((res) => setTimeout(res, 50));
    }
    throw new Error(`response ${id} never left its status`);
  };

  it('answers queued at once, runs detached, and is polled to its answer with one usage record', async () => {
    let release = () => {};
    const released = new Promise<void>((res) => {
      release = res;
    });
    hold = () => released;
    const res = await create(TEAM_A, { model: CLAUDE, input: 'slow one', background: true });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('application/json');
    const queued = (await res.json()) as Json;
    expect(queued).toMatchObject({ object: 'response', status: 'queued', background: true, output: [] });
    const running = await poll(String(queued.id), (s) => s === 'in_progress');
    expect(running.status).toBe('in_progress');
    release();
    const done = await poll(String(queued.id), (s) => s !== 'in_progress' && s !== 'queued');
    expect(done).toMatchObject({ id: queued.id, status: 'completed', background: true });
    expect(JSON.stringify(done.output)).toContain('it was kiwi');
    await expect
      .poll(() => usage.records.find((r) => r.promptTokens === 30 && r.team === 'team-a')?.completionTokens)
      .toBe(3);
    // A finished response cancels to itself.
    expect(await (await get(TEAM_A, `${queued.id}/cancel`, 'POST')).json()).toEqual(done);
  });

  it('refuses at once one whose input alone passes the bound in bytes: it could never be kept to be polled (é is 2 bytes, 1 UTF-16 unit)', async () => {
    const input = 'é'.repeat(MAX_BYTES * 0.6);
    const res = await create(TEAM_A, { model: CLAUDE, input, background: true });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: Json }).error).toMatchObject({ param: 'input', code: 'invalid_request' });
    expect(sent).toHaveLength(0);
  });

  it('ends failed with response_too_large where its answer passes the bound: what can be kept says why', async () => {
    double.behave({ completionTokens: 6_000 });
    try {
      const queued = await created(TEAM_A, { model: LLAMA, input: 'a long one', background: true });
      const done = await poll(String(queued.id), (s) => s !== 'in_progress' && s !== 'queued');
      expect(done).toMatchObject({ id: queued.id, status: 'failed', error: { code: 'response_too_large' } });
      expect(JSON.stringify(done).length).toBeLessThan(MAX_BYTES);
    } finally {
      double.reset();
    }
  });

  it('cancels: the running call is aborted and the response stays cancelled', async () => {
    let aborted: Promise<void> = Promise.resolve();
    hold = (call) => {
      aborted = new Promise<void>((res) => call.signal.addEventListener('abort', () => res()));
      return new Promise<void>(() => {});
    };
    const queued = (await (
      await create(TEAM_A, { model: CLAUDE, input: 'never ends', background: true })
    ).json()) as Json;
    await poll(String(queued.id), (s) => s === 'in_progress');
    const cancelled = await get(TEAM_A, `${queued.id}/cancel`, 'POST');
    expect(cancelled.status).toBe(200);
    expect(await cancelled.json()).toMatchObject({ id: queued.id, status: 'cancelled' });
    await aborted;
    expect((await poll(String(queued.id), () => true)).status).toBe('cancelled');
    expect((await get(TEAM_B, `${queued.id}/cancel`, 'POST')).status).toBe(404);
    const foreground = await created(TEAM_A, { model: LLAMA, input: 'hi' });
    expect((await get(TEAM_A, `${foreground.id}/cancel`, 'POST')).status).toBe(400);
  });
});
