import { describe, expect, it } from 'vitest';
import { loadCatalog } from '../../crds/catalog/catalog.js';
import { foundationModelOf } from '../../crds/catalog/prices.js';
import type { ExternalRoute, InClusterRoute } from '../serving/routes.js';
import type { Backend } from '../upstreams/backend.js';
import { externalBackend } from '../upstreams/external.js';
import { inClusterBackend } from '../upstreams/in-cluster.js';
import type { Upstream, Usage } from '../upstreams/upstream.js';
import {
  type BedrockPriceTable,
  charge,
  loadBedrockPrices,
  mergePrices,
  PriceBook,
  parseBedrockPrices,
} from './cost.js';

/**
 * What a request costs: each backend's price for its route (the catalog's for in-cluster
 * models, the one price table's for providers, with the overrides over it), the provider's free
 * credits named for the store to spend, and the arithmetic of prompt-cache reads and writes.
 */

const unused: Upstream = {
  dialects: () => [],
  send: () => Promise.reject(new Error('not called: pricing only')),
};

/** The charge of `usage` on `route` as the account stage computes it: its backend's price and credits. */
class CostMeter {
  private readonly inCluster: Backend<InClusterRoute>;
  private readonly external: Backend<ExternalRoute>;

  constructor(catalog: ReturnType<typeof loadCatalog>, prices: BedrockPriceTable) {
    const book = new PriceBook(catalog, prices);
    this.inCluster = inClusterBackend({ upstream: unused, prices: book, catalog });
    this.external = externalBackend({
      upstreams: {
        bedrock: unused,
        openai: unused,
        anthropic: unused,
        'azure-openai': unused,
        'vertex-ai': unused,
        'openai-compatible': unused,
      },
      prices: book,
    });
  }

  charge(route: InClusterRoute | ExternalRoute, usage: Usage) {
    return route.kind === 'in-cluster'
      ? charge(this.inCluster.price(route), usage, this.inCluster.credits(route))
      : charge(this.external.price(route), usage, this.external.credits(route));
  }
}

