import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ModelDeployment } from '../crds/model-deployment.js';
import { startGateway, type TestGateway } from '../e2e/support/gateway.js';
import { ApiKeys } from './access/auth.js';
import { buildRoutes, RouteTable } from './serving/routes.js';

/**
 * A system message inside an Anthropic Messages request (the published spec allows it; Claude
 * Code sends it with its Agent and Skill tools) is served: passed on to an engine that takes it
 * (vLLM), folded into `system` for one that refuses it (Ollama). What each upstream received is
 * what the assertions read.
 */

const KEY = 'sk-system-messages-00000000000000000';
const received: Array<{ path: string; body: Record<string, unknown> }> = [];
let upstream: Server;
let gateway: TestGateway;

const MESSAGE = {
  id: 'msg_1',
  type: 'message',
  role: 'assistant',
  model: 'm',
  content: [{ type: 'text', text: 'done' }],
  stop_reason: 'end_turn',
  stop_sequence: null,
  usage: { input_tokens: 12, output_tokens: 1 },
};

const deployment = (name: string, engine: 'Ollama' | 'VLLM', model: string, port: number): ModelDeployment => ({
  apiVersion: 'ai.platform/v1beta1',
  kind: 'ModelDeployment',
  metadata: { name, namespace: 'platform-llms' },
  spec: { model, engine, serviceName: name, port, replicas: 1, endpoint: `http://127.0.0.1:${port}` },
});

beforeAll(async () => {
  upstream = createServer((req, res) => {
    let raw = '';
    req.on('data', (c: Buffer) => {
      raw += c.toString('utf8');
    });
    req.on('end', () => {
      received.push({ path: req.url ?? '', body: JSON.parse(raw) as Record<string, unknown> });
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(MESSAGE));
    });
  });
  await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
  const port = (upstream.address() as AddressInfo).port;
  const routes = new RouteTable();
  routes.set(
    buildRoutes(
      [
        deployment('llama', 'Ollama', 'llama3.1:8b', port),
        deployment('qwen', 'VLLM', 'Qwen/Qwen2.5-0.5B-Instruct', port),
      ],
      { standalone: true },
    ),
  );
  gateway = await startGateway({}, { routes, keys: ApiKeys.fromKeys([KEY]) });
});

afterAll(async () => {
  await gateway.stop();
  await new Promise((r) => upstream.close(r));
});

const ask = (model: string) =>
  gateway.request('/anthropic/v1/messages', {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': KEY },
    body: JSON.stringify({
      model,
      max_tokens: 64,
      system: 'You are Claude Code.',
      messages: [
        { role: 'user', content: 'find the bug' },
        { role: 'system', content: 'Use the Agent tool for searches.' },
        { role: 'user', content: 'go' },
      ],
    }),
  });

describe('system messages inside an Anthropic Messages request', () => {
  it('reach Ollama folded into system, in order, the turns around them kept', async () => {
    received.length = 0;
    const res = await ask('llama3.1:8b');
    expect(res.status).toBe(200);
    expect(((await res.json()) as { content: Array<{ text: string }> }).content[0]?.text).toBe('done');
    expect(received).toHaveLength(1);
    expect(received[0]?.body.system).toBe('You are Claude Code.\n\nUse the Agent tool for searches.');
    expect(received[0]?.body.messages).toEqual([
      { role: 'user', content: 'find the bug' },
      { role: 'user', content: 'go' },
    ]);
  });

  it('reach vLLM where the caller put them', async () => {
    received.length = 0;
    const res = await ask('Qwen/Qwen2.5-0.5B-Instruct');
    expect(res.status).toBe(200);
    expect(received[0]?.path).toBe('/v1/messages');
    expect(received[0]?.body.system).toBe('You are Claude Code.');
    const messages = (received[0]?.body.messages ?? []) as Array<{ role: string }>;
    expect(messages.map((m) => m.role)).toEqual(['user', 'system', 'user']);
  });

  it('are still refused with a role the spec does not have, naming the field', async () => {
    const res = await gateway.request('/anthropic/v1/messages', {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': KEY },
      body: JSON.stringify({ model: 'llama3.1:8b', max_tokens: 8, messages: [{ role: 'tool', content: 'x' }] }),
    });
    expect(res.status).toBe(400);
    const body = (await res.json()) as { type: string; error: { message: string } };
    expect(body.type).toBe('error');
    expect(body.error.message).toMatch(/messages\.0\.role must be "user", "assistant" or "system"/);
  });
});
