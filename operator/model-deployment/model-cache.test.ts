import type { V1PersistentVolumeClaim } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { type ClusterInfo, loadCatalog, resolveModel } from '../../crds/catalog/catalog.js';
import { PULL_MODEL_SCRIPT } from '../../crds/engines/ollama.js';
import type { ModelDeployment } from '../../crds/model-deployment.js';
import { containsDesired } from '../runtime/contains-desired.js';
import { cacheCondition, type ModelCacheSetting, modelStore, parseModelCache, quantityBytes } from './model-cache.js';
import { desiredModelServer, PULL_CONTAINER } from './model-server.js';

const SERVER_CONTAINER = 'ollama';

const catalog = loadCatalog();
const cluster: ClusterInfo = { organizationId: 'o', clusterId: 'c', cloud: 'aws', region: 'us-east-1' };
const RWX: ModelCacheSetting = { storageClassName: 'efs-sc', accessMode: 'ReadWriteMany' };

function md(model = 'llama3.1:8b', cache?: ModelDeployment['spec']['cache']): ModelDeployment {
  return {
    apiVersion: 'ai.platform/v1beta1',
    kind: 'ModelDeployment',
    metadata: { name: 'llama', namespace: 'platform-llms', uid: 'uid-1', generation: 1 },
    spec: { model, serviceName: 'llama-svc', port: 11434, replicas: 2, ...(cache ? { cache } : {}) },
  };
}

function resolved(model: string) {
  const r = resolveModel(catalog, cluster, model);
  if (!r.ok) throw new Error(r.message);
  return r;
}

function server(
  d: ModelDeployment,
  modelCache?: ModelCacheSetting,
  observedClaim?: V1PersistentVolumeClaim,
): ReturnType<typeof desiredModelServer> {
  const r = resolved(d.spec.model);
  return desiredModelServer(d, r.model, catalog, {
    image: 'ollama/ollama:test',
    template: 'llms-by-platform',
    gpuTypes: r.gpuTypes,
    ...(modelCache !== undefined ? { modelCache } : {}),
    ...(observedClaim ? { observedClaim } : {}),
  });
}

const envOf = (s: ReturnType<typeof server>, container: string) => {
  const spec = s.deployment.spec?.template.spec;
  const c = [...(spec?.initContainers ?? []), ...(spec?.containers ?? [])].find((x) => x.name === container);
  return Object.fromEntries((c?.env ?? []).map((e) => [e.name, e.value]));
};

/** The claim as the API server returns it after our apply: defaults, binding and bookkeeping added. */
function asStored(claim: V1PersistentVolumeClaim, extra: Partial<V1PersistentVolumeClaim['spec']> = {}) {
  return {
    ...claim,
    metadata: {
      ...claim.metadata,
      uid: 'pvc-uid',
      resourceVersion: '42',
      managedFields: [{ manager: 'platform-ai-optimizer-operator', operation: 'Apply' }],
      annotations: { 'pv.kubernetes.io/bind-completed': 'yes' },
    },
    spec: { ...claim.spec, volumeMode: 'Filesystem', volumeName: 'pv-1', ...extra },
    status: { phase: 'Bound', accessModes: claim.spec?.accessModes, capacity: { storage: '10Gi' } },
  } as V1PersistentVolumeClaim;
}

