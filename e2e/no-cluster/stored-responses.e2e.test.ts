import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createOpenAI } from '@ai-sdk/openai';
import { Agent, OpenAIProvider, Runner, setTracingDisabled } from '@openai/agents';
import { generateText } from 'ai';
import OpenAI from 'openai';
import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { ApiKey } from '../../crds/api-key.js';
import { ApiKeys, policyOf, sha256 } from '../../proxy/access/auth.js';
import { buildRoutes, type InClusterRoute, RouteTable } from '../../proxy/serving/routes.js';
import { postgresRows } from '../../proxy/stored-responses/postgres-rows.js';
import { itemIdsOf } from '../../proxy/stored-responses/rows.js';
import { OpenAICompatibleUpstream } from '../../proxy/upstreams/openai-compatible.js';
import type { Upstream } from '../../proxy/upstreams/upstream.js';
import { startOllamaDouble } from '../doubles/ollama.js';
import { OLLAMA_MODEL, type OllamaServer, startOllama } from '../ollama/server.js';
import { type Postgres, startPostgres } from '../postgres/server.js';
import { startGateway, type TestGateway } from '../support/gateway.js';
import { routedModel, standaloneFiles, startProxyProcess } from '../support/proxy-process.js';

/**
 * Stateful Responses through the gateway in front of REAL Ollama (which speaks Responses itself),
 * stored in a REAL PostgreSQL (the usage store's database, as replicas share it): the official
 * `openai` SDK's create / retrieve / inputItems.list / delete / background + cancel, the Vercel
 * AI SDK's previousResponseId and the OpenAI Agents SDK's server-managed conversation
 * (previousResponseId between runs). A 135M model recalls a secret word unreliably, so each
 * chained turn is checked where it is certain: what the gateway sent Ollama holds turn 1's input
 * and output. The gateway is composed in-process so the upstream's requests can be read.
 */

const MODEL = OLLAMA_MODEL;
const KEY = 'sk-e2e-stored-team-a-5c1d9e2f7a';
const OTHER = 'sk-e2e-stored-team-b-8e4b0c6d1f';
const SECRET = 'PINEAPPLE';

setTracingDisabled(true);

let ollama: OllamaServer;
let postgres: Postgres;
let gateway: TestGateway;
/** Every line the gateway logged: none may hold what was stored. */
const logged: string[] = [];
const logger = {
  info: (m: string, f?: object) => logged.push(`${m} ${JSON.stringify(f)}`),
  warn: (m: string, f?: object) => logged.push(`${m} ${JSON.stringify(f)}`),
  error: (m: string, f?: object) => logged.push(`${m} ${JSON.stringify(f)}`),
};
/** What the gateway sent Ollama, in order. */
const sent: Array<Record<string, unknown>> = [];

const apiKey = (name: string, team: string, key: string): ApiKey => ({
  apiVersion: 'ai.platform/v1beta1',
  kind: 'ApiKey',
  metadata: { name, namespace: 'platform-agent' },
  spec: { team, role: 'User', rotation: 0 },
  status: { digest: `sha256:${sha256(key).toString('hex')}` },
});

beforeAll(async () => {
  [ollama, postgres] = await Promise.all([startOllama({ parallel: 2 }), startPostgres()]);
  postgres.psql('CREATE DATABASE stored_responses');
  const routes = new RouteTable();
  routes.set(
    buildRoutes(
      [
        {
          apiVersion: 'ai.platform/v1beta1',
          kind: 'ModelDeployment',
          metadata: { name: 'smol', namespace: 'platform-llms' },
          spec: { model: MODEL, serviceName: 'smol', port: 11434, replicas: 1, endpoint: ollama.url },
        },
      ],
      { standalone: true },
    ),
  );
  const keys = new ApiKeys();
  keys.setManaged([apiKey('a', 'team-a', KEY), apiKey('b', 'team-b', OTHER)].flatMap((k) => policyOf(k) ?? []));
  const real = new OpenAICompatibleUpstream();
  const inCluster: Upstream<InClusterRoute> = {
    dialects: (r) => real.dialects(r),
    send: (call) => {
      sent.push(call.body);
      return real.send(call);
    },
  };
  gateway = await startGateway({ usage: { db: dbUrl() }, logger }, { routes, keys, inCluster });
}, 120_000);

afterAll(async () => {
  await gateway?.stop();
  await Promise.all([ollama?.stop(), postgres?.destroy()]);
});

beforeEach(() => {
  sent.length = 0;
});

const dbUrl = () => postgres.url.replace(/\/postgres$/, '/stored_responses');
const client = (key = KEY) => new OpenAI({ baseURL: `${gateway.url}/openai/v1`, apiKey: key, maxRetries: 0 });
/** The last request the gateway sent Ollama, as text. */
const lastSent = () => JSON.stringify(sent.at(-1));
const textOf = (output: unknown) => JSON.stringify(output).match(/"text":"((?:[^"\\]|\\.)*)"/)?.[1] ?? '';

