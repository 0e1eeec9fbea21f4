import { describe, expect, it } from 'vitest';
import type { McpServer } from '../../crds/mcp-server.js';
import type { KeyPolicy } from '../access/auth.js';
import { McpServerTable, mayUseServer, mayUseTool } from './servers.js';

const server = (name: string, spec: McpServer['spec']): McpServer => ({
  apiVersion: 'ai.platform/v1beta1',
  kind: 'McpServer',
  metadata: { name, namespace: 'platform-agent' },
  spec,
});
const policy = (mcp?: KeyPolicy['mcp']): KeyPolicy => ({
  name: 'k',
  team: 't',
  role: 'User',
  tags: [],
  ...(mcp ? { mcp } : {}),
});

describe('what a key may use of the MCP servers', () => {
  const table = new McpServerTable();
  table.set([
    server('tickets', {
      url: 'http://tickets.tools.svc:8080/mcp',
      tools: { allow: ['search', 'create', 'delete'], deny: ['delete'] },
    }),
    server('memory', { stdio: { image: 'node:24', command: ['npx', 'server-memory'] } }),
  ]);

  it('reaches stdio servers at their bridge Service', () => {
    expect(table.get('memory')?.url).toBe('http://mcp-memory.platform-agent.svc:8000/mcp');
    expect(table.get('tickets')?.timeoutMs).toBe(60_000);
  });

  it('takes the McpServer’s allow and deny lists, then the key’s allow-list', () => {
    const tickets = table.get('tickets');
    if (!tickets) throw new Error('no tickets');
    expect(['search', 'create', 'delete', 'other'].filter((t) => mayUseTool(policy(), tickets, t))).toEqual([
      'search',
      'create',
    ]);
    const narrow = policy({ servers: [{ name: 'tickets', tools: ['search', 'delete'] }] });
    expect(['search', 'create', 'delete'].filter((t) => mayUseTool(narrow, tickets, t))).toEqual(['search']);
    expect(table.forKey(narrow).map((t) => t.name)).toEqual(['tickets']);
    expect(table.forKey(policy()).map((t) => t.name)).toEqual(['memory', 'tickets']);
    expect(mayUseServer(policy({ servers: [] }), 'tickets')).toBe(false);
    expect(mayUseServer(policy({ recordPayloads: true }), 'tickets')).toBe(true);
  });
});
