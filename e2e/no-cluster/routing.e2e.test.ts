import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type HostedDouble, startHostedDouble } from '../doubles/hosted.js';
import { OLLAMA_VERSIONS } from '../ollama/server.js';
import { claudePrint, installClients } from '../support/agent-clients.js';
import { type AgentGateway, startAgentGateway, type UsageRow } from '../support/agent-gateway.js';

/**
 * Routing (RoutingPolicy, issue 44) end to end: the standalone proxy in front of real Ollama
 * (SmolLM2, the policy's Light tier) and doubles of the premium tiers (OpenAI's gpt-5-mini and
 * gpt-5 on the hosted double; Claude on the Bedrock double for Claude Code's main model). The
 * official OpenAI SDK asks for `model: "auto"`: a simple question is answered by Ollama, the
 * same answer Ollama gives directly; a hard multi-step one by gpt-5; whole and streamed, on chat
 * completions and Responses. Claude Code runs with its small, fast model set to `auto`. A key
 * whose budget is spent and degrades is served by Ollama; one that refuses gets 429. Every
 * answer names what served it (X-Routed-Model, the body's model) and why (X-Routing-Reason);
 * every record says what was asked, by which policy, why, and what the baseline would have cost,
 * read back from the gateway's store and its routing report (GET /v1/usage/routing).
 */

/** SmolLM2 with temperature 0 and short answers: the Light tier, deterministic, quick on two cores. */
const LIGHT = 'smollm2:routed';
const MINI = 'gpt-5-mini';
const FRONTIER = 'gpt-5';
const CLAUDE = 'anthropic.claude-sonnet-4-5-20250929-v1:0';
/** An admin key of no ApiKey: reads every team's usage. */
const KEY = 'sk-e2e-routing-admin-3e9b1f7c2a4d';
const DEGRADE = 'sk-e2e-routing-degrade-8a2c6e0f4b1d';
const REFUSE = 'sk-e2e-routing-refuse-5d7f9b3e1c0a';
const OPENAI_KEY = 'sk-openai-double-0001';
/** The hosted double's answer: its default four completion tokens. */
const DOUBLE_ANSWER = 'tok0 tok1 tok2 tok3';

const SIMPLE = 'What is the capital of France?';
const EMBED = OLLAMA_VERSIONS.OLLAMA_EMBED_MODEL ?? 'all-minilm:l6-v2';
const HARD =
  'Design a distributed rate limiter for a multi-region API gateway. 1. Compare token bucket and sliding window ' +
  'algorithms with their trade-offs. 2. Write the Go code for the Redis-backed implementation, step by step. ' +
  '3. Prove that your algorithm never admits more than the limit across regions, and analyze its failure modes.\n' +
  '```go\nfunc (l *Limiter) Allow(key string) (bool, error) {\n\treturn false, nil\n}\n```';
const MATH =
  'Prove by induction that the sum of the first n odd numbers is n^2. Then, step by step: 1. compute the integral ' +
  'of x^2 * e^x from 0 to 1, 2. find the eigenvalues of the matrix [[2, 1], [1, 2]], 3. write a Python function ' +
  'that checks both results numerically.';

let gw: AgentGateway;
let hosted: HostedDouble;
let clients: string;

const doc = (kind: string, name: string, spec: Record<string, unknown>) =>
  [
    'apiVersion: ai.platform/v1beta1',
    `kind: ${kind}`,
    `metadata: {name: ${name}}`,
    `spec: ${JSON.stringify(spec)}`,
  ].join('\n');

const budgetKey = (name: string, whenSpent: 'Degrade' | 'Refuse') =>
  doc('ApiKey', name, { team: 'routing', budget: { usd: 0.000001, period: 'Monthly', whenSpent } });

/** Every policy's pool: Ollama, then the two OpenAI tiers. */
const POOL = [
  { name: LIGHT, tier: 'Light' },
  { name: MINI, tier: 'Standard' },
  { name: FRONTIER, tier: 'Frontier' },
];

