import { hostedPrice } from '../catalog/prices.js';
import type { ExternalProviderSpec } from '../external-provider.js';
import {
  type AnswerHeaders,
  classify,
  type ErrorRule,
  familyOf,
  headerOf,
  modelTypeOf,
  type ProviderErrorBody,
  type ProviderModule,
  type ProviderProblem,
  type ProviderTarget,
} from './provider.js';

/**
 * What the providers besides Bedrock share of their module, so each keeps only its own: errors
 * read through a table of HTTP statuses and error kinds (ErrorRule, first match wins), a target
 * per model that discovery listed (status.models), prices from the price table's `providers`
 * section, and the same words in the status. Bedrock's module (bedrock.ts) reads AWS's error
 * codes, regions and inference profiles instead.
 */

export type StatusTableParts = Omit<
  ProviderModule,
  'target' | 'baseModel' | 'price' | 'facts' | 'words' | 'problem' | 'errors'
> & {
  /** Reads the provider's error body. */
  errorBody(body: unknown): ProviderErrorBody | undefined;
  errors: readonly ErrorRule[];
  /** The model whose price applies (Azure: a deployment's model); the id itself where absent. */
  baseModel?: ProviderModule['baseModel'];
  /** The fix said for selected models the list does not have. */
  missingFix?: string;
};

/** Seconds to wait: retry-after, or Azure's retry-after-ms rounded up. */
function retryAfterOf(headers: AnswerHeaders): string | null {
  const ms = Number(headerOf(headers, 'retry-after-ms'));
  if (Number.isFinite(ms) && ms > 0) return String(Math.ceil(ms / 1000));
  return headerOf(headers, 'retry-after') ?? null;
}

export function statusTableProvider(parts: StatusTableParts): ProviderModule {
  const baseModel: ProviderModule['baseModel'] = parts.baseModel ?? ((_spec, model) => model);
  const pricesUnder = parts.type === 'azure-openai' ? 'openai' : parts.type;
  return {
    ...parts,
    baseModel,
    target(ep, model, at) {
      const info = ep.status?.models?.find((m) => m.id === model);
      if (!at.standalone && !info) return undefined;
      const base = baseModel(ep.spec, model);
      const target: ProviderTarget = {
        type: parts.type,
        upstreamModel: model,
        family: info?.family === 'anthropic' || familyOf(model) === 'anthropic' ? 'anthropic' : 'openai',
        modelType: info ? (info.type === 'Embedding' ? 'embedding' : 'text') : modelTypeOf(base),
        baseUrl: parts.baseUrl(ep.spec, at.env),
        ...(ep.spec.azure?.apiVersion ? { apiVersion: ep.spec.azure.apiVersion } : {}),
        ...(ep.spec.vertex ? { project: ep.spec.vertex.project, location: ep.spec.vertex.location } : {}),
      };
      return { target, baseModel: base };
    },
    price: (table, _at, _model, base) => hostedPrice(table, parts.type, base),
    // The model lists of these providers say nothing of limits or abilities: what the route knows.
    facts: (model, _base, target) => ({
      displayName: model,
      provider: parts.type,
      tools: target.modelType === 'text',
      reasoning: false,
      images: false,
      unknown: ['reasoning', 'images'],
      status: 'active',
    }),
    words: (_spec: ExternalProviderSpec) => ({
      accepted: `${parts.label} accepted the credentials`,
      where: '',
      missing: (ids: readonly string[]) =>
        `selected models ${parts.label} does not list for these credentials: ${ids.join(', ')}; ` +
        (parts.missingFix ?? 'check the ids against status.availableModels and the account’s model access'),
      priceFix: `add them under providers.${pricesUnder} in the ConfigMap platform-ai-optimizer-prices (key bedrock-prices.yaml)`,
    }),
    problem(failure, ctx): ProviderProblem {
      // Callers read which provider resource failed; the operator's condition is the provider's own.
      const name = ctx.provider ? `${parts.label} (${ctx.provider})` : parts.label;
      switch (failure.kind) {
        case 'answer':
          return classify(
            parts,
            failure.status,
            failure.body,
            { provider: name, ...(ctx.model ? { model: ctx.model } : {}) },
            retryAfterOf(failure.headers),
          );
        case 'credentials':
          return {
            status: 502,
            type: 'api_error',
            code: 'provider_credentials',
            ...failure.problem,
            message: ctx.provider ? `${name}: ${failure.problem.message}` : failure.problem.message,
          };
        case 'exception':
          return {
            reason: 'ProviderError',
            credentials: false,
            status: 502,
            type: 'api_error',
            code: 'upstream_stream_error',
            message: `${name} failed in the middle of the answer (${failure.type})`,
          };
        case 'unreachable':
          return {
            reason: 'ProviderUnreachable',
            credentials: false,
            status: 502,
            type: 'api_error',
            code: 'upstream_unreachable',
            message: `${parts.label} could not be reached from the operator: check spec.baseUrl (or the resource's name) and the cluster's egress to it`,
          };
      }
    },
  };
}
