import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { ApiKey } from '../../crds/api-key.js';
import type { ModelDeployment } from '../../crds/model-deployment.js';
import type { RoutingPolicy } from '../../crds/routing-policy.js';
import { type OllamaDouble, startOllamaDouble } from '../../e2e/doubles/ollama.js';
import { startGateway, type TestGateway } from '../../e2e/support/gateway.js';
import { ApiKeys, policyOf, sha256 } from '../access/auth.js';
import { BudgetGuard } from '../access/budgets.js';
import { buildRoutes, RouteTable } from '../serving/routes.js';
import { MemoryUsage } from '../usage/record.js';
import { DEFAULT_THRESHOLDS } from './scorer.js';

/**
 * Routing through the composed gateway against the Ollama double: `auto` picks by difficulty,
 * a named model goes cheaper when routing is on (header, key, organization), the cascade moves an
 * empty answer up (whole and streamed, the caller seeing one answer), a spent budget degrades,
 * and every answer and record says what happened.
 */

const KEY = 'sk-routing-test';
const OFF = 'sk-routing-off';
const SPENT = 'sk-routing-spent';
const LIGHT = 'qwen2.5:0.5b';
const STANDARD = 'llama3.1:8b';
let double: OllamaDouble;
let gateway: TestGateway;
const usage = new MemoryUsage();

const md = (name: string, model: string, endpoint: string): ModelDeployment => ({
  apiVersion: 'ai.platform/v1beta1',
  kind: 'ModelDeployment',
  metadata: { name, namespace: 'platform-llms' },
  spec: { model, serviceName: name, port: 11434, replicas: 1, endpoint },
});

const policy = (name: string, spec: Partial<RoutingPolicy['spec']> = {}): RoutingPolicy => ({
  apiVersion: 'ai.platform/v1beta1',
  kind: 'RoutingPolicy',
  metadata: { name, namespace: 'platform-agent' },
  spec: {
    models: [
      { name: LIGHT, tier: 'Light' },
      { name: STANDARD, tier: 'Standard' },
    ],
    cascade: { maxEscalations: 1 },
    ...spec,
  },
});

const apiKey = (name: string, key: string, spec: Partial<ApiKey['spec']>): ApiKey => ({
  apiVersion: 'ai.platform/v1beta1',
  kind: 'ApiKey',
  metadata: { name, namespace: 'platform-agent' },
  spec: { team: 'ml', role: 'User', rotation: 0, ...spec },
  status: { digest: `sha256:${sha256(key).toString('hex')}` },
});

const SIMPLE = 'What is the capital of France?';
/** Standard under Balanced (about 0.25). */
const MEDIUM = 'Explain how a hash map handles collisions, and compare open addressing with chaining.';
/** Short and plain to the features, hard by the semantic scorer's examples. */
const TRICKY = 'Tell me a joke';
const HARD =
  'Design a distributed rate limiter for a multi-region API gateway. 1. Compare token bucket and sliding window ' +
  'algorithms with their trade-offs. 2. Write the Go code for the Redis-backed implementation, step by step. ' +
  '3. Prove that your algorithm never admits more than the limit across regions, and analyze its failure modes.\n' +
  '```go\nfunc (l *Limiter) Allow(key string) (bool, error) {\n\treturn false, nil\n}\n```';

