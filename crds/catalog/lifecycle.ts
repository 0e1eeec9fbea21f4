import { isRecord } from '../is-record.js';
import type { BedrockPriceTable } from './prices.js';

/**
 * When a hosted model goes away, as its provider publishes it: the `lifecycle` section of the price
 * table (prices.yaml; the prices ConfigMap overrides single entries, so a platform team can add a
 * date its provider announced before a release of ours carries it). The proxy answers a deprecated
 * model with Deprecation and Sunset headers and counts its requests; the operator's resources that
 * name a model within RETIRING_SOON_DAYS of its retirement carry a ModelsRetiring condition.
 */

/** Dates are calendar days (YYYY-MM-DD), read as 00:00 UTC. */
export interface ModelLifecycle {
  /** When the provider deprecated it; the Deprecation header's date. */
  deprecated?: string;
  /** When requests to it start to fail. */
  retires?: string;
  /** The model the provider says to move to (followed further while that one is going away too). */
  replacement?: string;
}

/** The window before retirement in which a resource naming the model gets the condition. */
export const RETIRING_SOON_DAYS = 30;

const DAY_MS = 86_400_000;
const DATE = /^\d{4}-\d{2}-\d{2}$/;

class LifecycleTableError extends Error {}

/** A YAML date (js-yaml reads an unquoted one as a Date) or a quoted YYYY-MM-DD, as YYYY-MM-DD. */
function dayOf(v: unknown, where: string): string {
  const text = v instanceof Date ? v.toISOString().slice(0, 10) : v;
  // A day that is not in the calendar (2026-02-30) reads as another one: refused, not moved.
  const real = typeof text === 'string' && DATE.test(text) && !Number.isNaN(Date.parse(text));
  if (!real || new Date(Date.parse(`${text}T00:00:00Z`)).toISOString().slice(0, 10) !== text) {
    throw new LifecycleTableError(`${where} must be a date, YYYY-MM-DD`);
  }
  return text;
}

/** The `lifecycle` section: provider -> model id -> {deprecated, retires, replacement}. */
export function parseLifecycle(section: unknown): Record<string, Record<string, ModelLifecycle>> {
  if (section === undefined || section === null) return {};
  if (!isRecord(section)) throw new LifecycleTableError('lifecycle must be a map of provider -> models');
  const out: Record<string, Record<string, ModelLifecycle>> = {};
  for (const [provider, models] of Object.entries(section)) {
    if (!isRecord(models)) throw new LifecycleTableError(`lifecycle.${provider} must be a map of model id -> dates`);
    const entries: Record<string, ModelLifecycle> = {};
    for (const [id, raw] of Object.entries(models)) {
      const where = `lifecycle.${provider}.${id}`;
      if (!isRecord(raw)) throw new LifecycleTableError(`${where} must be {deprecated, retires, replacement}`);
      const entry: ModelLifecycle = {};
      if (raw.deprecated !== undefined) entry.deprecated = dayOf(raw.deprecated, `${where}.deprecated`);
      if (raw.retires !== undefined) entry.retires = dayOf(raw.retires, `${where}.retires`);
      if (raw.replacement !== undefined) {
        if (typeof raw.replacement !== 'string' || raw.replacement === '') {
          throw new LifecycleTableError(`${where}.replacement must be a model id`);
        }
        entry.replacement = raw.replacement;
      }
      if (!entry.deprecated && !entry.retires) {
        throw new LifecycleTableError(`${where} needs a deprecated or a retires date`);
      }
      entries[id] = entry;
    }
    out[provider] = entries;
  }
  return out;
}

/**
 * The ids a hosted model id is looked up by, most specific first: itself, without Vertex's
 * `@version`, without a date or `-latest` (claude-sonnet-4-5-20250929 -> claude-sonnet-4-5), and
 * for a Bedrock inference profile its foundation model. Prices are looked up the same way.
 */
function lookupIds(model: string): string[] {
  const bare = model.replace(/@.*$/, '');
  const undated = bare.replace(/-(\d{4}-\d{2}-\d{2}|\d{8}|latest)$/, '');
  return [...new Set([model, bare, undated])];
}

/**
 * A hosted model's entry in a section of the table kept by provider (prices, lifecycles): under
 * the first of its lookupIds the provider's entries have. Azure's deployments are their OpenAI model's.
 */
export function hostedEntry<T>(
  section: Record<string, Record<string, T>> | undefined,
  provider: string,
  model: string,
): T | undefined {
  const entries = section?.[provider === 'azure-openai' ? 'openai' : provider];
  if (!entries) return undefined;
  for (const id of lookupIds(model)) {
    const hit = entries[id];
    if (hit) return hit;
  }
  return undefined;
}

/** A model's lifecycle at a provider (spec.provider), if the table has one. */
export const lifecycleOf = (table: BedrockPriceTable, provider: string, model: string): ModelLifecycle | undefined =>
  hostedEntry(table.lifecycle, provider, model);

/** Where to move: the provider's replacement, followed while the replacement is going away too. */
export function replacementOf(table: BedrockPriceTable, provider: string, model: string): string | undefined {
  let next = lifecycleOf(table, provider, model)?.replacement;
  // A bounded walk: a table that loops (a bad override) still answers.
  for (let hops = 0; next && hops < 8; hops++) {
    const after = lifecycleOf(table, provider, next)?.replacement;
    if (!after) break;
    next = after;
  }
  return next;
}

const at = (day: string) => Date.parse(`${day}T00:00:00Z`);

/** Deprecated now: its deprecation date (or its retirement) has come. */
export function isDeprecated(l: ModelLifecycle | undefined, now: number): boolean {
  const from = l?.deprecated ?? l?.retires;
  return from !== undefined && at(from) <= now;
}

/** Whole days until it retires (negative: retired that many days ago); undefined without a date. */
export function daysToRetirement(l: ModelLifecycle | undefined, now: number): number | undefined {
  return l?.retires === undefined ? undefined : Math.ceil((at(l.retires) - now) / DAY_MS);
}

/**
 * The headers of an answer from a deprecated model: Deprecation (RFC 9745, a structured-field
 * date: `@` and Unix seconds) and, where a retirement date is published, Sunset (RFC 8594, an
 * HTTP-date). None for a model that is not deprecated.
 */
export function deprecationHeaders(l: ModelLifecycle | undefined, now: number): Record<string, string> {
  if (!l || !isDeprecated(l, now)) return {};
  const since = at(l.deprecated ?? (l.retires as string));
  return {
    deprecation: `@${Math.floor(since / 1000)}`,
    ...(l.retires ? { sunset: new Date(at(l.retires)).toUTCString() } : {}),
  };
}
