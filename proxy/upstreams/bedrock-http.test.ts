import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AwsDouble, startAwsDouble } from '../../e2e/doubles/aws.js';
import { webStream } from '../chunk-source.js';
import type { BedrockRoute } from '../routing.js';
import { BedrockUpstream } from './bedrock.js';

/**
 * The Bedrock runtime client's HTTP, as the gateway configures it (bedrock-http.ts), against the
 * AWS double: many streams at once, none held back by the SDK, and sockets reused between calls.
 */

const creds = { accessKeyId: 'AKIAHTTP000000000001', secretAccessKey: 'httpSecret000000000000000000000000000000' };
const MODEL = 'amazon.nova-lite-v1:0';
const STREAMS = 300;

let aws: AwsDouble;
let upstream: BedrockUpstream;

const route: BedrockRoute = {
  kind: 'bedrock',
  model: MODEL,
  provider: 'platform-agent/bench',
  region: 'us-east-1',
  modelType: 'text',
  streaming: true,
  baseModel: MODEL,
  auth: { method: 'AccessKey', secretRef: { name: 'k' } },
  version: '1',
};

const chat = (stream: boolean) =>
  upstream.send({
    route,
    dialect: 'openai-chat',
    body: { model: MODEL, messages: [{ role: 'user', content: 'hello there' }] },
    stream,
    clientWantsUsage: false,
    signal: new AbortController().signal,
  });

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
    await chat(false);
    const before = aws.connections().accepted;
    for (let i = 0; i < 20; i++) {
      const r = await chat(true);
      if (r.kind === 'stream') await new Response(webStream(r.body)).text();
    }
    expect(aws.connections().accepted - before).toBeLessThanOrEqual(1);
  });

  it(`holds ${STREAMS} streams at once: the SDK queues none of them`, async () => {
    // 8 deltas 250 ms apart: each stream stays open ~2 s, so all are open together only if none waits.
    aws.paceStreams(250);
    try {
      const t0 = performance.now();
      const results = await Promise.all(Array.from({ length: STREAMS }, () => chat(true)));
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
