import type { Readable } from 'node:stream';
import {
  BedrockRuntimeClient,
  ConverseCommand,
  type ConverseCommandOutput,
  ConverseStreamCommand,
  type ConverseStreamOutput,
  InvokeModelCommand,
} from '@aws-sdk/client-bedrock-runtime';
import type { CredentialProvider } from '../../crds/providers/aws-credentials.js';
import type { BedrockTarget, ProviderTarget } from '../../crds/providers/provider.js';
import type { Dialect } from '../endpoints/dialects.js';
import { ProxyError } from '../endpoints/errors.js';
import { type ExternalRoute, type ExternalRouteOf, narrowTarget } from '../routing/routes.js';
import { countAnthropicTokens, sendAnthropic } from './bedrock-anthropic.js';
import { isAnthropic, jsonMode, toConverseInput } from './bedrock-converse-request.js';
import { fromConverseOutput, type OpenAIChatChunk, type OpenAIChatCompletion } from './bedrock-converse-response.js';
import { ConverseStreamAggregator, ConverseStreamTranslator } from './bedrock-converse-stream.js';
import { type EmbeddingAnswer, fromEmbeddingAnswers, toEmbeddingCalls } from './bedrock-embeddings.js';
import { type BedrockErrorContext, mapBedrockError } from './bedrock-errors.js';
import { ConverseEventRelay, takeEventStream } from './bedrock-event-stream.js';
import { bedrockRequestHandler } from './bedrock-http.js';
import {
  DEFAULT_TIMEOUTS,
  type StreamOutcome,
  type Upstream,
  type UpstreamCall,
  type UpstreamResult,
} from './upstream.js';

/**
 * AWS Bedrock through the Converse API. The gateway calls ConverseStream by default, also for
 * clients that did not ask to stream (the stream is aggregated into one completion), unless
 * the provider turns streaming off; the translation both ways lives in bedrock-converse-request.ts,
 * bedrock-converse-response.ts and bedrock-converse-stream.ts.
 * One SDK client per provider and region; credentials come from the provider's resource
 * (its Secret, or a role assumed per request from the cache of temporary credentials).
 */

const encoder = new TextEncoder();
const frame = (chunk: OpenAIChatChunk | object) => `data: ${JSON.stringify(chunk)}\n\n`;
const DONE = 'data: [DONE]\n\n';

export interface BedrockUpstreamOptions {
  credentialsFor: (route: BedrockRoute) => CredentialProvider;
  endpoint?: string;
  /** SDK attempts per call; default 1, because the gateway's retry policy (proxy/upstreams/resilience.ts) retries. */
  maxAttempts?: number;
}

/** A Bedrock model's route, its target Bedrock's. */
export type BedrockRoute = ExternalRouteOf<BedrockTarget>;
const isBedrock = (t: ProviderTarget): t is BedrockTarget => t.type === 'bedrock';
const bedrockRoute = (route: ExternalRoute): BedrockRoute => narrowTarget(route, isBedrock);

const EMBEDDING_DIALECTS: readonly Dialect[] = ['openai-embeddings'];
const TEXT_DIALECTS: readonly Dialect[] = ['openai-chat'];
const CLAUDE_DIALECTS: readonly Dialect[] = ['openai-chat', 'anthropic-messages'];

/** InvokeModel calls one embeddings request makes at once (Titan embeds one text per call). */
const EMBED_CONCURRENCY = 8;

const translatorFor = (call: UpstreamCall<BedrockRoute>, id: string, created: number, json: boolean) =>
  new ConverseStreamTranslator(call.route.model, id, created, call.clientWantsUsage, call.route.provider, json);

const completionId = () => `chatcmpl-${Math.random().toString(36).slice(2, 14)}`;

export class BedrockUpstream implements Upstream<ExternalRoute> {
  private readonly clients = new Map<string, { version: string; client: BedrockRuntimeClient }>();

  constructor(private readonly opts: BedrockUpstreamOptions) {}

  private client(route: BedrockRoute): BedrockRuntimeClient {
    const key = `${route.provider}|${route.target.region}`;
    // A changed provider (new role, new Secret reference) gets a fresh client and credentials.
    const version = route.target.version;
    const cached = this.clients.get(key);
    if (cached && cached.version === version) return cached.client;
    cached?.client.destroy();
    const client = new BedrockRuntimeClient({
      region: route.target.region,
      credentials: this.opts.credentialsFor(route),
      maxAttempts: this.opts.maxAttempts ?? 1,
      requestHandler: bedrockRequestHandler({ connectMs: DEFAULT_TIMEOUTS.connectMs }),
      ...(this.opts.endpoint ? { endpoint: this.opts.endpoint } : {}),
    });
    this.clients.set(key, { version, client });
    return client;
  }