describe('prices and charges', () => {
  const catalog = loadCatalog();
  const ollama: InClusterRoute = {
    kind: 'in-cluster',
    model: 'llama3.1:8b',
    baseUrl: 'x',
    provider: 'p',
  };
  const bedrockRoute = (model: string, region: string, freeCredits?: number, baseModel?: string): ExternalRoute => ({
    kind: 'external',
    model,
    provider: 'platform-agent/bedrock',
    identity: { provider: 'bedrock', region, auth: { method: 'IAMRole', roleArn: 'r' } },
    target: {
      type: 'bedrock',
      upstreamModel: model,
      family: 'openai',
      baseUrl: '',
      region,
      modelType: 'text',
      streaming: true,
    },
    baseModel: baseModel ?? foundationModelOf(model),
    ...(freeCredits ? { freeCredits } : {}),
  });

  it('prices in-cluster tokens at the catalog price per 1M tokens, at the deployment engine and concurrency', () => {
    const meter = new CostMeter(catalog, loadBedrockPrices());
    const tokens = { promptTokens: 600_000, completionTokens: 400_000 };
    // llama3.1:8b on Ollama, its 4 default slots: L4 at $0.805/h over 72 tokens/s = $3.1057 per 1M.
    expect(meter.charge(ollama, tokens).costUsd).toBeCloseTo(3.1057, 4);
    // One slot: the single-stream point, 36 tokens/s.
    expect(meter.charge({ ...ollama, slots: 1 }, tokens).costUsd).toBeCloseTo(6.2114, 4);
    // The same family on vLLM at its 32 default slots: 280 tokens/s on the same L4.
    const vllm: InClusterRoute = { ...ollama, model: 'meta-llama/Llama-3.1-8B-Instruct', engine: 'VLLM' };
    expect(meter.charge(vllm, tokens).costUsd).toBeCloseTo(0.7986, 4);
  });

  it('prices Bedrock by model, region override and inference profile, with free credits paying first', () => {
    const meter = new CostMeter(catalog, loadBedrockPrices());
    const usage = { promptTokens: 1_000_000, completionTokens: 1_000_000 };
    expect(meter.charge(bedrockRoute('amazon.nova-lite-v1:0', 'us-east-1'), usage).costUsd).toBeCloseTo(0.3);
    expect(meter.charge(bedrockRoute('amazon.nova-lite-v1:0', 'eu-central-1'), usage).costUsd).toBeCloseTo(0.39);
    expect(
      meter.charge(bedrockRoute('us.anthropic.claude-3-7-sonnet-20250219-v1:0', 'us-east-1'), usage).costUsd,
    ).toBeCloseTo(18);
    // A provider with credits: the charge names them; the store spends them (next test group).
    const route = bedrockRoute('amazon.nova-lite-v1:0', 'us-east-1', 1);
    expect(meter.charge(route, usage)).toEqual({ costUsd: 0.3, creditsUsd: 1 });
    expect(meter.charge(bedrockRoute('amazon.nova-lite-v1:0', 'us-east-1'), usage)).toEqual({ costUsd: 0.3 });
  });

  it('prices global profiles as AWS does (Claude 4.5: global 10% below geographic) and application profiles by their model', () => {
    const meter = new CostMeter(catalog, loadBedrockPrices());
    const usage = { promptTokens: 1_000_000, completionTokens: 1_000_000 };
    const sonnet = 'anthropic.claude-sonnet-4-5-20250929-v1:0';
    expect(meter.charge(bedrockRoute(`global.${sonnet}`, 'us-east-1'), usage).costUsd).toBeCloseTo(18);
    expect(meter.charge(bedrockRoute(`us.${sonnet}`, 'us-east-1'), usage).costUsd).toBeCloseTo(19.8);
    expect(meter.charge(bedrockRoute(`jp.${sonnet}`, 'ap-northeast-1'), usage).costUsd).toBeCloseTo(19.8);
    // Older models cost the same whichever way they are routed.
    const haiku = 'anthropic.claude-3-5-haiku-20241022-v1:0';
    expect(meter.charge(bedrockRoute(`global.${haiku}`, 'us-east-1'), usage).costUsd).toBeCloseTo(4.8);
    // An application profile's opaque id is priced as the model discovery found behind it.
    expect(meter.charge(bedrockRoute('a1b2c3d4e5f6', 'us-east-1', undefined, haiku), usage).costUsd).toBeCloseTo(4.8);
    expect(meter.charge(bedrockRoute('a1b2c3d4e5f6', 'us-east-1'), usage)).toEqual({ costUsd: 0, unpriced: true });
  });

  it('prices prompt-cache reads and writes apart from fresh prompt tokens', () => {
    const meter = new CostMeter(catalog, loadBedrockPrices());
    // Claude 3.7 Sonnet: input 3, cache read 0.3, cache write 3.75, output 15 per 1M.
    const route = bedrockRoute('us.anthropic.claude-3-7-sonnet-20250219-v1:0', 'us-east-1');
    const usage = {
      promptTokens: 3_000_000,
      cachedTokens: 1_000_000,
      cacheWriteTokens: 1_000_000,
      completionTokens: 1_000_000,
    };
    expect(meter.charge(route, usage).costUsd).toBeCloseTo(3 + 0.3 + 3.75 + 15);
    // Without cache prices (Llama) cached tokens cost the input price.
    const llama = bedrockRoute('meta.llama3-1-8b-instruct-v1:0', 'us-east-1');
    expect(meter.charge(llama, { ...usage, completionTokens: 0 }).costUsd).toBeCloseTo(3 * 0.22);
  });

  it('refuses a malformed price table with the entry at fault', () => {
    expect(() => parseBedrockPrices('models:\n  x: {input: -1, output: 2}\n')).toThrow(
      /models\.x\.input must be a number >= 0/,
    );
    expect(() => parseBedrockPrices('models: [1, 2]\n')).toThrow(/models must be a map/);
    expect(() => parseBedrockPrices('global:\n  x: {input: 1}\n')).toThrow(/global\.x\.output/);
  });

  it('takes overrides over the shipped table', () => {
    const prices = mergePrices(
      loadBedrockPrices(),
      parseBedrockPrices('models:\n  amazon.nova-lite-v1:0: {input: 1, output: 2}\n'),
    );
    const meter = new CostMeter(catalog, prices);
    expect(
      meter.charge(bedrockRoute('amazon.nova-lite-v1:0', 'us-east-1'), { promptTokens: 1_000_000, completionTokens: 0 })
        .costUsd,
    ).toBe(1);
    expect(
      meter.charge(bedrockRoute('unknown.model-v1:0', 'us-east-1'), { promptTokens: 5, completionTokens: 5 }).costUsd,
    ).toBe(0);
  });
});
