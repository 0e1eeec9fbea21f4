import { describe, expect, it } from 'vitest';
import { catalogModel, loadCatalog, pricing } from '../../crds/catalog/catalog.js';
import { loadBedrockPrices } from '../../crds/catalog/prices.js';
import type { ExternalProvider } from '../../crds/external-provider.js';
import type { ModelDeployment } from '../../crds/model-deployment.js';
import type { RoutingPolicy } from '../../crds/routing-policy.js';
import { NOT_PRICED, NOT_SERVED, routingPolicyStatus, type ServingWorld } from './routing-policy-status.js';

const T0 = new Date('2026-11-27T10:00:00Z');
const T1 = new Date('2026-11-27T10:05:00Z');

const policy = (spec: Partial<RoutingPolicy['spec']> = {}, status?: RoutingPolicy['status']): RoutingPolicy => ({
  apiVersion: 'ai.platform/v1beta1',
  kind: 'RoutingPolicy',
  metadata: { name: 'default', namespace: 'platform-agent', generation: 2 },
  spec: {
    models: [
      { name: 'llama3.2:3b', tier: 'Light' },
      { name: 'gpt-4o-mini', tier: 'Standard' },
      { name: 'claude-sonnet', tier: 'Frontier' },
    ],
    ...spec,
  },
  ...(status ? { status } : {}),
});

const md = (model: string, namespace = 'platform-llms', server?: { contextLength: number }): ModelDeployment => ({
  apiVersion: 'ai.platform/v1beta1',
  kind: 'ModelDeployment',
  metadata: { name: model.replace(/[^a-z0-9]/g, '-'), namespace, creationTimestamp: '2026-11-01T00:00:00Z' },
  spec: { model, serviceName: 's', port: 11434, replicas: 1, ...(server ? { server } : {}) },
  status: { phase: 'Running' },
});

const provider = (
  name: string,
  spec: Pick<ExternalProvider['spec'], 'provider' | 'models'> & Partial<ExternalProvider['spec']>,
  discovered: string[] = spec.models,
): ExternalProvider => ({
  apiVersion: 'ai.platform/v1beta1',
  kind: 'ExternalProvider',
  metadata: { name, namespace: 'platform-agent', creationTimestamp: '2026-11-02T00:00:00Z' },
  spec: {
    displayName: name,
    auth: { method: 'APIKey', secretRef: { name: 'k' } },
    includeInCLI: false,
    streaming: true,
    ...spec,
  },
  status: {
    availableModels: discovered,
    models: discovered.map((id) => ({ id, type: 'Text', streaming: true, lifecycle: 'Active', priced: true })),
  },
});

const openai = provider('openai', { provider: 'openai', models: ['gpt-4o-mini'] });
const anthropic = provider('anthropic', {
  provider: 'anthropic',
  models: ['claude-sonnet-5-5'],
  aliases: [{ name: 'claude-sonnet', model: 'claude-sonnet-5-5' }],
});

const world = (over: Partial<ServingWorld> = {}): ServingWorld => ({
  deployments: [md('llama3.2:3b')],
  providers: [openai, anthropic],
  prices: loadBedrockPrices(),
  catalog: loadCatalog(),
  examples: () => undefined,
  builtInEmbedding: true,
  ...over,
});