  close(): void {
    for (const { client } of this.clients.values()) client.destroy();
    this.clients.clear();
  }

  /**
   * Embedding models answer embeddings (InvokeModel); text models chat (Converse), and Claude
   * models also Anthropic's Messages natively (InvokeModel with Anthropic's body).
   */
  dialects(external: ExternalRoute): readonly Dialect[] {
    const route = bedrockRoute(external);
    if (route.target.modelType === 'embedding') return EMBEDDING_DIALECTS;
    return isAnthropic(route.baseModel) || isAnthropic(route.model) ? CLAUDE_DIALECTS : TEXT_DIALECTS;
  }

  private context(route: BedrockRoute, streaming: boolean): BedrockErrorContext {
    return { model: route.model, provider: route.provider, streaming, auth: authOf(route) };
  }

  async send(external: UpstreamCall<ExternalRoute>): Promise<UpstreamResult> {
    const call = { ...external, route: bedrockRoute(external.route) };
    switch (call.dialect) {
      case 'openai-embeddings':
        return this.embeddings(call);
      case 'anthropic-messages':
        return sendAnthropic(this.client(call.route), call, this.context(call.route, call.stream));
      case 'openai-chat':
        return this.converse(call);
      default:
        throw new ProxyError(
          500,
          'server_error',
          'internal_error',
          `Bedrock was sent ${call.dialect}, which it does not serve`,
        );
    }
  }

  /** Input tokens of an Anthropic Messages request, counted by Bedrock for a Claude model. */
  async countTokens(
    external: ExternalRoute,
    body: Record<string, unknown>,
    signal: AbortSignal,
  ): Promise<number | undefined> {
    const route = bedrockRoute(external);
    if (!this.dialects(route).includes('anthropic-messages')) return undefined;
    return countAnthropicTokens(this.client(route), route, body, signal, this.context(route, false));
  }

  private async converse(call: UpstreamCall<BedrockRoute>): Promise<UpstreamResult> {
    const started = performance.now();
    const input = toConverseInput(call.route.model, call.body, {
      baseModel: call.route.baseModel,
      streaming: call.route.target.streaming,
      ...(call.route.target.images === false ? { images: false } : {}),
      ...(call.route.target.guardrail ? { guardrail: call.route.target.guardrail } : {}),
    });
    if (input instanceof ProxyError) throw input;
    const ctx: BedrockErrorContext = {
      model: call.route.model,
      provider: call.route.provider,
      streaming: call.route.target.streaming,
      auth: authOf(call.route),
    };
    const client = this.client(call.route);
    const id = completionId();
    const created = Math.floor(Date.now() / 1000);

    if (!call.route.target.streaming) {
      let out: ConverseCommandOutput;
      try {
        out = await client.send(new ConverseCommand(input), { abortSignal: call.signal });
      } catch (err) {
        throw mapBedrockError(err, ctx);
      }
      const { body, usage } = fromConverseOutput(out, call.route.model, id, created, jsonMode(input));
      if (!call.stream) return usage ? { kind: 'json', status: 200, body, usage } : { kind: 'json', status: 200, body };
      // A streaming client of a non-streaming provider gets the whole answer as one stream.
      const chunks = completionAsChunks(body, call.clientWantsUsage);
      return {
        kind: 'stream',
        body: new ReadableStream<Uint8Array>({
          start(controller) {
            controller.enqueue(encoder.encode(chunks.map(frame).join('') + DONE));
            controller.close();
          },
        }),
        outcome: Promise.resolve({ ...(usage ? { usage } : {}), firstTokenMs: performance.now() - started }),
      };
    }

    let events: AsyncIterable<ConverseStreamOutput>;
    const command = new ConverseStreamCommand(input);
    // A streaming caller gets the events from the answer's bytes (bedrock-event-stream.ts).
    const taken = call.stream ? takeEventStream(command) : undefined;
    try {
      const out = await client.send(command, { abortSignal: call.signal });
      const raw = taken?.body();
      if (raw) return this.relayRaw(raw, call, ctx, id, created, started, jsonMode(input));
      if (!out.stream) throw new ProxyError(502, 'api_error', 'upstream_error', 'Bedrock returned no stream');
      events = out.stream;
    } catch (err) {
      throw mapBedrockError(err, ctx);
    }

    if (!call.stream) {
      const aggregator = new ConverseStreamAggregator({ model: call.route.model, provider: call.route.provider });
      try {
        for await (const event of events) aggregator.push(event);
      } catch (err) {
        throw mapBedrockError(err, ctx);
      }
      const cut = cutOff(aggregator.finishReason() !== undefined, aggregator.usage() !== undefined, ctx);
      if (cut) throw cut;
      const { body, usage } = aggregator.result(call.route.model, id, created, jsonMode(input));
      return usage ? { kind: 'json', status: 200, body, usage } : { kind: 'json', status: 200, body };
    }
    return this.relay(events, call, ctx, id, created, started, jsonMode(input));
  }

