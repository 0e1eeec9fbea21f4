import type { V1Deployment, V1Service } from '@kubernetes/client-node';
import { AGENT_NAMESPACE, API_GROUP } from '../../crds/constants.js';
import { type Informer, keyOf } from '../../crds/kube/informer.js';
import { type KubeClient, resourcePath } from '../../crds/kube/kube-client.js';
import { NamedSecrets, SECRET_READ_WAIT_MS } from '../../crds/kube/named-secrets.js';
import { mcpAuthProvider, mcpSecretName } from '../../crds/mcp/auth.js';
import { type McpServer, mcpBridgeName, mcpServerUrl } from '../../crds/mcp-server.js';
import { collection, platformCollection } from '../runtime/collection.js';
import { containsDesired } from '../runtime/contains-desired.js';
import { type ControllerDeclaration, ownerByLabel, watch } from '../runtime/controller-declaration.js';
import type { EventRecorder } from '../runtime/events.js';
import { writeStatusIfChanged } from '../runtime/status-write.js';
import type { ReconcileResult } from '../runtime/work-queue.js';
import { bridgeReady, desiredBridge, MCP_SERVER_LABEL, type NetworkPolicy } from './bridge.js';
import { isTransient, type McpDiscoveryOutcome, type McpProblem, mcpServerStatus } from './mcp-server-status.js';
import { McpSessions } from './mcp-sessions.js';
import { ensureSessionsSecret } from './sessions-secret.js';

/**
 * Reconciles an McpServer: for a stdio server, applies its bridge (bridge.ts) and waits for a
 * ready replica; then discovers the server's tools on a live session (mcp-sessions.ts) and writes
 * the status (mcp-server-status.ts) when it changed, with an Event when Ready changes. Discovery
 * runs on a spec or Secret change, when the server says its tools changed, when the bridge became
 * ready, and every REDISCOVERY_MS; reconciles in between (our own status write, a resync) reuse
 * the last result.
 */

const FIELD_MANAGER = 'platform-ai-optimizer-operator';
/** How often a server's tools are listed again without a notification. */
const MCP_REDISCOVERY_MS = 5 * 60_000;
/** How soon a failure that may pass (unreachable, timeout, a bridge starting) is tried again. */
const TRANSIENT_RETRY_MS = 30_000;
const DEFAULT_TIMEOUT_SECONDS = 60;

interface LastDiscovery {
  generation: number;
  secretVersion: string;
  at: number;
  /** The server's list_changed count when this discovery started. */
  changes: number;
  /** It did not list: a bridge not ready or a spec that names no server. */
  blocked: boolean;
  retryMs?: number;
}

interface McpCaches {
  servers: Informer<McpServer>;
  deployments: Informer<V1Deployment>;
  services: Informer<V1Service>;
  policies: Informer<NetworkPolicy>;
}

const bridgePath = (group: string, plural: string, namespace: string, name: string) =>
  resourcePath({ group, version: 'v1', plural, namespace, name });

/** The bridge's three objects, by where they live and how they are cached. */
const BRIDGE_KINDS = [
  { group: 'apps', plural: 'deployments', part: 'deployment', cache: 'deployments' },
  { group: '', plural: 'services', part: 'service', cache: 'services' },
  { group: 'networking.k8s.io', plural: 'networkpolicies', part: 'networkPolicy', cache: 'policies' },
] as const;

export class McpServerController {
  private readonly last = new Map<string, LastDiscovery>();
  /** notifications/tools/list_changed received per server. */
  private readonly changes = new Map<string, number>();

  constructor(
    private readonly client: KubeClient,
    private readonly caches: McpCaches,
    private readonly secrets: NamedSecrets,
    private readonly sessions: McpSessions,
    private readonly events: EventRecorder,
    private readonly now: () => Date,
  ) {}

  /** The server said its tools changed: the next reconcile lists them. */
  toolsChanged(key: string): void {
    this.changes.set(key, (this.changes.get(key) ?? 0) + 1);
  }

  /** Changes when the Secret changes or when this operator gains or loses the right to read it. */
  private secretVersion(server: McpServer): string {
    const name = mcpSecretName(server);
    if (!name) return '';
    return `${this.secrets.access(name) ?? 'untracked'}/${this.secrets.get(name)?.metadata?.resourceVersion ?? ''}`;
  }

