import { type BedrockPriceTable, bedrockPrice } from '../../crds/catalog/prices.js';
import type {
  DiscoveredModel,
  ExternalProvider,
  ExternalProviderPhase,
  ExternalProviderStatus,
} from '../../crds/external-provider.js';
import type { Condition } from '../../crds/meta.js';
import { type AwsFailure, classifyAwsError } from '../../crds/providers/aws-errors.js';
import { setCondition } from '../runtime/conditions.js';
import { discoveryStatus, failedConditions, pricedCondition } from './discovery-conditions.js';

/**
 * An ExternalProvider's status as a pure function of one discovery attempt: credentials
 * (AssumeRole or the Secret's key), then ListFoundationModels and ListInferenceProfiles in the
 * region, and the price table (which selected models have no price). AWS errors
 * become conditions with the cause and the fix of the shared table (crds/providers/aws-errors.ts), which
 * the proxy's caller errors use too; no message names the role, the account or the Secret.
 */

/** What discovery found for each callable model id of the region (selected or not). */
export type FoundModel = Omit<DiscoveredModel, 'id' | 'priced'>;

export type DiscoveryOutcome =
  | {
      ok: true;
      models: ReadonlyMap<string, FoundModel>;
      /** ListInferenceProfiles was refused (an IAM policy from before it was needed): profiles were guessed. */
      profilesGuessed?: true;
      accessKeyLast4?: string;
    }
  | { ok: false; stage: 'credentials' | 'discovery'; failure: AwsFailure; accessKeyLast4?: string };

/** Bedrock's inference-profile prefix of a region: us-east-1 -> us, eu-west-1 -> eu, ap-* -> apac. */
export function inferenceProfileGeo(region: string): string {
  if (region.startsWith('us-gov-')) return 'us-gov';
  if (region.startsWith('ap-')) return 'apac';
  return region.split('-')[0] ?? region;
}

/** ListFoundationModels' FoundationModelSummary, the fields discovery reads. */
export interface ModelSummary {
  modelId?: string;
  outputModalities?: string[];
  inferenceTypesSupported?: string[];
  responseStreamingSupported?: boolean;
  modelLifecycle?: { status?: string };
  inputModalities?: string[];
}

/** ListInferenceProfiles' InferenceProfileSummary, the fields discovery reads. */
export interface ProfileSummary {
  inferenceProfileId?: string;
  type?: string;
  status?: string;
  models?: Array<{ modelArn?: string }>;
}

const foundationId = (arn: string | undefined) => /:foundation-model\/(.+)$/.exec(arn ?? '')?.[1];

/**
 * The callable models of a region: on-demand text and embedding models, and every active
 * inference profile (system-defined: us., eu., global., jp., ...; application profiles by their
 * id), each with what its foundation model's summary says (kind, streaming, lifecycle). Without
 * the profile list (`profiles` undefined: not permitted), the region's geographic ids are
 * derived from the models that support inference profiles, as before ListInferenceProfiles.
 */
export function discoveredModels(
  summaries: readonly ModelSummary[],
  profiles: readonly ProfileSummary[] | undefined,
  region: string,
): Map<string, FoundModel> {
  const byId = new Map<string, FoundModel>();
  const found = new Map<string, FoundModel>();
  for (const m of summaries) {
    const outputs = m.outputModalities ?? ['TEXT'];
    if (!m.modelId || !(outputs.includes('TEXT') || outputs.includes('EMBEDDING'))) continue;
    const type = outputs.includes('TEXT') ? 'Text' : 'Embedding';
    const info: FoundModel = {
      type,
      streaming: type === 'Text' && m.responseStreamingSupported !== false,
      lifecycle: m.modelLifecycle?.status === 'LEGACY' ? 'Legacy' : 'Active',
      ...(m.inputModalities?.includes('IMAGE') ? { images: true } : {}),
    };
    byId.set(m.modelId, info);
    const types = m.inferenceTypesSupported ?? [];
    if (types.includes('ON_DEMAND')) found.set(m.modelId, info);
    if (!profiles && types.includes('INFERENCE_PROFILE')) {
      found.set(`${inferenceProfileGeo(region)}.${m.modelId}`, {
        ...info,
        baseModel: m.modelId,
        profile: 'SystemDefined',
      });
    }
  }
  for (const p of profiles ?? []) {
    if (!p.inferenceProfileId || (p.status !== undefined && p.status !== 'ACTIVE')) continue;
    const baseModel = p.models?.map((m) => foundationId(m.modelArn)).find((id) => id !== undefined);
    const base = baseModel ? byId.get(baseModel) : undefined;
    // A profile whose model this region does not list (it routes elsewhere) still serves text.
    found.set(p.inferenceProfileId, {
      ...(base ?? { type: 'Text', streaming: true, lifecycle: 'Active' }),
      ...(baseModel ? { baseModel } : {}),
      profile: p.type === 'APPLICATION' ? 'Application' : 'SystemDefined',
    });
  }
  return found;
}