describe('the model cache claim', () => {
  it('is one claim per deployment, sized from the catalog, with the options’ access mode and class, owned like the Deployment', () => {
    const s = server(md('llama3.1:8b'), RWX);
    // llama3.1:8b downloads 4.9 GiB: ceil(4.9 * 1.5) + 1, the emptyDir's limit before.
    expect(s.claim).toEqual({
      apiVersion: 'v1',
      kind: 'PersistentVolumeClaim',
      metadata: {
        name: 'llama-models',
        namespace: 'platform-llms',
        labels: s.deployment.metadata?.labels,
        ownerReferences: s.deployment.metadata?.ownerReferences,
      },
      spec: {
        accessModes: ['ReadWriteMany'],
        storageClassName: 'efs-sc',
        resources: { requests: { storage: '9Gi' } },
      },
    });
    expect(s.claim?.metadata?.ownerReferences).toEqual([
      expect.objectContaining({ kind: 'ModelDeployment', name: 'llama', uid: 'uid-1', controller: true }),
    ]);
    expect(server(md('llama3.1:70b'), RWX).claim?.spec?.resources?.requests?.storage).toBe('66Gi');
    // No class named: the cluster's default class, so the field is left out.
    expect(server(md(), { accessMode: 'ReadWriteOnce' }).claim?.spec).toEqual({
      accessModes: ['ReadWriteOnce'],
      resources: { requests: { storage: '9Gi' } },
    });
  });

  it('every replica mounts it at /models, and only the server’s pull-or-find script decides to pull', () => {
    const s = server(md(), RWX);
    const pod = s.deployment.spec?.template.spec;
    expect(pod?.volumes?.find((v) => v.name === 'models')).toEqual({
      name: 'models',
      persistentVolumeClaim: { claimName: 'llama-models' },
    });
    for (const c of [...(pod?.initContainers ?? []), ...(pod?.containers ?? [])]) {
      expect(c.volumeMounts, c.name).toContainEqual({ name: 'models', mountPath: '/models' });
      expect(c.securityContext?.readOnlyRootFilesystem, c.name).toBe(true);
    }
    // Its blobs keep their owner: no recursive chown of gigabytes at every mount.
    expect(pod?.securityContext?.fsGroupChangePolicy).toBe('OnRootMismatch');
    expect(pod?.initContainers?.[0]?.command).toEqual(['/bin/sh', '-c', PULL_MODEL_SCRIPT]);
    expect(envOf(s, PULL_CONTAINER)).toMatchObject({
      MODEL_PULL_POLICY: 'IfNotPresent',
      MODEL_CLAIM: 'llama-models',
      OLLAMA_NOPRUNE: '1',
    });
    // The server must not prune a pull in progress on the shared volume either.
    expect(envOf(s, SERVER_CONTAINER)).toMatchObject({ OLLAMA_NOPRUNE: '1' });
    // ReadWriteMany: replicas anywhere, and the new server answers before the old one goes.
    expect(pod?.affinity?.podAffinity).toBeUndefined();
    expect(s.deployment.spec?.strategy?.rollingUpdate).toEqual({ maxSurge: 1, maxUnavailable: 0 });
  });

  it('ReadWriteOnce keeps the replicas on the volume’s node and lets the old pod go first in a rollout', () => {
    const s = server(md(), { accessMode: 'ReadWriteOnce' });
    expect(s.deployment.spec?.template.spec?.affinity?.podAffinity).toEqual({
      requiredDuringSchedulingIgnoredDuringExecution: [
        {
          labelSelector: { matchLabels: { 'ai.platform/model-deployment': 'llama' } },
          topologyKey: 'kubernetes.io/hostname',
        },
      ],
    });
    expect(s.deployment.spec?.template.spec?.affinity?.nodeAffinity).toEqual(
      server(md(), RWX).deployment.spec?.template.spec?.affinity?.nodeAffinity,
    );
    expect(s.deployment.spec?.strategy?.rollingUpdate).toEqual({ maxSurge: 0, maxUnavailable: 1 });
  });

  it.each([
    ['absent', undefined],
    ['false', false],
  ] as const)('with the cache %s: the emptyDir as before, no claim', (_, setting) => {
    const s = server(md(), setting);
    expect(s.claim).toBeUndefined();
    const pod = s.deployment.spec?.template.spec;
    expect(pod?.volumes).toEqual([
      { name: 'models', emptyDir: { sizeLimit: '9Gi' } },
      { name: 'home', emptyDir: { sizeLimit: '64Mi' } },
      { name: 'tmp', emptyDir: { sizeLimit: '1Gi' } },
    ]);
    expect(pod?.securityContext?.fsGroupChangePolicy).toBeUndefined();
    expect(pod?.affinity?.podAffinity).toBeUndefined();
    expect(s.deployment.spec?.strategy?.rollingUpdate).toEqual({ maxSurge: 1, maxUnavailable: 0 });
    expect(envOf(s, PULL_CONTAINER).MODEL_PULL_POLICY).toBe('IfNotPresent');
    expect(envOf(s, PULL_CONTAINER).MODEL_CLAIM).toBeUndefined();
  });

  it.each([
    ['on', RWX],
    ['off', false],
  ] as const)(
    'spec.cache.existingClaim (operator cache %s): mounts that claim, creates none, never pulls',
    (_, setting) => {
      const s = server(md('llama3.1:8b', { existingClaim: 'llama-prefilled' }), setting);
      expect(s.claim).toBeUndefined();
      expect(s.deployment.spec?.template.spec?.volumes?.find((v) => v.name === 'models')).toEqual({
        name: 'models',
        persistentVolumeClaim: { claimName: 'llama-prefilled', readOnly: true },
      });
      expect(envOf(s, PULL_CONTAINER)).toMatchObject({ MODEL_PULL_POLICY: 'Never', MODEL_CLAIM: 'llama-prefilled' });
    },
  );

  it('an existing ReadWriteOnce claim keeps the replicas on its node too', () => {
    const d = md('llama3.1:8b', { existingClaim: 'llama-prefilled' });
    const claim = { spec: { accessModes: ['ReadWriteOnce'] } } as V1PersistentVolumeClaim;
    expect(server(d, false, claim).deployment.spec?.template.spec?.affinity?.podAffinity).toBeDefined();
    expect(server(d, false).deployment.spec?.template.spec?.affinity?.podAffinity).toBeUndefined();
  });

  it('re-applying to the stored claim is a no-op, even where the API server filled in fields', () => {
    const first = server(md(), RWX).claim;
    if (!first) throw new Error('no claim');
    const stored = asStored(first);
    const again = server(md(), RWX, stored).claim;
    expect(again).toEqual(first);
    expect(containsDesired(stored, again)).toBe(true);
    // The Deployment's template does not depend on whether the claim was seen yet.
    expect(server(md(), RWX, stored).deployment).toEqual(server(md(), RWX).deployment);
  });

  it('never asks to change what a claim cannot change: class and access modes stay as created', () => {
    // Created without a class: the DefaultStorageClass admission plugin named one.
    const created = server(md(), { accessMode: 'ReadWriteMany' }).claim;
    if (!created) throw new Error('no claim');
    const stored = asStored(created, { storageClassName: 'standard' });
    const desired = server(md(), { accessMode: 'ReadWriteMany' }, stored).claim;
    expect(desired?.spec?.storageClassName).toBe('standard');
    expect(containsDesired(stored, desired)).toBe(true);
    // The operator restarted with other options: the existing claim still wins.
    const changed = server(md(), { storageClassName: 'other', accessMode: 'ReadWriteOnce' }, stored);
    expect(changed.claim?.spec).toEqual(desired?.spec);
    expect(containsDesired(stored, changed.claim)).toBe(true);
    // ...and so do the pods: the claim is ReadWriteMany whatever the option says now.
    expect(changed.deployment.spec?.template.spec?.affinity?.podAffinity).toBeUndefined();
  });

  it('only grows: a bigger model asks for more, a smaller one keeps what the claim has', () => {
    const small = server(md('qwen2.5:0.5b'), RWX).claim;
    if (!small) throw new Error('no claim');
    expect(small.spec?.resources?.requests?.storage).toBe('2Gi');
    // The deployment switched to a bigger model: the claim grows to fit it.
    const grown = server(md('llama3.1:8b'), RWX, asStored(small)).claim;
    expect(grown?.spec?.resources?.requests?.storage).toBe('9Gi');
    // ...and back: never shrunk (the API server refuses that), whatever the unit it was written in.
    for (const had of ['9Gi', '20Gi', '1Ti', '10000000000', '9.5Gi']) {
      const stored = asStored(small, { resources: { requests: { storage: had } } });
      expect(server(md('qwen2.5:0.5b'), RWX, stored).claim?.spec?.resources?.requests?.storage, had).toBe(had);
    }
    const tooSmall = asStored(small, { resources: { requests: { storage: '1500M' } } });
    expect(server(md('qwen2.5:0.5b'), RWX, tooSmall).claim?.spec?.resources?.requests?.storage).toBe('2Gi');
  });
});