beforeAll(async () => {
  clients = installClients();
  hosted = await startHostedDouble({ openaiKeys: [OPENAI_KEY], models: { openai: [MINI, FRONTIER] } });
  gw = await startAgentGateway({
    key: KEY,
    bedrock: [{ modelId: CLAUDE, providerName: 'Anthropic' }],
    providerModels: [`us.${CLAUDE}`],
    providerAliases: [{ name: 'claude-sonnet-4-5', model: `us.${CLAUDE}` }],
    variants: [{ model: LIGHT, parameters: { temperature: 0, num_predict: 32 } }],
    ollamaModels: [EMBED],
    documents: [
      doc('ExternalProvider', 'openai', {
        provider: 'openai',
        displayName: 'OpenAI',
        auth: { method: 'APIKey', secretRef: { name: 'openai-key' } },
        models: [MINI, FRONTIER],
      }),
      doc('RoutingPolicy', 'default', {
        models: POOL,
        objective: 'Balanced',
        // The questions asked here score 0 (SIMPLE), 0.56 (HARD) and 0.78 (MATH) with the shipped weights.
        scorer: { thresholds: { standard: 0.5, frontier: 0.55 } },
      }),
      // A policy for a coding agent's small model (its requests name `agent/auto`). Claude Code's
      // hook verdict (a JSON answer asked, its hook input pasted) reads to the learned scorer as
      // ordinary programming work, about 0.5; the payload carries a fresh session id and paths
      // each turn, so it lands either side of default's 0.55. Only what reads as hard research or
      // proofs goes to the Frontier model here.
      doc('RoutingPolicy', 'agent', {
        models: POOL,
        objective: 'Balanced',
        scorer: { thresholds: { standard: 0.5, frontier: 0.9 } },
      }),
      // The same pool, its classifier retrained in the space of a real embedding model (all-MiniLM
      // on the real Ollama) on the bank's sample and the team's examples.
      doc('RoutingPolicy', 'minilm', {
        models: POOL,
        scorer: {
          semantic: {
            embeddingModel: EMBED,
            examples: [
              { tier: 'Light', prompt: 'What is the tallest mountain in Japan?' },
              { tier: 'Frontier', prompt: 'Find all primes p such that p^2 + 2 is also prime, and prove it.' },
            ],
          },
        },
      }),
      budgetKey('degrade', 'Degrade'),
      budgetKey('refuse', 'Refuse'),
    ],
    namedKeys: { degrade: DEGRADE, refuse: REFUSE },
    secrets: { 'openai-key': { apiKey: OPENAI_KEY } },
    env: hosted.env,
  });
}, 600_000);

afterAll(async () => {
  await gw?.stop();
  await hosted?.close();
});

const gateway = (apiKey = KEY) =>
  new OpenAI({
    baseURL: `${gw.proxy.base}/openai/v1`,
    apiKey,
    maxRetries: 0,
    defaultHeaders: { 'X-Tags': 'e2e:routing' },
  });
const direct = () => new OpenAI({ baseURL: `${gw.ollama.url}/v1`, apiKey: 'ollama', maxRetries: 0 });

/** The usage record of one request, by the X-Request-Id it answered with. */
async function record(requestId: string | null): Promise<UsageRow> {
  expect(requestId).toMatch(/^req_/);
  const [row] = await gw.rowsAtLeast((r) => r.request_id === requestId, 1);
  if (!row) throw new Error(`no usage record for ${requestId}`);
  return row;
}

/** What every routed answer says of itself: the model that served, and why. */
function expectRouted(headers: Headers, model: string, reason: RegExp): void {
  expect(headers.get('x-routed-model')).toBe(model);
  expect(headers.get('x-routing-reason')).toMatch(reason);
}

const chat = (content: string) => ({
  model: 'auto',
  max_tokens: 16,
  temperature: 0,
  messages: [{ role: 'user' as const, content }],
});

