import { execFile } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningServer, startEverything } from '../mcp/servers.js';
import { bin, type ClaudeRun, claudePrint, installClients } from '../support/agent-clients.js';
import { type AgentGateway, startAgentGateway, type UsageRow } from '../support/agent-gateway.js';

/**
 * The coding agents' tools through the gateway: Claude Code (`claude mcp add --transport http`,
 * then `claude -p`) and Codex (`codex exec` with the gateway as an MCP server in config.toml)
 * each complete a turn in which the model (Claude on the Bedrock double, over the gateway's
 * Messages and Responses routes) calls a tool of server-everything, served by the gateway's
 * /mcp under the ApiKey `agents`; the tool call is recorded under the key's team and tags. A key
 * whose allow-list lacks the tool gets a turn in which the tool is not there to call.
 */

const run = promisify(execFile);
const CLAUDE = 'anthropic.claude-sonnet-4-5-20250929-v1:0';
const KEY = 'sk-e2e-mcp-agents-7f3a9c2d1b0e';
const NARROW = 'sk-e2e-mcp-narrow-2b8e4f6a0c1d';
const TOOL = 'everything_echo';

let gw: AgentGateway;
let everything: RunningServer;
let clients: string;

const apiKey = (name: string, spec: Record<string, unknown>) =>
  [
    'apiVersion: ai.platform/v1beta1',
    'kind: ApiKey',
    `metadata: {name: ${name}}`,
    `spec: ${JSON.stringify({ team: 'agents', tags: { project: 'mcp-e2e' }, ...spec })}`,
  ].join('\n');

beforeAll(async () => {
  clients = installClients();
  everything = await startEverything();
  gw = await startAgentGateway({
    key: 'sk-e2e-mcp-unused-0000',
    bedrock: [{ modelId: CLAUDE, providerName: 'Anthropic' }],
    providerModels: [`us.${CLAUDE}`],
    providerAliases: [{ name: 'claude-sonnet-4-5', model: `us.${CLAUDE}` }],
    documents: [
      [
        'apiVersion: ai.platform/v1beta1',
        'kind: McpServer',
        'metadata: {name: everything}',
        `spec: {url: "${everything.url}"}`,
      ].join('\n'),
      apiKey('agents', {}),
      apiKey('narrow', { mcp: { servers: [{ name: 'everything', tools: ['get-sum'] }] } }),
    ],
    namedKeys: { agents: KEY, narrow: NARROW },
  });
}, 600_000);

afterAll(async () => {
  await gw?.stop();
  await everything?.stop();
});

const toolRows = (): UsageRow[] => gw.rows().filter((r) => r.endpoint === 'mcp');

/** One `claude -p` turn with the gateway registered as its MCP server by `claude mcp add`, its built-in tools off. */
const claudeTurn = (key: string, tags: string): Promise<ClaudeRun> =>
  claudePrint(clients, {
    base: gw.proxy.base,
    key,
    model: 'claude-sonnet-4-5',
    prompt: `Call the tool mcp__gateway__${TOOL} now.`,
    tools: '',
    args: ['--allowedTools', `mcp__gateway__${TOOL}`],
    mcp: [{ name: 'gateway', url: `${gw.proxy.base}/mcp`, headers: { 'X-API-Key': key, 'X-Tags': tags } }],
  });

describe('coding agents call MCP tools through the gateway', () => {
  it('Claude Code completes a turn that calls a tool through /mcp, recorded under the key’s team and tags', async () => {
    const before = toolRows().length;
    const out = await claudeTurn(KEY, 'agent:claude-code');
    expect(out.is_error).toBe(false);
    // The double's Claude called the tool, Claude Code ran it through /mcp and sent the result back.
    expect(out.num_turns).toBeGreaterThanOrEqual(2);
    const rows = (await gw.rowsAtLeast((r) => r.endpoint === 'mcp', before + 1)).slice(before);
    expect(rows).toEqual([expect.objectContaining({ model: 'echo', provider: 'everything', status: 200 })]);
    expect(JSON.parse(rows[0]?.tags ?? '[]')).toEqual(
      expect.arrayContaining(['team:agents', 'project:mcp-e2e', 'agent:claude-code']),
    );
  }, 600_000);

  it('Codex (codex exec) completes a turn that calls a tool through /mcp', async () => {
    const home = mkdtempSync(join(tmpdir(), 'pao-codex-mcp-'));
    writeFileSync(join(home, 'instructions.md'), 'Use the tools you are told to use.\n');
    writeFileSync(
      join(home, 'config.toml'),
      [
        'model = "claude-sonnet-4-5"',
        'model_provider = "gateway"',
        `model_instructions_file = "${join(home, 'instructions.md')}"`,
        'web_search = "disabled"',
        'approval_policy = "never"',
        '[model_providers.gateway]',
        'name = "gateway"',
        `base_url = "${gw.proxy.base}/openai/v1"`,
        'env_key = "GATEWAY_KEY"',
        'wire_api = "responses"',
        'request_max_retries = 0',
        'stream_max_retries = 0',
        '[mcp_servers.gateway]',
        `url = "${gw.proxy.base}/mcp"`,
        'bearer_token_env_var = "GATEWAY_KEY"',
        'http_headers = { "X-Tags" = "agent:codex" }',
        '[analytics]',
        'enabled = false',
        '[otel]',
        'exporter = "none"',
      ].join('\n'),
    );
    const before = toolRows().length;
    // Codex names MCP tools <server>__<tool> (older releases mcp__<server>__<tool>): the prompt names both.
    const codex = run(
      bin(clients, 'codex'),
      ['exec', '--skip-git-repo-check', `Call the tool gateway__${TOOL} (mcp__gateway__${TOOL}).`],
      {
        cwd: home,
        timeout: 300_000,
        env: { PATH: process.env.PATH ?? '', HOME: home, CODEX_HOME: home, GATEWAY_KEY: KEY },
      },
    );
    codex.child.stdin?.end();
    const { stdout } = await codex;
    expect(stdout.trim().length).toBeGreaterThan(0);
    const rows = (await gw.rowsAtLeast((r) => r.endpoint === 'mcp', before + 1)).slice(before);
    expect(rows).toEqual([expect.objectContaining({ model: 'echo', provider: 'everything', status: 200 })]);
    expect(JSON.parse(rows[0]?.tags ?? '[]')).toEqual(expect.arrayContaining(['team:agents', 'agent:codex']));
  }, 600_000);

  it('a key without the tool: Claude Code is offered no such tool, and nothing is called', async () => {
    const before = toolRows().length;
    const out = await claudeTurn(NARROW, 'agent:claude-code');
    // The double answers in text when the named tool is not among those offered.
    expect(out.num_turns).toBe(1);
    await new Promise((r) => setTimeout(r, 500));
    expect(
      toolRows()
        .slice(before)
        .filter((r) => r.model === 'echo'),
    ).toEqual([]);
  }, 600_000);
});
