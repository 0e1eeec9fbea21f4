import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { type AwsDouble, startAwsDouble } from '../e2e/doubles/aws.js';
import { type HostedDouble, startHostedDouble } from '../e2e/doubles/hosted.js';
import { hostedProviderDoc, resourceDoc, startStandaloneGateway, type TestGateway } from '../e2e/support/gateway.js';
import { MemoryUsage } from './usage/record.js';

/**
 * Guardrails' external services through the composed gateway, configured as a standalone user
 * configures them: OpenAI's moderations (the hosted double's classifier) and Bedrock's
 * ApplyGuardrail (the AWS double, every call SigV4-signed with the Bedrock provider's access key).
 * A whole-text verdict refuses in the caller's dialect, naming the guardrail and the category;
 * what a service found in a text is redacted before the text leaves; a service that cannot answer
 * refuses with 503 where it fails closed and lets the text pass where it fails open, counted.
 * (A real Presidio analyzer: e2e/no-cluster/guardrail-services.e2e.test.ts.)
 */

const KEY = 'sk-guard-services-0001';
const OPENAI_KEY = 'sk-openai-double-services';
const ACCESS_KEY = 'AKIAGUARDSERVICES001';
const SECRET_KEY = 'guardServicesSecret00000000000000000000';
let hosted: HostedDouble;
let aws: AwsDouble;
let gateway: TestGateway;
const usage = new MemoryUsage();

beforeAll(async () => {
  hosted = await startHostedDouble({ openaiKeys: [OPENAI_KEY] });
  aws = await startAwsDouble({
    principals: [
      {
        accessKeyId: ACCESS_KEY,
        secretAccessKey: SECRET_KEY,
        arn: 'arn:aws:iam::123456789012:user/guard',
        allow: ['bedrock:*'],
        account: '123456789012',
      },
    ],
    models: { 'us-east-1': [{ modelId: 'amazon.nova-micro-v1:0', providerName: 'Amazon' }] },
    guardrails: [
      {
        id: 'gr1services',
        versions: ['2'],
        blockedWords: ['forbidden'],
        blockedMessage: 'Sorry.',
        piiEntities: [{ type: 'EMAIL', pattern: /[\w.]+@[\w.]+\.[a-z]+/ }],
        topics: [{ name: 'Investment advice', words: ['stocks'] }],
      },
    ],
  });
  const service = (name: string, spec: Record<string, unknown>, extra: Record<string, unknown> = {}) =>
    resourceDoc('Guardrail', name, { selector: { tags: [`svc:${name}`] }, ...extra, detectors: { services: [spec] } });
  const documents = [
    hostedProviderDoc('openai', ['gpt-4o-mini']),
    hostedProviderDoc('bedrock', ['amazon.nova-micro-v1:0']),
    resourceDoc('Guardrail', 'moderation', {
      selector: { tags: ['svc:moderation'] },
      detectors: {
        builtIn: { categories: ['PaymentCard'] },
        services: [{ name: 'openai', openAIModeration: { provider: 'openai' } }],
      },
      action: 'Block',
      actions: [{ category: 'PaymentCard', action: 'Redact' }],
    }),
    service(
      'bedrock',
      { name: 'aws', bedrockGuardrail: { provider: 'bedrock', identifier: 'gr1services', version: '2' } },
      { action: 'Block', actions: [{ category: 'Email', action: 'Redact' }] },
    ),
    service(
      'closed',
      { name: 'gone', openAIModeration: { provider: 'nosuch' }, onFailure: 'Block' },
      { appliesTo: ['Request'] },
    ),
    service('open', { name: 'gone', openAIModeration: { provider: 'nosuch' } }, { appliesTo: ['Request'] }),
  ];
  gateway = await startStandaloneGateway(
    {
      documents,
      keys: `${KEY}\n`,
      secrets: {
        'openai-key': OPENAI_KEY,
        'aws-keys': { accessKeyId: ACCESS_KEY, secretAccessKey: SECRET_KEY },
      },
      env: { ...process.env, ...hosted.env, PAO_ENDPOINT_URL_BEDROCK_RUNTIME: aws.url },
    },
    { usage },
  );
});