beforeAll(async () => {
  double = await startOllamaDouble();
  const routes = new RouteTable();
  const standard = md('standard', STANDARD, double.url);
  standard.spec.aliases = ['house-model'];
  routes.set(buildRoutes([md('light', LIGHT, double.url), standard], { standalone: true }));
  const keys = ApiKeys.fromKeys([KEY]);
  keys.setManaged(
    [
      apiKey('off', OFF, { routing: 'Disabled' }),
      apiKey('spent', SPENT, { budget: { usd: 0, period: 'Monthly', whenSpent: 'Degrade' } }),
    ].flatMap((ak) => policyOf(ak) ?? []),
  );
  // No spend stored: the spent key's budget is 0 USD, spent before its first request.
  const budgets = new BudgetGuard({ spend: async (scopes) => scopes.map(() => 0) }, () => keys.policies());
  gateway = await startGateway({}, { routes, keys, usage, budgets });
  gateway.policies.set([
    policy('default', { enabled: true }),
    policy('cheap', { objective: 'Cost' }),
    policy('semantic', {
      scorer: {
        semantic: {
          embeddingModel: LIGHT,
          neighbours: 1,
          weight: 1,
          examples: [
            { tier: 'Light', prompt: 'hi' },
            { tier: 'Frontier', prompt: TRICKY },
          ],
        },
      },
    }),
  ]);
  await gateway.policies.ready();
});

afterAll(async () => {
  await gateway?.stop();
  await double?.close();
});

beforeEach(() => {
  double.reset();
  usage.records.length = 0;
});

const chat = (body: Record<string, unknown>, headers: Record<string, string> = {}, key = KEY) =>
  gateway.request('/openai/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}`, ...headers },
    body: JSON.stringify(body),
  });

const ask = (model: string, prompt: string, extra: Record<string, unknown> = {}) => ({
  model,
  messages: [{ role: 'user', content: prompt }],
  ...extra,
});

/** The last record (streams settle after their last byte). */
async function lastRecord() {
  for (let i = 0; i < 50 && usage.records.length === 0; i++) await new Promise((r) => setTimeout(r, 10));
  return usage.records.at(-1);
}