  /**
   * A stdio server's bridge applied where it differs; what keeps discovery from running, if
   * anything. A server that is no longer stdio loses the bridge it had.
   */
  private async ensureBridge(server: McpServer): Promise<McpProblem | undefined> {
    const namespace = server.metadata.namespace ?? AGENT_NAMESPACE;
    const name = mcpBridgeName(server.metadata.name ?? '');
    const desired = desiredBridge(server);
    for (const kind of BRIDGE_KINDS) {
      const path = bridgePath(kind.group, kind.plural, namespace, name);
      const cached = this.caches[kind.cache].get(`${namespace}/${name}`);
      if (!desired) {
        const ours = cached?.metadata?.ownerReferences?.some((o) => o.uid === server.metadata.uid);
        if (ours) await this.client.delete(path);
      } else if (!cached || !containsDesired(cached, desired[kind.part])) {
        await this.client.apply(path, desired[kind.part], FIELD_MANAGER);
      }
    }
    if (!desired) return server.spec.url ? undefined : { reason: 'InvalidSpec', detail: 'the spec names no server' };
    if (bridgeReady(this.caches.deployments.get(`${namespace}/${name}`))) return undefined;
    const stopped = server.spec.stdio?.replicas === 0;
    return {
      reason: 'BridgeNotReady',
      detail: stopped
        ? `spec.stdio.replicas is 0: the bridge Deployment ${name} runs no replica`
        : `the bridge Deployment ${name} has no ready replica yet`,
    };
  }

  private async discover(key: string, server: McpServer): Promise<McpDiscoveryOutcome> {
    const url = mcpServerUrl(server) ?? '';
    const timeoutSeconds = server.spec.timeoutSeconds ?? DEFAULT_TIMEOUT_SECONDS;
    return this.sessions.discover(key, {
      url,
      fingerprint: JSON.stringify([url, server.spec.auth ?? {}, timeoutSeconds]),
      auth: () => mcpAuthProvider(server, (name) => this.secrets.lookup(name)),
      timeoutMs: timeoutSeconds * 1000,
    });
  }

  /** Whether the last discovery still stands, and for how long. */
  private standing(key: string, server: McpServer, now: number): number | undefined {
    const last = this.last.get(key);
    if (!last || last.blocked) return undefined;
    const generation = server.metadata.generation ?? 0;
    const every = last.retryMs ?? MCP_REDISCOVERY_MS;
    const stale =
      last.generation !== generation ||
      last.secretVersion !== this.secretVersion(server) ||
      last.changes !== (this.changes.get(key) ?? 0) ||
      server.status?.observedGeneration !== generation ||
      now - last.at >= every;
    return stale ? undefined : every - (now - last.at);
  }

  async reconcile(key: string): Promise<ReconcileResult> {
    const server = this.caches.servers.get(key);
    if (!server || server.metadata.deletionTimestamp) {
      // Its bridge goes with it through the owner references; its session goes here.
      this.last.delete(key);
      this.changes.delete(key);
      await this.sessions.close(key);
      return;
    }
    const blocked = await this.ensureBridge(server);
    // Discovering before the Secret's first read would report it missing, with a Warning Event.
    if (!blocked && this.secrets.unread(mcpSecretName(server))) return { requeueAfterMs: SECRET_READ_WAIT_MS };
    const now = this.now().getTime();
    if (!blocked) {
      const left = this.standing(key, server, now);
      if (left !== undefined) return { requeueAfterMs: Math.max(1000, left) };
    }
    const record: LastDiscovery = {
      generation: server.metadata.generation ?? 0,
      secretVersion: this.secretVersion(server),
      at: now,
      changes: this.changes.get(key) ?? 0,
      blocked: blocked !== undefined,
    };
    let outcome: McpDiscoveryOutcome;
    if (blocked) {
      await this.sessions.close(key);
      outcome = { ok: false, problem: blocked };
    } else {
      outcome = await this.discover(key, server);
    }
    const status = mcpServerStatus(server, outcome, this.now());
    const retryMs = !outcome.ok && isTransient(outcome.problem.reason) ? TRANSIENT_RETRY_MS : undefined;
    this.last.set(key, retryMs ? { ...record, retryMs } : record);
    await writeStatusIfChanged(this.client, 'mcpservers', server, status);
    await this.recordTransition(
      server,
      status.conditions?.find((c) => c.type === 'Ready'),
    );
    return { requeueAfterMs: retryMs ?? MCP_REDISCOVERY_MS };
  }

  /** An Event when Ready changes status or reason (not on every rediscovery). */
  private async recordTransition(
    server: McpServer,
    ready: { status: string; reason: string; message: string } | undefined,
  ): Promise<void> {
    const before = server.status?.conditions?.find((c) => c.type === 'Ready');
    if (!ready || (before?.status === ready.status && before.reason === ready.reason)) return;
    await this.events.record(server, ready.status === 'True' ? 'Normal' : 'Warning', ready.reason, ready.message);
  }
}

const MCP_SERVERS = platformCollection<McpServer>('mcpservers', AGENT_NAMESPACE);
/** The bridges' objects: only those labelled with their McpServer. */
const BRIDGE_DEPLOYMENTS = collection<V1Deployment>({
  group: 'apps',
  version: 'v1',
  plural: 'deployments',
  namespace: AGENT_NAMESPACE,
  labelSelector: MCP_SERVER_LABEL,
});
const BRIDGE_SERVICES = collection<V1Service>({
  group: '',
  version: 'v1',
  plural: 'services',
  namespace: AGENT_NAMESPACE,
  labelSelector: MCP_SERVER_LABEL,
});
const BRIDGE_POLICIES = collection<NetworkPolicy>({
  group: 'networking.k8s.io',
  version: 'v1',
  plural: 'networkpolicies',
  namespace: AGENT_NAMESPACE,
  labelSelector: MCP_SERVER_LABEL,
});