describe('the openai SDK', () => {
  it('creates, retrieves, lists the input of, chains from and deletes a response; another team sees none', async () => {
    const openai = client();
    const first = await openai.responses.create({
      model: MODEL,
      input: `The secret word is ${SECRET}. Say OK.`,
      max_output_tokens: 12,
      temperature: 0,
    });
    expect(first.id).toMatch(/^resp_[0-9a-f]{48}$/);
    expect(first.status).toBe('completed');
    // Ollama was asked to keep nothing: the gateway keeps it.
    expect(sent[0]?.store).toBe(false);

    const retrieved = await openai.responses.retrieve(first.id);
    expect(retrieved).toEqual(first);
    const items = await openai.responses.inputItems.list(first.id);
    expect(items.data).toHaveLength(1);
    expect(items.data[0]).toMatchObject({ type: 'message', role: 'user', content: [{ type: 'input_text' }] });
    expect(JSON.stringify(items.data[0])).toContain(SECRET);

    const second = await openai.responses.create({
      model: MODEL,
      previous_response_id: first.id,
      input: 'What is the secret word?',
      max_output_tokens: 12,
      temperature: 0,
    });
    expect(second.previous_response_id).toBe(first.id);
    const upstream = lastSent();
    expect(upstream).toContain(SECRET);
    expect(upstream).toContain(textOf(first.output));
    expect(upstream).toContain('What is the secret word?');
    expect(upstream).not.toContain('previous_response_id');

    await expect(client(OTHER).responses.retrieve(second.id)).rejects.toMatchObject({ status: 404 });
    await expect(
      client(OTHER).responses.create({ model: MODEL, previous_response_id: second.id, input: 'and?' }),
    ).rejects.toMatchObject({ status: 404, code: 'previous_response_not_found' });

    await openai.responses.delete(first.id);
    await expect(openai.responses.retrieve(first.id)).rejects.toMatchObject({ status: 404 });
    // The chain through a deleted turn is broken, as at OpenAI.
    await expect(
      openai.responses.create({ model: MODEL, previous_response_id: second.id, input: 'and?' }),
    ).rejects.toMatchObject({ status: 404, code: 'previous_response_not_found' });
  }, 60_000);

  it('runs a background response to completion, and cancels another', async () => {
    const openai = client();
    const queued = await openai.responses.create({
      model: MODEL,
      input: 'Say hi.',
      background: true,
      max_output_tokens: 8,
    });
    expect(queued.status).toBe('queued');
    let done = queued;
    for (let i = 0; i < 300 && (done.status === 'queued' || done.status === 'in_progress'); i++) {
      await new Promise((r) => setTimeout(r, 100));
      done = await openai.responses.retrieve(queued.id);
    }
    expect(done.status).toBe('completed');
    expect(done.output_text.length).toBeGreaterThan(0);

    const long = await openai.responses.create({
      model: MODEL,
      input: 'Count from one to one thousand in words.',
      background: true,
      max_output_tokens: 4000,
    });
    const cancelled = await openai.responses.cancel(long.id);
    expect(cancelled.status).toBe('cancelled');
    expect((await openai.responses.retrieve(long.id)).status).toBe('cancelled');
  }, 60_000);
});

describe('the Vercel AI SDK', () => {
  it('continues a conversation with providerOptions.openai.previousResponseId', async () => {
    const openai = createOpenAI({ baseURL: `${gateway.url}/openai/v1`, apiKey: KEY });
    const first = await generateText({
      model: openai.responses(MODEL),
      prompt: `Remember the secret word ${SECRET}.`,
      maxOutputTokens: 12,
      temperature: 0,
      maxRetries: 0,
    });
    const previousResponseId = first.providerMetadata?.openai?.responseId;
    expect(previousResponseId).toMatch(/^resp_/);
    const second = await generateText({
      model: openai.responses(MODEL),
      prompt: 'What was the secret word?',
      maxOutputTokens: 12,
      temperature: 0,
      maxRetries: 0,
      providerOptions: { openai: { previousResponseId: String(previousResponseId) } },
    });
    expect(lastSent()).toContain(SECRET);
    expect(lastSent()).toContain(JSON.stringify(first.text).slice(1, -1));
    // The SDK sent the new turn only: the first came from the gateway's store.
    const own = await client().responses.inputItems.list(String(second.providerMetadata?.openai?.responseId));
    expect(JSON.stringify(own.data)).not.toContain(SECRET);
  }, 60_000);
});