  /**
   * Embeddings through InvokeModel: one call per Titan text, per 96 Cohere texts, at most
   * EMBED_CONCURRENCY at a time; the input tokens come from Bedrock's response header
   * (Cohere's body has no count).
   */
  private async embeddings(call: UpstreamCall<BedrockRoute>): Promise<UpstreamResult> {
    const route = call.route;
    const plan = toEmbeddingCalls(route.baseModel, call.body);
    if (plan instanceof ProxyError) throw plan;
    const ctx: BedrockErrorContext = {
      model: route.model,
      provider: route.provider,
      streaming: false,
      auth: authOf(route),
    };
    const client = this.client(route);
    const answers: EmbeddingAnswer[] = new Array(plan.calls.length);
    let next = 0;
    let failed = false;
    const worker = async () => {
      // The first failure stops the others from starting more calls: the request fails whole.
      while (!failed && next < plan.calls.length) {
        const i = next++;
        const command = new InvokeModelCommand({
          modelId: route.model,
          contentType: 'application/json',
          accept: 'application/json',
          body: JSON.stringify(plan.calls[i]?.body),
        });
        let inputTokens: number | undefined;
        command.middlewareStack.add(
          (nextHandler) => async (args) => {
            const out = await nextHandler(args);
            const headers = (out.response as { headers?: Record<string, string> }).headers ?? {};
            const count = Number(headers['x-amzn-bedrock-input-token-count']);
            if (Number.isFinite(count)) inputTokens = count;
            return out;
          },
          { step: 'deserialize', name: 'inputTokenCount' },
        );
        let text: string;
        try {
          const out = await client.send(command, { abortSignal: call.signal });
          text = new TextDecoder().decode(out.body);
        } catch (err) {
          failed = true;
          throw mapBedrockError(err, ctx);
        }
        let json: unknown;
        try {
          json = JSON.parse(text);
        } catch {
          throw new ProxyError(
            502,
            'api_error',
            'upstream_error',
            `Bedrock answered ${route.model} with a body that is not JSON`,
          );
        }
        answers[i] = inputTokens === undefined ? { json } : { json, inputTokens };
      }
    };
    await Promise.all(Array.from({ length: Math.min(EMBED_CONCURRENCY, plan.calls.length) }, worker));
    const result = fromEmbeddingAnswers(plan, answers, route.model);
    if (result instanceof ProxyError) throw result;
    return { kind: 'json', status: 200, body: result.body, usage: result.usage };
  }

  private relayRaw(
    raw: Readable,
    call: UpstreamCall<BedrockRoute>,
    ctx: BedrockErrorContext,
    id: string,
    created: number,
    started: number,
    json: boolean,
  ): UpstreamResult {
    const translator = translatorFor(call, id, created, json);
    const relay = new ConverseEventRelay(
      raw,
      {
        push: (event) => {
          const chunks = translator.push(event);
          return chunks.length === 1 ? frame(chunks[0] as OpenAIChatChunk) : chunks.map(frame).join('');
        },
        cut: () => cutOff(translator.finishReason() !== undefined, translator.usage() !== undefined, ctx),
        usage: () => translator.usage(),
        firstContentSeen: () => translator.firstContentSeen(),
        errorEvent: (err) => frame(err.toJSON()),
        end: DONE,
      },
      (err) => mapBedrockError(err, ctx),
      started,
    );
    return { kind: 'stream', body: relay, outcome: relay.outcomeSettled };
  }

