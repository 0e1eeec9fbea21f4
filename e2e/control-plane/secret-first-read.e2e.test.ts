import type { V1Deployment, V1Service } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AGENT_NAMESPACE } from '../../crds/constants.js';
import type { ExternalProvider } from '../../crds/external-provider.js';
import { Informer } from '../../crds/kube/informer.js';
import { KubeClient, type KubeList, type KubeObject } from '../../crds/kube/kube-client.js';
import { NamedSecrets } from '../../crds/kube/named-secrets.js';
import type { McpServer } from '../../crds/mcp-server.js';
import { ExternalProviderController } from '../../operator/external-provider/external-provider-controller.js';
import type { NetworkPolicy } from '../../operator/mcp-server/bridge.js';
import { McpServerController } from '../../operator/mcp-server/mcp-server-controller.js';
import { McpSessions } from '../../operator/mcp-server/mcp-sessions.js';
import { EventRecorder } from '../../operator/runtime/events.js';
import { type HostedDouble, startHostedDouble } from '../doubles/hosted.js';
import { eventReasons, eventually, kubeConfig, kubectl, kubectlOk } from '../support/kube.js';

/**
 * An object reconciled before its Secret was first read. A controller watches each Secret its
 * objects name, by name, starting on the object's own event, so the object's first reconcile can
 * come before the watch's first list answers: in a loaded run an ExternalProvider with a wrong key
 * was reported as naming a missing Secret (with a Warning Event), then corrected. Here that list
 * is held back on demand, against the real API server: the status and Events say nothing until
 * the Secret is read, and then say what it holds.
 */

const NS = AGENT_NAMESPACE;
const SECRET = 'sfr-key';
const PROVIDER = 'sfr-wrong-key';
const MCP = 'sfr-mcp';
const apply = (doc: object) => kubectlOk(['apply', '-f', '-'], JSON.stringify(doc));

/** The real client, but a list of Secrets waits until `release` is called. */
class HeldSecretsClient extends KubeClient {
  private readonly gate: Promise<void>;
  release: () => void = () => {};

  constructor() {
    super(kubeConfig());
    this.gate = new Promise((resolve) => {
      this.release = resolve;
    });
  }

  override async list<T>(path: string, query: Parameters<KubeClient['list']>[1] = {}): Promise<KubeList<T>> {
    if (path.endsWith('/secrets')) await this.gate;
    return super.list<T>(path, query);
  }
}

/** Secrets watched through a held client: `track` starts the watch, `release` lets it read. */
function heldSecrets() {
  const held = new HeldSecretsClient();
  const changed: string[] = [];
  const secrets = new NamedSecrets(held, NS, { onChange: (name) => changed.push(name) });
  return { secrets, changed, release: () => held.release() };
}

const field = (plural: string, name: string, path: string) =>
  kubectlOk(['get', plural, name, '-n', NS, '-o', `jsonpath=${path}`]);
const reasonsOf = (name: string) => eventReasons(NS, `involvedObject.name=${name}`);
const informer = <T extends KubeObject>(path: string) => new Informer<T>(new KubeClient(kubeConfig()), { path });

let double: HostedDouble;
const client = new KubeClient(kubeConfig());
const events = new EventRecorder(client, 'e2e');

beforeAll(async () => {
  double = await startHostedDouble();
  apply({
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: { name: SECRET, namespace: NS },
    stringData: { apiKey: 'sk-not-a-key-7777', token: 't' },
  });
});

afterAll(async () => {
  await double?.close();
  kubectl(['delete', 'externalprovider', PROVIDER, '-n', NS, '--ignore-not-found']);
  kubectl(['delete', 'mcpserver', MCP, '-n', NS, '--ignore-not-found']);
  kubectl(['delete', 'secret', SECRET, '-n', NS, '--ignore-not-found']);
  for (const name of [PROVIDER, MCP])
    kubectl(['delete', 'events', '-n', NS, '--field-selector', `involvedObject.name=${name}`]);
});

