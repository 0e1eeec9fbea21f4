import { type Catalog, catalogModel, pricing } from '../../crds/catalog/catalog.js';
import { lifecycleOf, type ModelLifecycle, replacementOf } from '../../crds/catalog/lifecycle.js';
import type { BedrockPriceTable, TokenPrice } from '../../crds/catalog/prices.js';
import type { EngineName } from '../../crds/engines/engine.js';
import { PROVIDERS } from '../../crds/providers/table.js';
import type { ExternalRoute } from '../serving/routes.js';
import type { Usage } from '../upstreams/upstream.js';

export {
  type BedrockPriceTable,
  loadBedrockPrices,
  mergePrices,
  parseBedrockPrices,
  type TokenPrice,
} from '../../crds/catalog/prices.js';

/**
 * What a request cost. In-cluster models: the catalog's price per 1M tokens (the hourly price of
 * the recommended GPU spread over its assumed throughput). External providers: the one price
 * table (crds/catalog/prices.ts: input, output and prompt-cache prices per 1M tokens, Bedrock's
 * per region and for global routing where they differ), overridable at run time. Which price a
 * route has is its backend's to say (proxy/upstreams/backend.ts); this module only holds the
 * current tables and does the arithmetic. A provider's free credits pay first: that part is
 * reported as savings until the credits are used up; the usage store allocates them when it
 * writes the records (see allocateCredits), so that several replicas spend them once.
 */

export interface Charge {
  costUsd: number;
  /** The serving provider's free credits (its whole grant), for the store to allocate from. */
  creditsUsd?: number;
  /** Tokens were used but the model has no price: the cost is unknown, not zero. */
  unpriced?: true;
}

/** The price tables in force: the catalog's, and the providers' table with the ConfigMap's overrides. */
export class PriceBook {
  private table: BedrockPriceTable;

  constructor(
    private readonly catalog: Catalog,
    table: BedrockPriceTable,
  ) {
    this.table = table;
  }

  /** A new providers' table (the prices ConfigMap changed). */
  setTable(table: BedrockPriceTable): void {
    this.table = table;
    this.lifecycles.clear();
  }

  /** Lifecycles looked up, by provider and model: every answer asks (account stage), the table seldom changes. */
  private readonly lifecycles = new Map<string, ModelLifecycle | null>();

  /**
   * An in-cluster model's list price, from the catalog's GPU and its engine's throughput at the
   * deployment's concurrency (its slots; absent: the catalog's serving default).
   */
  catalogPrice(model: string, engine: EngineName = 'Ollama', slots?: number): TokenPrice | undefined {
    const known = catalogModel(this.catalog, model, engine);
    if (!known) return undefined;
    const per1M = pricing(this.catalog, known, known.gpu.recommended, slots).usdPer1MTokens;
    return { input: per1M, output: per1M };
  }

  /**
   * What one replica of an in-cluster model costs per hour: its GPUs on the catalog's recommended
   * type, the type its list price assumes too (the proxy does not see which GPU type a node has),
   * so that list and actual cost differ by utilisation only.
   */
  gpuHourPrice(model: string, engine: EngineName = 'Ollama'): number | undefined {
    const known = catalogModel(this.catalog, model, engine);
    return known ? pricing(this.catalog, known, known.gpu.recommended).usdPerHour : undefined;
  }

  /** A provider's model, as its module looks it up (Bedrock's by region and foundation model). */
  providerPrice(route: Pick<ExternalRoute, 'target' | 'identity' | 'model' | 'baseModel'>): TokenPrice | undefined {
    return PROVIDERS[route.target.type].price(this.table, route.identity, route.model, route.baseModel);
  }

  /**
   * A provider's model's deprecation and retirement, from the table's lifecycle section (looked up
   * like its price), with the replacement to move to now (a replacement going away too is followed).
   */
  providerLifecycle(route: Pick<ExternalRoute, 'target' | 'baseModel'>): ModelLifecycle | undefined {
    const key = `${route.target.type}\u0000${route.baseModel}`;
    const known = this.lifecycles.get(key);
    if (known !== undefined) return known ?? undefined;
    const found = lifecycleOf(this.table, route.target.type, route.baseModel);
    const replacement = found && replacementOf(this.table, route.target.type, route.baseModel);
    const value = found ? { ...found, ...(replacement ? { replacement } : {}) } : null;
    // Bounded: model names come from the routes, not from callers, but a table of many providers stays small anyway.
    if (this.lifecycles.size >= 10_000) this.lifecycles.clear();
    this.lifecycles.set(key, value);
    return value ?? undefined;
  }
}

/** What `usage` cost at `price`; the cache's reads and writes at their own prices. */
export function charge(price: TokenPrice | undefined, usage: Usage | undefined, creditsUsd: number): Charge {
  if (!usage) return { costUsd: 0 };
  if (!price) return usage.promptTokens + usage.completionTokens > 0 ? { costUsd: 0, unpriced: true } : { costUsd: 0 };
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
  return creditsUsd > 0 ? { costUsd, creditsUsd } : { costUsd };
}
