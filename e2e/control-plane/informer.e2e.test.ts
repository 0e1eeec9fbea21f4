import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { Informer, type InformerEvent } from '../../crds/kube/informer.js';
import { KubeClient, type KubeObject } from '../../crds/kube/kube-client.js';
import { NamedSecrets } from '../../crds/kube/named-secrets.js';
import { eventually, kubeConfig, kubectl, kubectlOk } from '../support/kube.js';

/**
 * The informer against the real API server: events keep the cache current, resync replays
 * it, and a watch whose resourceVersion was compacted away (410 Gone after an API server
 * restart) is recovered by a relist.
 */

const NS = 'informer-e2e';
const CHURN = 'informer-churn';

type ConfigMap = KubeObject & { data?: Record<string, string> };

function configMaps(resyncMs = 0) {
  const errors: string[] = [];
  const events: Array<[InformerEvent, string]> = [];
  const client = new KubeClient(kubeConfig());
  const informer = new Informer<ConfigMap>(client, {
    path: `/api/v1/namespaces/${NS}/configmaps`,
    labelSelector: 'e2e=informer',
    resyncMs,
    // No bookmarks: the resume point stays at the last event, so compaction makes it stale.
    bookmarks: false,
    backoff: { initialMs: 100, maxMs: 1000 },
    onError: (err) => errors.push(String(err)),
  });
  informer.on((event, obj) => events.push([event, obj.metadata?.name ?? '']));
  return { informer, events, errors };
}

const cm = (name: string, value: string) =>
  JSON.stringify({
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: { name, namespace: NS, labels: { e2e: 'informer' } },
    data: { value },
  });

const names = (inf: Informer<ConfigMap>) =>
  inf
    .list()
    .map((o) => o.metadata?.name)
    .sort();

beforeAll(() => {
  for (const ns of [NS, CHURN]) kubectl(['create', 'namespace', ns]);
});

afterAll(() => {
  kubectl(['delete', 'namespace', NS, CHURN, '--wait=false']);
});

describe('Informer', () => {
  it('lists, then follows adds, updates and deletes, and replays the cache on resync', async () => {
    kubectlOk(['apply', '-f', '-'], cm('a', '1'));
    const { informer, events } = configMaps(300);
    await informer.start();
    try {
      expect(names(informer)).toEqual(['a']);
      // Listed items come without apiVersion and kind; the cache holds them whole, as a watch event does.
      expect(informer.get(`${NS}/a`)).toMatchObject({ apiVersion: 'v1', kind: 'ConfigMap' });
      kubectlOk(['apply', '-f', '-'], cm('b', '1'));
      kubectlOk(['apply', '-f', '-'], cm('a', '2'));
      kubectlOk(['delete', 'configmap', 'b', '-n', NS]);
      await eventually('delete seen', 10_000, () =>
        events.some(([e, n]) => e === 'delete' && n === 'b') ? true : undefined,
      );
      expect(events.filter(([e]) => e !== 'resync')).toEqual([
        ['add', 'a'],
        ['add', 'b'],
        ['update', 'a'],
        ['delete', 'b'],
      ]);
      expect(informer.get(`${NS}/a`)?.data).toEqual({ value: '2' });
      await eventually('resync', 5_000, () => (events.some(([e]) => e === 'resync') ? true : undefined));
    } finally {
      await informer.stop();
    }
  });

  it.runIf(inject('localControlPlane'))(
    'relists after 410 Gone when its resourceVersion was compacted away',
    async () => {
      const control = inject('controlUrl');
      const { informer, errors } = configMaps();
      await informer.start();
      try {
        expect(informer.lists).toBe(1);
        kubectlOk(['apply', '-f', '-'], cm('c', '1'));
        await eventually('c seen', 10_000, () => informer.get(`${NS}/c`));
        // Move etcd past the informer's resume point, compact, and restart the API server so
        // that its watch cache starts at the compacted revision.
        for (let i = 0; i < 20; i++) {
          kubectlOk(['create', 'configmap', `churn-${i}`, '-n', CHURN, `--from-literal=i=${i}`]);
        }
        expect((await fetch(`${control}/compact`, { method: 'POST' })).status).toBe(200);
        expect((await fetch(`${control}/restart/kube-apiserver`, { method: 'POST' })).status).toBe(200);

        await eventually('relist', 60_000, () => (informer.lists >= 2 ? true : undefined));
        // Failed reconnects while the server was down were retried with backoff.
        expect(errors.length).toBeGreaterThan(0);
        kubectlOk(['apply', '-f', '-'], cm('d', '1'));
        await eventually('d seen after the relist', 20_000, () => informer.get(`${NS}/d`));
        const server = kubectlOk([
          'get',
          'configmap',
          '-n',
          NS,
          '-l',
          'e2e=informer',
          '-o',
          'jsonpath={.items[*].metadata.name}',
        ])
          .split(' ')
          .sort();
        expect(names(informer)).toEqual(server);
      } finally {
        await informer.stop();
      }
    },
  );
});

describe('NamedSecrets', () => {
  const secret = (name: string, value: string) =>
    JSON.stringify({ apiVersion: 'v1', kind: 'Secret', metadata: { name, namespace: NS }, stringData: { value } });
  const decoded = (data: Record<string, string> | undefined) =>
    data?.value === undefined ? undefined : Buffer.from(data.value, 'base64').toString('utf8');

  it('watches only the tracked names: follows their changes, ignores other Secrets, and stops when untracked', async () => {
    kubectlOk(['apply', '-f', '-'], secret('wanted', 'v1'));
    kubectlOk(['apply', '-f', '-'], secret('other', 'x'));
    const changes: string[] = [];
    const secrets = new NamedSecrets(new KubeClient(kubeConfig()), NS, { onChange: (n) => changes.push(n) });
    await secrets.track(['wanted', 'not-yet']);
    expect(secrets.settled()).toBe(true);
    expect(secrets.access('wanted')).toBe('readable');
    expect(decoded(secrets.data('wanted'))).toBe('v1');
    // Missing is readable with no data; an untracked name is not watched at all.
    expect(secrets.access('not-yet')).toBe('readable');
    expect(secrets.data('not-yet')).toBeUndefined();
    expect(secrets.access('other')).toBeUndefined();
    expect(secrets.data('other')).toBeUndefined();

    kubectlOk(['apply', '-f', '-'], secret('not-yet', 'arrived'));
    kubectlOk(['apply', '-f', '-'], secret('wanted', 'v2'));
    kubectlOk(['apply', '-f', '-'], secret('other', 'y'));
    await eventually('changes seen', 10_000, () =>
      decoded(secrets.data('not-yet')) === 'arrived' && decoded(secrets.data('wanted')) === 'v2' ? true : undefined,
    );
    expect(changes).not.toContain('other');

    await secrets.track(['not-yet']);
    expect(secrets.access('wanted')).toBeUndefined();
    const seen = changes.length;
    kubectlOk(['apply', '-f', '-'], secret('wanted', 'v3'));
    kubectlOk(['delete', 'secret', 'not-yet', '-n', NS]);
    await eventually('delete seen', 10_000, () => (secrets.data('not-yet') === undefined ? true : undefined));
    expect(changes.slice(seen)).toEqual(['not-yet']);
    await secrets.stop();
  });
});
