import { foldedBetas, foldSystemMessages } from '../anthropic-system-messages.js';
import { loadBedrockModels } from '../catalog/bedrock-models.js';
import { bedrockPrice, foundationModelOf } from '../catalog/prices.js';
import type { Dialect } from '../constants.js';
import { isRecord } from '../is-record.js';
import { type AwsFailure, awsAnswerFailure, awsStreamFailure, classifyAwsError } from './aws-errors.js';
import { discoverBedrock } from './bedrock-discovery.js';
import { fromEmbeddingAnswers, toEmbeddingCalls } from './bedrock-embeddings.js';
import {
  headerOf,
  type ProblemContext,
  type ProviderFailure,
  type ProviderModule,
  type ProviderProblem,
  type ProviderTarget,
  type Refusal,
  rootOf,
  type WireRequest,
} from './provider.js';

/**
 * AWS Bedrock, a provider module like the others, over Bedrock Runtime's REST API signed with
 * SigV4 (aws-signature.ts) with the provider's AWS credentials (an access key from its Secret, or
 * a role assumed through STS: aws-credentials.ts).
 *
 * - Text models speak Bedrock's Converse (`bedrock-converse`: /model/<id>/converse, and
 *   /converse-stream, the default unless the provider or the model does not stream, also for
 *   callers that want the answer whole); chat callers reach it through the gateway's translator
 *   (proxy/translators/openai-chat_bedrock-converse.ts), Responses and Anthropic callers through
 *   chat. The provider's guardrail goes on every Converse call.
 * - Claude models also speak Anthropic's Messages natively, through InvokeModel
 *   (/invoke, /invoke-with-response-stream) with anthropic_version bedrock-2023-05-31: nothing
 *   is lost in a round trip (signed thinking blocks, cache_control on any block, every beta
 *   Claude Code sends, server tools, citations), where Converse names each differently or not
 *   at all; and Bedrock counts their tokens (/count-tokens).
 * - Embedding models answer OpenAI's embeddings as a fan-out of InvokeModel calls
 *   (bedrock-embeddings.ts).
 *
 * Discovery is ListFoundationModels and ListInferenceProfiles (bedrock-discovery.ts); errors are
 * AWS's codes read through one table (aws-errors.ts) for conditions and callers alike.
 */

/** The anthropic_version Claude on Bedrock takes in the body instead of a header. */
const BEDROCK_ANTHROPIC_VERSION = 'bedrock-2023-05-31';
/** InvokeModel calls one embeddings request makes at once (Titan embeds one text per call). */
const EMBED_CONCURRENCY = 8;
/** The input tokens Bedrock counted for an InvokeModel call (Cohere's body has no count). */
const INPUT_TOKENS_HEADER = 'x-amzn-bedrock-input-token-count';

const EVENT_STREAM = 'application/vnd.amazon.eventstream';

const EMBEDDING_DIALECTS: readonly Dialect[] = ['openai-embeddings'];
const TEXT_DIALECTS: readonly Dialect[] = ['bedrock-converse'];
// Converse first: OpenAI's dialects reach Claude through Converse, as they reach every text model.
const CLAUDE_DIALECTS: readonly Dialect[] = ['bedrock-converse', 'anthropic-messages'];

/** An Anthropic model, by its foundation id or a system-defined profile's (us.anthropic...). */
export const isAnthropic = (id: string) => /(^|\.)anthropic\./.test(id);

/** Bedrock's embedding models by their ids (amazon.titan-embed-*, cohere.embed-*), where no discovery ran. */
const isEmbeddingModel = (id: string): boolean => /(^|\.)(amazon\.titan-embed|cohere\.embed)-/.test(id);

const RUNTIME_ENV = ['PAO_ENDPOINT_URL_BEDROCK_RUNTIME', 'AWS_ENDPOINT_URL_BEDROCK_RUNTIME', 'AWS_ENDPOINT_URL'];

const modelPath = (t: ProviderTarget, id = t.upstreamModel) => `${t.baseUrl}/model/${encodeURIComponent(id)}`;

/** A content block anywhere in Converse's messages that is an image. */
const hasImage = (messages: unknown): boolean =>
  Array.isArray(messages) &&
  messages.some((m) => isRecord(m) && Array.isArray(m.content) && m.content.some((b) => isRecord(b) && b.image));

/**
 * Anthropic's Messages body as InvokeModel takes it: no model or stream, the version, the betas in
 * the body, system messages folded into `system` (Bedrock's Messages API trails Anthropic's).
 */
function invokeBody(body: Record<string, unknown>, given: readonly string[] = []): Record<string, unknown> {
  const { model: _model, stream: _stream, ...rest } = foldSystemMessages(body);
  const betas = foldedBetas(given);
  return {
    anthropic_version: BEDROCK_ANTHROPIC_VERSION,
    ...rest,
    ...(betas.length > 0 ? { anthropic_beta: betas } : {}),
  };
}