describe('model "auto"', () => {
  it('sends a simple request to the Light model and a hard one to Standard, and says so', async () => {
    const simple = await chat(ask('auto', SIMPLE));
    expect(simple.status).toBe(200);
    expect(simple.headers.get('x-routed-model')).toBe(LIGHT);
    expect(simple.headers.get('x-routing-reason')).toMatch(/^score; tier=Light; score=0\.\d\d/);
    const body = (await simple.json()) as { model: string };
    expect(body.model).toBe(LIGHT);
    expect(double.requests.at(-1)?.body).toMatchObject({ model: LIGHT });
    const rec = await lastRecord();
    expect(rec).toMatchObject({
      model: LIGHT,
      requestedModel: 'auto',
      routingPolicy: 'default',
      routingReason: 'score',
      escalations: 0,
    });
    // Counted against the pool's most expensive model for the same tokens.
    expect(rec?.counterfactualCostUsd).toBeGreaterThan(rec?.costUsd ?? Number.POSITIVE_INFINITY);

    const hard = await chat(ask('auto', HARD));
    expect(hard.headers.get('x-routed-model')).toBe(STANDARD);
    // Frontier is needed, and the pool's best is Standard.
    expect(hard.headers.get('x-routing-reason')).toMatch(
      /^score; tier=Standard; score=0\.\d\d; signals=learned; embedding=built-in$/,
    );
  });

  it('is listed with the models, one name per policy, and its decisions are counted', async () => {
    const res = await gateway.request('/openai/v1/models', { headers: { authorization: `Bearer ${KEY}` } });
    const ids = ((await res.json()) as { data: Array<{ id: string; owned_by: string }> }).data.map((m) => m.id);
    expect(ids.slice(0, 3)).toEqual(['auto', 'cheap/auto', 'semantic/auto']);
    expect(ids).toContain(LIGHT);
    const cli = await gateway.request('/v1/models/metadata', { headers: { authorization: `Bearer ${KEY}` } });
    const auto = ((await cli.json()) as { models: Array<Record<string, unknown>> }).models.find(
      (m) => m.slug === 'auto',
    );
    expect(auto).toMatchObject({
      display_name: 'Auto (routing policy default)',
      tool_call: true,
      owned_by: 'routing-policy/default',
    });
    await chat(ask('auto', SIMPLE));
    const text = await gateway.metrics.registry.metrics();
    expect(text).toMatch(
      /pao_gateway_routing_decisions_total\{policy="default",from="auto",to="qwen2\.5:0\.5b",reason="score"\} [1-9]/,
    );
  });

  it("takes an agent's large output maximum to a small model, lowered to what its window leaves", async () => {
    const window = gateway.policies.get('default')?.pool.find((m) => m.name === LIGHT)?.contextWindow ?? 0;
    expect(window).toBeGreaterThan(0);
    const res = await chat(ask('auto', SIMPLE, { max_tokens: window * 4 }));
    expect(res.headers.get('x-routed-model')).toBe(LIGHT);
    const sent = (double.requests.at(-1)?.body as { max_tokens?: number } | undefined)?.max_tokens ?? 0;
    expect(sent).toBeLessThan(window);
    expect(sent).toBeGreaterThan(window - 100);
  });

  it('routes through a named policy, and answers a policy that does not exist in the dialect', async () => {
    const cheap = await chat(ask('cheap/auto', SIMPLE));
    expect(cheap.headers.get('x-routed-model')).toBe(LIGHT);
    expect((await lastRecord())?.routingPolicy).toBe('cheap');
    const none = await chat(ask('nope/auto', SIMPLE));
    expect(none.status).toBe(404);
    expect(await none.json()).toMatchObject({ error: { code: 'model_not_found', param: 'model' } });
    const embed = await gateway.request('/openai/v1/embeddings', {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` },
      body: JSON.stringify({ model: 'auto', input: 'hi' }),
    });
    expect(embed.status).toBe(400);
  });

  it('works in the Responses dialect, and for count_tokens', async () => {
    const res = await gateway.request('/openai/v1/responses', {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` },
      body: JSON.stringify({ model: 'auto', input: HARD }),
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-routed-model')).toBe(STANDARD);
    expect(((await res.json()) as { model: string }).model).toBe(STANDARD);
    const count = await gateway.request('/anthropic/v1/messages/count_tokens', {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': KEY, 'anthropic-version': '2023-06-01' },
      body: JSON.stringify({ model: 'auto', messages: [{ role: 'user', content: SIMPLE }] }),
    });
    expect(count.status).toBe(200);
    expect(count.headers.get('x-routed-model')).toBe(LIGHT);
    expect(((await count.json()) as { input_tokens: number }).input_tokens).toBeGreaterThan(0);
  });

  it('works in the Messages dialect, the answer naming the model that served', async () => {
    const res = await gateway.request('/anthropic/v1/messages', {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': KEY, 'anthropic-version': '2023-06-01' },
      body: JSON.stringify({ model: 'auto', max_tokens: 16, messages: [{ role: 'user', content: SIMPLE }] }),
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-routed-model')).toBe(LIGHT);
    expect(((await res.json()) as { model: string }).model).toBe(LIGHT);
  });
});

describe("a policy's own classifier", () => {
  it("is trained on the bank and its examples in its embedding model's space, and then decides", {
    timeout: 90_000,
  }, async () => {
    // Trained in the background, a turn of the event loop per epoch: seconds when idle, more on a
    // loaded machine running the other suites.
    await expect
      .poll(() => gateway.policies.get('semantic')?.scorer.embeddingModel, { timeout: 60_000, interval: 50 })
      .toBe(LIGHT);
    // The shipped classifier keeps it on Light; the team's example labelled Frontier moves it to the pool's best.
    expect((await chat(ask('auto', TRICKY))).headers.get('x-routed-model')).toBe(LIGHT);
    const res = await chat(ask('semantic/auto', TRICKY));
    expect(res.headers.get('x-routed-model')).toBe(STANDARD);
    expect(res.headers.get('x-routing-reason')).toContain(`embedding=${LIGHT}`);
    const score = Number(/score=([\d.]+)/.exec(res.headers.get('x-routing-reason') ?? '')?.[1]);
    expect(score).toBeGreaterThanOrEqual(DEFAULT_THRESHOLDS.Balanced.frontier);
  });
});

describe('a named model', () => {
  it('goes to a cheaper model that serves it under an enabled default policy, and stays with X-Routing-Enabled: false', async () => {
    const routed = await chat(ask(STANDARD, SIMPLE));
    expect(routed.headers.get('x-routed-model')).toBe(LIGHT);
    const rec = await lastRecord();
    expect(rec).toMatchObject({ model: LIGHT, requestedModel: STANDARD, routingReason: 'score' });
    // The savings are exact: what the named model's price makes of the same tokens.
    expect(rec?.counterfactualCostUsd).toBeGreaterThan(rec?.costUsd ?? Number.POSITIVE_INFINITY);

    const kept = await chat(ask(STANDARD, SIMPLE), { 'x-routing-enabled': 'false' });
    expect(kept.headers.get('x-routed-model')).toBeNull();
    expect(double.requests.at(-1)?.body).toMatchObject({ model: STANDARD });

    const bad = await chat(ask(STANDARD, SIMPLE), { 'x-routing-enabled': 'maybe' });
    expect(bad.status).toBe(400);
    expect(await bad.json()).toMatchObject({ error: { param: 'X-Routing-Enabled' } });
  });

  it('knows an alias of a pool model as that model: its tier, and kept when nothing cheaper serves', async () => {
    // Needs Standard: the alias's own model is the cheapest that serves it, so it is kept.
    const medium = await chat(ask('house-model', MEDIUM));
    expect(medium.headers.get('x-routed-model')).toBe(STANDARD);
    expect(medium.headers.get('x-routing-reason')).toMatch(/^kept; tier=Standard/);
    expect((await chat(ask('house-model', SIMPLE))).headers.get('x-routed-model')).toBe(LIGHT);
  });

  it('is kept when the request needs it, and for a key whose routing is Disabled', async () => {
    const hard = await chat(ask(STANDARD, HARD));
    expect(hard.headers.get('x-routed-model')).toBe(STANDARD);
    expect(hard.headers.get('x-routing-reason')).toMatch(/^kept;/);
    const off = await chat(ask(STANDARD, SIMPLE), {}, OFF);
    expect(off.headers.get('x-routed-model')).toBeNull();
    expect(double.requests.at(-1)?.body).toMatchObject({ model: STANDARD });
  });
});

describe('the cascade', () => {
  it('moves an empty answer to the next tier, the caller getting only the answer that served', async () => {
    double.behave({ completionTokens: 0 }, LIGHT);
    const res = await chat(ask('auto', SIMPLE));
    expect(res.status).toBe(200);
    expect(res.headers.get('x-routed-model')).toBe(STANDARD);
    expect(res.headers.get('x-routing-reason')).toMatch(
      new RegExp(`^cascade; from=${LIGHT.replace('.', '\\.')} \\(Empty\\)`),
    );
    const body = (await res.json()) as { model: string; choices: Array<{ message: { content: string } }> };
    expect(body.model).toBe(STANDARD);
    expect(body.choices[0]?.message.content).toMatch(/tok0/);
    expect(double.requests.map((r) => (r.body as { model: string }).model)).toEqual([LIGHT, STANDARD]);
    expect(await lastRecord()).toMatchObject({ model: STANDARD, routingReason: 'cascade', escalations: 1 });
  });

  it('moves a stream that ends before its first content, before the caller got a byte of it', async () => {
    double.behave({ completionTokens: 0 }, LIGHT);
    const res = await chat(ask('auto', SIMPLE, { stream: true }));
    expect(res.headers.get('x-routed-model')).toBe(STANDARD);
    const text = await res.text();
    expect(text).toContain('tok0');
    expect(text).not.toContain(`"model":"${LIGHT}"`);
    expect(text.trimEnd().endsWith('data: [DONE]')).toBe(true);
    expect(await lastRecord()).toMatchObject({
      model: STANDARD,
      routingReason: 'cascade',
      escalations: 1,
      status: 200,
    });
  });

  it('moves an upstream error too, and never past its bound', async () => {
    double.behave({ failWith: { status: 500, message: 'boom' } }, LIGHT);
    const res = await chat(ask('auto', SIMPLE));
    expect(res.status).toBe(200);
    expect(res.headers.get('x-routed-model')).toBe(STANDARD);
    double.reset();
    double.behave({ completionTokens: 0 });
    const last = await chat(ask('auto', SIMPLE));
    // The last model's answer is the caller's, whatever it is: one escalation, two calls.
    expect(last.status).toBe(200);
    expect(last.headers.get('x-routed-model')).toBe(STANDARD);
    expect(double.requests.map((r) => (r.body as { model: string }).model)).toEqual([LIGHT, STANDARD]);
    expect(await lastRecord()).toMatchObject({ model: STANDARD, escalations: 1 });
  });
});

describe('a spent budget that degrades', () => {
  it('is refused for a key whose budget refuses', async () => {
    const refusing = new BudgetGuard({ spend: async (scopes) => scopes.map(() => 0) }, () => []);
    refusing.setTagBudgets([{ name: 'ml', tag: { key: 'team', value: 'ml' }, usd: 0, period: 'Monthly' }]);
    expect(
      refusing.check({ name: '', team: 'ml', role: 'User', tags: [] }, [{ key: 'team', value: 'ml' }]),
    ).toMatchObject({
      scope: 'tag',
    });
    refusing.setTagBudgets([
      { name: 'ml', tag: { key: 'team', value: 'ml' }, usd: 0, period: 'Monthly', degrade: true },
    ]);
    expect(
      refusing.check({ name: '', team: 'ml', role: 'User', tags: [] }, [{ key: 'team', value: 'ml' }]),
    ).toMatchObject({
      scope: 'tag',
      degrade: true,
    });
  });

  it('serves a hard request on the cheapest in-cluster model instead of refusing it, and says so', async () => {
    const res = await chat(ask('auto', HARD), {}, SPENT);
    expect(res.status).toBe(200);
    expect(res.headers.get('x-routed-model')).toBe(LIGHT);
    expect(res.headers.get('x-routing-reason')).toMatch(/^budget-degraded;/);
    const named = await chat(ask(STANDARD, HARD), {}, SPENT);
    expect(named.headers.get('x-routed-model')).toBe(LIGHT);
    expect(await lastRecord()).toMatchObject({
      model: LIGHT,
      requestedModel: STANDARD,
      routingReason: 'budget-degraded',
    });
  });
});

describe('without the built-in embedding (Helm value routing.builtInEmbedding: false)', () => {
  it('still routes `auto`, on the measured features and the shape, and says that no embedding scored', async () => {
    const routes = new RouteTable();
    routes.set(
      buildRoutes([md('light', LIGHT, double.url), md('standard', STANDARD, double.url)], { standalone: true }),
    );
    const bare = await startGateway(
      { routing: { builtInEmbedding: false } },
      { routes, keys: ApiKeys.fromKeys([KEY]), usage: new MemoryUsage() },
    );
    try {
      bare.policies.set([policy('default')]);
      await bare.policies.ready();
      const send = (prompt: string) =>
        bare.request('/openai/v1/chat/completions', {
          method: 'POST',
          headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` },
          body: JSON.stringify(ask('auto', prompt)),
        });
      const simple = await send(SIMPLE);
      expect(simple.status).toBe(200);
      expect(simple.headers.get('x-routed-model')).toBe(LIGHT);
      expect(simple.headers.get('x-routing-reason')).toMatch(/signals=features; embedding=none$/);
      // Pasted code and numbered requirements are measured without any embedding.
      const hard = await send(HARD);
      expect(hard.headers.get('x-routed-model')).toBe(STANDARD);
      expect(hard.headers.get('x-routing-reason')).toMatch(/^score; tier=(Standard|Frontier); .*embedding=none$/);
    } finally {
      await bare.stop();
    }
  });
});