const byOwner = ownerByLabel(MCP_SERVER_LABEL, AGENT_NAMESPACE);

/**
 * The McpServer controller. Its watches requeue a server on: its own changes; its bridge's
 * Deployment, Service and NetworkPolicy (by the label it puts on them: a replica becoming ready,
 * an object changed or deleted by hand); and, watched by the controller itself, the Secret its
 * auth names, and the server's own notifications/tools/list_changed on the live session.
 */
export const mcpServerController: ControllerDeclaration = {
  name: 'mcpserver',
  for: MCP_SERVERS,
  watches: [watch(BRIDGE_DEPLOYMENTS, byOwner), watch(BRIDGE_SERVICES, byOwner), watch(BRIDGE_POLICIES, byOwner)],
  rbac: [
    {
      scope: AGENT_NAMESPACE,
      apiGroups: [API_GROUP],
      resources: ['mcpservers/status'],
      verbs: ['get', 'patch', 'update'],
      reason: 'status written by merge patch when it changed',
    },
    {
      scope: AGENT_NAMESPACE,
      apiGroups: [API_GROUP],
      resources: ['mcpservers/finalizers'],
      verbs: ['update'],
      reason: 'blockOwnerDeletion on the McpServer under OwnerReferencesPermissionEnforcement',
    },
    {
      scope: AGENT_NAMESPACE,
      apiGroups: [''],
      resources: ['secrets'],
      verbs: ['create'],
      reason: 'the key the proxies seal MCP session ids with, created once and never read',
    },
    {
      scope: AGENT_NAMESPACE,
      apiGroups: ['apps'],
      resources: ['deployments'],
      verbs: ['create', 'patch', 'update', 'delete'],
      reason: "a stdio server's bridge Deployment, server-side applied; deleted when the server is no longer stdio",
    },
    {
      scope: AGENT_NAMESPACE,
      apiGroups: [''],
      resources: ['services'],
      verbs: ['create', 'patch', 'update', 'delete'],
      reason: "a stdio server's bridge Service, server-side applied; deleted when the server is no longer stdio",
    },
    {
      scope: AGENT_NAMESPACE,
      apiGroups: ['networking.k8s.io'],
      resources: ['networkpolicies'],
      verbs: ['create', 'patch', 'update', 'delete'],
      reason: "a stdio server's bridge NetworkPolicy (only the proxy and the operator reach it)",
    },
    {
      scope: AGENT_NAMESPACE,
      apiGroups: [''],
      resources: ['secrets'],
      verbs: ['get', 'list', 'watch'],
      resourceNamesFromValue: 'providerSecrets',
      reason: "the MCP servers' credential Secrets, each watched by name: only those the install lists",
    },
    {
      scope: AGENT_NAMESPACE,
      apiGroups: [''],
      resources: ['events'],
      verbs: ['create', 'patch'],
      reason: 'Events on McpServers',
    },
  ],
  failure: 'MCP server reconcile failed',
  async start(ctx) {
    const servers = ctx.caches.of(MCP_SERVERS);
    // Before any session: the proxies seal theirs with it once it exists (until then, each its
    // own). A failure is tried again at the next reconcile.
    let sealed = false;
    const ensureSealingKey = async () => {
      if (sealed) return;
      sealed = await ensureSessionsSecret(ctx.client).then(
        () => true,
        (error: unknown) => {
          ctx.log.warn('the MCP sessions Secret was not created; trying again', { error: String(error) });
          return false;
        },
      );
    };
    await ensureSealingKey();
    const secrets = new NamedSecrets(ctx.client, AGENT_NAMESPACE, {
      onChange: (name) => {
        for (const s of servers.list()) if (mcpSecretName(s) === name) ctx.enqueue(keyOf(s));
      },
      onError: (error) => ctx.log.warn('Secret watch failed, retrying', { error }),
    });
    const track = () => secrets.track(servers.list().flatMap((s) => mcpSecretName(s) ?? []));
    servers.on((event) => {
      if (event !== 'resync') void track();
    });
    // The first discoveries see the Secrets as they are, not as not yet read.
    await track();
    let controller: McpServerController | undefined;
    const sessions = new McpSessions((key) => {
      controller?.toolsChanged(key);
      ctx.enqueue(key);
    });
    controller = new McpServerController(
      ctx.client,
      {
        servers,
        deployments: ctx.caches.of(BRIDGE_DEPLOYMENTS),
        services: ctx.caches.of(BRIDGE_SERVICES),
        policies: ctx.caches.of(BRIDGE_POLICIES),
      },
      secrets,
      sessions,
      ctx.events,
      ctx.now,
    );
    const running = controller;
    return {
      reconcile: async (key) => {
        await ensureSealingKey();
        return running.reconcile(key);
      },
      // The sessions close with the Secret watches, once the queue drained: nothing discovers after.
      watches: {
        stop: async () => {
          await secrets.stop();
          await sessions.closeAll();
        },
      },
    };
  },
};
