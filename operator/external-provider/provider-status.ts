import { isDeprecated, lifecycleOf } from '../../crds/catalog/lifecycle.js';
import type { BedrockPriceTable } from '../../crds/catalog/prices.js';
import type {
  DiscoveredModel,
  ExternalProvider,
  ExternalProviderPhase,
  ExternalProviderStatus,
} from '../../crds/external-provider.js';
import { type Condition, rfc3339 } from '../../crds/meta.js';
import type { ProviderCredentials } from '../../crds/providers/credentials.js';
import {
  CredentialError,
  type Discovery,
  type FetchJson,
  type ListedModel,
  type ProviderFailure,
  ProviderHttpError,
  type ProviderModule,
} from '../../crds/providers/provider.js';
import { PROVIDERS } from '../../crds/providers/table.js';
import { setCondition } from '../runtime/conditions.js';

/**
 * Every provider's discovery and status, one path for all six: the provider's module lists the
 * models its credentials may call (crds/providers/: Bedrock's foundation models and inference
 * profiles, the others' model lists), each request authorized by the same credentials the proxy
 * uses; the status is then a pure function of that one attempt, the status before it and the
 * price table. Failures are read through the module's own error table, so a condition says the
 * cause and the fix in the same words as a caller's error, and names no key, token, ARN, account
 * or Secret.
 */

interface Problem {
  reason: string;
  credentials: boolean;
  message: string;
}

export type DiscoveryOutcome =
  | { ok: true; discovery: Discovery; keyLast4?: string }
  | { ok: false; problem: Problem; keyLast4?: string };

/** JSON over the platform's fetch, bounded in time. */
const fetchJson: FetchJson = async (url, init) => {
  const res = await fetch(url, {
    method: init.method ?? 'GET',
    headers: init.headers,
    ...(init.body ? { body: init.body } : {}),
    signal: AbortSignal.timeout(15_000),
  });
  const text = await res.text();
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    body = undefined;
  }
  return { status: res.status, headers: res.headers, body };
};

/** One discovery through the provider's module, every request authorized with its credentials. */
export async function discover(
  ep: ExternalProvider,
  credentials: ProviderCredentials,
  env: NodeJS.ProcessEnv,
  fetch: FetchJson = fetchJson,
): Promise<DiscoveryOutcome> {
  const module = PROVIDERS[ep.spec.provider];
  const shown = credentials.keyLast4(ep.spec);
  const last4 = shown ? { keyLast4: shown } : {};
  const authorized: FetchJson = async (url, init) => {
    const headers = await credentials.authorize(ep.spec, module, {
      method: init.method ?? 'GET',
      url,
      headers: { ...module.fixedHeaders, ...init.headers },
      ...(init.body ? { body: init.body } : {}),
    });
    return fetch(url, { ...init, headers });
  };
  try {
    return { ok: true, discovery: await module.discover(ep.spec, env, authorized), ...last4 };
  } catch (err) {
    const {
      reason,
      credentials: credential,
      message,
    } = module.problem(failureOf(err), {
      stage: 'discovery',
      identity: ep.spec,
    });
    return { ok: false, problem: { reason, credentials: credential, message }, ...last4 };
  }
}

/** What failed: the credentials, the provider's answer, or the way to it. */
function failureOf(err: unknown): ProviderFailure {
  if (err instanceof CredentialError) return { kind: 'credentials', problem: err.problem };
  if (err instanceof ProviderHttpError) {
    return { kind: 'answer', status: err.status, headers: err.headers, body: err.body };
  }
  const e = err as { name?: unknown; code?: unknown; cause?: { code?: unknown } } | undefined;
  const code = e?.name === 'TimeoutError' ? 'TimeoutError' : (e?.cause?.code ?? e?.code);
  return { kind: 'unreachable', ...(typeof code === 'string' ? { code } : {}) };
}

/** Failures a second try soon may not see: throttling, overload, timeouts, the network. */
const TRANSIENT = new Set([
  'Throttled',
  'ProviderUnavailable',
  'ProviderTimeout',
  'ProviderUnreachable',
  'TokenExchangeUnreachable',
  'MetadataServerUnavailable',
  // AWS's (crds/providers/aws-errors.ts).
  'Unavailable',
  'Timeout',
]);

export const isTransient = (problem: Problem): boolean => TRANSIENT.has(problem.reason);

type SetCondition = (type: string, status: Condition['status'], reason: string, message: string) => void;

/** A failed attempt: who failed (the credentials, or the listing after them) and why, not Ready. */
function failedConditions(set: SetCondition, problem: Problem, accepted: string): void {
  if (problem.credentials) {
    set('CredentialsValid', 'False', problem.reason, problem.message);
    set('ModelsAvailable', 'Unknown', 'CredentialsInvalid', 'models cannot be listed without working credentials');
  } else {
    set('CredentialsValid', 'True', 'Authenticated', accepted);
    set('ModelsAvailable', 'Unknown', problem.reason, problem.message);
  }
  set('Ready', 'False', problem.reason, problem.message);
}

/** ModelsPriced: which selected models have no price, and where to add one (`fix`). */
function pricedCondition(set: SetCondition, models: readonly DiscoveredModel[], fix: string): void {
  const unpriced = models.filter((m) => !m.priced).map((m) => m.id);
  if (unpriced.length > 0) {
    set(
      'ModelsPriced',
      'False',
      'UnpricedModels',
      `no price for ${unpriced.join(', ')}: their usage is recorded with its tokens at cost 0 and marked unpriced; ${fix}`,
    );
  } else if (models.length > 0) {
    set('ModelsPriced', 'True', 'Priced', 'every available selected model has a price');
  }
}

