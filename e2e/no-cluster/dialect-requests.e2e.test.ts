import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import OpenAI from 'openai';
import type { ChatCompletionChunk } from 'openai/resources';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OLLAMA_MODEL, OLLAMA_VERSIONS, type OllamaServer, startOllama } from '../ollama/server.js';
import { type ProxyProcess, startProxyProcess } from '../support/proxy-process.js';

/**
 * Requests for more than one answer, and requests that can never succeed, against a REAL Ollama
 * (0.17.4, which answers one choice whatever `n` asks and refuses a `prompt` that is not one
 * string) through the gateway process, called with the official `openai` SDK:
 * `n` and prompt lists served by several calls and merged (whole and streamed) into what a
 * server that takes them would answer; an embeddings answer too large to ever fit is a 400 the
 * SDK does not retry; an unknown model is a 404 before anything else is judged.
 */

const MODEL = OLLAMA_MODEL;
const EMBED = OLLAMA_VERSIONS.OLLAMA_EMBED_MODEL ?? 'all-minilm:l6-v2';
const KEY = 'sk-e2e-dialect-requests-6a1d2c';

let ollama: OllamaServer;
let proxy: ProxyProcess;
let direct: OpenAI;
let proxied: OpenAI;
let dir: string;
let db: string;
/** Requests the SDK sent to the gateway (retries included). */
let gatewayRequests = 0;

/** Ollama's access-log lines for `path` (its [GIN] lines), any status. */
const ollamaCalls = (path: string) =>
  ollama
    .output()
    .split('\n')
    .filter((l) => l.includes('[GIN]') && l.includes(path)).length;

