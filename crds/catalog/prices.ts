import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import yaml from 'js-yaml';
import { isRecord } from '../is-record.js';
import { hostedEntry, type ModelLifecycle, parseLifecycle } from './lifecycle.js';

/**
 * Bedrock's prices per model id, shared by the proxy (what a request cost) and the operator
 * (which selected models have no price: the provider's ModelsPriced condition), so both read
 * one table with one lookup. The shipped table is catalog/prices.yaml; the
 * ConfigMap platform-ai-optimizer-prices overrides single entries.
 */

/** USD per 1M tokens. */
export interface TokenPrice {
  input: number;
  output: number;
  /** Prompt tokens read from the prompt cache; the input price where absent. */
  cacheRead?: number;
  /** Prompt tokens written to the prompt cache; the input price where absent. */
  cacheWrite?: number;
  /** Prompt tokens written to the cache with a 1-hour lifetime (Anthropic); cacheWrite where absent. */
  cacheWrite1h?: number;
}

export interface BedrockPriceTable {
  models: Record<string, TokenPrice>;
  /** `global.` inference profiles where AWS prices global routing differently. */
  global?: Record<string, TokenPrice>;
  regions?: Record<string, Record<string, TokenPrice>>;
  /** Hosted providers' prices by spec.provider, then model id (OpenAI's, Anthropic's, Vertex's ids). */
  providers?: Record<string, Record<string, TokenPrice>>;
  /** When hosted models are deprecated and retire, by spec.provider, then model id (crds/catalog/lifecycle.ts). */
  lifecycle?: Record<string, Record<string, ModelLifecycle>>;
}

class PriceTableError extends Error {}

export function loadBedrockPrices(path = fileURLToPath(new URL('./prices.yaml', import.meta.url))): BedrockPriceTable {
  return parseBedrockPrices(readFileSync(path, 'utf8'));
}

function priceEntries(section: unknown, where: string): Record<string, TokenPrice> {
  if (section === undefined || section === null) return {};
  if (!isRecord(section)) throw new PriceTableError(`${where} must be a map of model id -> price`);
  const out: Record<string, TokenPrice> = {};
  for (const [id, raw] of Object.entries(section)) {
    if (!isRecord(raw)) throw new PriceTableError(`${where}.${id} must be {input, output}`);
    const price: TokenPrice = { input: 0, output: 0 };
    for (const field of ['input', 'output', 'cacheRead', 'cacheWrite', 'cacheWrite1h'] as const) {
      const v = raw[field];
      if (v === undefined && field !== 'input' && field !== 'output') continue;
      if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) {
        throw new PriceTableError(`${where}.${id}.${field} must be a number >= 0 (USD per 1M tokens)`);
      }
      price[field] = v;
    }
    out[id] = price;
  }
  return out;
}

/** Parses and checks a price table; a malformed one is refused whole (the last good one stays). */
export function parseBedrockPrices(text: string): BedrockPriceTable {
  const t: unknown = yaml.load(text);
  if (t === undefined || t === null) return { models: {}, global: {}, regions: {} };
  if (!isRecord(t)) throw new PriceTableError('the price table must be a map with models, global and regions');
  const regions: Record<string, Record<string, TokenPrice>> = {};
  if (t.regions !== undefined && t.regions !== null) {
    if (!isRecord(t.regions)) throw new PriceTableError('regions must be a map of region -> models');
    for (const [region, models] of Object.entries(t.regions))
      regions[region] = priceEntries(models, `regions.${region}`);
  }
  const providers: Record<string, Record<string, TokenPrice>> = {};
  if (t.providers !== undefined && t.providers !== null) {
    if (!isRecord(t.providers)) throw new PriceTableError('providers must be a map of provider -> models');
    for (const [provider, models] of Object.entries(t.providers))
      providers[provider] = priceEntries(models, `providers.${provider}`);
  }
  return {
    models: priceEntries(t.models, 'models'),
    global: priceEntries(t.global, 'global'),
    regions,
    providers,
    lifecycle: parseLifecycle(t.lifecycle),
  };
}

/** Overrides replace single entries; everything else stays from the base table. */
export function mergePrices(base: BedrockPriceTable, over: BedrockPriceTable): BedrockPriceTable {
  const regions: Record<string, Record<string, TokenPrice>> = { ...base.regions };
  for (const [r, models] of Object.entries(over.regions ?? {})) regions[r] = { ...regions[r], ...models };
  const providers: Record<string, Record<string, TokenPrice>> = { ...base.providers };
  for (const [p, models] of Object.entries(over.providers ?? {})) providers[p] = { ...providers[p], ...models };
  const lifecycle: Record<string, Record<string, ModelLifecycle>> = { ...base.lifecycle };
  for (const [p, models] of Object.entries(over.lifecycle ?? {})) lifecycle[p] = { ...lifecycle[p], ...models };
  return {
    models: { ...base.models, ...over.models },
    global: { ...base.global, ...over.global },
    regions,
    providers,
    lifecycle,
  };
}

/**
 * The price of a hosted provider's model: its id, else the id without a date or version
 * (gpt-4o-2024-08-06 -> gpt-4o, claude-sonnet-4-5-20250929 -> claude-sonnet-4-5,
 * claude-sonnet-4-5@20250929 -> claude-sonnet-4-5). Azure's deployments are priced as their
 * OpenAI model (the caller passes it), openai-compatible servers only where the table names them.
 */
export const hostedPrice = (table: BedrockPriceTable, provider: string, model: string): TokenPrice | undefined =>
  hostedEntry(table.providers, provider, model);

/** Prefixes of system-defined inference profiles: geographic ones, and global routing. */
const PROFILE_PREFIX = /^(us|eu|apac|us-gov|ca|jp|au|global)\.(.+)$/;

/** The foundation model a model id names: a system-defined profile's id without its prefix. */
export function foundationModelOf(id: string): string {
  return PROFILE_PREFIX.exec(id)?.[2] ?? id;
}

/**
 * The price of a call to `id` made in `region`. `baseModel` is the foundation model an
 * inference profile routes to, where discovery found it (application profiles have opaque ids).
 */
export function bedrockPrice(
  table: BedrockPriceTable,
  id: string,
  region: string,
  baseModel?: string,
): TokenPrice | undefined {
  const base = baseModel ?? foundationModelOf(id);
  const inRegion = table.regions?.[region]?.[base] ?? table.models[base];
  return id.startsWith('global.') ? (table.global?.[base] ?? inRegion) : inRegion;
}