describe('the Vercel AI SDK, store on, the conversation as messages', () => {
  it('sends earlier answers as item_reference, which the gateway resolves from its store', async () => {
    const asked: string[] = [];
    const openai = createOpenAI({
      baseURL: `${gateway.url}/openai/v1`,
      apiKey: KEY,
      fetch: (url, init) => {
        asked.push(String(init?.body));
        return fetch(url, init);
      },
    });
    const ask = { model: openai.responses(MODEL), maxOutputTokens: 12, temperature: 0, maxRetries: 0 };
    const first = await generateText({ ...ask, prompt: `Remember the secret word ${SECRET}.` });
    await generateText({
      ...ask,
      messages: [
        { role: 'user', content: `Remember the secret word ${SECRET}.` },
        ...first.response.messages,
        { role: 'user', content: 'What was it?' },
      ],
    });
    expect(asked.at(-1)).toContain('"item_reference"');
    const upstream = lastSent();
    expect(upstream).not.toContain('item_reference');
    expect(upstream).toContain(JSON.stringify(first.text).slice(1, -1));
  }, 60_000);
});

describe('the OpenAI Agents SDK', () => {
  it("keeps the conversation on the server between runs (previousResponseId: the last run's lastResponseId)", async () => {
    const provider = new OpenAIProvider({ baseURL: `${gateway.url}/openai/v1`, apiKey: KEY, useResponses: true });
    const runner = new Runner({ modelProvider: provider });
    const agent = new Agent({
      name: 'terse',
      instructions: 'You are terse.',
      model: MODEL,
      modelSettings: { maxTokens: 12 },
    });
    const first = await runner.run(agent, `The secret word is ${SECRET}.`);
    expect(first.lastResponseId).toMatch(/^resp_/);
    sent.length = 0;
    const second = await runner.run(agent, 'What is the secret word?', { previousResponseId: first.lastResponseId });
    expect(second.lastResponseId).toMatch(/^resp_/);
    // The SDK sent only the new turn; the gateway added the first from its store.
    expect(lastSent()).toContain(SECRET);
    const own = await client().responses.inputItems.list(String(second.lastResponseId));
    expect(JSON.stringify(own.data)).not.toContain(SECRET);
    const stored = await client().responses.retrieve(String(second.lastResponseId));
    expect(stored.previous_response_id).toBe(first.lastResponseId);
  }, 60_000);
});

describe('the PostgreSQL rows', () => {
  it('count their bytes and sweep the expired ones; nothing stored was logged', async () => {
    const pool = new pg.Pool({ connectionString: dbUrl(), max: 1 });
    try {
      const rows = postgresRows(pool);
      const before = await rows.bytes();
      expect(before).toBeGreaterThan(0);
      const row = {
        owner: 'team:x',
        status: 'completed',
        background: false,
        response: '{"x":1}',
        input: '[]',
        items: [],
      };
      await rows.put({ ...row, id: 'resp_expired', created: 1, expires: Date.now() - 1 });
      expect(await rows.bytes()).toBe(before + 9);
      expect(await rows.sweep(Date.now())).toBe(1);
      expect(await rows.get('resp_expired')).toBeUndefined();
      expect(await rows.bytes()).toBe(before);
      // The item index: an item's response within its owner (any owner for an admin); a
      // background response's output indexed as it settles; gone with its response.
      const answer = (id: string) => JSON.stringify({ output: [{ id, type: 'message' }] });
      const input = JSON.stringify([{ id: 'msg_pg_in', type: 'message' }]);
      await rows.put({
        ...row,
        id: 'resp_pg1',
        created: 1,
        expires: Date.now() + 60_000,
        response: answer('msg_pg1'),
        input,
        items: itemIdsOf(answer('msg_pg1'), input),
      });
      expect(await rows.findItem('msg_pg1', 'team:x')).toBe('resp_pg1');
      expect(await rows.findItem('msg_pg_in', 'team:x')).toBe('resp_pg1');
      expect(await rows.findItem('msg_pg1', 'team:y')).toBeUndefined();
      expect(await rows.findItem('msg_pg1', undefined)).toBe('resp_pg1');
      const bg = { ...row, id: 'resp_pg2', created: 2, expires: Date.now() + 60_000, status: 'in_progress' };
      await rows.put({ ...bg, background: true, response: '{"output":[]}' });
      expect(await rows.settle('resp_pg2', 'completed', answer('msg_pg2'))).toBe(true);
      expect(await rows.findItem('msg_pg2', 'team:x')).toBe('resp_pg2');
      expect(await rows.delete('resp_pg1')).toBe(true);
      expect(await rows.delete('resp_pg1')).toBe(false);
      expect(await rows.findItem('msg_pg1', 'team:x')).toBeUndefined();
      expect(await rows.findItem('msg_pg_in', 'team:x')).toBeUndefined();
      await pool.query('UPDATE stored_responses SET expires = 1 WHERE id = $1', ['resp_pg2']);
      expect(await rows.sweep(Date.now())).toBe(1);
      expect(await rows.findItem('msg_pg2', 'team:x')).toBeUndefined();
      expect(await rows.bytes()).toBe(before);
    } finally {
      await pool.end();
    }
    for (const line of logged) expect(line).not.toContain(SECRET);
  });
});