describe('routingPolicyStatus', () => {
  it('resolves every model, aliases included, and prices it as the proxy does', () => {
    const catalog = loadCatalog();
    const llama = catalogModel(catalog, 'llama3.2:3b');
    if (!llama) throw new Error('the catalog lost llama3.2:3b');
    const perMillion = pricing(catalog, llama, llama.gpu.recommended).usdPer1MTokens;
    const status = routingPolicyStatus(policy(), world(), T0);
    expect(status.models).toEqual([
      {
        name: 'llama3.2:3b',
        tier: 'Light',
        inputPerMillion: perMillion,
        outputPerMillion: perMillion,
        contextWindow: llama.serving.contextLength,
      },
      { name: 'gpt-4o-mini', tier: 'Standard', inputPerMillion: 0.15, outputPerMillion: 0.6 },
      { name: 'claude-sonnet', tier: 'Frontier', inputPerMillion: 2, outputPerMillion: 10 },
    ]);
    expect(status.observedGeneration).toBe(2);
    expect(status.conditions).toEqual([
      {
        type: 'Ready',
        status: 'True',
        reason: 'Resolved',
        message: 'every model of the pool is served and priced (3)',
        observedGeneration: 2,
        lastTransitionTime: '2026-11-27T10:00:00Z',
      },
      {
        type: 'Scorer',
        status: 'True',
        reason: 'BuiltInEmbedding',
        message: 'requests are scored by the learned classifier over the built-in embedding',
        observedGeneration: 2,
        lastTransitionTime: '2026-11-27T10:00:00Z',
      },
    ]);
  });

  it("takes the server's context length and a Bedrock model's context window", () => {
    const bedrock = provider('bedrock', {
      provider: 'bedrock',
      region: 'us-east-1',
      auth: { method: 'IAMRole', roleArn: 'arn:aws:iam::123456789012:role/r' },
      models: ['anthropic.claude-3-haiku-20240307-v1:0'],
    });
    const status = routingPolicyStatus(
      policy({
        models: [
          { name: 'llama3.2:3b', tier: 'Light' },
          { name: 'anthropic.claude-3-haiku-20240307-v1:0', tier: 'Standard' },
        ],
      }),
      world({ deployments: [md('llama3.2:3b', 'platform-llms', { contextLength: 8192 })], providers: [bedrock] }),
      T0,
    );
    expect(status.models?.map((m) => m.contextWindow)).toEqual([8192, 200000]);
    expect(status.models?.[1]).toMatchObject({ inputPerMillion: 0.25, outputPerMillion: 1.25 });
  });

  it('is ModelsMissing for a model nothing in platform-llms or platform-agent serves, naming it', () => {
    const status = routingPolicyStatus(policy(), world({ deployments: [md('llama3.2:3b', 'team-a')] }), T0);
    expect(status.models?.[0]).toEqual({ name: 'llama3.2:3b', tier: 'Light', problem: NOT_SERVED });
    expect(status.conditions?.[0]).toMatchObject({ status: 'False', reason: 'ModelsMissing' });
    expect(status.conditions?.[0]?.message).toMatch(
      /^no ModelDeployment or ExternalProvider serves llama3\.2:3b: deploy/,
    );
  });

  it('is ModelsUnpriced for a model the price table does not know, after any missing one', () => {
    const local = provider('local', {
      provider: 'openai-compatible',
      baseUrl: 'http://vllm.tools.svc:8000/v1',
      auth: { method: 'None' },
      models: ['my-finetune'],
    });
    const spec = { models: [...policy().spec.models, { name: 'my-finetune', tier: 'Light' as const }] };
    const unpriced = routingPolicyStatus(policy(spec), world({ providers: [openai, anthropic, local] }), T0);
    expect(unpriced.models?.[3]).toEqual({ name: 'my-finetune', tier: 'Light', problem: NOT_PRICED });
    expect(unpriced.conditions?.[0]).toMatchObject({ status: 'False', reason: 'ModelsUnpriced' });
    expect(unpriced.conditions?.[0]?.message).toContain('no price for my-finetune');

    const both = routingPolicyStatus(policy(spec), world({ providers: [anthropic, local] }), T0);
    expect(both.conditions?.[0]?.reason).toBe('ModelsMissing');
    expect(both.conditions?.[0]?.message).toMatch(/serves gpt-4o-mini: .*; no price for my-finetune/);
  });

  it('is ExamplesMissing when examplesFrom names no labelled ConfigMap, or a key it lacks', () => {
    const semantic = policy({
      scorer: {
        semantic: { embeddingModel: 'gpt-4o-mini', examplesFrom: { configMapName: 'support', key: 'examples.yaml' } },
      },
    });
    const absent = routingPolicyStatus(semantic, world(), T0);
    expect(absent.conditions?.[0]).toMatchObject({ status: 'False', reason: 'ExamplesMissing' });
    expect(absent.conditions?.[0]?.message).toContain('ConfigMap support, which is not in namespace platform-agent');

    const noKey = routingPolicyStatus(semantic, world({ examples: () => ({ other: '[]' }) }), T0);
    expect(noKey.conditions?.[0]?.message).toBe(
      'ConfigMap support has no key examples.yaml (spec.scorer.semantic.examplesFrom.key): add the YAML list of {tier, prompt} under it',
    );

    const present = routingPolicyStatus(semantic, world({ examples: () => ({ 'examples.yaml': '[]' }) }), T0);
    expect(present.conditions?.[0]?.status).toBe('True');
  });

  it('is EmbeddingModelMissing while nothing serves the embedding model the scorer names', () => {
    const semantic = (embeddingModel: string) =>
      policy({ scorer: { semantic: { embeddingModel, examples: [{ tier: 'Light', prompt: 'hi' }] } } });
    const missing = routingPolicyStatus(semantic('text-embedding-3-small'), world(), T0);
    expect(missing.conditions?.[0]).toMatchObject({ status: 'False', reason: 'EmbeddingModelMissing' });
    expect(missing.conditions?.[0]?.message).toContain('scored with the built-in embedding');
    expect(routingPolicyStatus(semantic('gpt-4o-mini'), world(), T0).conditions?.[0]?.status).toBe('True');
  });

  it('says in its Scorer condition what judges difficulty, and FeaturesOnly with the fix when no embedding is at hand', () => {
    const scorer = (s: ReturnType<typeof routingPolicyStatus>) => s.conditions?.find((c) => c.type === 'Scorer');
    const embedded = (embeddingModel: string) =>
      policy({ scorer: { semantic: { embeddingModel, examples: [{ tier: 'Light', prompt: 'hi' }] } } });
    expect(scorer(routingPolicyStatus(policy(), world(), T0))).toMatchObject({
      status: 'True',
      reason: 'BuiltInEmbedding',
    });
    expect(scorer(routingPolicyStatus(embedded('gpt-4o-mini'), world(), T0))).toMatchObject({
      status: 'True',
      reason: 'EmbeddingModel',
    });
    // The built-in embedding off: a served embedding model still makes the classifier learned.
    const off = world({ builtInEmbedding: false });
    expect(scorer(routingPolicyStatus(embedded('gpt-4o-mini'), off, T0))?.status).toBe('True');
    const featuresOnly = scorer(routingPolicyStatus(policy(), off, T0));
    expect(featuresOnly).toMatchObject({ status: 'False', reason: 'FeaturesOnly' });
    expect(featuresOnly?.message).toContain('spec.scorer.semantic.embeddingModel is not set');
    expect(featuresOnly?.message).toContain('routing.builtInEmbedding: true');
    // An unserved model with the built-in embedding off: both conditions name it.
    const unserved = routingPolicyStatus(embedded('text-embedding-3-small'), off, T0);
    expect(scorer(unserved)?.message).toContain('nothing serves text-embedding-3-small');
    expect(unserved.conditions?.[0]?.message).toContain('on measured features only');
    // Ready is about the pool and the examples, not the scorer.
    expect(routingPolicyStatus(policy(), off, T0).conditions?.[0]).toMatchObject({ type: 'Ready', status: 'True' });
  });

  it('is ModelsRetiring within 30 days of a pool model’s retirement, naming the replacement; ModelsRetired after', () => {
    // An alias to Claude Sonnet 4.5, which Anthropic retires on 2026-11-30 (crds/catalog/prices.yaml lifecycle).
    const old = provider('anthropic', {
      provider: 'anthropic',
      models: ['claude-sonnet-4-5-20250929'],
      aliases: [{ name: 'claude-sonnet', model: 'claude-sonnet-4-5-20250929' }],
    });
    const retiring = (at: string) =>
      routingPolicyStatus(policy(), world({ providers: [openai, old] }), new Date(at)).conditions?.find(
        (c) => c.type === 'ModelsRetiring',
      );
    expect(retiring('2026-10-30T10:00:00Z')).toBeUndefined();
    expect(retiring('2026-11-27T10:00:00Z')).toMatchObject({
      status: 'True',
      reason: 'ModelsRetiring',
      message: expect.stringContaining(
        'claude-sonnet (spec.models) retires on 2026-11-30, in 3 days: move to claude-sonnet-5-5',
      ),
    });
    expect(retiring('2026-12-01T10:00:00Z')).toMatchObject({ reason: 'ModelsRetired' });
    // Ready still says whether the pool is served and priced: a retiring model is both, for now.
    const status = routingPolicyStatus(policy(), world({ providers: [openai, old] }), T0);
    expect(status.conditions?.find((c) => c.type === 'Ready')?.status).toBe('True');
    // Moving the alias to the replacement takes the condition away.
    expect(routingPolicyStatus(policy({}, status), world(), T1).conditions?.map((c) => c.type)).toEqual([
      'Ready',
      'Scorer',
    ]);
  });

  it('keeps the transition time while Ready holds, and moves it when Ready changes', () => {
    const first = routingPolicyStatus(policy(), world(), T0);
    const again = routingPolicyStatus(policy({}, first), world(), T1);
    expect(again).toEqual(first);
    const broken = routingPolicyStatus(policy({}, first), world({ providers: [anthropic] }), T1);
    expect(broken.conditions?.[0]?.lastTransitionTime).toBe('2026-11-27T10:05:00Z');
  });
});
