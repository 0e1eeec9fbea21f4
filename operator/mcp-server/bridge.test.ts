import { describe, expect, it } from 'vitest';
import { MCP_BRIDGE_PATH, MCP_BRIDGE_PORT, type McpServer, mcpServerUrl } from '../../crds/mcp-server.js';
import {
  bridgeArgs,
  bridgeCommand,
  bridgeReady,
  desiredBridge,
  MCP_BRIDGE_PACKAGE,
  MCP_SERVER_LABEL,
} from './bridge.js';

const stdio = (extra: Partial<NonNullable<McpServer['spec']['stdio']>> = {}): McpServer => ({
  apiVersion: 'ai.platform/v1beta1',
  kind: 'McpServer',
  metadata: { name: 'memory', namespace: 'platform-agent', uid: 'uid-1', generation: 1 },
  spec: {
    stdio: {
      image: 'node:24-bookworm-slim',
      command: ['npx', '-y', '@modelcontextprotocol/server-memory@2026.8.31'],
      ...extra,
    },
  },
});

const plan = (server: McpServer = stdio()) => {
  const bridge = desiredBridge(server);
  if (!bridge) throw new Error('no bridge');
  return bridge;
};

describe('desiredBridge', () => {
  it('has none for a server at a URL', () => {
    expect(
      desiredBridge({ ...stdio(), spec: { url: 'http://code-search.tools.svc:8080/mcp' } } as McpServer),
    ).toBeUndefined();
  });

  it('runs the server behind the pinned mcp-proxy, Streamable HTTP only, at the port and path the endpoint names', () => {
    const [container] = plan().deployment.spec?.template.spec?.containers ?? [];
    expect(container?.command).toEqual([
      'npx',
      '-y',
      MCP_BRIDGE_PACKAGE,
      '--port',
      String(MCP_BRIDGE_PORT),
      '--server',
      'stream',
      '--streamEndpoint',
      MCP_BRIDGE_PATH,
      '--',
      'npx',
      '-y',
      '@modelcontextprotocol/server-memory@2026.8.31',
    ]);
    expect(MCP_BRIDGE_PACKAGE).toBe('mcp-proxy@6.7.19');
    expect(bridgeCommand(['srv'])).toEqual(['npx', '-y', MCP_BRIDGE_PACKAGE, ...bridgeArgs(), '--', 'srv']);
    expect(container?.image).toBe('node:24-bookworm-slim');
    expect(container?.ports).toEqual([{ name: 'http', containerPort: MCP_BRIDGE_PORT, protocol: 'TCP' }]);
    expect(container?.readinessProbe?.tcpSocket?.port).toBe('http');
    expect(mcpServerUrl(stdio())).toBe(`http://mcp-memory.platform-agent.svc:${MCP_BRIDGE_PORT}${MCP_BRIDGE_PATH}`);
  });

  it('names the three objects mcp-<name> in the server’s namespace, owned by it and labelled with it', () => {
    const bridge = plan();
    for (const obj of [bridge.deployment, bridge.service, bridge.networkPolicy]) {
      expect(obj.metadata?.name).toBe('mcp-memory');
      expect(obj.metadata?.namespace).toBe('platform-agent');
      expect(obj.metadata?.labels?.[MCP_SERVER_LABEL]).toBe('memory');
      expect(obj.metadata?.ownerReferences).toEqual([
        {
          apiVersion: 'ai.platform/v1beta1',
          kind: 'McpServer',
          name: 'memory',
          uid: 'uid-1',
          controller: true,
          blockOwnerDeletion: true,
        },
      ]);
    }
    expect(bridge.deployment.spec?.selector.matchLabels).toEqual({ [MCP_SERVER_LABEL]: 'memory' });
    expect(bridge.deployment.spec?.template.metadata?.labels?.[MCP_SERVER_LABEL]).toBe('memory');
  });

  it('passes Pod Security restricted: non-root by uid, no escalation, no capabilities, seccomp, read-only root', () => {
    const pod = plan().deployment.spec?.template.spec;
    expect(pod?.securityContext).toMatchObject({
      runAsNonRoot: true,
      runAsUser: 10001,
      seccompProfile: { type: 'RuntimeDefault' },
    });
    for (const c of pod?.containers ?? []) {
      expect(c.securityContext).toEqual({
        allowPrivilegeEscalation: false,
        readOnlyRootFilesystem: true,
        runAsNonRoot: true,
        capabilities: { drop: ['ALL'] },
      });
    }
    expect(pod?.automountServiceAccountToken).toBe(false);
    expect(pod?.volumes?.every((v) => v.emptyDir !== undefined)).toBe(true);
    expect(pod?.hostNetwork).toBeUndefined();
  });

  it("gives npx a writable HOME and cache on /tmp, the spec's env after (and over) them", () => {
    const env = plan(stdio({ env: [{ name: 'MEMORY_FILE_PATH', value: '/tmp/memory.json' }] })).deployment.spec
      ?.template.spec?.containers[0]?.env;
    expect(env).toContainEqual({ name: 'HOME', value: '/tmp' });
    expect(env).toContainEqual({ name: 'npm_config_cache', value: '/tmp/.npm' });
    expect(env?.at(-1)).toEqual({ name: 'MEMORY_FILE_PATH', value: '/tmp/memory.json' });
    const over = plan(stdio({ env: [{ name: 'HOME', value: '/data' }] })).deployment.spec?.template.spec?.containers[0]
      ?.env;
    expect(over?.filter((e) => e.name === 'HOME')).toEqual([{ name: 'HOME', value: '/data' }]);
    expect(plan().deployment.spec?.template.spec?.containers[0]?.volumeMounts).toEqual([
      { name: 'tmp', mountPath: '/tmp' },
    ]);
  });

  it('runs spec.stdio.replicas (1 by default), keeping a caller on one replica (its session lives there)', () => {
    expect(plan().deployment.spec?.replicas).toBe(1);
    expect(plan(stdio({ replicas: 3 })).deployment.spec?.replicas).toBe(3);
    expect(plan(stdio({ replicas: 0 })).deployment.spec?.replicas).toBe(0);
    expect(plan().service.spec).toMatchObject({
      type: 'ClusterIP',
      selector: { [MCP_SERVER_LABEL]: 'memory' },
      ports: [{ name: 'http', port: MCP_BRIDGE_PORT, targetPort: 'http', protocol: 'TCP' }],
      sessionAffinity: 'ClientIP',
    });
  });

  it("admits only the product's proxy and operator pods, on the named port", () => {
    const policy = plan().networkPolicy;
    expect(policy.spec?.podSelector).toEqual({ matchLabels: { [MCP_SERVER_LABEL]: 'memory' } });
    expect(policy.spec?.policyTypes).toEqual(['Ingress']);
    expect(policy.spec?.ingress).toHaveLength(1);
    const [rule] = policy.spec?.ingress ?? [];
    expect(rule?.ports).toEqual([{ port: 'http', protocol: 'TCP' }]);
    expect(rule?.from.map((p) => p.podSelector?.matchLabels?.['app.kubernetes.io/component'])).toEqual([
      'proxy',
      'operator',
    ]);
    for (const peer of rule?.from ?? []) {
      expect(peer.namespaceSelector).toEqual({ matchLabels: { 'kubernetes.io/metadata.name': 'platform-agent' } });
      expect(peer.podSelector?.matchLabels?.['app.kubernetes.io/part-of']).toBe('platform-ai-optimizer');
    }
  });

  it('is pure: the same server plans the same objects', () => {
    expect(desiredBridge(stdio())).toEqual(desiredBridge(stdio()));
  });
});

describe('bridgeReady', () => {
  it('needs a ready replica', () => {
    expect(bridgeReady(undefined)).toBe(false);
    expect(bridgeReady({ status: { replicas: 1 } })).toBe(false);
    expect(bridgeReady({ status: { replicas: 1, readyReplicas: 1 } })).toBe(true);
  });
});
