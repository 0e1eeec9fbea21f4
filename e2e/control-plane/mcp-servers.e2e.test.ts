import { type ChildProcess, spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MCP_SESSIONS_KEY, MCP_SESSIONS_SECRET } from '../../crds/constants.js';
import { MCP_TOKEN_KEY } from '../../crds/mcp/auth.js';
import { bridgeArgs, bridgeCommand, MCP_SERVER_LABEL } from '../../operator/mcp-server/bridge.js';
import { Operator } from '../../operator/operator.js';
import { installClients } from '../support/agent-clients.js';
import { capture, capturedLogger } from '../support/capture.js';
import { startClusterGateway } from '../support/cluster-gateway.js';
import { eventReasons, eventually, kubeConfig, kubectl, kubectlOk } from '../support/kube.js';

/**
 * McpServers on the real control plane with the operator: a URL to the real everything server
 * (@modelcontextprotocol/server-everything over Streamable HTTP, pinned in e2e/clients) becomes
 * Ready with its tools, narrowed by spec.tools; the bridge's exact arguments in front of the real
 * memory server (mcp-proxy and server-memory, pinned) serve its tools over Streamable HTTP; a
 * server whose tools change says so (tools/list_changed) and status follows at once; a
 * closed port is Degraded Unreachable, a missing credential Secret SecretMissing until it is
 * created; a stdio server gets its bridge's Deployment, Service and NetworkPolicy, which the
 * garbage collector deletes with it. No kubelet runs the bridge's pod in this tier: kwok marks it
 * ready on its CPU node, and the operator, outside the cluster network, cannot resolve the
 * bridge's Service, so the stdio server stays Degraded.
 */

const NS = 'platform-agent';
const TOKEN = 'mcp-e2e-bearer-5e1f0c';
const SECRET = 'mcp-e2e-guarded-token';

let operator: Operator;
const children: ChildProcess[] = [];
let everythingUrl: string;
let bridgeUrl: string;
let growingUrl: string;
let closedUrl: string;

/**
 * A stdio server of the official SDK whose tool `grow` adds a tool and says so
 * (notifications/tools/list_changed): behind the bridge, how a server's changed tools reach status.
 */
