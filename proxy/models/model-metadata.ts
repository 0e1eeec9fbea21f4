import { type Catalog, catalogModel } from '../../crds/catalog/catalog.js';
import type { TokenPrice } from '../../crds/catalog/prices.js';
import type { EngineName } from '../../crds/engines/engine.js';
import { ENGINES, engineFor } from '../../crds/engines/table.js';
import type { ProviderModelFacts } from '../../crds/providers/provider.js';
import type { InClusterRoute, ModelListing } from '../serving/routes.js';

/**
 * What a listed model can do, for the model lists: GET /openai/v1/models (context window and
 * max output, which agents size their prompts by) and the CLI model list GET /v1/models/metadata
 * (the product's coding CLI and editor plugin). Facts come from data, in this order:
 * in-cluster models from the ModelDeployment's spec.server.contextLength, the hosted-model
 * catalog, else what the model server itself reports (Ollama's /api/show); a provider's models
 * from its module (crds/providers/: Bedrock's from discovery, its model table and the price
 * table). Each backend asks for its own kind's facts (proxy/upstreams/backend.ts).
 */

/** Who serves it (ollama, aws.bedrock, or a provider's spec.provider) and what it can do. */
export interface ModelFacts extends ProviderModelFacts {
  /** USD per 1M tokens, where the gateway has a price. */
  price?: TokenPrice;
}

/** What a model server says about a model it has (Ollama's POST /api/show, vLLM's GET /v1/models). */
interface ServerReport {
  /** Absent where the server does not report them (vLLM). */
  capabilities?: readonly string[];
  contextLength?: number;
}

/** Asks a model server about a model the catalog does not know; undefined when it cannot tell. */
export type AskServer = (baseUrl: string, model: string, engine?: EngineName) => Promise<ServerReport | undefined>;

const TEXT_ONLY = ['text'] as const;

/** An in-cluster model: the catalog's entry, else what its server reports. */
export async function inClusterFacts(
  route: InClusterRoute,
  price: TokenPrice | undefined,
  catalog: Catalog,
  ask?: AskServer,
): Promise<ModelFacts> {
  const engine = engineFor(route);
  const known = catalogModel(catalog, route.model, engine.name);
  const report = known ? undefined : await ask?.(route.replicas?.[0] ?? route.baseUrl, route.model, engine.name);
  const capabilities = known?.capabilities ?? report?.capabilities ?? [];
  // The context the server runs with (OLLAMA_CONTEXT_LENGTH, --max-model-len), not the most the model could take.
  const contextWindow = route.contextLength ?? known?.serving.contextLength ?? report?.contextLength;
  return {
    displayName: known?.displayName ?? route.model,
    provider: engine.container,
    // Neither the catalog nor the server said: what it can do is not known (routing does not rule it out).
    ...(!known && !report?.capabilities ? { unknown: ['tools', 'reasoning', 'images'] as const } : {}),
    // Both engines bound an answer only by the context they run with.
    ...(contextWindow ? { contextWindow, maxOutputTokens: contextWindow } : {}),
    tools: capabilities.includes('tools'),
    reasoning: capabilities.includes('thinking'),
    images: capabilities.includes('vision'),
    status: 'active',
    ...(price ? { price } : {}),
  };
}

/** An entry of GET /openai/v1/models: OpenAI's four fields, and the limits agents ask for. */
export function openAIModel(listing: ModelListing, facts: ModelFacts | undefined): Record<string, unknown> {
  return {
    id: listing.id,
    object: 'model',
    created: listing.created,
    owned_by: listing.provider,
    ...(facts?.contextWindow ? { context_window: facts.contextWindow } : {}),
    ...(facts?.maxOutputTokens !== undefined && facts.contextWindow
      ? { max_output_tokens: facts.maxOutputTokens }
      : {}),
  };
}

