import { type BedrockPriceTable, hostedPrice } from '../../crds/catalog/prices.js';
import type { DiscoveredModel, ExternalProvider, ExternalProviderStatus } from '../../crds/external-provider.js';
import type { Condition } from '../../crds/meta.js';
import { azureBaseModel } from '../../crds/providers/azure-openai.js';
import {
  apiKeyOf,
  CredentialError,
  type HostedCredentials,
  keyLast4,
  type SecretSource,
} from '../../crds/providers/credentials.js';
import {
  classify,
  type FetchJson,
  type HostedProvider,
  type ListedModel,
  ProviderHttpError,
} from '../../crds/providers/provider.js';
import { HOSTED_PROVIDERS, isHosted } from '../../crds/providers/table.js';
import { setCondition } from '../runtime/conditions.js';
import { discoveryStatus, failedConditions, pricedCondition } from './discovery-conditions.js';

/**
 * Discovery of a hosted provider other than Bedrock (crds/providers/), and its status as a pure
 * function of one attempt: the credentials (the Secret's key, or the workload identity's token),
 * the provider's model list, and the price table. Failures are read through the provider's own
 * error table, so the condition says the cause and the fix in the same words a caller's error
 * does; nothing names the key, a token or the Secret.
 */

interface HostedProblem {
  reason: string;
  credentials: boolean;
  message: string;
}

export type HostedOutcome =
  | { ok: true; models: readonly ListedModel[]; keyLast4?: string }
  | { ok: false; problem: HostedProblem; keyLast4?: string };

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

export async function discoverHosted(
  ep: ExternalProvider,
  credentials: HostedCredentials,
  secrets: SecretSource,
  env: NodeJS.ProcessEnv,
  fetch: FetchJson = fetchJson,
): Promise<HostedOutcome> {
  const type = ep.spec.provider;
  if (!isHosted(type)) throw new Error(`${type} is not a hosted provider`);
  const provider = HOSTED_PROVIDERS[type];
  let last4: { keyLast4?: string } = {};
  let auth: Record<string, string>;
  try {
    if (ep.spec.auth.method === 'APIKey') {
      const shown = keyLast4(apiKeyOf(ep.spec, secrets));
      if (shown.length === 4) last4 = { keyLast4: shown };
    }
    auth = await credentials.headers(ep.spec, provider);
  } catch (err) {
    if (err instanceof CredentialError) return { ok: false, problem: { ...err.problem }, ...last4 };
    throw err;
  }
  try {
    const models = await provider.discover(
      ep.spec,
      provider.baseUrl(ep.spec, env),
      { ...provider.fixedHeaders, ...auth },
      fetch,
    );
    return { ok: true, models, ...last4 };
  } catch (err) {
    return { ok: false, problem: failure(provider, err), ...last4 };
  }
}

/** Failures a second try soon may not see: throttling, overload, timeouts, the network. */
const TRANSIENT = new Set([
  'Throttled',
  'ProviderUnavailable',
  'ProviderTimeout',
  'ProviderUnreachable',
  'TokenExchangeUnreachable',
  'MetadataServerUnavailable',
]);

export const isTransient = (problem: HostedProblem): boolean => TRANSIENT.has(problem.reason);

function failure(provider: HostedProvider, err: unknown): HostedProblem {
  if (err instanceof ProviderHttpError) {
    const p = classify(provider, err.status, err.body, { provider: provider.label }, err.retryAfter);
    return { reason: p.reason, credentials: p.credentials, message: p.message };
  }
  return {
    reason: 'ProviderUnreachable',
    credentials: false,
    message: `${provider.label} could not be reached from the operator: check spec.baseUrl (or the resource's name) and the cluster's egress to it`,
  };
}

/** A selected model as the list has it (the provider's own matching: undated aliases, Vertex versions). */
function matchOf(provider: HostedProvider, selected: string, listed: readonly ListedModel[]): ListedModel | undefined {
  return provider.matches ? provider.matches(selected, listed) : listed.find((m) => m.id === selected);
}

export function hostedProviderStatus(
  ep: ExternalProvider,
  outcome: HostedOutcome,
  now: Date,
  prices: BedrockPriceTable,
): ExternalProviderStatus {
  const type = ep.spec.provider;
  if (!isHosted(type)) throw new Error(`${type} is not a hosted provider`);
  const provider = HOSTED_PROVIDERS[type];
  const generation = ep.metadata.generation ?? 0;
  const prev = ep.status ?? {};
  let conditions = prev.conditions;
  const set = (t: string, status: Condition['status'], reason: string, message: string) => {
    conditions = setCondition(conditions, { type: t, status, reason, message, observedGeneration: generation }, now);
  };
  let phase: ExternalProviderStatus['phase'];
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
    failedConditions(set, outcome.problem, `${provider.label} accepted the credentials`);
    phase = 'Failed';
  } else {
    set('CredentialsValid', 'True', 'Authenticated', `${provider.label} accepted the credentials`);
    const matched = new Map<string, ListedModel>();
    for (const id of ep.spec.models) {
      const m = matchOf(provider, id, outcome.models);
      if (m) matched.set(id, m);
    }
    // The selected names that matched are available under those names too (undated aliases);
    // they come first, so the bound never cuts one of them.
    available = [...new Set([...matched.keys(), ...outcome.models.map((m) => m.id).sort()])].slice(0, 1000).sort();
    models = [...matched].map(([id, m]): DiscoveredModel => {
      const base = type === 'azure-openai' ? azureBaseModel(ep.spec, id) : id;
      return {
        id,
        type: m.modelType === 'embedding' ? 'Embedding' : 'Text',
        family: m.family,
        streaming: m.modelType === 'text',
        lifecycle: 'Active',
        priced: hostedPrice(prices, type, base) !== undefined,
      };
    });
    const missing = ep.spec.models.filter((id) => !matched.has(id));
    if (missing.length > 0) {
      const message =
        `selected models ${provider.label} does not list for these credentials: ${missing.join(', ')}; ` +
        (type === 'azure-openai'
          ? 'the resource does not serve the model of these deployments (azure.deployments[].model)'
          : 'check the ids against status.availableModels and the account’s model access');
      set('ModelsAvailable', 'False', 'ModelsNotAvailable', message);
      phase = missing.length === ep.spec.models.length ? 'Failed' : 'Degraded';
      set(
        'Ready',
        phase === 'Failed' ? 'False' : 'True',
        phase === 'Failed' ? 'ModelsNotAvailable' : 'Degraded',
        message,
      );
    } else {
      set('ModelsAvailable', 'True', 'ModelsAvailable', `all ${ep.spec.models.length} selected models are available`);
      set('Ready', 'True', 'Ready', `${ep.spec.models.length} models routable through the gateway`);
      phase = 'Ready';
    }
    pricedCondition(
      set,
      models,
      `add them under providers.${type === 'azure-openai' ? 'openai' : type} in the ConfigMap platform-ai-optimizer-prices (key bedrock-prices.yaml)`,
    );
  }
  return discoveryStatus(prev, {
    phase,
    generation,
    conditions,
    ...(available ? { availableModels: available } : {}),
    ...(models ? { models } : {}),
    ...(outcome.keyLast4 ? { accessKeyLast4: outcome.keyLast4 } : {}),
    ok: outcome.ok,
    now,
  });
}