async function recorded(
  requestId: string | null | undefined,
): Promise<{ prompt: number; completion: number; tags: string; status: number }> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const conn = new Database(db, { readonly: true, fileMustExist: true });
    try {
      const row = conn
        .prepare('SELECT prompt, completion, tags, status FROM requests WHERE request_id = ?')
        .get(requestId) as { prompt: number; completion: number; tags: string; status: number } | undefined;
      if (row) return row;
    } catch {
      // the database is being created
    } finally {
      conn.close();
    }
    if (Date.now() > deadline) throw new Error(`no usage record for ${requestId}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const chat = {
  model: MODEL,
  messages: [{ role: 'user' as const, content: 'Name a color.' }],
  max_tokens: 6,
  temperature: 0,
  seed: 7,
};

beforeAll(async () => {
  ollama = await startOllama({ parallel: 2 });
  dir = mkdtempSync(join(tmpdir(), 'pao-dialect-requests-'));
  db = join(dir, 'usage.db');
  const md = (name: string, model: string) =>
    `apiVersion: ai.platform/v1beta1\nkind: ModelDeployment\nmetadata: { name: ${name} }\nspec:\n  model: ${model}\n  serviceName: ${name}\n  endpoint: ${ollama.url}\n`;
  writeFileSync(join(dir, 'config.yaml'), [md('smollm2', MODEL), md('minilm', EMBED)].join('---\n'));
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
  proxied = new OpenAI({
    baseURL: `${proxy.base}/openai/v1`,
    apiKey: KEY,
    // The SDK's default: it retries 408, 409, 429 and 5xx, never a 400 or a 404.
    maxRetries: 2,
    fetch: (url, init) => {
      gatewayRequests += 1;
      return fetch(url, init);
    },
  });
  await direct.chat.completions.create({ ...chat, max_tokens: 1 });
}, 600_000);

afterAll(async () => {
  await proxy?.stop('SIGTERM');
  await ollama?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('n > 1 on a server that gives one choice per call (real Ollama)', () => {
  it('chat n 3, whole: three calls, each choice the answer Ollama gives, usage summed and recorded once', async () => {
    const one = await direct.chat.completions.create(chat);
    const before = ollamaCalls('/v1/chat/completions');
    const { data: p, response } = await proxied.chat.completions
      .create({ ...chat, n: 3 }, { headers: { 'X-LiteLLM-Tags': 'agent:cli,team:ml' } })
      .withResponse();
    expect(ollamaCalls('/v1/chat/completions') - before).toBe(3);
    expect(p.choices.map((c) => c.index)).toEqual([0, 1, 2]);
    for (const c of p.choices) expect(c.message.content).toBe(one.choices[0]?.message.content);
    const u = one.usage;
    expect(p.usage).toMatchObject({
      prompt_tokens: 3 * (u?.prompt_tokens ?? 0),
      completion_tokens: 3 * (u?.completion_tokens ?? 0),
      total_tokens: 3 * (u?.total_tokens ?? 0),
    });
    const rec = await recorded(response.headers.get('x-request-id'));
    expect(rec).toMatchObject({ prompt: p.usage?.prompt_tokens, completion: p.usage?.completion_tokens, status: 200 });
    expect(JSON.parse(rec.tags).sort()).toEqual(['agent:cli', 'team:ml']);
  });

  it('chat n 3, streamed: one stream the SDK reads, each index the answer Ollama gives, one usage chunk summed', async () => {
    const one = await direct.chat.completions.create(chat);
    const { data: stream, response } = await proxied.chat.completions
      .create({
        ...chat,
        n: 3,
        stream: true,
        stream_options: { include_usage: true },
      })
      .withResponse();
    const chunks: ChatCompletionChunk[] = [];
    for await (const c of stream) chunks.push(c);
    const texts = new Map<number, string>();
    for (const c of chunks)
      for (const ch of c.choices) texts.set(ch.index, (texts.get(ch.index) ?? '') + (ch.delta.content ?? ''));
    expect([...texts.keys()].sort()).toEqual([0, 1, 2]);
    for (const t of texts.values()) expect(t).toBe(one.choices[0]?.message.content);
    expect(new Set(chunks.map((c) => c.id)).size).toBe(1);
    const usage = chunks.filter((c) => c.usage);
    expect(usage).toHaveLength(1);
    expect(usage[0]?.usage?.completion_tokens).toBe(3 * (one.usage?.completion_tokens ?? 0));
    expect(chunks.at(-1)?.usage).toBeTruthy();
    const rec = await recorded(response.headers.get('x-request-id'));
    expect(rec.completion).toBe(3 * (one.usage?.completion_tokens ?? 0));
  });
});

describe('completions prompt lists on a server of one prompt string (real Ollama)', () => {
  it('a list of two prompts: one call each, choices in prompt order, each the answer Ollama gives alone', async () => {
    const prompts = ['The capital of France is', 'One, two, three,'];
    const params = { model: MODEL, max_tokens: 5, temperature: 0, seed: 7 };
    const alone = await Promise.all(prompts.map((prompt) => direct.completions.create({ ...params, prompt })));
    // Real Ollama itself refuses the list: why the gateway makes one call per prompt.
    await expect(direct.completions.create({ ...params, prompt: prompts })).rejects.toMatchObject({ status: 400 });
    const p = await proxied.completions.create({ ...params, prompt: prompts });
    expect(p.choices.map((c) => [c.index, c.text])).toEqual(alone.map((a, i) => [i, a.choices[0]?.text]));
    expect(p.usage?.prompt_tokens).toBe(alone.reduce((n, a) => n + (a.usage?.prompt_tokens ?? 0), 0));
    expect(p.usage?.completion_tokens).toBe(alone.reduce((n, a) => n + (a.usage?.completion_tokens ?? 0), 0));
  });

  it('token-id prompts are a 400 naming prompt (Ollama takes text only), not retried', async () => {
    const sent = gatewayRequests;
    const err = await proxied.completions.create({ model: MODEL, prompt: [1, 2, 3] }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect(err).toMatchObject({ status: 400, param: 'prompt', code: 'unsupported_prompt' });
    expect(gatewayRequests - sent).toBe(1);
  });
});

describe('requests that can never succeed are 4xx the SDK does not retry', () => {
  it('embeddings with 10,000,000 dimensions: 400 naming dimensions and the maximum, once, nothing sent to Ollama', async () => {
    const sent = gatewayRequests;
    const calls = ollamaCalls('/v1/embeddings');
    const err = await proxied.embeddings
      .create({ model: EMBED, input: 'hi', dimensions: 10_000_000 })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect(err).toMatchObject({ status: 400, param: 'dimensions' });
    expect((err as Error).message).toContain('65536');
    expect(gatewayRequests - sent).toBe(1);
    expect(ollamaCalls('/v1/embeddings')).toBe(calls);
  });

  it('an embeddings answer larger than the whole memory budget: 400 naming the field and what fits, once', async () => {
    const sent = gatewayRequests;
    const input = Array.from({ length: 2048 }, (_, i) => `t${i}`);
    const err = await proxied.embeddings.create({ model: EMBED, input, dimensions: 65_536 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect(err).toMatchObject({ status: 400, param: 'dimensions', code: 'answer_too_large' });
    expect((err as Error).message).toMatch(/at most \d+ dimensions for 2048 inputs/);
    expect(gatewayRequests - sent).toBe(1);
  });

  it('an unknown model is a NotFoundError, whatever else the request asks, once', async () => {
    const sent = gatewayRequests;
    const err = await proxied.embeddings
      .create({ model: 'no-such-model', input: Array.from({ length: 2048 }, () => 'x'), dimensions: 65_536 })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.NotFoundError);
    expect(err).toMatchObject({ status: 404, code: 'model_not_found' });
    const chatErr = await proxied.chat.completions
      .create({ ...chat, model: 'no-such-model', n: 3 })
      .catch((e: unknown) => e);
    expect(chatErr).toBeInstanceOf(OpenAI.NotFoundError);
    expect(gatewayRequests - sent).toBe(2);
  });
});
