import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AwsDouble, startAwsDouble } from '../../e2e/doubles/aws.js';
import type { BedrockRoute } from './bedrock.js';
import { BedrockUpstream } from './bedrock.js';
import { ConverseEventRelay } from './bedrock-event-stream.js';
import { webStream } from './chunk-source.js';
import type { UpstreamResult } from './upstream.js';

/**
 * The Bedrock upstream's streams against the AWS double: the runtime client's HTTP as the gateway
 * configures it (bedrock-http.ts: many streams at once, none held back by the SDK, sockets reused
 * between calls), and ConverseStream relayed from its bytes (bedrock-event-stream.ts: the same
 * chunks as the SDK's own decoding gave, mid-stream exceptions and cut streams as errors in the
 * stream, a caller leaving).
 */

const creds = { accessKeyId: 'AKIAHTTP000000000001', secretAccessKey: 'httpSecret000000000000000000000000000000' };
const MODEL = 'amazon.nova-lite-v1:0';
const STREAMS = 300;

let aws: AwsDouble;
let upstream: BedrockUpstream;

const route: BedrockRoute = {
  kind: 'external',
  model: MODEL,
  provider: 'platform-agent/bench',
  identity: { provider: 'bedrock', auth: { method: 'AccessKey', secretRef: { name: 'k' } } },
  target: {
    type: 'bedrock',
    upstreamModel: MODEL,
    region: 'us-east-1',
    modelType: 'text',
    streaming: true,
    version: '1',
  },
  baseModel: MODEL,
};

const send = (stream: boolean, signal = new AbortController().signal) =>
  upstream.send({
    route,
    dialect: 'openai-chat',
    body: { model: MODEL, messages: [{ role: 'user', content: 'hello there' }] },
    stream,
    clientWantsUsage: true,
    signal,
  });

async function frames(r: UpstreamResult): Promise<string[]> {
  if (r.kind !== 'stream') throw new Error('not a stream');
  const text = await new Response(webStream(r.body)).text();
  return text
    .split('\n\n')
    .filter((f) => f.startsWith('data: '))
    .map((f) => f.slice(6));
}

beforeAll(async () => {
  aws = await startAwsDouble({
    principals: [{ ...creds, arn: 'arn:aws:iam::123456789012:user/h', allow: ['bedrock:*'], account: '123456789012' }],
    models: { 'us-east-1': [{ modelId: MODEL, providerName: 'Amazon' }] },
  });
  upstream = new BedrockUpstream({ endpoint: aws.url, credentialsFor: () => async () => creds });
});

afterAll(async () => {
  upstream?.close();
  await aws?.close();
});

describe('the Bedrock runtime client’s connections', () => {
  it('reuses one socket for calls one after another (the SDK default opens a session per call)', async () => {
    await send(false);
    const before = aws.connections().accepted;
    for (let i = 0; i < 20; i++) {
      const r = await send(true);
      if (r.kind === 'stream') await new Response(webStream(r.body)).text();
    }
    expect(aws.connections().accepted - before).toBeLessThanOrEqual(1);
  });

  it(`holds ${STREAMS} streams at once: the SDK queues none of them`, async () => {
    // 8 deltas 250 ms apart: each stream stays open ~2 s, so all are open together only if none waits.
    aws.paceStreams(250);
    try {
      const t0 = performance.now();
      const results = await Promise.all(Array.from({ length: STREAMS }, () => send(true)));
      const firstBytes = performance.now() - t0;
      expect(aws.connections().open).toBeGreaterThanOrEqual(STREAMS);
      // With the SDK's 50-socket pool the last ones would start after five rounds of ~2 s.
      expect(firstBytes).toBeLessThan(1_500);
      const texts = await Promise.all(
        results.map((r) => (r.kind === 'stream' ? new Response(webStream(r.body)).text() : '')),
      );
      expect(texts.filter((t) => t.includes('tok7') && t.includes('[DONE]'))).toHaveLength(STREAMS);
    } finally {
      aws.paceStreams(0);
    }
  }, 60_000);
});

describe('ConverseStream from its bytes', () => {
  it('streams the text, the finish and the usage, as the whole answer has them', async () => {
    const streamed = await send(true);
    // From the bytes, not from the SDK's iterator.
    expect(streamed.kind === 'stream' && streamed.body).toBeInstanceOf(ConverseEventRelay);
    const f = await frames(streamed);
    expect(f.at(-1)).toBe('[DONE]');
    const chunks = f.slice(0, -1).map(
      (x) =>
        JSON.parse(x) as {
          choices: Array<{ delta?: { content?: string }; finish_reason?: string }>;
          usage?: { completion_tokens: number };
        },
    );
    const text = chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('');
    const whole = await send(false);
    expect(whole.kind).toBe('json');
    const body = (whole as { body: { choices: Array<{ message: { content: string } }> } }).body;
    expect(text).toBe(body.choices[0]?.message.content);
    expect(chunks.some((c) => c.choices[0]?.finish_reason === 'stop')).toBe(true);
    expect(chunks.at(-1)?.usage?.completion_tokens).toBe(8);
    expect(await (streamed as { outcome: Promise<unknown> }).outcome).toMatchObject({
      usage: { completionTokens: 8 },
    });
  });

  it.each([
    ['exception', /The model stopped unexpectedly/],
    ['throttling', /Too many requests/],
    ['no-stop', /before it finished/],
  ] as const)('a stream broken mid-way (%s) ends with the mapped error, then [DONE]', async (how, message) => {
    aws.breakStreams(1, how);
    const r = await send(true);
    const f = await frames(r);
    expect(f.at(-1)).toBe('[DONE]');
    const error = (JSON.parse(f.at(-2) ?? '{}') as { error: { message: string } }).error;
    expect(error.message).toMatch(message);
    const outcome = await (r as { outcome: Promise<{ error?: { status: number } }> }).outcome;
    expect(outcome.error?.status).toBeGreaterThanOrEqual(429);
  });

  it('a caller that leaves mid-stream stops it and is recorded as gone', async () => {
    aws.paceStreams(50);
    try {
      const r = await send(true);
      if (r.kind !== 'stream') throw new Error('not a stream');
      const reader = webStream(r.body).getReader();
      await reader.read();
      await reader.cancel();
      expect(await r.outcome).toMatchObject({ clientAborted: true });
    } finally {
      aws.paceStreams(0);
    }
  });
});