afterAll(async () => {
  await gateway?.stop();
  await hosted?.close();
  await aws?.close();
});

beforeEach(() => {
  hosted.reset();
  aws.calls.length = 0;
  usage.records.length = 0;
});

const chat = (tag: string, ...contents: string[]) =>
  gateway.request('/openai/v1/chat/completions', {
    method: 'POST',
    headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json', 'x-tags': tag },
    body: JSON.stringify({ model: 'gpt-4o-mini', messages: contents.map((content) => ({ role: 'user', content })) }),
  });

/** What reached the hosted model (its chat calls, not the moderation service's). */
const modelCalls = () => hosted.calls.filter((c) => c.path.endsWith('/chat/completions'));
const moderationCalls = () => hosted.calls.filter((c) => c.path.endsWith('/moderations'));
const applyCalls = () => aws.calls.filter((c) => c.action === 'ApplyGuardrail');

describe("OpenAI's moderations as a guardrail's service", () => {
  it('refuses a flagged request in the caller’s envelope, naming the guardrail and the category, never the text', async () => {
    const res = await chat('svc:moderation', 'I will kill them all');
    expect(res.status).toBe(400);
    const body = (await res.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe('guardrail_blocked');
    expect(body.error.message).toBe('blocked by guardrail moderation: the request carries Violence');
    expect(modelCalls()).toHaveLength(0);
    expect(moderationCalls().map((c) => [c.headers.authorization, c.body])).toEqual([
      [`Bearer ${OPENAI_KEY}`, { model: 'omni-moderation-latest', input: 'I will kill them all' }],
    ]);
    expect(usage.records.at(-1)?.findings).toEqual([
      { guardrail: 'moderation', category: 'Violence', action: 'Block', where: 'request', count: 1 },
    ]);
  });

  it('is asked about what the built-in detectors left: a card redacted never reaches it', async () => {
    expect((await chat('svc:moderation', 'Refund card 4111 1111 1111 1111')).status).toBe(200);
    expect(moderationCalls()[0]?.body).toEqual({
      model: 'omni-moderation-latest',
      input: 'Refund card <PAYMENT_CARD>',
    });
  });

  it('lets a clean request through and checks its answer too', async () => {
    hosted.behave({ answerText: 'You are worthless.' });
    const res = await chat('svc:moderation', 'Say something nice');
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: { message: string } }).error.message).toBe(
      'blocked by guardrail moderation: the answer carries Harassment',
    );
    expect(modelCalls()).toHaveLength(1);
    expect(moderationCalls().map((c) => (c.body as { input: string }).input)).toEqual([
      'Say something nice',
      'You are worthless.',
    ]);
  });
});

