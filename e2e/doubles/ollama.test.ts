import { Agent, request } from 'node:http';
import { performance } from 'node:perf_hooks';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { type OllamaDouble, startOllamaDouble } from './ollama.js';

/** The test double of Ollama's OpenAI-compatible server, exercised over real HTTP. */

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function until(what: string, probe: () => boolean, timeoutMs = 1000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!probe()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(5);
  }
}

/** Splits an SSE body into its `data:` payloads, failing on anything that is not exactly `data: <x>\n\n`. */
function sseData(text: string): string[] {
  expect(text.endsWith('\n\n')).toBe(true);
  const frames = text.slice(0, -2).split('\n\n');
  for (const f of frames) expect(f).toMatch(/^data: [^\n]+$/);
  return frames.map((f) => f.slice('data: '.length));
}

async function json<T>(res: Response): Promise<T> {
  return (await res.json()) as T;
}

interface Completion {
  id: string;
  object: string;
  created: number;
  model: string;
  choices: Array<{ index: number; message: { role: string; content: string }; finish_reason: string }>;
  usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number };
}

interface ErrorEnvelope {
  error: { message: string; type: string; param: null; code: null };
}

interface Chunk {
  id: string;
  object: string;
  created: number;
  model: string;
  system_fingerprint: string;
  choices: Array<{ index: number; delta: { role: string; content: string }; finish_reason: string | null }>;
  usage?: { prompt_tokens: number; completion_tokens: number; total_tokens: number };
}

