import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { MemoryUsage } from '../../proxy/usage/record.js';
import { type HostedDouble, startHostedDouble } from '../doubles/hosted.js';
import { hostedProviderDoc, resourceDoc, startStandaloneGateway, type TestGateway } from '../support/gateway.js';
import { type RunningPresidio, startPresidio } from '../support/presidio.js';

/**
 * A real Presidio analyzer (presidio-analyzer from PyPI, its REST API) as a Guardrail's service,
 * in front of the hosted providers' doubles: what it finds in a prompt is redacted, in every
 * dialect, before the prompt leaves; what it finds in a whole answer is redacted before the
 * caller reads it; each finding is recorded by its entity type, never its text; with the
 * analyzer gone, a guardrail that fails closed refuses with 503 and one that fails open lets the
 * text pass.
 */

const KEY = 'sk-presidio-e2e-0001';
const OPENAI_KEY = 'sk-openai-double-presidio';
const ANTHROPIC_KEY = 'sk-anthropic-double-presidio';
const EMAIL = 'jane.doe@example.com';
const CARD = '4111 1111 1111 1111';
let presidio: RunningPresidio;
let hosted: HostedDouble;
let gateway: TestGateway;
const usage = new MemoryUsage();

beforeAll(async () => {
  presidio = await startPresidio();
  hosted = await startHostedDouble({ openaiKeys: [OPENAI_KEY], anthropicKeys: [ANTHROPIC_KEY] });
  const documents = [
    hostedProviderDoc('openai', ['gpt-4o-mini']),
    hostedProviderDoc('anthropic', ['claude-haiku-4-5-20251001']),
    resourceDoc('Guardrail', 'presidio', {
      detectors: {
        services: [
          {
            name: 'analyzer',
            presidio: { url: presidio.url, entities: ['EMAIL_ADDRESS', 'CREDIT_CARD', 'IBAN_CODE'] },
            onFailure: 'Block',
            timeoutSeconds: 10,
          },
        ],
      },
      action: 'Redact',
      actions: [{ category: 'CreditCard', action: 'Mask' }],
    }),
  ];
  gateway = await startStandaloneGateway(
    {
      documents,
      keys: `${KEY}\n`,
      secrets: { 'openai-key': OPENAI_KEY, 'anthropic-key': ANTHROPIC_KEY },
      env: { ...process.env, ...hosted.env },
    },
    { usage },
  );
}, 180_000);

afterAll(async () => {
  await gateway?.stop();
  await hosted?.close();
  await presidio?.stop();
});

beforeEach(() => {
  hosted.reset();
  usage.records.length = 0;
});

const post = (path: string, body: unknown) =>
  gateway.request(path, {
    method: 'POST',
    headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });

const sent = () => JSON.stringify(hosted.calls.filter((c) => c.method === 'POST').at(-1)?.body);

describe('a Presidio analyzer as a guardrail', () => {
  const PROMPT = `Refund ${EMAIL} on card ${CARD} 😀 today`;

  it.each([
    ['chat', '/openai/v1/chat/completions', { model: 'gpt-4o-mini', messages: [{ role: 'user', content: PROMPT }] }],
    ['Responses', '/openai/v1/responses', { model: 'gpt-4o-mini', input: PROMPT }],
    [
      'Messages',
      '/anthropic/v1/messages',
      { model: 'claude-haiku-4-5-20251001', max_tokens: 16, messages: [{ role: 'user', content: PROMPT }] },
    ],
  ])('redacts what it finds in a %s prompt before it leaves, and records it by entity type', async (_, path, body) => {
    const res = await post(path, body);
    expect(res.status).toBe(200);
    expect(sent()).toContain('Refund <EMAIL_ADDRESS> on card **** **** **** 1111 😀 today');
    expect(sent()).not.toContain('jane.doe');
    const findings = usage.records.at(-1)?.findings ?? [];
    expect(findings).toEqual(
      expect.arrayContaining([
        { guardrail: 'presidio', category: 'EmailAddress', action: 'Redact', where: 'request', count: 1 },
        { guardrail: 'presidio', category: 'CreditCard', action: 'Mask', where: 'request', count: 1 },
      ]),
    );
    expect(JSON.stringify(usage.records.at(-1))).not.toContain('jane.doe');
  });

  it('redacts what it finds in a whole answer before the caller reads it', async () => {
    hosted.behave({ answerText: `Write to ${EMAIL} for the refund.` });
    const res = await post('/openai/v1/chat/completions', {
      model: 'gpt-4o-mini',
      messages: [{ role: 'user', content: 'Who handles refunds?' }],
    });
    const body = (await res.json()) as { choices: { message: { content: string } }[] };
    expect(body.choices[0]?.message.content).toBe('Write to <EMAIL_ADDRESS> for the refund.');
  });

  it('refuses with 503 once the analyzer is gone, as the guardrail fails closed', async () => {
    await presidio.stop();
    const res = await post('/openai/v1/chat/completions', {
      model: 'gpt-4o-mini',
      messages: [{ role: 'user', content: 'a prompt never asked about before' }],
    });
    expect(res.status).toBe(503);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('guardrail_unavailable');
    expect(hosted.calls.filter((c) => c.method === 'POST')).toHaveLength(0);
  });
});
