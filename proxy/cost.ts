import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import yaml from 'js-yaml';
import { type Catalog, pricing } from '../crds/catalog/catalog.js';
import type { RouteEntry } from './routing.js';
import type { Usage } from './upstream.js';

/**
 * What a request cost. In-cluster models: the catalog's price per 1M tokens (the hourly
 * price of the recommended GPU spread over its assumed throughput). Bedrock: the price table
 * (input and output per 1M tokens, per region where it differs), overridable. A provider's
 * free credits pay first: that part is reported as savings, until the credits are used up;
 * the usage store allocates them when it writes the records (see allocateCredits), so that
 * several replicas spend them once.
 */

export interface TokenPrice {
  input: number;
  output: number;
}

export interface BedrockPriceTable {
  models: Record<string, TokenPrice>;
  regions?: Record<string, Record<string, TokenPrice>>;
}

export function loadBedrockPrices(
  path = fileURLToPath(new URL('./bedrock-prices.yaml', import.meta.url)),
): BedrockPriceTable {
  return parseBedrockPrices(readFileSync(path, 'utf8'));
}

export function parseBedrockPrices(text: string): BedrockPriceTable {
  const t = yaml.load(text) as Partial<BedrockPriceTable> | null;
  return { models: t?.models ?? {}, regions: t?.regions ?? {} };
}

/** Overrides replace single entries; everything else stays from the base table. */
export function mergePrices(base: BedrockPriceTable, over: BedrockPriceTable): BedrockPriceTable {
  const regions: Record<string, Record<string, TokenPrice>> = { ...base.regions };
  for (const [r, models] of Object.entries(over.regions ?? {})) regions[r] = { ...regions[r], ...models };
  return { models: { ...base.models, ...over.models }, regions };
}

/** Inference-profile ids (us.x, eu.x, apac.x) are priced like their base model. */
const baseModel = (id: string) => id.replace(/^(us|eu|apac|us-gov|ca|jp|au)\./, '');

export interface Charge {
  costUsd: number;
  /** The serving provider's free credits (its whole grant), for the store to allocate from. */
  creditsUsd?: number;
  /** Tokens were used but the model has no price: the cost is unknown, not zero. */
  unpriced?: true;
}

export class CostMeter {
  private prices: BedrockPriceTable;

  constructor(
    private readonly catalog: Catalog,
    prices: BedrockPriceTable,
  ) {
    this.prices = prices;
  }

  setPrices(prices: BedrockPriceTable): void {
    this.prices = prices;
  }

  priceOf(entry: RouteEntry): TokenPrice | undefined {
    if (entry.kind === 'bedrock') {
      const id = baseModel(entry.model);
      return this.prices.regions?.[entry.region]?.[id] ?? this.prices.models[id];
    }
    const model = this.catalog.models.find((m) => m.name === entry.model);
    if (!model) return undefined;
    const per1M = pricing(this.catalog, model, model.gpu.recommended).usdPer1MTokens;
    return { input: per1M, output: per1M };
  }

  charge(entry: RouteEntry | undefined, usage: Usage | undefined): Charge {
    if (!entry || !usage) return { costUsd: 0 };
    const price = this.priceOf(entry);
    if (!price) {
      return usage.promptTokens + usage.completionTokens > 0 ? { costUsd: 0, unpriced: true } : { costUsd: 0 };
    }
    const costUsd = (usage.promptTokens * price.input + usage.completionTokens * price.output) / 1_000_000;
    const credits = entry.kind === 'bedrock' ? (entry.source.spec.freeCredits ?? 0) : 0;
    return credits > 0 ? { costUsd, creditsUsd: credits } : { costUsd };
  }
}