const GROWING_SERVER = `
import { Server } from '@modelcontextprotocol/server';
import { StdioServerTransport } from '@modelcontextprotocol/server/stdio';
const tools = [{ name: 'grow', description: 'adds a tool', inputSchema: { type: 'object' } }];
const server = new Server({ name: 'growing', version: '1.0.0' }, { capabilities: { tools: { listChanged: true } } });
server.setRequestHandler('tools/list', () => ({ tools }));
server.setRequestHandler('tools/call', async () => {
  tools.push({ name: 'grown-' + tools.length, inputSchema: { type: 'object' } });
  await server.sendToolListChanged();
  return { content: [{ type: 'text', text: 'grown' }] };
});
await server.connect(new StdioServerTransport());
`;

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** Starts a pinned client package's binary, its output into the e2e capture. */
function start(bin: string, args: string[], env: Record<string, string> = {}): ChildProcess {
  const child = spawn(bin, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  const write = capture(`mcp-servers-${bin.split('/').at(-1)}`);
  child.stdout?.on('data', (c: Buffer) => write(c.toString()));
  child.stderr?.on('data', (c: Buffer) => write(c.toString()));
  children.push(child);
  return child;
}

/** Resolves once something answers HTTP at `url` (any status). */
const answering = (url: string) =>
  eventually(`${url} answering`, 60_000, async () => {
    const res = await fetch(url, { method: 'GET', signal: AbortSignal.timeout(2000) });
    await res.body?.cancel();
    return true;
  });

const apply = (doc: object) => kubectlOk(['apply', '-f', '-'], JSON.stringify(doc));
const mcpServer = (name: string, spec: Record<string, unknown>) =>
  apply({ apiVersion: 'ai.platform/v1beta1', kind: 'McpServer', metadata: { name, namespace: NS }, spec });
const field = (name: string, path: string) =>
  kubectlOk(['get', 'mcpservers', name, '-n', NS, '-o', `jsonpath=${path}`]);
const ready = (name: string, part: 'reason' | 'message' | 'status') =>
  field(name, `{.status.conditions[?(@.type=="Ready")].${part}}`);
const toolNames = (name: string) => field(name, '{.status.tools[*].name}').split(' ').filter(Boolean);
const phase = (name: string, want: string, reasons?: string[]) =>
  eventually(`${name} ${want}${reasons ? ` (${reasons.join('|')})` : ''}`, 60_000, () =>
    field(name, '{.status.phase}') === want && (!reasons || reasons.includes(ready(name, 'reason'))) ? want : undefined,
  );
const reasonsOf = (name: string) => eventReasons(NS, `involvedObject.kind=McpServer,involvedObject.name=${name}`);

beforeAll(async () => {
  const bin = join(installClients(), 'node_modules', '.bin');
  const everythingPort = await freePort();
  start(join(bin, 'mcp-server-everything'), ['streamableHttp'], { PORT: String(everythingPort) });
  everythingUrl = `http://127.0.0.1:${everythingPort}/mcp`;
  // The bridge exactly as the Deployment runs it, but on a free local port, with the real memory server.
  const bridgePort = await freePort();
  const args = bridgeArgs();
  args[args.indexOf('--port') + 1] = String(bridgePort);
  start(join(bin, 'mcp-proxy'), [...args, '--', join(bin, 'mcp-server-memory')]);
  bridgeUrl = `http://127.0.0.1:${bridgePort}/mcp`;
  const growingPort = await freePort();
  const growing = bridgeArgs();
  growing[growing.indexOf('--port') + 1] = String(growingPort);
  start(join(bin, 'mcp-proxy'), [...growing, '--', process.execPath, '--input-type=module', '-e', GROWING_SERVER]);
  growingUrl = `http://127.0.0.1:${growingPort}/mcp`;
  closedUrl = `http://127.0.0.1:${await freePort()}/mcp`;
  await Promise.all([answering(everythingUrl), answering(bridgeUrl), answering(growingUrl)]);
  operator = new Operator({
    kubeConfig: kubeConfig(),
    cluster: { organizationId: 'acme', clusterId: 'prod-1', cloud: 'aws', region: 'us-east-1' },
    images: { Ollama: 'ollama/ollama:test' },
    port: 0,
    resyncMs: 0,
    leaderElection: false,
    logger: capturedLogger('operator-mcp-servers'),
  });
  await operator.start();
});

afterAll(async () => {
  await operator?.stop();
  kubectl(['delete', 'mcpservers', '--all', '-n', NS, '--wait=false']);
  kubectl(['delete', 'secret', SECRET, '-n', NS, '--ignore-not-found']);
  kubectl(['delete', 'secret', MCP_SESSIONS_SECRET, '-n', NS, '--ignore-not-found']);
  kubectl(['delete', 'deploy,svc,networkpolicy', '-n', NS, '-l', MCP_SERVER_LABEL]);
  for (const child of children) child.kill();
});

describe('McpServer with the operator on the real control plane', () => {
  it('lists the tools of a real Streamable HTTP server and becomes Ready', async () => {
    mcpServer('everything', { url: everythingUrl });
    await phase('everything', 'Ready');
    expect(toolNames('everything')).toEqual(expect.arrayContaining(['echo', 'get-sum']));
    expect(field('everything', '{.status.endpoint}')).toBe(everythingUrl);
    expect(field('everything', '{.status.serverInfo.name}')).toBe('mcp-servers/everything');
    expect(field('everything', '{.status.protocolVersion}')).toMatch(/^\d{4}-\d{2}-\d{2}$/);
    expect(field('everything', '{.status.lastDiscoveryTime}')).not.toBe('');
    expect(ready('everything', 'reason')).toBe('ToolsDiscovered');
    // The Event is recorded beside the status, not before it: on a loaded machine it lands a moment later.
    await eventually('the ToolsDiscovered event', 30_000, () =>
      reasonsOf('everything').includes('ToolsDiscovered') ? true : undefined,
    );
    // `kubectl get` shows the phase and the revision in its columns.
    console.log(`[e2e] kubectl get mcpservers:\n${kubectlOk(['get', 'mcpservers', '-n', NS])}`);
  });

  it('two gateways in cluster mode serve its tools at /mcp, each the other’s sessions (sealed with the operator’s key)', async () => {
    const key = 'sk-e2e-mcp-cluster-9c1f';
    const a = await startClusterGateway(key);
    const b = await startClusterGateway(key);
    try {
      const transport = new StreamableHTTPClientTransport(new URL(`${a.url}/mcp`), {
        requestInit: { headers: { 'X-API-Key': key } },
      });
      const client = new Client({ name: 'e2e', version: '1' });
      await client.connect(transport);
      const names = (await client.listTools()).tools.map((t) => t.name);
      expect(names).toContain('everything_echo');
      // The session a began, on b: the same key seals both (the Secret the operator made).
      const res = await fetch(`${b.url}/mcp`, {
        method: 'POST',
        headers: {
          'X-API-Key': key,
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
          'mcp-session-id': transport.sessionId ?? '',
          'mcp-protocol-version': '2025-11-25',
        },
        body: JSON.stringify({
          jsonrpc: '2.0',
          id: 5,
          method: 'tools/call',
          params: { name: 'everything_echo', arguments: { message: 'from a to b' } },
        }),
      });
      expect(res.status).toBe(200);
      expect(await res.json()).toMatchObject({
        id: 5,
        result: { content: [{ type: 'text', text: 'Echo: from a to b' }] },
      });
      await client.close();
    } finally {
      await a.stop();
      await b.stop();
    }
  });

  it('creates the key the proxies seal MCP sessions with, once: 32 random bytes', () => {
    const key = kubectlOk([
      'get',
      'secret',
      MCP_SESSIONS_SECRET,
      '-n',
      NS,
      '-o',
      `jsonpath={.data.${MCP_SESSIONS_KEY}}`,
    ]);
    expect(Buffer.from(key, 'base64')).toHaveLength(32);
  });

  it('narrows status.tools to spec.tools (deny wins over allow)', async () => {
    mcpServer('everything', { url: everythingUrl, tools: { allow: ['echo', 'get-sum'] } });
    await eventually('allow-list applied', 30_000, () =>
      toolNames('everything').join(',') === 'echo,get-sum' ? true : undefined,
    );
    mcpServer('everything', { url: everythingUrl, tools: { allow: ['echo', 'get-sum'], deny: ['get-sum'] } });
    await eventually('deny applied', 30_000, () => (toolNames('everything').join(',') === 'echo' ? true : undefined));
    expect(ready('everything', 'message')).toMatch(/serves 1 of \d+ tools .*excluded by spec\.tools/);
    expect(field('everything', '{.status.observedGeneration}')).toBe(field('everything', '{.metadata.generation}'));
  });

  it("serves a stdio server through the bridge's exact arguments (mcp-proxy in front of server-memory)", async () => {
    mcpServer('memory-bridge', { url: bridgeUrl });
    await phase('memory-bridge', 'Ready');
    expect(toolNames('memory-bridge')).toEqual(expect.arrayContaining(['create_entities', 'read_graph']));
    expect(field('memory-bridge', '{.status.serverInfo.name}')).toBe('memory-server');
  });

  it('lists the tools again when the server says they changed (tools/list_changed), not at the next round', async () => {
    mcpServer('growing', { url: growingUrl });
    await phase('growing', 'Ready');
    expect(toolNames('growing')).toEqual(['grow']);
    const client = new Client({ name: 'e2e', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(growingUrl)));
    try {
      await client.callTool({ name: 'grow', arguments: {} });
    } finally {
      await client.close();
    }
    // The operator lists every 5 minutes otherwise: well within, the notification did it.
    await eventually('the grown tool in status', 20_000, () =>
      toolNames('growing').includes('grown-1') ? true : undefined,
    );
  });

  it('is Degraded Unreachable at a closed port, with the cause and the fix', async () => {
    mcpServer('nowhere', { url: closedUrl });
    await phase('nowhere', 'Degraded', ['Unreachable']);
    expect(ready('nowhere', 'status')).toBe('False');
    expect(ready('nowhere', 'message')).toContain('ECONNREFUSED');
    expect(ready('nowhere', 'message')).toContain('check spec.url');
    await eventually('Warning event', 20_000, () => reasonsOf('nowhere').includes('Unreachable') || undefined);
  });

  it("is Degraded SecretMissing until its token's Secret exists, naming the key and never the Secret", async () => {
    mcpServer('guarded', { url: everythingUrl, auth: { method: 'Bearer', secretRef: { name: SECRET } } });
    await phase('guarded', 'Degraded', ['SecretMissing']);
    const message = ready('guarded', 'message');
    expect(message).toContain(`key ${MCP_TOKEN_KEY}`);
    expect(message).not.toContain(SECRET);
    apply({
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name: SECRET, namespace: NS },
      stringData: { token: TOKEN },
    });
    // The Secret's watch brings the server back; the everything server takes any token.
    await phase('guarded', 'Ready');
    const everything = kubectlOk(['get', 'mcpservers,events', '-n', NS, '-o', 'yaml']);
    expect(everything).not.toContain(TOKEN);
  });

  it("runs a stdio server's bridge: Deployment, Service and NetworkPolicy, owned by the McpServer", async () => {
    const command = ['npx', '-y', '@modelcontextprotocol/server-memory@2026.8.31'];
    mcpServer('memory', { stdio: { image: 'node:24-bookworm-slim', command } });
    const deployment = await eventually('the bridge Deployment', 30_000, () => {
      const run = kubectl(['get', 'deployment', 'mcp-memory', '-n', NS, '-o', 'json']);
      return run.code === 0
        ? (JSON.parse(run.stdout) as {
            metadata: { ownerReferences: Array<{ kind: string; name: string; controller: boolean }> };
            spec: { template: { spec: { containers: Array<{ command: string[]; image: string }> } } };
          })
        : undefined;
    });
    expect(deployment.metadata.ownerReferences).toEqual([
      expect.objectContaining({ kind: 'McpServer', name: 'memory', controller: true }),
    ]);
    expect(deployment.spec.template.spec.containers[0]?.command).toEqual(bridgeCommand(command));
    // The operator makes the bridge's objects one after another: each is waited for, not read once.
    for (const kind of ['service', 'networkpolicy']) {
      const owner = await eventually(`the bridge ${kind}`, 30_000, () => {
        const run = kubectl([
          'get',
          kind,
          'mcp-memory',
          '-n',
          NS,
          '-o',
          'jsonpath={.metadata.ownerReferences[0].name}',
        ]);
        return run.code === 0 ? run.stdout : undefined;
      });
      expect(owner).toBe('memory');
    }
    // Not ready yet, or (kwok marked its pod ready) ready but out of this host's reach. The status
    // is written after the bridge's objects, so its endpoint is read once the phase is there.
    await phase('memory', 'Degraded', ['BridgeNotReady', 'Unreachable']);
    expect(field('memory', '{.status.endpoint}')).toBe('http://mcp-memory.platform-agent.svc:8000/mcp');
    console.log(`[e2e] stdio server: ${ready('memory', 'reason')}: ${ready('memory', 'message')}`);
  });

  it('deleting a stdio McpServer garbage-collects its bridge', async () => {
    kubectlOk(['delete', 'mcpserver', 'memory', '-n', NS]);
    await eventually('bridge collected', 60_000, () => {
      const left = kubectlOk([
        'get',
        'deploy,svc,networkpolicy',
        '-n',
        NS,
        '-l',
        `${MCP_SERVER_LABEL}=memory`,
        '-o',
        'name',
      ]);
      return left.trim() === '' ? true : undefined;
    });
  });
});