  private relay(
    events: AsyncIterable<ConverseStreamOutput>,
    call: UpstreamCall<BedrockRoute>,
    ctx: BedrockErrorContext,
    id: string,
    created: number,
    started: number,
    json: boolean,
  ): UpstreamResult {
    const iterator = events[Symbol.asyncIterator]();
    const translator = translatorFor(call, id, created, json);
    const outcome: StreamOutcome = {};
    let settle: (o: StreamOutcome) => void = () => {};
    const settled = new Promise<StreamOutcome>((r) => {
      settle = r;
    });
    const done = (controller: ReadableStreamDefaultController<Uint8Array>, tail: string) => {
      const usage = translator.usage();
      if (usage) outcome.usage = usage;
      controller.enqueue(encoder.encode(tail + DONE));
      controller.close();
      settle(outcome);
    };
    const body = new ReadableStream<Uint8Array>({
      pull: async (controller) => {
        // One Bedrock event per pull: the client's pace sets the upstream's.
        for (;;) {
          let next: IteratorResult<ConverseStreamOutput>;
          try {
            next = await iterator.next();
          } catch (err) {
            const error = mapBedrockError(err, ctx);
            outcome.error = error;
            return done(controller, frame(error.toJSON()));
          }
          if (next.done) {
            // A stream Bedrock ended without messageStop or usage was cut off: not a success.
            const cut = cutOff(translator.finishReason() !== undefined, translator.usage() !== undefined, ctx);
            if (!cut) return done(controller, '');
            outcome.error = cut;
            return done(controller, frame(cut.toJSON()));
          }
          let chunks: OpenAIChatChunk[];
          try {
            chunks = translator.push(next.value);
          } catch (err) {
            const error = mapBedrockError(err, ctx);
            outcome.error = error;
            return done(controller, frame(error.toJSON()));
          }
          if (outcome.firstTokenMs === undefined && translator.firstContentSeen()) {
            outcome.firstTokenMs = performance.now() - started;
          }
          if (chunks.length > 0) {
            controller.enqueue(encoder.encode(chunks.map(frame).join('')));
            return;
          }
        }
      },
      cancel: async () => {
        outcome.clientAborted = true;
        const usage = translator.usage();
        if (usage) outcome.usage = usage;
        await iterator.return?.();
        settle(outcome);
      },
    });
    return { kind: 'stream', body, outcome: settled };
  }
}

/** The CRD admits only these two methods for Bedrock. */
const authOf = (route: BedrockRoute): 'IAMRole' | 'AccessKey' =>
  route.identity.auth.method === 'AccessKey' ? 'AccessKey' : 'IAMRole';

/** The error for a ConverseStream that ended without messageStop or without its usage metadata. */
function cutOff(stopped: boolean, usage: boolean, ctx: { model: string; provider: string }): ProxyError | undefined {
  if (stopped && usage) return undefined;
  return new ProxyError(
    502,
    'api_error',
    'upstream_stream_broken',
    `Bedrock ended the stream of ${ctx.model} (${ctx.provider}) before it finished (${stopped ? 'no usage metadata' : 'no messageStop'}); the answer may be incomplete, retry`,
  );
}

/** A whole completion as the chunk sequence a streaming client expects: text, reasoning and tool calls. */
function completionAsChunks(body: OpenAIChatCompletion, includeUsage: boolean): object[] {
  const base = { id: body.id, object: 'chat.completion.chunk', created: body.created, model: body.model };
  const choice = body.choices[0];
  const message = choice?.message;
  const delta: Record<string, unknown> = { role: 'assistant', content: message?.content ?? '' };
  if (message?.reasoning_content) delta.reasoning_content = message.reasoning_content;
  if (message?.thinking_blocks) delta.thinking_blocks = message.thinking_blocks;
  if (message?.tool_calls) delta.tool_calls = message.tool_calls.map((call, index) => ({ index, ...call }));
  const chunks: object[] = [
    { ...base, choices: [{ index: 0, delta, finish_reason: null }] },
    { ...base, choices: [{ index: 0, delta: {}, finish_reason: choice?.finish_reason ?? 'stop' }] },
  ];
  if (includeUsage && body.usage) chunks.push({ ...base, choices: [], usage: body.usage });
  return chunks;
}