// "Be terse." (2) + "hello  there\nworld" (3) + an image (0)
const MESSAGES = [
  { role: 'system', content: 'Be terse.' },
  {
    role: 'user',
    content: [
      { type: 'text', text: 'hello  there\nworld' },
      { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0KGgo=' } },
    ],
  },
];
const PROMPT_TOKENS = 5;
const EIGHT = 'tok0 tok1 tok2 tok3 tok4 tok5 tok6 tok7';

describe('Ollama double', () => {
  let double: OllamaDouble;
  const chat = (body: unknown, init: RequestInit = {}) =>
    fetch(`${double.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: 'Bearer t' },
      body: typeof body === 'string' ? body : JSON.stringify(body),
      ...init,
    });

  beforeAll(async () => {
    double = await startOllamaDouble();
  });
  afterAll(() => double.close());
  beforeEach(() => double.reset());

  it('answers a non-streaming completion with the OpenAI shape and word-count usage', async () => {
    const before = Math.floor(Date.now() / 1000);
    const body = { model: 'llama3.1:8b', messages: MESSAGES };
    const res = await chat(body);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    const completion = await json<Completion>(res);
    expect(completion).toEqual({
      id: expect.stringMatching(/^chatcmpl-\d+$/),
      object: 'chat.completion',
      created: expect.any(Number),
      model: 'llama3.1:8b',
      system_fingerprint: 'fp_ollama',
      choices: [{ index: 0, message: { role: 'assistant', content: EIGHT }, finish_reason: 'stop' }],
      usage: { prompt_tokens: PROMPT_TOKENS, completion_tokens: 8, total_tokens: PROMPT_TOKENS + 8 },
    });
    expect(completion.created).toBeGreaterThanOrEqual(before);
    expect(completion.created).toBeLessThanOrEqual(Math.floor(Date.now() / 1000));

    expect(double.requests).toHaveLength(1);
    const [rec] = double.requests;
    expect(rec).toMatchObject({ method: 'POST', path: '/v1/chat/completions', body, aborted: false });
    expect(rec?.headers.authorization).toBe('Bearer t');
  });

  it('generates completionTokens tokens, capped by max_tokens (not max_completion_tokens, like Ollama 0.17)', async () => {
    double.behave({ completionTokens: 3 });
    const three = await json<Completion>(await chat({ model: 'qwen2.5:0.5b', messages: MESSAGES }));
    expect(three.choices[0]).toMatchObject({ message: { content: 'tok0 tok1 tok2' }, finish_reason: 'stop' });

    double.reset();
    const capped = await json<Completion>(await chat({ model: 'llama3.1:8b', messages: MESSAGES, max_tokens: 2 }));
    expect(capped.choices[0]).toMatchObject({ message: { content: 'tok0 tok1' }, finish_reason: 'length' });
    expect(capped.usage).toEqual({ prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 });

    const both = await json<Completion>(
      await chat({ model: 'llama3.1:8b', messages: MESSAGES, max_tokens: 5, max_completion_tokens: 1 }),
    );
    expect(both.choices[0]).toMatchObject({
      message: { content: 'tok0 tok1 tok2 tok3 tok4' },
      finish_reason: 'length',
    });
    const ignored = await json<Completion>(
      await chat({ model: 'llama3.1:8b', messages: MESSAGES, max_completion_tokens: 1 }),
    );
    expect(ignored.choices[0]).toMatchObject({ message: { content: EIGHT }, finish_reason: 'stop' });

    const roomy = await json<Completion>(await chat({ model: 'llama3.1:8b', messages: MESSAGES, max_tokens: 100 }));
    expect(roomy.choices[0]).toMatchObject({ message: { content: EIGHT }, finish_reason: 'stop' });
  });

  it('matches an untagged model name to name:latest, as Ollama does', async () => {
    const tagged = await startOllamaDouble({ models: ['mistral:latest'] });
    try {
      const res = await fetch(`${tagged.url}/v1/chat/completions`, {
        method: 'POST',
        body: JSON.stringify({ model: 'mistral', messages: [{ role: 'user', content: 'hi' }] }),
      });
      expect(res.status).toBe(200);
      expect((await json<Completion>(res)).model).toBe('mistral');
    } finally {
      await tagged.close();
    }
  });

  it('streams one chunk per token, a finish chunk and [DONE], without usage unless asked', async () => {
    const res = await chat({ model: 'llama3.1:8b', messages: MESSAGES, stream: true });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/event-stream');
    expect(res.headers.get('cache-control')).toBe('no-cache');
    expect(res.headers.get('connection')).toBe('keep-alive');
    const data = sseData(await res.text());
    expect(data.at(-1)).toBe('[DONE]');
    const chunks = data.slice(0, -1).map((d) => JSON.parse(d) as Chunk);
    expect(chunks).toHaveLength(9);
    const id = chunks[0]?.id;
    expect(id).toMatch(/^chatcmpl-\d+$/);
    for (const c of chunks) {
      expect(c).toMatchObject({ id, object: 'chat.completion.chunk', model: 'llama3.1:8b' });
      expect(c.system_fingerprint).toBe('fp_ollama');
      expect('usage' in c).toBe(false);
    }
    chunks.slice(0, 8).forEach((c, i) => {
      expect(c.choices).toEqual([
        { index: 0, delta: { role: 'assistant', content: i < 7 ? `tok${i} ` : 'tok7' }, finish_reason: null },
      ]);
    });
    expect(chunks[8]?.choices).toEqual([
      { index: 0, delta: { role: 'assistant', content: '' }, finish_reason: 'stop' },
    ]);
    expect(chunks.map((c) => c.choices[0]?.delta.content).join('')).toBe(EIGHT);
  });

  it('adds a usage chunk with empty choices before [DONE] when stream_options.include_usage is true', async () => {
    const res = await chat({
      model: 'llama3.1:8b',
      messages: MESSAGES,
      stream: true,
      max_tokens: 3,
      stream_options: { include_usage: true },
    });
    const data = sseData(await res.text());
    expect(data).toHaveLength(3 + 1 + 1 + 1);
    expect(data.at(-1)).toBe('[DONE]');
    const finish = JSON.parse(data[3] ?? '') as Chunk;
    expect(finish.choices[0]?.finish_reason).toBe('length');
    const usage = JSON.parse(data[4] ?? '') as Chunk;
    expect(usage.choices).toEqual([]);
    expect(usage.usage).toEqual({ prompt_tokens: 5, completion_tokens: 3, total_tokens: 8 });
    expect(usage.id).toBe(finish.id);
  });

  it('rejects what Ollama rejects, with its error envelopes', async () => {
    const unknown = await chat({ model: 'nope:1b', messages: MESSAGES });
    expect(unknown.status).toBe(404);
    expect(await unknown.json()).toEqual({
      error: { message: 'model "nope:1b" not found, try pulling it first', type: 'api_error', param: null, code: null },
    });

    const noModel = await chat({ messages: MESSAGES });
    expect(noModel.status).toBe(400);
    expect(await noModel.json()).toEqual({
      error: { message: 'model is required', type: 'invalid_request_error', param: null, code: null },
    });

    const notJson = await chat('{"model":');
    expect(notJson.status).toBe(400);
    expect((await json<ErrorEnvelope>(notJson)).error).toMatchObject({
      type: 'invalid_request_error',
      param: null,
      code: null,
    });

    const cases: Array<[unknown, string]> = [
      [{ model: 'llama3.1:8b', messages: [] }, "[] is too short - 'messages'"],
      [{ model: 'llama3.1:8b', messages: [{ content: 'hi' }] }, 'messages[0].role must be a string'],
      [{ model: 'llama3.1:8b', messages: [{ role: 'user', content: 7 }] }, 'invalid message content type: float64'],
      [{ model: 'llama3.1:8b', messages: [{ role: 'user', content: [{ type: 'audio' }] }] }, 'invalid message format'],
      [
        { model: 'llama3.1:8b', messages: [{ role: 'user', content: [{ type: 'image_url', image_url: {} }] }] },
        'invalid message format',
      ],
      [
        {
          model: 'llama3.1:8b',
          messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'https://x/y.png' } }] }],
        },
        'invalid image input',
      ],
    ];
    for (const [body, message] of cases) {
      const res = await chat(body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      const { error } = await json<ErrorEnvelope>(res);
      expect(error.type).toBe('invalid_request_error');
      expect(error.message).toContain(message);
    }
    // Invalid requests are recorded too, the unparseable one as raw text.
    expect(double.requests).toHaveLength(3 + cases.length);
    expect(double.requests[2]?.body).toBe('{"model":');
  });

  it('fails with the configured status, Retry-After and envelope', async () => {
    double.behave({ failWith: { status: 429, retryAfterSeconds: 7, message: 'slow down' } });
    const res = await chat({ model: 'llama3.1:8b', messages: MESSAGES, stream: true });
    expect(res.status).toBe(429);
    expect(res.headers.get('retry-after')).toBe('7');
    expect(await res.json()).toEqual({
      error: { message: 'slow down', type: 'api_error', param: null, code: null },
    });

    double.behave({ failWith: { status: 503 } });
    const busy = await chat({ model: 'llama3.1:8b', messages: MESSAGES });
    expect(busy.status).toBe(503);
    expect(busy.headers.get('retry-after')).toBeNull();

    double.reset();
    expect((await chat({ model: 'llama3.1:8b', messages: MESSAGES })).status).toBe(200);
  });

  it('delays the response headers by firstByteDelayMs', async () => {
    double.behave({ firstByteDelayMs: 80 });
    const t0 = performance.now();
    const res = await chat({ model: 'llama3.1:8b', messages: MESSAGES, stream: true });
    // Timers may round down by a millisecond.
    expect(performance.now() - t0).toBeGreaterThanOrEqual(79);
    expect(res.status).toBe(200);
    await res.text();
  });

  it('spaces streamed tokens by interTokenDelayMs', async () => {
    double.behave({ completionTokens: 4, interTokenDelayMs: 20 });
    const t0 = performance.now();
    const res = await chat({ model: 'llama3.1:8b', messages: MESSAGES, stream: true });
    await res.text();
    expect(performance.now() - t0).toBeGreaterThanOrEqual(3 * 20 - 1);
  });

  it('resetAfterTokens cuts the connection mid-stream: the client read fails after N token chunks', async () => {
    double.behave({ resetAfterTokens: 2 });
    const res = await chat({ model: 'llama3.1:8b', messages: MESSAGES, stream: true });
    expect(res.status).toBe(200);
    await expect(res.text()).rejects.toThrow();

    // node:http hands over every byte that arrived before the cut, so the count is exact.
    const got = await new Promise<{ text: string; ended: boolean }>((resolve, reject) => {
      const req = request(`${double.url}/v1/chat/completions`, { method: 'POST' }, (r) => {
        let text = '';
        let ended = false;
        r.setEncoding('utf8');
        r.on('data', (d: string) => {
          text += d;
        });
        r.on('end', () => {
          ended = true;
        });
        r.on('error', () => {});
        r.on('close', () => resolve({ text, ended }));
      });
      req.on('error', reject);
      req.end(JSON.stringify({ model: 'llama3.1:8b', messages: MESSAGES, stream: true }));
    });
    expect(got.ended).toBe(false);
    const data = sseData(got.text);
    expect(data.map((d) => (JSON.parse(d) as Chunk).choices[0]?.delta.content)).toEqual(['tok0 ', 'tok1 ']);
    // The double cut it, not the client.
    expect(double.requests.map((r) => r.aborted)).toEqual([false, false]);
  });

  it('stallAfterTokens holds the stream open; the client aborting marks the request aborted', async () => {
    double.behave({ stallAfterTokens: 1 });
    const ac = new AbortController();
    const res = await chat({ model: 'llama3.1:8b', messages: MESSAGES, stream: true }, { signal: ac.signal });
    const reader = res.body?.getReader();
    if (!reader) throw new Error('no body');
    const first = await reader.read();
    expect(new TextDecoder().decode(first.value)).toContain('"content":"tok0 "');
    const next = await Promise.race([reader.read().then(() => 'data' as const), sleep(60).then(() => 'stalled')]);
    expect(next).toBe('stalled');
    expect(double.requests[0]?.aborted).toBe(false);

    ac.abort();
    await until('the double to see the client leave', () => double.requests[0]?.aborted === true);
  });

  it('close() returns promptly with a stalled stream and an idle keep-alive connection open', async () => {
    const own = await startOllamaDouble();
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    const post = (body: unknown) =>
      new Promise<{ status: number; reused: boolean; done: Promise<boolean> }>((resolve, reject) => {
        const req = request(`${own.url}/v1/chat/completions`, { method: 'POST', agent }, (r) => {
          const done = new Promise<boolean>((settle) => {
            r.on('end', () => settle(true));
            r.on('error', () => settle(false));
            r.on('close', () => settle(r.complete));
          });
          r.resume();
          resolve({ status: r.statusCode ?? 0, reused: req.reusedSocket, done });
        });
        req.on('error', reject);
        req.end(JSON.stringify(body));
      });
    try {
      const a = await post({ model: 'llama3.1:8b', messages: MESSAGES });
      expect(await a.done).toBe(true);
      const b = await post({ model: 'llama3.1:8b', messages: MESSAGES });
      expect(await b.done).toBe(true);
      // Keep-alive works: the pooled connection carried the second request.
      expect(b.reused).toBe(true);

      own.behave({ stallAfterTokens: 0 });
      const stalled = await post({ model: 'llama3.1:8b', messages: MESSAGES, stream: true });
      expect(stalled.status).toBe(200);

      const t0 = performance.now();
      await own.close();
      expect(performance.now() - t0).toBeLessThan(500);
      expect(await stalled.done).toBe(false);
      // The double ended it, so it is not recorded as a client abort.
      expect(own.requests.at(-1)?.aborted).toBe(false);
    } finally {
      agent.destroy();
      await own.close();
    }
  });

  it('serves /v1/models, /api/tags, /api/show and the root banner', async () => {
    const models = await (await fetch(`${double.url}/v1/models`)).json();
    expect(models).toEqual({
      object: 'list',
      data: ['llama3.1:8b', 'qwen2.5:0.5b'].map((id) => ({
        id,
        object: 'model',
        created: expect.any(Number),
        owned_by: 'library',
      })),
    });

    const tags = await json<{ models: Array<{ name: string; model: string }> }>(await fetch(`${double.url}/api/tags`));
    expect(tags.models.map((m) => [m.name, m.model])).toEqual([
      ['llama3.1:8b', 'llama3.1:8b'],
      ['qwen2.5:0.5b', 'qwen2.5:0.5b'],
    ]);

    const show = (body: unknown) => fetch(`${double.url}/api/show`, { method: 'POST', body: JSON.stringify(body) });
    const byModel = await show({ model: 'llama3.1:8b' });
    expect(byModel.status).toBe(200);
    const shown = await json<{ modelfile: string; details: unknown }>(byModel);
    expect(shown.modelfile).toContain('FROM ');
    expect(shown.details).toMatchObject({ format: 'gguf', family: 'llama', parameter_size: '8B' });
    expect((await show({ name: 'qwen2.5:0.5b' })).status).toBe(200);
    const missing = await show({ model: 'x' });
    expect(missing.status).toBe(404);
    expect(await missing.json()).toEqual({ error: "model 'x' not found" });
    expect((await show({})).status).toBe(400);

    const root = await fetch(`${double.url}/`);
    expect(root.status).toBe(200);
    expect(await root.text()).toBe('Ollama is running');

    // Only chat completions are recorded.
    expect(double.requests).toHaveLength(0);
  });

  it('reset() restores the default behaviour and clears the recorded requests in place', async () => {
    const requests = double.requests;
    double.behave({ completionTokens: 1, failWith: { status: 500 } });
    expect((await chat({ model: 'llama3.1:8b', messages: MESSAGES })).status).toBe(500);
    expect(requests).toHaveLength(1);
    double.reset();
    expect(requests).toHaveLength(0);
    const body = await json<Completion>(await chat({ model: 'llama3.1:8b', messages: MESSAGES }));
    expect(body.choices[0]?.message.content).toBe(EIGHT);
    expect(() => double.behave({ completionTokens: -1 })).toThrow(RangeError);
  });

  it('behaves differently for one model when told so: long tokens for it, the common behaviour for the rest', async () => {
    const two = await startOllamaDouble({ models: ['llama3.1:8b', 'long:latest'] });
    try {
      two.behave({ completionTokens: 3, tokenBytes: 1000 }, 'long');
      expect(() => two.behave({ tokenBytes: 1 }, 'absent')).toThrow(RangeError);
      const ask = async (model: string) => {
        const res = await fetch(`${two.url}/v1/chat/completions`, {
          method: 'POST',
          body: JSON.stringify({ model, messages: MESSAGES }),
        });
        return (await json<Completion>(res)).choices[0]?.message.content ?? '';
      };
      const long = await ask('long');
      expect(long.split(' ')).toHaveLength(3);
      expect(long).toHaveLength(3000);
      expect(await ask('llama3.1:8b')).toBe(EIGHT);
      two.reset();
      expect(await ask('long')).toBe(EIGHT);
    } finally {
      await two.close();
    }
  });
});

describe('Ollama double: Responses and Anthropic Messages', () => {
  let d: OllamaDouble;
  beforeAll(async () => {
    d = await startOllamaDouble();
  });
  afterAll(async () => {
    await d.close();
  });

  it('answers /v1/responses as the OpenAI SDK reads it, whole and streamed, with the same text and usage', async () => {
    const client = new OpenAI({ baseURL: `${d.url}/v1`, apiKey: 'x' });
    const whole = await client.responses.create({ model: 'llama3.1:8b', input: 'hello there' });
    expect(whole.output_text.length).toBeGreaterThan(0);
    expect(whole.usage).toMatchObject({ input_tokens: expect.any(Number), output_tokens: 8 });
    const stream = await client.responses.create({ model: 'llama3.1:8b', input: 'hello there', stream: true });
    let text = '';
    let done: typeof whole | undefined;
    for await (const ev of stream) {
      if (ev.type === 'response.output_text.delta') text += ev.delta;
      if (ev.type === 'response.completed') done = ev.response;
    }
    expect(text).toBe(whole.output_text);
    expect(done?.usage).toEqual(whole.usage);
  });

  it('answers /v1/messages as the Anthropic SDK reads it, whole and streamed, with the same text and usage', async () => {
    const client = new Anthropic({ baseURL: d.url, apiKey: 'x' });
    const params = { model: 'llama3.1:8b', max_tokens: 5, messages: [{ role: 'user' as const, content: 'hi' }] };
    const whole = await client.messages.create(params);
    expect(whole).toMatchObject({ stop_reason: 'max_tokens', usage: { output_tokens: 5 } });
    const streamed = await client.messages.stream(params).finalMessage();
    expect(streamed.content).toEqual(whole.content);
    expect(streamed.usage).toMatchObject({ input_tokens: whole.usage.input_tokens, output_tokens: 5 });
    const missing = await client.messages.create({ ...params, model: 'nope' }).catch((e: unknown) => e);
    expect(missing).toBeInstanceOf(Anthropic.NotFoundError);
  });
});

/**
 * The fields real Ollama 0.17.4 writes, as captured from it (the values differ, the keys must not):
 * the double sends no more and no less, so that what the gateway mends is tested against what the
 * real server leaves out (proxy/conformance/).
 */
describe('Ollama double: the fields real Ollama 0.17.4 sends', () => {
  let d: OllamaDouble;
  beforeAll(async () => {
    d = await startOllamaDouble();
  });
  afterAll(async () => {
    await d.close();
  });
  const post = (path: string, body: object) =>
    fetch(`${d.url}/v1/${path}`, { method: 'POST', body: JSON.stringify(body) });
  const keys = (o: unknown) => Object.keys(o as object).sort();
  /** The JSON events of an SSE body, named or not. */
  const events = (text: string) =>
    text
      .split('\n\n')
      .map((f) =>
        f
          .split('\n')
          .find((l) => l.startsWith('data: '))
          ?.slice(6),
      )
      .filter((x): x is string => x !== undefined && x !== '[DONE]')
      .map((x) => JSON.parse(x) as Record<string, unknown>);

  it('chat: no logprobs and no refusal, whole or streamed', async () => {
    const whole = await json<Record<string, Array<Record<string, unknown>>>>(
      await post('chat/completions', { model: 'llama3.1:8b', messages: MESSAGES, max_tokens: 2 }),
    );
    expect(keys(whole)).toEqual(['choices', 'created', 'id', 'model', 'object', 'system_fingerprint', 'usage']);
    expect(keys(whole.choices?.[0])).toEqual(['finish_reason', 'index', 'message']);
    expect(keys(whole.choices?.[0]?.message)).toEqual(['content', 'role']);
  });

  it('completions: no logprobs; with include_usage a zero usage on every chunk before the last', async () => {
    const whole = await json<Record<string, Array<Record<string, unknown>>>>(
      await post('completions', { model: 'llama3.1:8b', prompt: 'hi', max_tokens: 2 }),
    );
    expect(keys(whole.choices?.[0])).toEqual(['finish_reason', 'index', 'text']);
    const body = { model: 'llama3.1:8b', prompt: 'hi', max_tokens: 2, stream: true };
    const plain = events(await (await post('completions', body)).text());
    for (const c of plain) expect(c).not.toHaveProperty('usage');
    const chunks = events(
      await (await post('completions', { ...body, stream_options: { include_usage: true } })).text(),
    );
    expect(chunks).toHaveLength(4);
    for (const c of chunks.slice(0, -1)) {
      expect(c.usage).toEqual({ prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 });
      expect(keys((c.choices as unknown[])[0])).toEqual(['finish_reason', 'index', 'text']);
    }
    expect(chunks.at(-1)).toMatchObject({ choices: [], usage: { completion_tokens: 2 } });
  });

  /** Every key of Ollama's Responses object (openai/responses.go). */
  const RESPONSE_KEYS = [
    'background',
    'completed_at',
    'created_at',
    'error',
    'frequency_penalty',
    'id',
    'incomplete_details',
    'instructions',
    'max_output_tokens',
    'max_tool_calls',
    'metadata',
    'model',
    'object',
    'output',
    'parallel_tool_calls',
    'presence_penalty',
    'previous_response_id',
    'prompt_cache_key',
    'reasoning',
    'safety_identifier',
    'service_tier',
    'status',
    'store',
    'temperature',
    'text',
    'tool_choice',
    'tools',
    'top_logprobs',
    'top_p',
    'truncation',
    'usage',
  ];

  it('responses: every field of the real object, its nulls included, whole and in the stream', async () => {
    const body = {
      model: 'llama3.1:8b',
      input: 'hi',
      instructions: 'be brief',
      max_output_tokens: 2,
      metadata: { a: 'b' },
    };
    const whole = await json<Record<string, unknown>>(await post('responses', body));
    expect(keys(whole)).toEqual(RESPONSE_KEYS);
    expect(whole).toMatchObject({
      instructions: 'be brief',
      temperature: 1,
      top_p: 1,
      metadata: {},
      safety_identifier: null,
      prompt_cache_key: null,
      usage: { input_tokens_details: { cached_tokens: 0 }, output_tokens_details: { reasoning_tokens: 0 } },
      output: [{ content: [{ type: 'output_text', annotations: [], logprobs: [] }] }],
    });
    const streamed = events(await (await post('responses', { ...body, stream: true })).text());
    const [created, inProgress] = streamed;
    expect(keys(created?.response)).toEqual(RESPONSE_KEYS);
    expect(created?.response).toMatchObject({ usage: null, completed_at: null, status: 'in_progress' });
    expect(keys(inProgress?.response)).toEqual(RESPONSE_KEYS);
    for (const e of streamed.filter((x) => String(x.type).startsWith('response.output_text')))
      expect(e.logprobs).toEqual([]);
    expect(keys(streamed.at(-1)?.response)).toEqual(RESPONSE_KEYS);
  });

  it('messages: no stop_sequence anywhere, no stop_reason in message_start, the usage’s two counts', async () => {
    const body = { model: 'llama3.1:8b', max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] };
    const whole = await json<Record<string, unknown>>(await post('messages', body));
    expect(keys(whole)).toEqual(['content', 'id', 'model', 'role', 'stop_reason', 'type', 'usage']);
    expect(keys(whole.usage)).toEqual(['input_tokens', 'output_tokens']);
    const streamed = events(await (await post('messages', { ...body, stream: true })).text());
    expect(keys(streamed[0]?.message)).toEqual(['content', 'id', 'model', 'role', 'type', 'usage']);
    const delta = streamed.find((e) => e.type === 'message_delta');
    expect(keys(delta?.delta)).toEqual(['stop_reason']);
    expect(keys(delta?.usage)).toEqual(['input_tokens', 'output_tokens']);
  });
});
