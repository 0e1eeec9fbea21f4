import { type AwsFailure, classifyAwsError } from '../crds/aws-errors.js';
import type { ExternalProvider, ExternalProviderPhase, ExternalProviderStatus } from '../crds/external-provider.js';
import { type Condition, rfc3339 } from '../crds/meta.js';
import { setCondition } from './conditions.js';

/**
 * An ExternalProvider's status as a pure function of one discovery attempt: credentials
 * (AssumeRole or the Secret's key), then ListFoundationModels in the region. AWS errors
 * become conditions with the cause and the fix of the shared table (crds/aws-errors.ts), which
 * the proxy's caller errors use too; no message names the role, the account or the Secret.
 */

export type DiscoveryOutcome =
  | { ok: true; modelIds: string[]; accessKeyLast4?: string }
  | { ok: false; stage: 'credentials' | 'discovery'; failure: AwsFailure; accessKeyLast4?: string };

/** Bedrock's inference-profile prefix of a region: us-east-1 -> us, eu-west-1 -> eu, ap-* -> apac. */
export function inferenceProfileGeo(region: string): string {
  if (region.startsWith('us-gov-')) return 'us-gov';
  if (region.startsWith('ap-')) return 'apac';
  return region.split('-')[0] ?? region;
}

export interface ModelSummary {
  modelId?: string;
  outputModalities?: string[];
  inferenceTypesSupported?: string[];
}

/** Text models callable in the region: on-demand ids, and geo-prefixed ids of inference-profile models. */
export function availableModelIds(summaries: ModelSummary[], region: string): string[] {
  const ids = new Set<string>();
  for (const m of summaries) {
    if (!m.modelId || !(m.outputModalities ?? ['TEXT']).includes('TEXT')) continue;
    const types = m.inferenceTypesSupported ?? [];
    if (types.includes('ON_DEMAND')) ids.add(m.modelId);
    if (types.includes('INFERENCE_PROFILE')) ids.add(`${inferenceProfileGeo(region)}.${m.modelId}`);
  }
  return [...ids].sort();
}

export function externalProviderStatus(
  ep: ExternalProvider,
  outcome: DiscoveryOutcome,
  now: Date,
): ExternalProviderStatus {
  const generation = ep.metadata.generation ?? 0;
  const prev = ep.status ?? {};
  let conditions = prev.conditions;
  const set = (type: string, status: Condition['status'], reason: string, message: string) => {
    conditions = setCondition(conditions, { type, status, reason, message, observedGeneration: generation }, now);
  };
  const region = ep.spec.region;
  let phase: ExternalProviderPhase;
  let available = prev.availableModels;

  if (!outcome.ok) {
    const problem = classifyAwsError(outcome.failure, { auth: ep.spec.auth.method, stage: outcome.stage, region }, [
      ep.spec.auth.secretRef?.name ?? '',
    ]);
    if (problem.credentials) {
      set('CredentialsValid', 'False', problem.reason, problem.message);
      set('ModelsAvailable', 'Unknown', 'CredentialsInvalid', 'models cannot be listed without working credentials');
    } else {
      set('CredentialsValid', 'True', 'Authenticated', 'AWS accepted the credentials');
      set('ModelsAvailable', 'Unknown', problem.reason, problem.message);
    }
    set('Ready', 'False', problem.reason, problem.message);
    phase = 'Failed';
  } else {
    set(
      'CredentialsValid',
      'True',
      'Authenticated',
      ep.spec.auth.method === 'IAMRole' ? 'assumed the role in spec.auth.roleArn' : 'AWS accepted the access key',
    );
    available = outcome.modelIds;
    const missing = ep.spec.models.filter((m) => !outcome.modelIds.includes(m));
    if (outcome.modelIds.length === 0) {
      const message = `no text models are available to this account in ${region}: wrong account or region; switch to the account and region where model access was granted`;
      set('ModelsAvailable', 'False', 'NoModelsInRegion', message);
      set('Ready', 'False', 'NoModelsInRegion', message);
      phase = 'Failed';
    } else if (missing.length > 0) {
      const message =
        `selected models not available in ${region}: ${missing.join(', ')}; the model may not be enabled for the account ` +
        '(invoke it once in the console playground and submit the use-case details if asked) or not offered in the region';
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
        'ModelsAvailable',
        `all ${ep.spec.models.length} selected models are available in ${region}`,
      );
      set('Ready', 'True', 'Ready', `${ep.spec.models.length} models routable through the gateway`);
      phase = 'Ready';
    }
  }

  const status: ExternalProviderStatus = { phase, observedGeneration: generation, conditions };
  if (available) status.availableModels = available;
  const last4 = outcome.accessKeyLast4;
  if (last4) status.accessKeyLast4 = last4;
  if (outcome.ok) status.lastDiscoveryTime = rfc3339(now);
  else if (prev.lastDiscoveryTime) status.lastDiscoveryTime = prev.lastDiscoveryTime;
  return status;
}