describe('the OpenAI SDK with model "auto" (chat completions)', () => {
  it('lists "auto" beside the models', async () => {
    const ids: string[] = [];
    for await (const m of gateway().models.list()) ids.push(m.id);
    expect(ids).toEqual(expect.arrayContaining(['auto', LIGHT, MINI, FRONTIER]));
  });

  it('a simple question is answered by Ollama, as Ollama answers it directly, and says so', async () => {
    const own = await direct().chat.completions.create({ ...chat(SIMPLE), model: LIGHT });
    const { data, response } = await gateway().chat.completions.create(chat(SIMPLE)).withResponse();
    expectRouted(response.headers, LIGHT, /^score; tier=Light; score=0\.\d\d/);
    expect(data.model).toBe(LIGHT);
    // The same call, direct and through the gateway: the same answer in the same shape.
    expect(data.object).toBe(own.object);
    expect(data.choices.map((c) => [c.index, c.finish_reason, c.message.role, c.message.content])).toEqual(
      own.choices.map((c) => [c.index, c.finish_reason, c.message.role, c.message.content]),
    );
    expect(data.usage).toMatchObject({
      prompt_tokens: own.usage?.prompt_tokens,
      completion_tokens: own.usage?.completion_tokens,
    });
    const row = await record(response.headers.get('x-request-id'));
    expect(row).toMatchObject({
      model: LIGHT,
      status: 200,
      requested_model: 'auto',
      routing_policy: 'default',
      routing_reason: 'score',
      escalations: 0,
    });
    // Savings: the same tokens on the policy's baseline (its Frontier model) cost more.
    expect(row.counterfactual).toBeGreaterThan(row.cost);
  });

  it('hard multi-step coding and math questions are answered by the Frontier model', async () => {
    for (const prompt of [HARD, MATH]) {
      const before = hosted.calls.length;
      const { data, response } = await gateway().chat.completions.create(chat(prompt)).withResponse();
      expectRouted(
        response.headers,
        FRONTIER,
        /^score; tier=Frontier; score=0\.\d\d; signals=learned; embedding=built-in$/,
      );
      expect(data.model).toBe(FRONTIER);
      expect(data.choices[0]?.message.content).toBe(DOUBLE_ANSWER);
      expect(hosted.calls.slice(before).map((c) => (c.body as { model?: string }).model)).toEqual([FRONTIER]);
      const row = await record(response.headers.get('x-request-id'));
      expect(row).toMatchObject({
        model: FRONTIER,
        provider: expect.stringContaining('openai'),
        requested_model: 'auto',
        routing_reason: 'score',
      });
      // Served on the baseline itself: it costs what the baseline costs, nothing saved.
      expect(row.cost).toBeGreaterThan(0);
      expect(row.counterfactual).toBeCloseTo(row.cost, 12);
    }
  });

  it('streams: the simple question from Ollama (the same text as directly), the hard one from gpt-5', async () => {
    const collect = async (client: OpenAI, body: ReturnType<typeof chat>) => {
      const { data, response } = await client.chat.completions
        .create({ ...body, stream: true, stream_options: { include_usage: true } })
        .withResponse();
      let text = '';
      const models = new Set<string>();
      for await (const chunk of data) {
        models.add(chunk.model);
        text += chunk.choices[0]?.delta.content ?? '';
      }
      return { text, models: [...models], headers: response.headers };
    };
    const own = await collect(direct(), { ...chat(SIMPLE), model: LIGHT });
    const simple = await collect(gateway(), chat(SIMPLE));
    expectRouted(simple.headers, LIGHT, /^score; tier=Light/);
    expect(simple.models).toEqual([LIGHT]);
    expect(simple.text).toBe(own.text);
    expect((await record(simple.headers.get('x-request-id'))).stream).toBe(1);
    const hard = await collect(gateway(), chat(HARD));
    expectRouted(hard.headers, FRONTIER, /^score; tier=Frontier/);
    expect(hard.models).toEqual([FRONTIER]);
    expect(hard.text).toBe(DOUBLE_ANSWER);
  });
});

describe('the OpenAI SDK with model "auto" (Responses)', () => {
  const ask = (input: string) => ({
    model: 'auto',
    input,
    max_output_tokens: 16,
    temperature: 0,
    store: false,
  });

  it('a simple question is answered by Ollama as directly, a hard one by gpt-5', async () => {
    const own = await direct().responses.create({ ...ask(SIMPLE), model: LIGHT });
    const { data, response } = await gateway().responses.create(ask(SIMPLE)).withResponse();
    expectRouted(response.headers, LIGHT, /^score; tier=Light/);
    expect(data.model).toBe(LIGHT);
    expect(data.output_text).toBe(own.output_text);
    expect(data.usage).toMatchObject({
      input_tokens: own.usage?.input_tokens,
      output_tokens: own.usage?.output_tokens,
    });
    expect(await record(response.headers.get('x-request-id'))).toMatchObject({
      model: LIGHT,
      endpoint: 'responses',
      requested_model: 'auto',
      routing_reason: 'score',
    });
    const hard = await gateway().responses.create(ask(HARD)).withResponse();
    expectRouted(hard.response.headers, FRONTIER, /^score; tier=Frontier/);
    expect(hard.data.model).toBe(FRONTIER);
    expect(hard.data.output_text).toBe(DOUBLE_ANSWER);
  });
});

