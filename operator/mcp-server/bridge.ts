import type { V1Deployment, V1EnvVar, V1LabelSelector, V1ObjectMeta, V1Service } from '@kubernetes/client-node';
import {
  AGENT_NAMESPACE,
  API_GROUP,
  API_GROUP_VERSION,
  MANAGED_BY_LABEL,
  MANAGED_BY_VALUE,
} from '../../crds/constants.js';
import { HARDENED } from '../../crds/engines/hardened.js';
import { MCP_BRIDGE_PATH, MCP_BRIDGE_PORT, type McpServer, mcpBridgeName } from '../../crds/mcp-server.js';

/**
 * The desired bridge of a stdio McpServer, as pure data: a Deployment running the user's image
 * with mcp-proxy in front of the server's command (mcp-proxy spawns the command, speaks stdio to
 * it and serves it as Streamable HTTP with sessions at /mcp), its Service, and a NetworkPolicy
 * admitting only the gateway's proxy pods (which call its tools) and the operator (which lists
 * them). Pod Security restricted, as the model servers.
 *
 * Why mcp-proxy: it is maintained, serves the Streamable HTTP transport with sessions (and the
 * 2026-07-28 revision beside the 2025 ones), passes its environment to the child, and takes the
 * command after `--` without a shell. It runs from the user's image with npx at a pinned version,
 * so the image needs Node.js and nothing of ours; npx writes its cache to /tmp.
 */

/** Label on the bridge's objects naming its McpServer: how the controller finds its owner. */
export const MCP_SERVER_LABEL = `${API_GROUP}/mcp-server`;
/** The bridge, pinned (e2e/clients/package.json pins the same version for the e2e tier). */
export const MCP_BRIDGE_PACKAGE = 'mcp-proxy@6.7.19';
/** The uid the bridge and the server run as: the image's own user may be a name, which restricted cannot verify. */
const MCP_BRIDGE_UID = 10001;

/** The bridge's command line before the server's: Streamable HTTP only, on the bridge port and path. */
export function bridgeArgs(): string[] {
  return ['--port', String(MCP_BRIDGE_PORT), '--server', 'stream', '--streamEndpoint', MCP_BRIDGE_PATH];
}

/** The container's command: the bridge with npx, then `--` and the server's stdio command as the spec has it. */
export function bridgeCommand(command: readonly string[]): string[] {
  return ['npx', '-y', MCP_BRIDGE_PACKAGE, ...bridgeArgs(), '--', ...command];
}

/** A peer of an ingress rule. */
interface PolicyPeer {
  namespaceSelector?: V1LabelSelector;
  podSelector?: V1LabelSelector;
}

/**
 * A NetworkPolicy as the API serves it (the client library's type spells `from` as `_from`, its
 * own serializer's name, which is not the wire's).
 */
export interface NetworkPolicy {
  apiVersion: 'networking.k8s.io/v1';
  kind: 'NetworkPolicy';
  metadata?: V1ObjectMeta;
  spec?: {
    podSelector: V1LabelSelector;
    policyTypes: string[];
    ingress: Array<{ from: PolicyPeer[]; ports: Array<{ port: number | string; protocol: string }> }>;
  };
}

export interface McpBridge {
  deployment: V1Deployment;
  service: V1Service;
  networkPolicy: NetworkPolicy;
}

const bridgeSelector = (server: McpServer): Record<string, string> => ({
  [MCP_SERVER_LABEL]: server.metadata.name ?? '',
});

function labels(server: McpServer): Record<string, string> {
  return {
    'app.kubernetes.io/name': 'mcp-bridge',
    'app.kubernetes.io/instance': server.metadata.name ?? '',
    'app.kubernetes.io/component': 'mcp-server',
    [MANAGED_BY_LABEL]: MANAGED_BY_VALUE,
    ...bridgeSelector(server),
  };
}

function ownerReference(server: McpServer) {
  return {
    apiVersion: API_GROUP_VERSION,
    kind: 'McpServer',
    name: server.metadata.name ?? '',
    uid: server.metadata.uid ?? '',
    controller: true,
    blockOwnerDeletion: true,
  };
}

