import type { Dialect } from '../constants.js';
import type { ExternalProviderSpec } from '../external-provider.js';
import { isRecord } from '../is-record.js';
import {
  allPages,
  COMMON_ERRORS,
  type ErrorRule,
  listedAs,
  OPENAI_PATHS,
  openAIErrorBody,
  type ProviderModule,
  type ProviderTarget,
  records,
  rootOf,
} from './provider.js';
import { statusTableProvider } from './status-table-provider.js';

/**
 * Azure OpenAI (and AI Foundry) resources: https://<resourceName>.openai.azure.com. Without
 * azure.apiVersion the v1 API (/openai/v1/..., the deployment's name as `model`), which also
 * serves the Responses API; with it the dated deployments API
 * (/openai/deployments/<name>/...?api-version=...). A key goes in the api-key header; a
 * workload identity's Entra ID token (scope https://cognitiveservices.azure.com/.default) as a
 * bearer token. Errors are OpenAI's envelope with Azure's codes (DeploymentNotFound,
 * content_filter, 429 with retry-after).
 */

const V1: readonly Dialect[] = ['openai-chat', 'openai-responses', 'openai-completions', 'openai-embeddings'];
const DATED: readonly Dialect[] = ['openai-chat', 'openai-completions', 'openai-embeddings'];
const EMBEDDINGS: readonly Dialect[] = ['openai-embeddings'];

/** The scope a workload identity's token is requested for. */
export const AZURE_COGNITIVE_SCOPE = 'https://cognitiveservices.azure.com/.default';

const ERRORS: readonly ErrorRule[] = [
  {
    status: 401,
    problem: {
      reason: 'InvalidCredentials',
      credentials: true,
      status: 502,
      type: 'api_error',
      code: 'provider_auth_failed',
      message:
        "{provider} refused the credentials{detail}; with APIKey put one of the resource's keys in the Secret (key apiKey), with WorkloadIdentity check the federated credential of spec.auth.clientId",
    },
  },
  {
    status: 403,
    problem: {
      reason: 'AccessDenied',
      credentials: true,
      status: 502,
      type: 'api_error',
      code: 'provider_access_denied',
      message:
        "{provider} denied access{detail}; grant the identity the role Cognitive Services OpenAI User on the resource, and check the resource's network access",
    },
  },
  {
    status: 404,
    kind: /DeploymentNotFound/,
    problem: {
      reason: 'DeploymentNotFound',
      credentials: false,
      status: 404,
      type: 'not_found_error',
      code: 'model_not_found',
      message: '{provider} has no deployment {model}{detail}; create it or fix azure.deployments',
    },
  },
  {
    status: 404,
    problem: {
      reason: 'ResourceNotFound',
      credentials: false,
      status: 404,
      type: 'not_found_error',
      code: 'model_not_found',
      message: '{provider} answered 404{detail}; check azure.resourceName and azure.apiVersion',
    },
  },
  {
    status: 400,
    kind: /content_filter/,
    problem: {
      reason: 'ContentFiltered',
      credentials: false,
      status: 400,
      type: 'invalid_request_error',
      code: 'content_filter',
      message: "{provider}'s content filter blocked the prompt{detail}",
    },
  },
  ...COMMON_ERRORS,
];

const deploymentOf = (spec: ExternalProviderSpec, name: string) => spec.azure?.deployments.find((d) => d.name === name);

const baseUrl: ProviderModule['baseUrl'] = (spec, env) =>
  rootOf(env, 'PAO_ENDPOINT_URL_AZURE_OPENAI', `https://${spec.azure?.resourceName ?? ''}.openai.azure.com`);

/** The OpenAI model behind a deployment, whose price applies. */
const azureBaseModel = (spec: ExternalProviderSpec, deployment: string): string =>
  deploymentOf(spec, deployment)?.model ?? deployment;

export const azureOpenai: ProviderModule = statusTableProvider({
  type: 'azure-openai',
  label: 'Azure OpenAI',
  system: 'azure.ai.openai',
  endpointEnv: 'PAO_ENDPOINT_URL_AZURE_OPENAI',
  baseUrl,
  credentialStyle: 'api-key',
  dialects: (t) => (t.modelType === 'embedding' ? EMBEDDINGS : t.apiVersion ? DATED : V1),
  // stream_options (the usage chunk) came with 2024-09-01-preview; older versions refuse it, and
  // their streams are counted from what was sent.
  streamUsage: (t) => !t.apiVersion || t.apiVersion >= '2024-09-01',
  request: (t: ProviderTarget, dialect, body) => {
    const path = OPENAI_PATHS[dialect] ?? '';
    if (!t.apiVersion)
      return { url: `${t.baseUrl}/openai/v1${path}`, headers: {}, body: { ...body, model: t.upstreamModel } };
    const { model: _, ...rest } = body;
    return {
      url: `${t.baseUrl}/openai/deployments/${encodeURIComponent(t.upstreamModel)}${path}?api-version=${t.apiVersion}`,
      headers: {},
      body: rest,
    };
  },
  /**
   * The data plane cannot list deployments (that is Azure Resource Manager's, with other
   * rights): the resource's model list proves the credentials and the resource, and a declared
   * deployment counts as available when the resource serves its model. A deployment that does
   * not exist shows at its first call (DeploymentNotFound, a row of the table above).
   */
  discover: async (spec, env, fetch) => {
    const root = baseUrl(spec, env);
    const url = spec.azure?.apiVersion
      ? `${root}/openai/models?api-version=${spec.azure.apiVersion}`
      : `${root}/openai/v1/models`;
    const models = await allPages(
      url,
      {},
      fetch,
      (body) =>
        records(isRecord(body) ? body.data : undefined).flatMap((m) => (typeof m.id === 'string' ? [m.id] : [])),
      () => undefined,
    );
    const served = (model: string) => models.some((id) => id === model || id.startsWith(`${model}-`));
    return {
      models: (spec.azure?.deployments ?? [])
        .filter((d) => served(d.model))
        .map((d) => listedAs(d.name, 'openai', d.model)),
    };
  },
  baseModel: azureBaseModel,
  missingFix: 'the resource does not serve the model of these deployments (azure.deployments[].model)',
  errorBody: openAIErrorBody,
  errors: ERRORS,
});
