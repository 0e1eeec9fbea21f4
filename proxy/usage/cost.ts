import { type Catalog, pricing } from '../../crds/catalog/catalog.js';
import { type BedrockPriceTable, bedrockPrice, hostedPrice, type TokenPrice } from '../../crds/catalog/prices.js';
import type { RouteEntry } from '../routing/routes.js';
import type { Usage } from '../upstreams/upstream.js';

export {
  type BedrockPriceTable,
  loadBedrockPrices,
  mergePrices,
  parseBedrockPrices,
  type TokenPrice,
} from '../../crds/catalog/prices.js';

/**
 * What a request cost. In-cluster models: the catalog's price per 1M tokens (the hourly
 * price of the recommended GPU spread over its assumed throughput). Bedrock: the price table
 * (crds/catalog/prices.ts: input, output and prompt-cache prices per 1M tokens, per region and
 * for global routing where they differ), overridable. A provider's
 * free credits pay first: that part is reported as savings, until the credits are used up;
 * the usage store allocates them when it writes the records (see allocateCredits), so that
 * several replicas spend them once.
 */

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
    if (entry.kind === 'bedrock') return bedrockPrice(this.prices, entry.model, entry.region, entry.baseModel);
    if (entry.kind === 'hosted') return hostedPrice(this.prices, entry.target.type, entry.baseModel);
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
    const read = usage.cachedTokens ?? 0;
    const written = usage.cacheWriteTokens ?? 0;
    const hour = Math.min(usage.cacheWrite1hTokens ?? 0, written);
    const fresh = Math.max(0, usage.promptTokens - read - written);
    const costUsd =
      (fresh * price.input +
        read * (price.cacheRead ?? price.input) +
        (written - hour) * (price.cacheWrite ?? price.input) +
        hour * (price.cacheWrite1h ?? price.cacheWrite ?? price.input) +
        usage.completionTokens * price.output) /
      1_000_000;
    const credits = entry.kind === 'bedrock' || entry.kind === 'hosted' ? (entry.freeCredits ?? 0) : 0;
    return credits > 0 ? { costUsd, creditsUsd: credits } : { costUsd };
  }
}