/** Where npx and npm write (the root filesystem is read-only); the spec's env comes after and may override. */
function environment(server: McpServer): V1EnvVar[] {
  const own = server.spec.stdio?.env ?? [];
  const defaults: V1EnvVar[] = [
    { name: 'HOME', value: '/tmp' },
    { name: 'npm_config_cache', value: '/tmp/.npm' },
    { name: 'npm_config_update_notifier', value: 'false' },
    { name: 'npm_config_fund', value: 'false' },
  ];
  const named = new Set(own.map((e) => e.name));
  return [...defaults.filter((e) => !named.has(e.name)), ...own.map((e) => ({ name: e.name, value: e.value }))];
}

/** The gateway's proxy pods and the operator, as the chart labels them (any release of the product). */
const admitted = (component: 'proxy' | 'operator'): PolicyPeer => ({
  namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': AGENT_NAMESPACE } },
  podSelector: {
    matchLabels: { 'app.kubernetes.io/part-of': 'platform-ai-optimizer', 'app.kubernetes.io/component': component },
  },
});

export function desiredBridge(server: McpServer): McpBridge | undefined {
  const stdio = server.spec.stdio;
  if (!stdio) return undefined;
  const name = mcpBridgeName(server.metadata.name ?? '');
  const meta = {
    name,
    namespace: server.metadata.namespace ?? AGENT_NAMESPACE,
    labels: labels(server),
    ownerReferences: [ownerReference(server)],
  };
  const deployment: V1Deployment = {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: meta,
    spec: {
      replicas: stdio.replicas ?? 1,
      selector: { matchLabels: bridgeSelector(server) },
      // The new bridge answers before the old one goes: sessions move, the server stays listed.
      strategy: { type: 'RollingUpdate', rollingUpdate: { maxSurge: 1, maxUnavailable: 0 } },
      template: {
        metadata: { labels: labels(server) },
        spec: {
          containers: [
            {
              name: 'server',
              image: stdio.image,
              command: bridgeCommand(stdio.command),
              env: environment(server),
              ports: [{ name: 'http', containerPort: MCP_BRIDGE_PORT, protocol: 'TCP' }],
              // Ready once the bridge listens; the first start may wait for npx to fetch it.
              readinessProbe: { tcpSocket: { port: 'http' }, periodSeconds: 5, failureThreshold: 3 },
              resources: { requests: { cpu: '50m', memory: '128Mi' }, limits: { memory: '1Gi' } },
              securityContext: HARDENED,
              volumeMounts: [{ name: 'tmp', mountPath: '/tmp' }],
            },
          ],
          securityContext: {
            runAsNonRoot: true,
            runAsUser: MCP_BRIDGE_UID,
            runAsGroup: MCP_BRIDGE_UID,
            fsGroup: MCP_BRIDGE_UID,
            seccompProfile: { type: 'RuntimeDefault' },
          },
          // The server talks to its callers and whatever its own job needs, never the Kubernetes API.
          automountServiceAccountToken: false,
          enableServiceLinks: false,
          volumes: [{ name: 'tmp', emptyDir: { sizeLimit: '1Gi' } }],
          terminationGracePeriodSeconds: 10,
        },
      },
    },
  };
  const service: V1Service = {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: meta,
    spec: {
      type: 'ClusterIP',
      selector: bridgeSelector(server),
      ports: [{ name: 'http', port: MCP_BRIDGE_PORT, targetPort: 'http', protocol: 'TCP' }],
      // A session lives in one bridge process: with several replicas, a caller stays on its own.
      sessionAffinity: 'ClientIP',
    },
  };
  const networkPolicy: NetworkPolicy = {
    apiVersion: 'networking.k8s.io/v1',
    kind: 'NetworkPolicy',
    metadata: meta,
    spec: {
      podSelector: { matchLabels: bridgeSelector(server) },
      policyTypes: ['Ingress'],
      // Only through the gateway: no other pod skips its keys, limits and usage records. The
      // kubelet's TCP probe comes from the node, which NetworkPolicy does not govern.
      ingress: [{ from: [admitted('proxy'), admitted('operator')], ports: [{ port: 'http', protocol: 'TCP' }] }],
    },
  };
  return { deployment, service, networkPolicy };
}

/** Whether the bridge answers: a ready replica of its Deployment. */
export const bridgeReady = (deployment: V1Deployment | undefined): boolean =>
  (deployment?.status?.readyReplicas ?? 0) > 0;