describe('a standalone proxy process on an SQLite file', () => {
  it('keeps responses across a restart: retrieved, chained from, counted in the stored bytes', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'stored-sqlite-'));
    const args = [
      ...standaloneFiles(dir, [routedModel(MODEL, ollama.url)], `${KEY}\n`),
      '--usage-db',
      join(dir, 'usage.db'),
    ];
    const storedBytes = async (metrics: string) =>
      Number(/^pao_gateway_stored_responses_bytes (\d+)/m.exec(await (await fetch(`${metrics}/metrics`)).text())?.[1]);
    let proxy = await startProxyProcess(args);
    try {
      const openai = () => new OpenAI({ baseURL: `${proxy.base}/openai/v1`, apiKey: KEY, maxRetries: 0 });
      const first = await openai().responses.create({
        model: MODEL,
        input: `my word is ${SECRET}`,
        max_output_tokens: 8,
      });
      // Readable as soon as the answer is out (its row committed before it left).
      expect((await openai().responses.retrieve(first.id)).output_text).toBe(first.output_text);
      const second = await openai().responses.create({
        model: MODEL,
        input: 'and again?',
        previous_response_id: first.id,
        max_output_tokens: 8,
      });
      expect(second.previous_response_id).toBe(first.id);
      expect(await storedBytes(proxy.metrics)).toBeGreaterThan(0);
      await proxy.stop('SIGTERM');
      proxy = await startProxyProcess(args);
      const kept = await openai().responses.retrieve(second.id);
      expect(kept).toMatchObject({ id: second.id, previous_response_id: first.id, status: 'completed' });
      const inputs = await openai().responses.inputItems.list(second.id);
      expect(JSON.stringify(inputs.data)).toContain('and again?');
      const third = await openai().responses.create({
        model: MODEL,
        input: 'once more',
        previous_response_id: second.id,
        max_output_tokens: 8,
      });
      expect(third.previous_response_id).toBe(second.id);
      await openai().responses.delete(first.id);
      await expect(openai().responses.retrieve(first.id)).rejects.toMatchObject({ status: 404 });
      expect(proxy.output()).not.toContain(SECRET);
    } finally {
      await proxy.stop('SIGTERM');
      rmSync(dir, { recursive: true, force: true });
    }
  }, 90_000);
});

describe('two replicas on one PostgreSQL', () => {
  it('a background response running on one is cancelled through the other: its call stops within seconds', async () => {
    // A double answering after 60 s (a delay on demand): the call is surely running when cancelled.
    const slow = await startOllamaDouble({ models: ['slow:1b'], record: false });
    slow.behave({ firstByteDelayMs: 60_000 });
    const signals: AbortSignal[] = [];
    const replica = async () => {
      const routes = new RouteTable();
      const md = { model: 'slow:1b', serviceName: 'slow', port: 11434, replicas: 1, endpoint: slow.url };
      routes.set(
        buildRoutes(
          [{ apiVersion: 'ai.platform/v1beta1', kind: 'ModelDeployment', metadata: { name: 'slow' }, spec: md }],
          { standalone: true },
        ),
      );
      const keys = new ApiKeys();
      keys.setManaged([apiKey('a', 'team-a', KEY)].flatMap((k) => policyOf(k) ?? []));
      const real = new OpenAICompatibleUpstream();
      const inCluster: Upstream<InClusterRoute> = {
        dialects: (r) => real.dialects(r),
        send: (call) => {
          signals.push(call.signal);
          return real.send(call);
        },
      };
      return startGateway({ usage: { db: dbUrl() }, logger }, { routes, keys, inCluster });
    };
    const [a, b] = await Promise.all([replica(), replica()]);
    try {
      const on = (g: TestGateway) => new OpenAI({ baseURL: `${g.url}/openai/v1`, apiKey: KEY, maxRetries: 0 });
      const queued = await on(a).responses.create({ model: 'slow:1b', input: 'take your time', background: true });
      await expect.poll(() => signals.length, { timeout: 10_000 }).toBe(1);
      const cancelled = await on(b).responses.cancel(queued.id);
      expect(cancelled.status).toBe('cancelled');
      const from = Date.now();
      // Replica a learns it from the row (it polls each second) and stops its call.
      await expect.poll(() => signals[0]?.aborted, { timeout: 10_000, interval: 100 }).toBe(true);
      expect(Date.now() - from).toBeLessThan(5_000);
      expect((await on(a).responses.retrieve(queued.id)).status).toBe('cancelled');
    } finally {
      await Promise.all([a.stop(), b.stop()]);
      await slow.close();
    }
  }, 60_000);
});
