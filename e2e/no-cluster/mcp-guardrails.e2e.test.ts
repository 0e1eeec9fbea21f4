import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ApiKey } from '../../crds/api-key.js';
import type { Guardrail } from '../../crds/guardrail.js';
import type { McpServer } from '../../crds/mcp-server.js';
import { ApiKeys, policyOf, sha256 } from '../../proxy/access/auth.js';
import { GuardrailSet } from '../../proxy/guardrails/guardrail-set.js';
import { McpServerTable } from '../../proxy/mcp/servers.js';
import { MemoryUsage } from '../../proxy/usage/record.js';
import { type RunningServer, startEverything } from '../mcp/servers.js';
import { startGateway, type TestGateway } from '../support/gateway.js';
import { type RunningPresidio, startPresidio } from '../support/presidio.js';

/**
 * MCP tool calls through the same Guardrails as model requests, with MCP's reference server
 * (server-everything) behind the gateway and the official client in front: a card in a tool's
 * arguments never reaches the server; a card in a tool's result never reaches the agent; a
 * private key refuses the call with a tool error the agent's model can read, naming the guardrail
 * and the category, never the text; each call's record counts what was found. A guardrail's
 * service (a real Presidio analyzer) checks tool calls as it checks prompts.
 */

const KEYS = { args: 'sk-mcp-guard-args', results: 'sk-mcp-guard-results', presidio: 'sk-mcp-guard-presidio' };
const CARD = '4111 1111 1111 1111';
let everything: RunningServer;
let presidio: RunningPresidio;
let gateway: TestGateway;
const usage = new MemoryUsage();

const apiKey = (name: string, key: string): ApiKey => ({
  apiVersion: 'ai.platform/v1beta1',
  kind: 'ApiKey',
  metadata: { name, namespace: 'platform-agent' },
  spec: { team: name, role: 'User', rotation: 0 },
  status: { digest: `sha256:${sha256(key).toString('hex')}` },
});

const guardrail = (name: string, spec: Guardrail['spec']): Guardrail => ({
  apiVersion: 'ai.platform/v1beta1',
  kind: 'Guardrail',
  metadata: { name, namespace: 'platform-agent' },
  spec,
});

beforeAll(async () => {
  everything = await startEverything();
  presidio = await startPresidio();
  const keys = new ApiKeys();
  keys.setManaged(
    [apiKey('args', KEYS.args), apiKey('results', KEYS.results), apiKey('presidio', KEYS.presidio)].flatMap(
      (k) => policyOf(k) ?? [],
    ),
  );
  const servers = new McpServerTable(() => undefined);
  const server: McpServer = {
    apiVersion: 'ai.platform/v1beta1',
    kind: 'McpServer',
    metadata: { name: 'everything', namespace: 'platform-agent' },
    spec: { url: everything.url },
  };
  servers.set([server]);
  const guardrails = new GuardrailSet([
    guardrail('tool-arguments', {
      selector: { teams: ['args'] },
      appliesTo: ['Request'],
      detectors: { builtIn: { categories: ['PaymentCard', 'PrivateKey'] } },
      action: 'Redact',
      actions: [{ category: 'PrivateKey', action: 'Block' }],
    }),
    guardrail('tool-results', {
      selector: { teams: ['results'] },
      appliesTo: ['Answer'],
      detectors: { builtIn: { categories: ['PaymentCard'] } },
      action: 'Mask',
    }),
    guardrail('tool-presidio', {
      selector: { teams: ['presidio'] },
      detectors: { services: [{ name: 'analyzer', presidio: { url: presidio.url, entities: ['EMAIL_ADDRESS'] } }] },
      action: 'Redact',
    }),
  ]);
  gateway = await startGateway({ mcp: { sessionSecret: 'guard' } }, { keys, usage, mcpServers: servers, guardrails });
}, 120_000);

afterAll(async () => {
  await gateway?.stop();
  await everything?.stop();
  await presidio?.stop();
});

async function connect(key: string): Promise<Client> {
  const client = new Client({ name: 'e2e-guard', version: '1.0.0' });
  await client.connect(
    new StreamableHTTPClientTransport(new URL(`${gateway.url}/mcp`), {
      requestInit: { headers: { 'X-API-Key': key } },
    }),
  );
  await client.listTools();
  return client;
}

const lastTool = () => usage.records.filter((r) => r.endpoint === 'mcp').at(-1);

describe('MCP tool calls through guardrails', () => {
  it("redact a card in a tool's arguments before the server sees it", async () => {
    const client = await connect(KEYS.args);
    const result = await client.callTool({ name: 'everything_echo', arguments: { message: `pay with ${CARD}` } });
    expect(JSON.stringify(result)).toContain('Echo: pay with <PAYMENT_CARD>');
    expect(JSON.stringify(result)).not.toContain('4111');
    expect(lastTool()?.findings).toEqual([
      { guardrail: 'tool-arguments', category: 'PaymentCard', action: 'Redact', where: 'tool-arguments', count: 1 },
    ]);
    await client.close();
  });

  it('refuse a call carrying a private key with a tool error naming the guardrail and the category', async () => {
    const client = await connect(KEYS.args);
    const key =
      '-----BEGIN RSA PRIVATE KEY-----\nMIIBOgIBAAJBAKj34GkxFhD90vcNLYLInFEX6Ppy1tPf9Cnzj4p4\n-----END RSA PRIVATE KEY-----';
    const result = await client.callTool({ name: 'everything_echo', arguments: { message: key } });
    expect(result).toMatchObject({
      isError: true,
      content: [{ type: 'text', text: 'blocked by guardrail tool-arguments: the tool arguments carry PrivateKey' }],
    });
    expect(lastTool()).toMatchObject({ status: 400, errorType: 'guardrail_blocked' });
    await client.close();
  });

  it("mask a card in a tool's result before the agent sees it", async () => {
    const client = await connect(KEYS.results);
    const result = await client.callTool({ name: 'everything_echo', arguments: { message: `card ${CARD}` } });
    expect(JSON.stringify(result)).toContain('Echo: card **** **** **** 1111');
    expect(lastTool()?.findings).toEqual([
      { guardrail: 'tool-results', category: 'PaymentCard', action: 'Mask', where: 'tool-result', count: 1 },
    ]);
    await client.close();
  });

  it("redact what a guardrail's Presidio analyzer finds in a tool's arguments and result", async () => {
    const client = await connect(KEYS.presidio);
    const result = await client.callTool({ name: 'everything_echo', arguments: { message: 'mail ann@example.org' } });
    expect(JSON.stringify(result)).toContain('Echo: mail <EMAIL_ADDRESS>');
    expect(lastTool()?.findings).toEqual([
      { guardrail: 'tool-presidio', category: 'EmailAddress', action: 'Redact', where: 'tool-arguments', count: 1 },
    ]);
    await client.close();
  });
});