describe('a spent budget', () => {
  /** One paid request spends the key's budget of 0.000001 USD; the guard sees it after its next refresh. */
  async function spend(key: string): Promise<void> {
    const paid = await gateway(key)
      .chat.completions.create({ ...chat(SIMPLE), model: MINI })
      .withResponse();
    expect(paid.response.headers.get('x-routed-model')).toBeNull();
    expect((await record(paid.response.headers.get('x-request-id'))).cost).toBeGreaterThan(0.000001);
  }

  it('that degrades: the next request naming gpt-5-mini is served by Ollama, saying budget-degraded', async () => {
    await spend(DEGRADE);
    // The budget guard re-reads spend every 2 s: ask until it has (each paid answer spends more).
    let answer: Awaited<ReturnType<typeof degraded>> | undefined;
    const degraded = () =>
      gateway(DEGRADE)
        .chat.completions.create({ ...chat(HARD), model: MINI })
        .withResponse();
    for (const deadline = Date.now() + 30_000; Date.now() < deadline; ) {
      answer = await degraded();
      if (answer.response.headers.get('x-routed-model') !== null) break;
      await new Promise((r) => setTimeout(r, 500));
    }
    if (!answer) throw new Error('no answer');
    expectRouted(answer.response.headers, LIGHT, /^budget-degraded; /);
    expect(answer.data.model).toBe(LIGHT);
    const row = await record(answer.response.headers.get('x-request-id'));
    expect(row).toMatchObject({
      model: LIGHT,
      requested_model: MINI,
      routing_policy: 'default',
      routing_reason: 'budget-degraded',
    });
    expect(row.counterfactual).toBeGreaterThan(row.cost);
  });

  it('that refuses: the next request gets 429 insufficient_quota', async () => {
    await spend(REFUSE);
    let refused: unknown;
    for (const deadline = Date.now() + 30_000; Date.now() < deadline && refused === undefined; ) {
      refused = await gateway(REFUSE)
        .chat.completions.create({ ...chat(SIMPLE), model: MINI })
        .then(
          () => undefined,
          (err: unknown) => err,
        );
      if (refused === undefined) await new Promise((r) => setTimeout(r, 500));
    }
    expect(refused).toBeInstanceOf(OpenAI.RateLimitError);
    expect(refused).toMatchObject({ status: 429, code: 'insufficient_quota' });
  });
});

describe('Claude Code with its small, fast model set to "agent/auto"', () => {
  /**
   * A prompt hook before each Bash call: Claude Code asks its small, fast model whether the
   * condition holds (querySource hook_prompt, a JSON verdict). Without it a `claude -p` turn asks
   * the small model nothing (titles, summaries and suggestions are the interactive UI's).
   */
  const PROMPT_HOOK = {
    hooks: {
      PreToolUse: [
        { matcher: 'Bash', hooks: [{ type: 'prompt', prompt: 'The command only prints text: $ARGUMENTS' }] },
      ],
    },
  };
  const env = {
    // Claude Code 2.1.197 reads it (ANTHROPIC_SMALL_FAST_MODEL is its older name, still honoured).
    ANTHROPIC_DEFAULT_HAIKU_MODEL: 'agent/auto',
    ANTHROPIC_CUSTOM_HEADERS: 'X-Tags: agent:claude-code',
    // It asks for 32,000 output tokens (the gateway lowers that to what SmolLM2's 8,192-token
    // window leaves); a short answer is all a hook's verdict needs, and quick on two cores.
    CLAUDE_CODE_MAX_OUTPUT_TOKENS: '100',
  };

  it('completes a turn: its main model on Claude (the Bedrock double), its "auto" request below the Frontier model', async () => {
    const tagged = (r: UsageRow) => (JSON.parse(r.tags) as string[]).includes('agent:claude-code');
    const before = gw.rows().filter(tagged).length;
    const invokes = gw.aws.calls.length;
    const out = await claudePrint(clients, {
      base: gw.proxy.base,
      key: KEY,
      model: 'claude-sonnet-4-5',
      prompt: 'Use Bash to run: echo gateway-ok',
      args: ['--system-prompt', 'You are terse.', '--settings', JSON.stringify(PROMPT_HOOK)],
      env,
    });
    expect(out.is_error).toBe(false);
    expect(out.result.length).toBeGreaterThan(0);
    // The tool call, the hook's verdict, the answer to the tool's output.
    const rows = (await gw.rowsAtLeast(tagged, before + 3)).slice(before);
    const main = rows.filter((r) => r.model === `us.${CLAUDE}`);
    expect(main.length).toBeGreaterThanOrEqual(2);
    expect(main.every((r) => r.status === 200 && r.requested_model === null)).toBe(true);
    expect(gw.aws.calls.slice(invokes).filter((c) => c.action === 'InvokeModelWithResponseStream').length).toBe(
      main.length,
    );
    const auto = rows.filter((r) => r.requested_model === 'agent/auto');
    expect(auto.length).toBeGreaterThan(0);
    // The hook's verdicts are routed by the agent policy below the Frontier model, to Ollama or
    // gpt-5-mini, saving against it (the judgement itself is measured by the routing bench on
    // held-out prompts, not here).
    for (const r of auto) {
      expect(r).toMatchObject({ status: 200, routing_policy: 'agent', routing_reason: 'score' });
      expect([LIGHT, MINI]).toContain(r.model);
      expect(r.counterfactual).toBeGreaterThan(r.cost);
    }
  }, 300_000);
});

