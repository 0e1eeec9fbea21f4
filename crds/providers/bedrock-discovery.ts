import type { DiscoveredModel, ExternalProviderSpec } from '../external-provider.js';
import { isRecord } from '../is-record.js';
import { awsAnswerFailure } from './aws-errors.js';
import { allPages, type Discovery, type FetchJson, headerOf, ProviderHttpError, records, rootOf } from './provider.js';

/**
 * Bedrock's discovery: the region's foundation models (ListFoundationModels, every kind: the
 * summaries say which is text and which embedding) and its inference profiles
 * (ListInferenceProfiles, system-defined and application ones, every page), over Bedrock's
 * control-plane REST API, signed like every call (the operator's fetch authorizes each request).
 * Each callable id keeps what its foundation model's summary says: kind, streaming, lifecycle,
 * images.
 */

/** What discovery found for each callable model id of the region (selected or not). */
export type FoundModel = Omit<DiscoveredModel, 'id' | 'priced'>;

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

/** Where Bedrock's control plane is: the env override (ours, then AWS's own variables), or the region's. */
const controlPlaneUrl = (spec: ExternalProviderSpec, env: NodeJS.ProcessEnv): string =>
  rootOf(
    env,
    ['PAO_ENDPOINT_URL_BEDROCK', 'AWS_ENDPOINT_URL_BEDROCK', 'AWS_ENDPOINT_URL'],
    `https://bedrock.${spec.region ?? ''}.amazonaws.com`,
  );

const PROFILES_GUESSED =
  'inference profiles were derived from the region because ListInferenceProfiles was denied: grant bedrock:ListInferenceProfiles to route global., jp., au. and application inference profiles';

/** ListFoundationModels, then every page of ListInferenceProfiles of both types. */
export async function discoverBedrock(
  spec: ExternalProviderSpec,
  env: NodeJS.ProcessEnv,
  fetch: FetchJson,
): Promise<Discovery> {
  const root = controlPlaneUrl(spec, env);
  const summaries = await allPages(
    `${root}/foundation-models`,
    {},
    fetch,
    (body) => records(isRecord(body) ? body.modelSummaries : undefined) as ModelSummary[],
    () => undefined,
  );
  const profiles = await profilesOf(root, fetch);
  const found = discoveredModels(summaries, profiles, spec.region ?? '');
  return {
    models: [...found].map(([id, info]) => ({ id, ...info })),
    ...(profiles ? {} : { note: PROFILES_GUESSED }),
  };
}

/**
 * System-defined and application inference profiles, every page; undefined when IAM denies
 * ListInferenceProfiles (a policy written before the gateway needed it): discovery then derives
 * the region's geographic ids instead of failing the provider.
 */
async function profilesOf(root: string, fetch: FetchJson): Promise<ProfileSummary[] | undefined> {
  const all: ProfileSummary[] = [];
  for (const type of ['SYSTEM_DEFINED', 'APPLICATION']) {
    const first = `${root}/inference-profiles?maxResults=1000&type=${type}`;
    try {
      all.push(
        ...(await allPages(
          first,
          {},
          fetch,
          (body) => records(isRecord(body) ? body.inferenceProfileSummaries : undefined) as ProfileSummary[],
          (body) =>
            isRecord(body) && typeof body.nextToken === 'string' && body.nextToken
              ? `${first}&nextToken=${encodeURIComponent(body.nextToken)}`
              : undefined,
        )),
      );
    } catch (err) {
      if (err instanceof ProviderHttpError && deniedCode(err) === 'AccessDeniedException') return undefined;
      throw err;
    }
  }
  return all;
}

const deniedCode = (err: ProviderHttpError) =>
  awsAnswerFailure(err.status, headerOf(err.headers, 'x-amzn-errortype'), err.body).code;
