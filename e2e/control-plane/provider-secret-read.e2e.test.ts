import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AGENT_NAMESPACE } from '../../crds/constants.js';
import type { ExternalProvider } from '../../crds/external-provider.js';
import { Informer } from '../../crds/kube/informer.js';
import { KubeClient, type KubeList } from '../../crds/kube/kube-client.js';
import { NamedSecrets } from '../../crds/kube/named-secrets.js';
import { ExternalProviderController } from '../../operator/external-provider/external-provider-controller.js';
import { EventRecorder } from '../../operator/runtime/events.js';
import { type HostedDouble, startHostedDouble } from '../doubles/hosted.js';
import { eventually, kubeConfig, kubectl, kubectlOk } from '../support/kube.js';

/**
 * An ExternalProvider reconciled before its Secret was first read: the Secret's watch starts on
 * the provider's own event, so the first reconcile can come before the watch's first list
 * answers (it did in a loaded run: a wrong key reported as a missing Secret, then corrected).
 * Here that list is held back on demand, against the real API server: the provider's status and
 * Events say nothing until the Secret is read, and then say what the key is.
 */

const NS = AGENT_NAMESPACE;
const NAME = 'psr-wrong-key';
const SECRET = 'psr-key';

/** The real client, but a list of Secrets waits until `release` is called. */
class HeldSecretsClient extends KubeClient {
  private gate: Promise<void>;
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

let double: HostedDouble;
let providers: Informer<ExternalProvider>;
const field = (path: string) => kubectlOk(['get', 'externalproviders', NAME, '-n', NS, '-o', `jsonpath=${path}`]);
const reasons = () =>
  kubectlOk([
    'get',
    'events',
    '-n',
    NS,
    '--field-selector',
    `involvedObject.name=${NAME}`,
    '-o',
    'jsonpath={.items[*].reason}',
  ]);

beforeAll(async () => {
  double = await startHostedDouble();
  kubectlOk(
    ['apply', '-f', '-'],
    JSON.stringify({
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name: SECRET, namespace: NS },
      stringData: { apiKey: 'sk-not-a-key-7777' },
    }),
  );
  kubectlOk(
    ['apply', '-f', '-'],
    JSON.stringify({
      apiVersion: 'ai.platform/v1beta1',
      kind: 'ExternalProvider',
      metadata: { name: NAME, namespace: NS },
      spec: {
        displayName: NAME,
        provider: 'openai',
        auth: { method: 'APIKey', secretRef: { name: SECRET } },
        models: ['gpt-4o-mini'],
      },
    }),
  );
  providers = new Informer<ExternalProvider>(new KubeClient(kubeConfig()), {
    path: `/apis/ai.platform/v1beta1/namespaces/${NS}/externalproviders`,
  });
  await providers.start();
});

afterAll(async () => {
  await providers?.stop();
  await double?.close();
  kubectl(['delete', 'externalprovider', NAME, '-n', NS, '--ignore-not-found']);
  kubectl(['delete', 'secret', SECRET, '-n', NS, '--ignore-not-found']);
  kubectl(['delete', 'events', '-n', NS, '--field-selector', `involvedObject.name=${NAME}`]);
});

describe("a provider reconciled before its Secret's first read", () => {
  it('waits for the read, then reports the key as refused, never the Secret as missing', async () => {
    const client = new KubeClient(kubeConfig());
    const held = new HeldSecretsClient();
    const enqueued: string[] = [];
    const secrets = new NamedSecrets(held, NS, { onChange: (name) => enqueued.push(name) });
    const controller = new ExternalProviderController(client, providers, secrets, new EventRecorder(client, 'e2e'), {
      rediscoveryMs: 600_000,
      now: () => new Date(),
      env: { ...process.env, ...double.env },
    });
    const key = `${NS}/${NAME}`;
    const tracked = secrets.track([SECRET]);
    expect(secrets.access(SECRET)).toBe('pending');

    const early = await controller.reconcile(key);
    expect(early).toEqual({ requeueAfterMs: expect.any(Number) });
    expect((early as { requeueAfterMs: number }).requeueAfterMs).toBeLessThanOrEqual(1000);
    expect(double.calls).toHaveLength(0);
    expect(field('{.status.phase}')).toBe('');

    held.release();
    await tracked;
    // The read enqueues the provider (the controller's watch), and its reconcile discovers.
    expect(enqueued).toContain(SECRET);
    await controller.reconcile(key);
    expect(field('{.status.phase}')).toBe('Failed');
    expect(field('{.status.conditions[?(@.type=="CredentialsValid")].reason}')).toBe('InvalidAPIKey');
    await eventually('the Failed event', 10_000, () => (reasons().includes('InvalidAPIKey') ? true : undefined));
    expect(reasons()).not.toContain('SecretNotFound');
    await secrets.stop();
  });
});