/** A Converse call: the guardrail added, ConverseStream whenever the target streams. */
function converse(t: ProviderTarget, body: Record<string, unknown>): WireRequest | Refusal {
  if (t.images === false && hasImage(body.messages)) {
    return {
      refused: `${t.upstreamModel} takes text only: send the request without image parts`,
      param: 'messages',
      code: 'unsupported_content',
    };
  }
  const stream = t.streaming === true;
  const g = t.guardrail;
  const guardrailConfig = g
    ? {
        guardrailIdentifier: g.identifier,
        guardrailVersion: g.version,
        trace: g.trace ?? 'disabled',
        // streamProcessingMode exists on ConverseStream only.
        ...(stream && g.streamProcessingMode ? { streamProcessingMode: g.streamProcessingMode } : {}),
      }
    : undefined;
  return {
    url: `${modelPath(t)}/${stream ? 'converse-stream' : 'converse'}`,
    headers: stream ? { accept: EVENT_STREAM } : {},
    body: guardrailConfig ? { ...body, guardrailConfig } : body,
    stream,
  };
}

/** OpenAI's embeddings as InvokeModel calls of the embedding model, EMBED_CONCURRENCY at a time. */
function embeddings(t: ProviderTarget, body: Record<string, unknown>, baseModel: string) {
  const plan = toEmbeddingCalls(baseModel, body);
  if ('refused' in plan) return plan;
  return {
    calls: plan.calls.map((c) => ({ url: `${modelPath(t)}/invoke`, headers: {}, body: c.body })),
    concurrency: EMBED_CONCURRENCY,
    join: (answers: readonly { json: unknown; headers: Parameters<typeof headerOf>[0] }[]) =>
      fromEmbeddingAnswers(
        plan,
        answers.map((a) => {
          const count = Number(headerOf(a.headers, INPUT_TOKENS_HEADER));
          return Number.isFinite(count) ? { json: a.json, inputTokens: count } : { json: a.json };
        }),
        t.upstreamModel,
      ),
  };
}

/** Who failed, for a caller ("Bedrock model <id>"); the operator's conditions say "Bedrock" (the table's default). */
const subjectOf = (ctx: ProblemContext): string | undefined =>
  ctx.stage === 'call' ? (ctx.model ? `Bedrock model ${ctx.model}` : 'Bedrock') : undefined;

/** The table's problem for an AWS failure in its context; a caller's credential problem says who cannot be called. */
function awsProblem(failure: AwsFailure, ctx: ProblemContext, stage: 'credentials' | 'discovery' | 'invoke') {
  const subject = subjectOf(ctx);
  const problem = classifyAwsError(
    failure,
    {
      auth: ctx.identity.auth.method === 'AccessKey' ? 'AccessKey' : 'IAMRole',
      stage,
      ...(ctx.streaming !== undefined ? { streaming: ctx.streaming } : {}),
      ...(ctx.identity.region ? { region: ctx.identity.region } : {}),
      ...(subject ? { subject } : {}),
    },
    [ctx.identity.auth.secretRef?.name ?? ''],
  );
  return withSubject(problem, subject);
}

const withSubject = (problem: ProviderProblem, subject: string | undefined): ProviderProblem =>
  subject && problem.credentials ? { ...problem, message: `${subject} cannot be called: ${problem.message}` } : problem;

function problem(failure: ProviderFailure, ctx: ProblemContext): ProviderProblem {
  const stage = ctx.stage === 'call' ? 'invoke' : 'discovery';
  switch (failure.kind) {
    case 'answer':
      return awsProblem(
        awsAnswerFailure(failure.status, headerOf(failure.headers, 'x-amzn-errortype'), failure.body),
        ctx,
        stage,
      );
    case 'exception':
      return awsProblem(awsStreamFailure(failure.type, failure.message), ctx, stage);
    case 'unreachable':
      return awsProblem({ code: failure.code ?? 'NetworkingError', message: '' }, ctx, stage);
    case 'credentials': {
      // Classified by the same table when they failed (crds/providers/credentials.ts).
      return withSubject(
        { status: 502, type: 'api_error', code: 'bedrock_credentials_invalid', ...failure.problem },
        subjectOf(ctx),
      );
    }
  }
}