describe('the ModelCache condition', () => {
  const model = resolved('llama3.1:8b').model;
  const claim = (phase: string, extra: Partial<V1PersistentVolumeClaim> = {}) =>
    ({
      metadata: { name: 'llama-models', namespace: 'platform-llms' },
      spec: { accessModes: ['ReadWriteMany'], storageClassName: 'efs-sc', resources: { requests: { storage: '9Gi' } } },
      status: { phase, ...(phase === 'Bound' ? { capacity: { storage: '9Gi' } } : {}) },
      ...extra,
    }) as V1PersistentVolumeClaim;
  const cond = (
    d: ModelDeployment,
    setting: ModelCacheSetting | undefined,
    c?: V1PersistentVolumeClaim,
    err?: string,
  ) => cacheCondition(d, modelStore(d, model, setting, c), c, err);

  it('is True once the claim is bound', () => {
    expect(cond(md(), RWX, claim('Bound'))).toEqual({
      type: 'ModelCache',
      status: 'True',
      reason: 'Bound',
      message:
        'the model is kept on PersistentVolumeClaim llama-models, 9Gi ReadWriteMany of class efs-sc: restarted pods and new replicas pull nothing',
    });
  });

  it('says why pods stay Pending while the claim does not bind, and what to change', () => {
    const c = cond(md(), RWX, claim('Pending'));
    expect(c).toMatchObject({ status: 'False', reason: 'ClaimPending' });
    expect(c.message).toContain('PersistentVolumeClaim llama-models is not bound');
    expect(c.message).toContain('class efs-sc cannot provide ReadWriteMany volumes');
    expect(c.message).toContain('modelCache.accessMode ReadWriteOnce');
    expect(cond(md(), RWX)).toMatchObject({
      status: 'False',
      reason: 'ClaimPending',
      message: 'creating PersistentVolumeClaim llama-models',
    });
  });

  it('names a missing or refused claim', () => {
    const existing = md('llama3.1:8b', { existingClaim: 'prefilled' });
    const missing = cond(existing, false);
    expect(missing).toMatchObject({ status: 'False', reason: 'ClaimNotFound' });
    expect(missing.message).toMatch(
      /^PersistentVolumeClaim prefilled \(spec\.cache\.existingClaim\) does not exist in platform-llms/,
    );
    const refused = cond(
      md(),
      RWX,
      claim('Bound'),
      'PATCH ...: 403 Forbidden: only dynamically provisioned pvc can be resized',
    );
    expect(refused).toMatchObject({ status: 'False', reason: 'ClaimNotApplied' });
    expect(refused.message).toContain('could not be updated: PATCH ...: 403 Forbidden');
  });

  it('says when there is no cache', () => {
    expect(cond(md(), false)).toMatchObject({ status: 'False', reason: 'EmptyDir' });
    expect(cond(md(), undefined)).toMatchObject({ status: 'False', reason: 'EmptyDir' });
  });
});

