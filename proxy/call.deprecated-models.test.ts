import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ExternalProvider } from '../crds/external-provider.js';
import { startGateway, type TestGateway } from '../e2e/support/gateway.js';
import { ApiKeys } from './access/auth.js';
import { buildRoutes, type ExternalRoute, RouteTable } from './serving/routes.js';
import type { Upstream } from './upstreams/upstream.js';
import { MemoryUsage } from './usage/record.js';

/**
 * A model its provider has deprecated (crds/catalog/prices.yaml `lifecycle`: Claude Sonnet 4.5
 * retires on 2026-11-30) is still served, but its answers say so, RFC 9745 Deprecation and RFC
 * 8594 Sunset, and its records are counted as deprecated; the model lists give its dates and its
 * replacement. A current model's answers carry neither.
 */

const KEY = 'sk-deprecated-models-000000000000000';
const OLD = 'claude-sonnet-4-5-20250929';
const NEW = 'claude-sonnet-5-5';

const anthropic: ExternalProvider = {
  apiVersion: 'ai.platform/v1beta1',
  kind: 'ExternalProvider',
  metadata: { name: 'anthropic', namespace: 'platform-agent' },
  spec: {
    provider: 'anthropic',
    displayName: 'Anthropic',
    auth: { method: 'APIKey', secretRef: { name: 'k' } },
    includeInCLI: true,
    streaming: true,
    models: [OLD, NEW],
  },
};

/** Anthropic's Messages answer for whichever model was asked. */
const claude: Upstream<ExternalRoute> = {
  dialects: () => ['anthropic-messages'],
  send: async (call) => ({
    kind: 'json',
    status: 200,
    body: {
      id: 'msg_1',
      type: 'message',
      role: 'assistant',
      model: call.route.model,
      content: [{ type: 'text', text: 'done' }],
      stop_reason: 'end_turn',
      stop_sequence: null,
      usage: { input_tokens: 10, output_tokens: 2 },
    },
    usage: { promptTokens: 10, completionTokens: 2 },
  }),
};

let gateway: TestGateway;
const usage = new MemoryUsage();

beforeAll(async () => {
  const routes = new RouteTable();
  routes.set(buildRoutes([], { standalone: true }, [anthropic]));
  gateway = await startGateway({}, { routes, keys: ApiKeys.fromKeys([KEY]), usage, providers: { anthropic: claude } });
});

afterAll(async () => {
  await gateway.stop();
});

const ask = (path: string, body: Record<string, unknown>) =>
  gateway.request(path, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` },
    body: JSON.stringify(body),
  });

describe('a model its provider has deprecated', () => {
  it('answers with Deprecation and Sunset in both dialects, and its records are counted as deprecated', async () => {
    const messages = await ask('/anthropic/v1/messages', {
      model: OLD,
      max_tokens: 16,
      messages: [{ role: 'user', content: 'hi' }],
    });
    expect(messages.status).toBe(200);
    expect(messages.headers.get('deprecation')).toBe(`@${Date.parse('2026-10-21T00:00:00Z') / 1000}`);
    expect(messages.headers.get('sunset')).toBe('Mon, 30 Nov 2026 00:00:00 GMT');
    const chat = await ask('/openai/v1/chat/completions', { model: OLD, messages: [{ role: 'user', content: 'hi' }] });
    expect(chat.status).toBe(200);
    expect(chat.headers.get('deprecation')).toMatch(/^@\d+$/);
    const records = usage.records.filter((r) => r.model === OLD);
    expect(records).toHaveLength(2);
    expect(records.every((r) => r.deprecated === true)).toBe(true);
  });

  it('leaves a current model’s answers and records unmarked', async () => {
    const res = await ask('/anthropic/v1/messages', {
      model: NEW,
      max_tokens: 16,
      messages: [{ role: 'user', content: 'hi' }],
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('deprecation')).toBeNull();
    expect(res.headers.get('sunset')).toBeNull();
    expect(usage.records.find((r) => r.model === NEW)?.deprecated).toBeUndefined();
  });

  it('is listed with its dates and its replacement in the CLI model list', async () => {
    const res = await gateway.request('/v1/models/metadata', { headers: { authorization: `Bearer ${KEY}` } });
    const { models } = (await res.json()) as { models: Array<Record<string, unknown>> };
    expect(models.find((m) => m.slug === OLD)).toMatchObject({
      status: 'deprecated',
      replacement: NEW,
      deprecated_at: '2026-10-21',
      sunset_at: '2026-11-30',
    });
    expect(models.find((m) => m.slug === NEW)).toMatchObject({
      status: 'active',
      replacement: null,
      deprecated_at: null,
      sunset_at: null,
    });
  });
});