/** A selected model as the list has it (the module's own matching: undated aliases, Vertex versions). */
function matchOf(module: ProviderModule, selected: string, listed: readonly ListedModel[]): ListedModel | undefined {
  return module.matches ? module.matches(selected, listed) : listed.find((m) => m.id === selected);
}

/** What a successful discovery makes of the selected models: available, missing, priced, legacy. */
function found(ep: ExternalProvider, discovery: Discovery, prices: BedrockPriceTable, now: Date) {
  const module = PROVIDERS[ep.spec.provider];
  const matched = new Map<string, ListedModel>();
  for (const id of ep.spec.models) {
    const m = matchOf(module, id, discovery.models);
    if (m) matched.set(id, m);
  }
  // The selected names that matched are available under those names too (undated aliases); they
  // come first, so the bound never cuts one of them.
  const available = [...new Set([...matched.keys(), ...discovery.models.map((m) => m.id).sort()])]
    .slice(0, 1000)
    .sort();
  const models = [...matched].map(([id, m]): DiscoveredModel => {
    const base = module.baseModel(ep.spec, id, m);
    // What discovery says (Bedrock's Legacy) first; else what the provider published, from the lifecycle table.
    const deprecated =
      m.lifecycle === 'Active' && isDeprecated(lifecycleOf(prices, ep.spec.provider, base), now.getTime());
    return {
      ...m,
      id,
      ...(deprecated ? { lifecycle: 'Deprecated' as const } : {}),
      priced: module.price(prices, ep.spec, id, base) !== undefined,
    };
  });
  const missing = ep.spec.models.filter((id) => !matched.has(id));
  const legacy = models.filter((m) => m.lifecycle === 'Legacy').map((m) => m.id);
  return { available, models, missing, legacy };
}

/** The conditions of a discovery that found the models: available, missing, or none at all. */
function availability(
  ep: ExternalProvider,
  set: SetCondition,
  discovery: Discovery,
  f: ReturnType<typeof found>,
): ExternalProviderPhase {
  const words = PROVIDERS[ep.spec.provider].words(ep.spec);
  const notes = [
    f.legacy.length > 0 && words.legacy ? `; ${words.legacy}: ${f.legacy.join(', ')}` : '',
    discovery.note ? `; ${discovery.note}` : '',
  ].join('');
  if (discovery.models.length === 0 && words.empty) {
    set('ModelsAvailable', 'False', 'NoModelsInRegion', words.empty);
    set('Ready', 'False', 'NoModelsInRegion', words.empty);
    return 'Failed';
  }
  if (f.missing.length > 0) {
    const message = words.missing(f.missing) + notes;
    set('ModelsAvailable', 'False', 'ModelsNotAvailable', message);
    const failed = f.missing.length === ep.spec.models.length;
    set('Ready', failed ? 'False' : 'True', failed ? 'ModelsNotAvailable' : 'Degraded', message);
    return failed ? 'Failed' : 'Degraded';
  }
  set(
    'ModelsAvailable',
    'True',
    f.legacy.length > 0 ? 'LegacyModels' : 'ModelsAvailable',
    `all ${ep.spec.models.length} selected models are available${words.where}${notes}`,
  );
  set('Ready', 'True', 'Ready', `${ep.spec.models.length} models routable through the gateway`);
  return 'Ready';
}

export function providerStatus(
  ep: ExternalProvider,
  outcome: DiscoveryOutcome,
  now: Date,
  prices: BedrockPriceTable,
): ExternalProviderStatus {
  const module = PROVIDERS[ep.spec.provider];
  const words = module.words(ep.spec);
  const generation = ep.metadata.generation ?? 0;
  const prev = ep.status ?? {};
  let conditions = prev.conditions;
  const set: SetCondition = (type, status, reason, message) => {
    conditions = setCondition(conditions, { type, status, reason, message, observedGeneration: generation }, now);
  };
  let phase: ExternalProviderPhase | undefined;
  let available = prev.availableModels;
  let models = prev.models;
  const standing = prev.phase === 'Ready' || prev.phase === 'Degraded';
  if (!outcome.ok && standing && isTransient(outcome.problem)) {
    // A provider that answered before and fails for a moment keeps what it found: its models
    // stay routable (calls retry and fall back on their own) while discovery tries again soon.
    const { problem } = outcome;
    set(
      'ModelsAvailable',
      'Unknown',
      problem.reason,
      `the last discovery failed (${problem.message}); the models found before stay routable, discovery retries in 30 s`,
    );
    phase = prev.phase;
  } else if (!outcome.ok) {
    failedConditions(set, outcome.problem, words.accepted);
    phase = 'Failed';
  } else {
    set('CredentialsValid', 'True', 'Authenticated', words.accepted);
    const f = found(ep, outcome.discovery, prices, now);
    available = f.available;
    models = f.models;
    phase = availability(ep, set, outcome.discovery, f);
    pricedCondition(set, models, words.priceFix);
  }
  const status: ExternalProviderStatus = { phase, observedGeneration: generation, conditions };
  if (available) status.availableModels = available;
  if (models) status.models = models;
  if (outcome.keyLast4) status.accessKeyLast4 = outcome.keyLast4;
  // A failed attempt keeps the last successful discovery's time.
  if (outcome.ok) status.lastDiscoveryTime = rfc3339(now);
  else if (prev.lastDiscoveryTime) status.lastDiscoveryTime = prev.lastDiscoveryTime;
  return status;
}