describe('a streamed answer', () => {
  const stream = (tag: string, path: string, body: Record<string, unknown>) =>
    gateway.request(path, {
      method: 'POST',
      headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json', 'x-tags': tag },
      body: JSON.stringify({ ...body, stream: true }),
    });

  it.each([
    ['chat', '/openai/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }] }, 'data: [DONE]'],
    ['Responses', '/openai/v1/responses', { input: 'hi' }, 'event: response.completed'],
  ])(
    '%s: is asked about once it ended; a flagged one ends with the error event instead of its end',
    async (dialect, path, body, end) => {
      hosted.behave({ answerText: 'You are worthless, and I mean it.' });
      const flagged = await (await stream('svc:moderation', path, { model: 'gpt-4o-mini', ...body })).text();
      // The text went out as it came; its own end did not, the error event did (chat's [DONE] closes
      // every stream, after the error event).
      expect(flagged).toContain('worthless');
      const error = flagged.indexOf('blocked by guardrail moderation: the answer carries Harassment');
      expect(error).toBeGreaterThan(flagged.indexOf('worthless'));
      expect(flagged.split(end).length - 1).toBe(end === 'data: [DONE]' ? 1 : 0);
      if (end === 'data: [DONE]') expect(flagged.indexOf(end)).toBeGreaterThan(error);
      expect(usage.records.at(-1)).toMatchObject({ errorType: 'guardrail_blocked' });

      hosted.behave({ answerText: `You are doing fine (${dialect}).` });
      const clean = await (await stream('svc:moderation', path, { model: 'gpt-4o-mini', ...body })).text();
      expect(clean).toContain(end);
      expect(clean).not.toContain('blocked by guardrail');
      expect(moderationCalls().at(-1)?.body).toEqual({
        model: 'omni-moderation-latest',
        input: `You are doing fine (${dialect}).`,
      });
    },
  );
});

describe("Bedrock's ApplyGuardrail as a guardrail's service", () => {
  it('redacts what it found before the request leaves, and refuses a denied topic', async () => {
    const ok = await chat('svc:bedrock', 'Please write to jane.doe@example.com about the offsite');
    expect(ok.status).toBe(200);
    expect(JSON.stringify(modelCalls().at(-1)?.body)).toContain('Please write to <EMAIL> about the offsite');
    expect(JSON.stringify(modelCalls().at(-1)?.body)).not.toContain('jane.doe');
    // Signed with the provider's key, in its region; the request as INPUT, the answer as OUTPUT.
    expect(applyCalls().map((c) => [c.status, c.accessKeyId, c.region])).toEqual([
      [200, ACCESS_KEY, 'us-east-1'],
      [200, ACCESS_KEY, 'us-east-1'],
    ]);

    const refused = await chat('svc:bedrock', 'Which stocks should I buy?');
    expect(refused.status).toBe(400);
    expect(((await refused.json()) as { error: { message: string } }).error.message).toBe(
      'blocked by guardrail bedrock: the request carries InvestmentAdvice',
    );
  });

  it('asks about each text once: a conversation’s next turn sends only its new text', async () => {
    const first = 'Tell me about the lighthouse keepers of the north coast';
    hosted.behave({ answerText: 'They kept the lamps lit through every storm.' });
    expect((await chat('svc:bedrock', first)).status).toBe(200);
    const asked = applyCalls().length;
    aws.calls.length = 0;
    expect((await chat('svc:bedrock', first, 'And the south coast?')).status).toBe(200);
    // The first turn: its question and its answer; the next: only its new question (the answer is
    // the same text, remembered too).
    expect(asked).toBe(2);
    expect(applyCalls()).toHaveLength(1);
  });
});

describe('a service that cannot answer', () => {
  it('refuses with 503 guardrail_unavailable where it fails closed, and is counted', async () => {
    const res = await chat('svc:closed', 'hello');
    expect(res.status).toBe(503);
    expect(res.headers.get('retry-after')).toBe('1');
    const body = (await res.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe('guardrail_unavailable');
    // Why (no such provider) stays in the proxy's log: it may name a host or a provider's setup.
    expect(body.error.message).toBe(
      'guardrail closed could not judge the text (its service/gone did not answer) and refuses what it cannot judge; try again',
    );
    expect(modelCalls()).toHaveLength(0);
  });

  it('lets the text pass where it fails open, and is counted', async () => {
    const before = await failures();
    expect((await chat('svc:open', 'hello')).status).toBe(200);
    expect(modelCalls()).toHaveLength(1);
    expect((await chat('svc:closed', 'hello')).status).toBe(503);
    expect(await failures()).toEqual({ open: before.open + 1, closed: before.closed + 1 });
  });
});

/** The check failures counted for the open and closed guardrails' service. */
async function failures(): Promise<{ open: number; closed: number }> {
  const metrics = await gateway.metrics.registry.metrics();
  const of = (g: string) =>
    Number(
      new RegExp(
        `pao_gateway_guardrail_check_failures_total\\{guardrail="${g}",detector="service/gone"\\} (\\d+)`,
      ).exec(metrics)?.[1] ?? 0,
    );
  return { open: of('open'), closed: of('closed') };
}
