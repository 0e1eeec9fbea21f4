import type { Tool } from '@modelcontextprotocol/client';
import { describe, expect, it } from 'vitest';
import type { McpServer } from '../../crds/mcp-server.js';
import {
  DESCRIPTION_MAX,
  isTransient,
  type McpDiscoveryOutcome,
  type McpProblemReason,
  mcpServerStatus,
  PROBLEMS,
  problemMessage,
  STATUS_TOOLS_MAX,
} from './mcp-server-status.js';

const T0 = new Date('2026-11-27T10:00:00Z');
const T1 = new Date('2026-11-27T10:05:00Z');
const SECRET_NAME = 'tools-credentials-4d1c';

const server = (spec: Partial<McpServer['spec']> = {}, status?: McpServer['status']): McpServer => ({
  apiVersion: 'ai.platform/v1beta1',
  kind: 'McpServer',
  metadata: { name: 'everything', namespace: 'platform-agent', generation: 3 },
  spec: { url: 'http://everything.tools.svc:3001/mcp', ...spec },
  ...(status ? { status } : {}),
});

const tool = (name: string, description?: string): Tool => ({
  name,
  ...(description ? { description } : {}),
  inputSchema: { type: 'object' },
});

const listed = (tools: Tool[]): McpDiscoveryOutcome => ({
  ok: true,
  protocolVersion: '2025-11-25',
  serverInfo: { name: 'mcp-servers/everything', version: '2.0.0' },
  tools,
});

const failed = (reason: McpProblemReason, detail = 'the connection failed: ECONNREFUSED'): McpDiscoveryOutcome => ({
  ok: false,
  problem: { reason, detail },
});

