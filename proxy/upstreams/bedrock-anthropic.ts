import {
  type BedrockRuntimeClient,
  CountTokensCommand,
  InvokeModelCommand,
  InvokeModelWithResponseStreamCommand,
  type ResponseStream,
} from '@aws-sdk/client-bedrock-runtime';
import { DIALECTS } from '../endpoints/dialects.js';
import { ProxyError } from '../endpoints/errors.js';
import { anthropicStream, anthropicUsage } from './anthropic-stream.js';
import type { BedrockRoute } from './bedrock.js';
import { type BedrockErrorContext, mapBedrockError } from './bedrock-errors.js';
import type { StreamOutcome, UpstreamCall, UpstreamResult, Usage } from './upstream.js';

/**
 * Anthropic's Messages on Bedrock's Claude models, natively: the caller's body goes to
 * InvokeModel / InvokeModelWithResponseStream as Bedrock takes it (no `model` or `stream`,
 * `anthropic_version` bedrock-2023-05-31, the anthropic-beta header as `anthropic_beta`), and
 * Bedrock's answer is Anthropic's, event for event. Chosen over Converse for this dialect because
 * nothing is lost in a round trip: signed thinking blocks, cache_control on any block, every
 * beta Claude Code sends, server tools, citations; Converse names each of these differently or
 * not at all. (OpenAI's dialects still reach Claude through Converse.)
 */

const BEDROCK_ANTHROPIC_VERSION = 'bedrock-2023-05-31';
const encoder = new TextEncoder();
const decoder = new TextDecoder();

function invokeBody(body: Record<string, unknown>, betas: readonly string[] | undefined): Uint8Array {
  const { model: _model, stream: _stream, ...rest } = body;
  return encoder.encode(
    JSON.stringify({
      anthropic_version: BEDROCK_ANTHROPIC_VERSION,
      ...rest,
      ...(betas && betas.length > 0 ? { anthropic_beta: betas } : {}),
    }),
  );
}

/** Bedrock's additions to the last event, which Anthropic's own stream does not carry. */
const BEDROCK_METRICS = 'amazon-bedrock-invocationMetrics';

export async function sendAnthropic(
  client: BedrockRuntimeClient,
  call: UpstreamCall<BedrockRoute>,
  ctx: BedrockErrorContext,
): Promise<UpstreamResult> {
  const started = performance.now();
  const request = {
    modelId: call.route.model,
    contentType: 'application/json',
    accept: 'application/json',
    body: invokeBody(call.body, call.betas),
  };
  if (!call.stream) {
    let text: string;
    try {
      const out = await client.send(new InvokeModelCommand(request), { abortSignal: call.signal });
      text = decoder.decode(out.body);
    } catch (err) {
      throw mapBedrockError(err, ctx);
    }
    let json: { usage?: unknown; model?: unknown };
    try {
      json = JSON.parse(text) as typeof json;
    } catch {
      throw new ProxyError(
        502,
        'api_error',
        'upstream_error',
        `Bedrock answered ${ctx.model} with a body that is not JSON`,
      );
    }
    const usage = json.usage ? anthropicUsage(json.usage) : undefined;
    return { kind: 'json', status: 200, body: json, raw: text, ...(usage ? { usage } : {}) };
  }
  let events: AsyncIterable<ResponseStream>;
  try {
    const out = await client.send(new InvokeModelWithResponseStreamCommand(request), { abortSignal: call.signal });
    if (!out.body) throw new ProxyError(502, 'api_error', 'upstream_error', 'Bedrock returned no stream');
    events = out.body;
  } catch (err) {
    throw mapBedrockError(err, ctx);
  }
  return relay(events, ctx, started);
}

function relay(events: AsyncIterable<ResponseStream>, ctx: BedrockErrorContext, started: number): UpstreamResult {
  const iterator = events[Symbol.asyncIterator]();
  const reader = anthropicStream();
  const spec = DIALECTS['anthropic-messages'];
  const outcome: StreamOutcome = {};
  let usage: Usage | undefined;
  let complete = false;
  let settle: (o: StreamOutcome) => void = () => {};
  const settled = new Promise<StreamOutcome>((r) => {
    settle = r;
  });
  const fail = (controller: ReadableStreamDefaultController<Uint8Array>, error: ProxyError) => {
    outcome.error = error;
    if (usage) outcome.usage = usage;
    controller.enqueue(encoder.encode(spec.streamError(error)));
    controller.close();
    settle(outcome);
  };
  const body = new ReadableStream<Uint8Array>({
    pull: async (controller) => {
      for (;;) {
        let next: IteratorResult<ResponseStream>;
        try {
          next = await iterator.next();
        } catch (err) {
          return fail(controller, mapBedrockError(err, ctx));
        }
        if (next.done) {
          if (!complete) {
            return fail(
              controller,
              new ProxyError(
                502,
                'api_error',
                'upstream_stream_broken',
                `Bedrock ended the stream of ${ctx.model} (${ctx.provider}) before message_stop; the answer may be incomplete, retry`,
              ),
            );
          }
          if (usage) outcome.usage = usage;
          controller.close();
          settle(outcome);
          return;
        }
        const bytes = next.value.chunk?.bytes;
        if (!bytes) {
          // An exception member of the event stream (modelStreamErrorException, throttlingException, ...).
          const [name, value] = Object.entries(next.value).find(([, v]) => v !== undefined) ?? ['unknown', {}];
          return fail(
            controller,
            mapBedrockError(
              Object.assign(new Error(String((value as { message?: string }).message ?? name)), {
                name: name.charAt(0).toUpperCase() + name.slice(1),
              }),
              ctx,
            ),
          );
        }
        let data = decoder.decode(bytes);
        let type: string | undefined;
        try {
          const parsed = JSON.parse(data) as { type?: string; [BEDROCK_METRICS]?: unknown };
          type = parsed.type;
          if (parsed[BEDROCK_METRICS] !== undefined) {
            delete parsed[BEDROCK_METRICS];
            data = JSON.stringify(parsed);
          }
        } catch {
          return fail(
            controller,
            new ProxyError(
              502,
              'api_error',
              'upstream_error',
              `Bedrock sent an event of ${ctx.model} that is not JSON`,
            ),
          );
        }
        const read = reader.read(type, data);
        if (!read) continue;
        if (read.usage) usage = read.usage;
        if (read.token && outcome.firstTokenMs === undefined) outcome.firstTokenMs = performance.now() - started;
        if (read.last) complete = true;
        controller.enqueue(encoder.encode(read.out));
        return;
      }
    },
    cancel: async () => {
      outcome.clientAborted = true;
      if (usage) outcome.usage = usage;
      await iterator.return?.();
      settle(outcome);
    },
  });
  return { kind: 'stream', body, outcome: settled };
}

/** Exact input tokens of a Messages request, counted by Bedrock (CountTokens) for its Claude model. */
export async function countAnthropicTokens(
  client: BedrockRuntimeClient,
  route: BedrockRoute,
  body: Record<string, unknown>,
  signal: AbortSignal,
  ctx: BedrockErrorContext,
): Promise<number> {
  const { max_tokens: _m, ...rest } = body;
  try {
    const out = await client.send(
      new CountTokensCommand({
        // CountTokens takes the foundation model, not an inference profile.
        modelId: route.baseModel,
        input: { invokeModel: { body: invokeBody({ max_tokens: 1, ...rest }, undefined) } },
      }),
      { abortSignal: signal },
    );
    return out.inputTokens ?? 0;
  } catch (err) {
    throw mapBedrockError(err, ctx);
  }
}