export function externalProviderStatus(
  ep: ExternalProvider,
  outcome: DiscoveryOutcome,
  now: Date,
  prices: BedrockPriceTable,
): ExternalProviderStatus {
  const generation = ep.metadata.generation ?? 0;
  const prev = ep.status ?? {};
  let conditions = prev.conditions;
  const set = (type: string, status: Condition['status'], reason: string, message: string) => {
    conditions = setCondition(conditions, { type, status, reason, message, observedGeneration: generation }, now);
  };
  const region = ep.spec.region ?? '';
  let phase: ExternalProviderPhase;
  let available = prev.availableModels;
  let models = prev.models;

  if (!outcome.ok) {
    const auth = ep.spec.auth.method === 'AccessKey' ? 'AccessKey' : 'IAMRole';
    const problem = classifyAwsError(outcome.failure, { auth, stage: outcome.stage, region }, [
      ep.spec.auth.secretRef?.name ?? '',
    ]);
    failedConditions(set, problem, 'AWS accepted the credentials');
    phase = 'Failed';
  } else {
    set(
      'CredentialsValid',
      'True',
      'Authenticated',
      ep.spec.auth.method === 'IAMRole' ? 'assumed the role in spec.auth.roleArn' : 'AWS accepted the access key',
    );
    available = [...outcome.models.keys()].sort();
    models = ep.spec.models.flatMap((id) => {
      const info = outcome.models.get(id);
      if (!info) return [];
      const priced = bedrockPrice(prices, id, region, info.baseModel) !== undefined;
      return [{ id, ...info, priced }];
    });
    const missing = ep.spec.models.filter((m) => !outcome.models.has(m));
    const legacy = models.filter((m) => m.lifecycle === 'Legacy').map((m) => m.id);
    const notes = [
      legacy.length > 0 ? `; legacy (AWS is retiring them, move to a current model): ${legacy.join(', ')}` : '',
      outcome.profilesGuessed
        ? '; inference profiles were derived from the region because ListInferenceProfiles was denied: grant bedrock:ListInferenceProfiles to route global., jp., au. and application inference profiles'
        : '',
    ].join('');
    if (outcome.models.size === 0) {
      const message = `no text or embedding models are available to this account in ${region}: wrong account or region; switch to the account and region where model access was granted`;
      set('ModelsAvailable', 'False', 'NoModelsInRegion', message);
      set('Ready', 'False', 'NoModelsInRegion', message);
      phase = 'Failed';
    } else if (missing.length > 0) {
      const message =
        `selected models not available in ${region}: ${missing.join(', ')}; the model may not be enabled for the account ` +
        '(invoke it once in the console playground and submit the use-case details if asked) or not offered in the region' +
        notes;
      set('ModelsAvailable', 'False', 'ModelsNotAvailable', message);
      phase = missing.length === ep.spec.models.length ? 'Failed' : 'Degraded';
      set(
        'Ready',
        phase === 'Failed' ? 'False' : 'True',
        phase === 'Failed' ? 'ModelsNotAvailable' : 'Degraded',
        message,
      );
    } else {
      set(
        'ModelsAvailable',
        'True',
        legacy.length > 0 ? 'LegacyModels' : 'ModelsAvailable',
        `all ${ep.spec.models.length} selected models are available in ${region}${notes}`,
      );
      set('Ready', 'True', 'Ready', `${ep.spec.models.length} models routable through the gateway`);
      phase = 'Ready';
    }
    pricedCondition(set, models, 'add them to the ConfigMap platform-ai-optimizer-prices (key bedrock-prices.yaml)');
  }

  return discoveryStatus(prev, {
    phase,
    generation,
    conditions,
    ...(available ? { availableModels: available } : {}),
    ...(models ? { models } : {}),
    ...(outcome.accessKeyLast4 ? { accessKeyLast4: outcome.accessKeyLast4 } : {}),
    ok: outcome.ok,
    now,
  });
}