/** An entry of the CLI model list (GET /v1/models/metadata). */
export function cliModel(listing: ModelListing, facts: ModelFacts): Record<string, unknown> {
  return {
    slug: listing.id,
    display_name: facts.displayName,
    provider: facts.provider,
    owned_by: listing.provider,
    ...(listing.id !== listing.model ? { alias_of: listing.model } : {}),
    reasoning: facts.reasoning,
    input_modalities: facts.images ? ['text', 'image'] : [...TEXT_ONLY],
    limits: { context_window: facts.contextWindow ?? null, max_output_tokens: facts.maxOutputTokens ?? null },
    status: facts.status,
    replacement: facts.replacement ?? null,
    tool_call: facts.tools,
    supports_images: facts.images,
    pricing: facts.price ? { input_per_1m: facts.price.input, output_per_1m: facts.price.output } : null,
    // From the lifecycle table (crds/catalog/lifecycle.ts); Bedrock's Legacy says nothing of when: null, not invented.
    deprecated_at: facts.deprecatedAt ?? null,
    sunset_at: facts.retiresAt ?? null,
  };
}

const MAX_SHOW_BYTES = 1024 * 1024;
const SHOW_TIMEOUT_MS = 3_000;
const SHOW_TTL_MS = 10 * 60_000;
const SHOW_FAILED_TTL_MS = 30_000;

/**
 * Asks a model server about a model in its engine's way: Ollama's POST /api/show (capabilities,
 * and the context length its weights declare, `<architecture>.context_length`), vLLM's GET
 * /v1/models (the max_model_len it runs with). Answers are kept a while per server and model,
 * failures briefly, so a listing costs a call only now and then.
 */
export function askModelServer(fetchImpl: typeof fetch = fetch, now: () => number = Date.now): AskServer {
  const cache = new Map<string, { at: number; ttl: number; report: Promise<ServerReport | undefined> }>();
  return (baseUrl, model, engine = 'Ollama') => {
    const key = `${engine} ${baseUrl} ${model}`;
    const hit = cache.get(key);
    if (hit && now() - hit.at < hit.ttl) return hit.report;
    const entry = { at: now(), ttl: SHOW_TTL_MS, report: Promise.resolve<ServerReport | undefined>(undefined) };
    const ask = ENGINES[engine].modelInfo === 'ollama-show' ? show : listed;
    entry.report = ask(fetchImpl, baseUrl, model).then((r) => {
      if (!r) entry.ttl = SHOW_FAILED_TTL_MS;
      return r;
    });
    if (cache.size > 1000) cache.clear();
    cache.set(key, entry);
    return entry.report;
  };
}

async function show(fetchImpl: typeof fetch, baseUrl: string, model: string): Promise<ServerReport | undefined> {
  try {
    const res = await fetchImpl(`${baseUrl}/api/show`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model }),
      signal: AbortSignal.timeout(SHOW_TIMEOUT_MS),
    });
    if (!res.ok || Number(res.headers.get('content-length') ?? 0) > MAX_SHOW_BYTES) {
      await res.body?.cancel();
      return undefined;
    }
    const text = await res.text();
    if (text.length > MAX_SHOW_BYTES) return undefined;
    const body = JSON.parse(text) as { capabilities?: unknown; model_info?: unknown };
    const capabilities = Array.isArray(body.capabilities)
      ? body.capabilities.filter((c): c is string => typeof c === 'string')
      : [];
    let contextLength: number | undefined;
    if (body.model_info && typeof body.model_info === 'object') {
      for (const [k, v] of Object.entries(body.model_info)) {
        if (k.endsWith('.context_length') && typeof v === 'number' && v > 0) contextLength = v;
      }
    }
    return { capabilities, ...(contextLength ? { contextLength } : {}) };
  } catch {
    return undefined;
  }
}

/** vLLM's model list: the served model's max_model_len (capabilities are not reported there). */
async function listed(fetchImpl: typeof fetch, baseUrl: string, model: string): Promise<ServerReport | undefined> {
  try {
    const res = await fetchImpl(`${baseUrl}/v1/models`, { signal: AbortSignal.timeout(SHOW_TIMEOUT_MS) });
    if (!res.ok || Number(res.headers.get('content-length') ?? 0) > MAX_SHOW_BYTES) {
      await res.body?.cancel();
      return undefined;
    }
    const text = await res.text();
    if (text.length > MAX_SHOW_BYTES) return undefined;
    const body = JSON.parse(text) as { data?: Array<{ id?: unknown; max_model_len?: unknown }> };
    const entry = body.data?.find((m) => m.id === model);
    if (!entry) return undefined;
    const n = entry.max_model_len;
    return typeof n === 'number' && n > 0 ? { contextLength: n } : {};
  } catch {
    return undefined;
  }
}
