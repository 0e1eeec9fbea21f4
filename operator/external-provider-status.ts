import type { ExternalProvider, ExternalProviderPhase, ExternalProviderStatus } from '../crds/external-provider.js';
import { type Condition, rfc3339 } from '../crds/meta.js';
import { setCondition } from './conditions.js';

/**
 * An ExternalProvider's status as a pure function of one discovery attempt: credentials
 * (AssumeRole or the Secret's key), then ListFoundationModels in the region. AWS errors
 * become conditions that name the cause and the fix from the troubleshooting table.
 */

export type DiscoveryOutcome =
  | { ok: true; modelIds: string[]; accessKeyLast4?: string }
  | { ok: false; stage: 'credentials' | 'discovery'; code: string; message: string; accessKeyLast4?: string };

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

const TRUST_FIX =
  "the role's trust policy must allow sts:AssumeRole for the gateway's principal (statement AllowKimchi): compare it with the documented trust policy, then delete and re-create the provider";

function credentialProblem(ep: ExternalProvider, code: string, message: string): { reason: string; message: string } {
  const role = ep.spec.auth.roleArn ?? '';
  switch (code) {
    case 'AccessDenied':
    case 'AccessDeniedException':
      return { reason: 'AssumeRoleDenied', message: `STS denied sts:AssumeRole on ${role}: ${TRUST_FIX}` };
    case 'SecretNotFound':
      return { reason: 'SecretNotFound', message };
    case 'UnrecognizedClientException':
    case 'InvalidClientTokenId':
    case 'InvalidSignatureException':
    case 'SignatureDoesNotMatch':
      return ep.spec.auth.method === 'AccessKey'
        ? {
            reason: 'InvalidAccessKey',
            message: `AWS rejected the access key in Secret ${ep.spec.auth.secretRef?.name ?? ''} (${code}): check both values, or create a new key`,
          }
        : { reason: 'InvalidBaseCredentials', message: `AWS rejected the gateway's own credentials (${code})` };
    default:
      return {
        reason: 'AssumeRoleFailed',
        message: `assuming ${role} failed (${code}): confirm the role ARN, the principal in its trust policy and the region, then delete and re-create the provider`,
      };
  }
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

  if (!outcome.ok && outcome.stage === 'credentials') {
    const p = credentialProblem(ep, outcome.code, outcome.message);
    set('CredentialsValid', 'False', p.reason, p.message);
    set('ModelsAvailable', 'Unknown', 'CredentialsInvalid', 'models cannot be listed without working credentials');
    set('Ready', 'False', p.reason, p.message);
    phase = 'Failed';
  } else if (!outcome.ok) {
    const denied = outcome.code === 'AccessDeniedException' || outcome.code === 'AccessDenied';
    const credential = ['UnrecognizedClientException', 'InvalidSignatureException', 'ExpiredTokenException'].includes(
      outcome.code,
    );
    if (credential) {
      const p = credentialProblem(ep, outcome.code, outcome.message);
      set('CredentialsValid', 'False', p.reason, p.message);
      set('Ready', 'False', p.reason, p.message);
    } else {
      set('CredentialsValid', 'True', 'Authenticated', 'AWS accepted the credentials');
      const message = denied
        ? `ListFoundationModels was denied in ${region}: the permission policy lacks bedrock:ListFoundationModels (statement BedrockDiscovery, resource *)`
        : `ListFoundationModels failed in ${region} (${outcome.code}): ${outcome.message}`;
      set('ModelsAvailable', 'Unknown', denied ? 'DiscoveryDenied' : 'DiscoveryFailed', message);
      set('Ready', 'False', denied ? 'DiscoveryDenied' : 'DiscoveryFailed', message);
    }
    phase = 'Failed';
  } else {
    set(
      'CredentialsValid',
      'True',
      'Authenticated',
      ep.spec.auth.method === 'IAMRole' ? `assumed ${ep.spec.auth.roleArn}` : 'AWS accepted the access key',
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