export const bedrock: ProviderModule = {
  type: 'bedrock',
  label: 'Bedrock',
  system: 'aws.bedrock',
  endpointEnv: 'PAO_ENDPOINT_URL_BEDROCK_RUNTIME',
  // AWS's own endpoint variables, which the SDK read before, still apply after ours.
  baseUrl: (spec, env) => rootOf(env, RUNTIME_ENV, `https://bedrock-runtime.${spec.region ?? ''}.amazonaws.com`),
  /**
   * A model the region offers (status.availableModels; every selected model standalone), with
   * discovery's findings where it ran and what the id itself says where it did not.
   */
  target(ep, model, at) {
    if (!at.standalone && !ep.status?.availableModels?.includes(model)) return undefined;
    const info = ep.status?.models?.find((m) => m.id === model);
    const baseModel = info?.baseModel ?? foundationModelOf(model);
    const target: ProviderTarget = {
      type: 'bedrock',
      upstreamModel: model,
      family: isAnthropic(baseModel) || isAnthropic(model) ? 'anthropic' : 'openai',
      modelType: (info ? info.type === 'Embedding' : isEmbeddingModel(model)) ? 'embedding' : 'text',
      baseUrl: bedrock.baseUrl(ep.spec, at.env),
      region: ep.spec.region ?? '',
      streaming: ep.spec.streaming === true && (info?.streaming ?? true),
      ...(info ? { images: info.images === true, lifecycle: info.lifecycle } : {}),
      ...(ep.spec.guardrail ? { guardrail: { ...ep.spec.guardrail } } : {}),
    };
    return { target, baseModel };
  },
  credentialStyle: 'sigv4',
  signingName: 'bedrock',
  dialects: (t) =>
    t.modelType === 'embedding' ? EMBEDDING_DIALECTS : t.family === 'anthropic' ? CLAUDE_DIALECTS : TEXT_DIALECTS,
  request(t, dialect, body, stream, betas) {
    if (dialect === 'bedrock-converse') return converse(t, body);
    if (dialect === 'openai-embeddings') return embeddings(t, body, foundationModelOf(t.upstreamModel));
    if (dialect === 'anthropic-messages') {
      return {
        url: `${modelPath(t)}/${stream ? 'invoke-with-response-stream' : 'invoke'}`,
        // InvokeModelWithResponseStream takes the body's type in X-Amzn-Bedrock-Accept; its own is an event stream.
        headers: stream ? { accept: EVENT_STREAM, 'x-amzn-bedrock-accept': 'application/json' } : {},
        body: invokeBody(body, betas),
      };
    }
    return { refused: `Bedrock does not serve ${dialect}`, code: 'unsupported_endpoint' };
  },
  // CountTokens takes the foundation model, not an inference profile; the body InvokeModel would take, as a blob.
  countTokens: (t, body, baseModel) =>
    t.family === 'anthropic'
      ? {
          url: `${modelPath(t, baseModel)}/count-tokens`,
          headers: {},
          body: {
            input: {
              invokeModel: {
                body: Buffer.from(JSON.stringify(invokeBody({ max_tokens: 1, ...body }))).toString('base64'),
              },
            },
          },
        }
      : undefined,
  countedIn: 'inputTokens',
  discover: discoverBedrock,
  baseModel: (_spec, model, found) => found?.baseModel ?? foundationModelOf(model),
  price: (table, at, model, baseModel) => bedrockPrice(table, model, at.region ?? '', baseModel),
  /** The Bedrock model table (catalog/bedrock-models.yaml), with discovery's input modalities and lifecycle over it. */
  facts(model, baseModel, t) {
    const models = loadBedrockModels();
    const known = models[baseModel] ?? models[foundationModelOf(model)];
    return {
      displayName: known?.displayName ?? model,
      provider: 'aws.bedrock',
      ...(known ? { contextWindow: known.contextWindow, maxOutputTokens: known.maxOutputTokens } : {}),
      tools: known?.tools === true,
      reasoning: known?.reasoning === true,
      images: t.images ?? known?.images === true,
      status: t.lifecycle === 'Legacy' ? 'deprecated' : 'active',
      ...(t.lifecycle === 'Legacy' && known?.replacement ? { replacement: known.replacement } : {}),
    };
  },
  words: (spec) => {
    const region = spec.region ?? '';
    return {
      accepted:
        spec.auth.method === 'IAMRole' ? 'assumed the role in spec.auth.roleArn' : 'AWS accepted the access key',
      where: ` in ${region}`,
      missing: (ids) =>
        `selected models not available in ${region}: ${ids.join(', ')}; the model may not be enabled for the account ` +
        '(invoke it once in the console playground and submit the use-case details if asked) or not offered in the region',
      priceFix: 'add them to the ConfigMap platform-ai-optimizer-prices (key bedrock-prices.yaml)',
      empty: `no text or embedding models are available to this account in ${region}: wrong account or region; switch to the account and region where model access was granted`,
      legacy: 'legacy (AWS is retiring them, move to a current model)',
    };
  },
  problem,
};