describe('settings', () => {
  it('parses the operator’s flags', () => {
    expect(parseModelCache('off', 'x', 'ReadWriteOnce')).toBe(false);
    expect(parseModelCache('pvc', undefined, undefined)).toEqual({ accessMode: 'ReadWriteMany' });
    expect(parseModelCache('pvc', '', 'ReadWriteOnce')).toEqual({ accessMode: 'ReadWriteOnce' });
    expect(parseModelCache('pvc', 'efs-sc', 'ReadWriteMany')).toEqual({
      storageClassName: 'efs-sc',
      accessMode: 'ReadWriteMany',
    });
    expect(() => parseModelCache('hostpath', undefined, undefined)).toThrow('--model-cache must be pvc or off');
    expect(() => parseModelCache('pvc', undefined, 'ReadOnlyMany')).toThrow('--model-cache-access-mode must be');
  });

  it('reads storage quantities', () => {
    expect(quantityBytes('9Gi')).toBe(9 * 2 ** 30);
    expect(quantityBytes('1.5Ti')).toBe(1.5 * 2 ** 40);
    expect(quantityBytes('500M')).toBe(5e8);
    expect(quantityBytes('1e9')).toBe(1e9);
    expect(quantityBytes('12')).toBe(12);
    expect(quantityBytes('lots')).toBeUndefined();
    expect(quantityBytes(undefined)).toBeUndefined();
  });
});