describe('what routing saved, through the usage API', () => {
  type Numbers = {
    routedRequests: number;
    routedCostUsd: number;
    counterfactualCostUsd: number;
    routingSavingsUsd: number;
  };
  const get = async <T>(path: string): Promise<T> => {
    const res = await fetch(`${gw.proxy.base}${path}`, { headers: { 'x-api-key': KEY } });
    expect(res.status).toBe(200);
    return (await res.json()) as T;
  };

  it('GET /v1/usage/routing by served model and by policy, GET /v1/usage with the routing savings', async () => {
    const routed = gw.rows().filter((r) => r.requested_model !== null).length;
    const byModel = await get<{ totals: Numbers; groups: Array<Numbers & { group: string }> }>(
      '/v1/usage/routing?groupBy=model',
    );
    expect(byModel.totals.routedRequests).toBeGreaterThanOrEqual(routed);
    const light = byModel.groups.find((g) => g.group === LIGHT);
    // Chat, stream and Responses of the simple question, the degraded request (Claude Code's hook may be on gpt-5-mini).
    expect(light?.routedRequests).toBeGreaterThanOrEqual(4);
    expect(light?.counterfactualCostUsd).toBeGreaterThan(light?.routedCostUsd ?? Number.POSITIVE_INFINITY);
    expect(light?.routingSavingsUsd).toBeGreaterThan(0);
    const frontier = byModel.groups.find((g) => g.group === FRONTIER);
    expect(frontier?.routedRequests).toBeGreaterThanOrEqual(4);
    // Served on the baseline: nothing saved, nothing lost.
    expect(frontier?.routingSavingsUsd).toBeCloseTo(0, 9);
    const byPolicy = await get<{ groups: Array<Numbers & { group: string }> }>('/v1/usage/routing?groupBy=policy');
    // Claude Code's small model asked agent/auto.
    expect(byPolicy.groups.map((g) => g.group).sort()).toEqual(['agent', 'default']);
    const usage = await get<{ totals: { routedRequests: number; routingSavingsUsd: number } }>('/v1/usage');
    expect(usage.totals.routedRequests).toBe(byModel.totals.routedRequests);
    expect(usage.totals.routingSavingsUsd).toBeCloseTo(byModel.totals.routingSavingsUsd, 9);
    expect(usage.totals.routingSavingsUsd).toBeGreaterThan(0);
  });
});

describe("a policy retrained in a real embedding model's space (all-MiniLM on Ollama)", () => {
  const OLYMPIAD =
    'Determine all pairs of positive integers (a, b) such that a^2 + b divides b^2 + a and b^2 + a divides a^2 + b, and prove that there are no others.';

  it('scores with the model once trained: a plain question on Ollama, an olympiad problem on gpt-5', async () => {
    const ask = (content: string) =>
      gateway()
        .chat.completions.create({ ...chat(content), model: 'minilm/auto' })
        .withResponse();
    // Until the policy's classifier is trained (the bank's sample embedded by Ollama), the shipped one scores.
    const deadline = Date.now() + 240_000;
    let reason = '';
    while (Date.now() < deadline) {
      reason = (await ask(SIMPLE)).response.headers.get('x-routing-reason') ?? '';
      if (reason.includes(`embedding=${EMBED}`)) break;
      await new Promise((r) => setTimeout(r, 2000));
    }
    expect(reason).toContain(`embedding=${EMBED}`);
    const simple = await ask(SIMPLE);
    expectRouted(
      simple.response.headers,
      LIGHT,
      new RegExp(`^score; tier=Light; .*signals=learned; embedding=${EMBED}$`),
    );
    const hard = await ask(OLYMPIAD);
    expectRouted(hard.response.headers, FRONTIER, new RegExp(`^score; tier=Frontier; .*embedding=${EMBED}$`));
    expect(hard.data.choices[0]?.message.content).toBe(DOUBLE_ANSWER);
  }, 300_000);
});