describe('mcpServerStatus', () => {
  it('is Ready with the tools, the revision, the server and the endpoint', () => {
    const status = mcpServerStatus(server(), listed([tool('echo', 'Echoes back the input'), tool('add')]), T0);
    expect(status).toEqual({
      observedGeneration: 3,
      endpoint: 'http://everything.tools.svc:3001/mcp',
      phase: 'Ready',
      protocolVersion: '2025-11-25',
      serverInfo: { name: 'mcp-servers/everything', version: '2.0.0' },
      tools: [{ name: 'echo', description: 'Echoes back the input' }, { name: 'add' }],
      lastDiscoveryTime: '2026-11-27T10:00:00Z',
      conditions: [
        {
          type: 'Ready',
          status: 'True',
          reason: 'ToolsDiscovered',
          message: 'serves 2 of 2 tools through the gateway',
          observedGeneration: 3,
          lastTransitionTime: '2026-11-27T10:00:00Z',
        },
      ],
    });
  });

  it('lists only what spec.tools admits (deny wins), and says how many it left out', () => {
    const status = mcpServerStatus(
      server({ tools: { allow: ['echo', 'add', 'sleep'], deny: ['sleep'] } }),
      listed([tool('echo'), tool('add'), tool('sleep'), tool('env')]),
      T0,
    );
    expect(status.tools?.map((t) => t.name)).toEqual(['echo', 'add']);
    expect(status.conditions?.[0]?.message).toBe('serves 2 of 4 tools through the gateway (2 excluded by spec.tools)');
  });

  it('cuts long descriptions and bounds the list to what the schema holds', () => {
    const long = 'x'.repeat(DESCRIPTION_MAX * 2);
    const many = Array.from({ length: STATUS_TOOLS_MAX + 10 }, (_, i) => tool(`t${i}`));
    const status = mcpServerStatus(server(), listed([tool('long', long), ...many]), T0);
    expect(status.tools?.[0]?.description).toHaveLength(DESCRIPTION_MAX);
    expect(status.tools?.[0]?.description?.endsWith('…')).toBe(true);
    expect(status.tools).toHaveLength(STATUS_TOOLS_MAX);
    expect(status.conditions?.[0]?.message).toContain(`the first ${STATUS_TOOLS_MAX} listed here`);
  });

  it('leaves out names status cannot hold: empty, overlong, repeated', () => {
    const status = mcpServerStatus(
      server(),
      listed([tool('echo'), tool('echo'), tool(''), tool('x'.repeat(129)), tool('add')]),
      T0,
    );
    expect(status.tools?.map((t) => t.name)).toEqual(['echo', 'add']);
    expect(status.conditions?.[0]?.message).toContain('3 with an empty, overlong or repeated name left out');
  });

  it('is Degraded with the reason and keeps what the same endpoint served, narrowed to today’s spec', () => {
    const ready = mcpServerStatus(server(), listed([tool('echo'), tool('add')]), T0);
    const status = mcpServerStatus(
      server({ tools: { deny: ['add'] } }, ready),
      failed('Unreachable', 'the connection failed: ECONNREFUSED'),
      T1,
    );
    expect(status.phase).toBe('Degraded');
    expect(status.tools).toEqual([{ name: 'echo' }]);
    expect(status.lastDiscoveryTime).toBe('2026-11-27T10:00:00Z');
    expect(status.serverInfo).toEqual(ready.serverInfo);
    expect(status.conditions).toEqual([
      {
        type: 'Ready',
        status: 'False',
        reason: 'Unreachable',
        message: expect.stringContaining('ECONNREFUSED at http://everything.tools.svc:3001/mcp'),
        observedGeneration: 3,
        lastTransitionTime: '2026-11-27T10:05:00Z',
      },
    ]);
  });

  it('forgets the tools of another endpoint', () => {
    const ready = mcpServerStatus(server(), listed([tool('echo')]), T0);
    const status = mcpServerStatus(server({ url: 'http://other.tools.svc/mcp' }, ready), failed('Unreachable'), T1);
    expect(status.tools).toBeUndefined();
    expect(status.serverInfo).toBeUndefined();
    expect(status.endpoint).toBe('http://other.tools.svc/mcp');
  });

  it('keeps the transition time while the condition stays (so an unchanged status is not written)', () => {
    const first = mcpServerStatus(server(), failed('Timeout', 'the request timed out'), T0);
    const again = mcpServerStatus(server({}, first), failed('Timeout', 'the request timed out'), T1);
    expect(again).toEqual(first);
  });

  it('reports a stdio server at its bridge', () => {
    const stdio = server({ url: undefined, stdio: { image: 'node:24', command: ['srv'] } });
    const status = mcpServerStatus(
      stdio,
      failed('BridgeNotReady', 'the bridge Deployment mcp-everything has no ready replica yet'),
      T0,
    );
    expect(status.endpoint).toBe('http://mcp-everything.platform-agent.svc:8000/mcp');
    expect(status.conditions?.[0]?.message).toContain('kubectl describe deployment mcp-everything -n platform-agent');
  });
});

describe('the problem table', () => {
  const auths = [
    undefined,
    { method: 'Bearer' as const, secretRef: { name: SECRET_NAME } },
    {
      method: 'OAuthClientCredentials' as const,
      secretRef: { name: SECRET_NAME },
      tokenUrl: 'https://auth.example.com/token',
      clientId: 'gw',
    },
  ];
  const reasons = Object.keys(PROBLEMS) as McpProblemReason[];

  it.each(reasons)('%s says the cause and a fix, and never names the Secret', (reason) => {
    for (const auth of auths) {
      const message = problemMessage(server(auth ? { auth } : {}), { reason, detail: 'DETAIL' });
      expect(message).toContain('DETAIL');
      expect(message.length).toBeGreaterThan('DETAIL'.length + 20);
      expect(message).not.toContain(SECRET_NAME);
    }
  });

  it('tells Unauthorized apart by how the gateway authenticates', () => {
    const [none, bearer, oauth] = auths.map((auth) =>
      problemMessage(server(auth ? { auth } : {}), { reason: 'Unauthorized', detail: 'the server answered HTTP 401' }),
    );
    expect(none).toContain('set spec.auth');
    expect(bearer).toContain('the key token of the Secret named in spec.auth.secretRef');
    expect(oauth).toContain('the key clientSecret');
  });

  it('retries soon only what may pass by itself', () => {
    expect(reasons.filter(isTransient).sort()).toEqual(
      ['BridgeNotReady', 'ServerError', 'Timeout', 'TokenEndpointUnreachable', 'Unreachable'].sort(),
    );
  });
});