describe("an object reconciled before its Secret's first read", () => {
  it('ExternalProvider: waits for the read, then reports the key as refused, never the Secret as missing', async () => {
    apply({
      apiVersion: 'ai.platform/v1beta1',
      kind: 'ExternalProvider',
      metadata: { name: PROVIDER, namespace: NS },
      spec: {
        displayName: PROVIDER,
        provider: 'openai',
        auth: { method: 'APIKey', secretRef: { name: SECRET } },
        models: ['gpt-4o-mini'],
      },
    });
    const providers = informer<ExternalProvider>(`/apis/ai.platform/v1beta1/namespaces/${NS}/externalproviders`);
    await providers.start();
    const { secrets, changed, release } = heldSecrets();
    const controller = new ExternalProviderController(client, providers, secrets, events, {
      rediscoveryMs: 600_000,
      now: () => new Date(),
      env: { ...process.env, ...double.env },
    });
    const key = `${NS}/${PROVIDER}`;
    const tracked = secrets.track([SECRET]);
    expect(secrets.unread(SECRET)).toBe(true);

    const early = await controller.reconcile(key);
    expect((early as { requeueAfterMs: number }).requeueAfterMs).toBeLessThanOrEqual(1000);
    expect(double.calls).toHaveLength(0);
    expect(field('externalproviders', PROVIDER, '{.status.phase}')).toBe('');

    release();
    await tracked;
    // The read is a change, which the controller's watch turns into this reconcile.
    expect(changed).toContain(SECRET);
    await controller.reconcile(key);
    expect(field('externalproviders', PROVIDER, '{.status.phase}')).toBe('Failed');
    expect(field('externalproviders', PROVIDER, '{.status.conditions[?(@.type=="CredentialsValid")].reason}')).toBe(
      'InvalidAPIKey',
    );
    await eventually('the Failed event', 10_000, () => (reasonsOf(PROVIDER).length > 0 ? true : undefined));
    expect(reasonsOf(PROVIDER)).not.toContain('SecretNotFound');
    await secrets.stop();
    await providers.stop();
  });

  it('McpServer: waits for the read, then reports what discovery found, never the Secret as missing', async () => {
    // Nothing listens on port 9 here: with the Secret read, discovery finds the server unreachable.
    apply({
      apiVersion: 'ai.platform/v1beta1',
      kind: 'McpServer',
      metadata: { name: MCP, namespace: NS },
      spec: {
        url: 'http://127.0.0.1:9/mcp',
        timeoutSeconds: 5,
        auth: { method: 'Bearer', secretRef: { name: SECRET } },
      },
    });
    const servers = informer<McpServer>(`/apis/ai.platform/v1beta1/namespaces/${NS}/mcpservers`);
    await servers.start();
    const { secrets, release } = heldSecrets();
    const sessions = new McpSessions(() => {});
    const caches = {
      servers,
      // A server reached by URL has no bridge: these stay empty.
      deployments: informer<V1Deployment>(`/apis/apps/v1/namespaces/${NS}/deployments`),
      services: informer<V1Service>(`/api/v1/namespaces/${NS}/services`),
      policies: informer<NetworkPolicy>(`/apis/networking.k8s.io/v1/namespaces/${NS}/networkpolicies`),
    };
    const controller = new McpServerController(client, caches, secrets, sessions, events, () => new Date());
    const key = `${NS}/${MCP}`;
    const tracked = secrets.track([SECRET]);

    const early = await controller.reconcile(key);
    expect((early as { requeueAfterMs: number }).requeueAfterMs).toBeLessThanOrEqual(1000);
    expect(field('mcpservers', MCP, '{.status.phase}')).toBe('');

    release();
    await tracked;
    await controller.reconcile(key);
    expect(field('mcpservers', MCP, '{.status.phase}')).toBe('Degraded');
    const reason = field('mcpservers', MCP, '{.status.conditions[?(@.type=="Ready")].reason}');
    expect(reason).not.toBe('SecretMissing');
    expect(reason).not.toBe('');
    await eventually('the Degraded event', 10_000, () => (reasonsOf(MCP).length > 0 ? true : undefined));
    expect(reasonsOf(MCP)).not.toContain('SecretMissing');
    await sessions.closeAll();
    await secrets.stop();
    await servers.stop();
  });
});
