import type { V1PersistentVolumeClaim, V1Volume } from '@kubernetes/client-node';
import type { CatalogModel } from '../../crds/catalog/catalog.js';
import type { Condition } from '../../crds/meta.js';
import type { ModelDeployment } from '../../crds/model-deployment.js';

/**
 * The model cache: the volume a model server keeps its pulled model on. With the cache on, one
 * PersistentVolumeClaim per ModelDeployment outlives its pods, so a restarted pod, a new replica
 * or a model woken from zero finds the model there instead of pulling gigabytes again. With
 * `spec.cache.existingClaim` the pods mount a claim the user filled (air-gapped clusters) and
 * never pull. With the cache off each pod pulls into its own emptyDir.
 */

type CacheAccessMode = 'ReadWriteMany' | 'ReadWriteOnce';

interface ModelCacheOptions {
  /** Omitted: the cluster's default class. */
  storageClassName?: string;
  accessMode: CacheAccessMode;
}

export type ModelCacheSetting = ModelCacheOptions | false;

const CACHE_CONDITION = 'ModelCache';
const CACHE_ACCESS_MODES: readonly CacheAccessMode[] = ['ReadWriteMany', 'ReadWriteOnce'];

/**
 * The setting from the operator's flags (--model-cache pvc|off, --model-cache-storage-class,
 * --model-cache-access-mode); throws on a value the operator must not start with.
 */
export function parseModelCache(
  mode: string,
  storageClass: string | undefined,
  accessMode: string | undefined,
): ModelCacheSetting {
  if (mode === 'off') return false;
  if (mode !== 'pvc') throw new Error(`--model-cache must be pvc or off, not "${mode}"`);
  const access = accessMode || 'ReadWriteMany';
  if (!CACHE_ACCESS_MODES.includes(access as CacheAccessMode)) {
    throw new Error(`--model-cache-access-mode must be ${CACHE_ACCESS_MODES.join(' or ')}, not "${access}"`);
  }
  const setting: ModelCacheOptions = { accessMode: access as CacheAccessMode };
  if (storageClass) setting.storageClassName = storageClass;
  return setting;
}

/** The claim the operator creates for a ModelDeployment. */
const cacheClaimName = (md: ModelDeployment): string => `${md.metadata.name ?? ''}-models`;

/** The claim a deployment's pods mount: the user's existing one, ours with the cache on, or none. */
export const mountedClaimName = (md: ModelDeployment, cache: ModelCacheSetting | undefined): string | undefined =>
  md.spec.cache?.existingClaim ?? (cache ? cacheClaimName(md) : undefined);

/** Room for the model's blobs plus Ollama's working files; also the emptyDir's limit. */
const cacheSizeGiB = (model: CatalogModel): number => Math.ceil(model.sizeGiB * 1.5) + 1;

/** What a model server pod keeps the model on. */
export interface ModelStore {
  /** The volume named `models`, mounted at /models. */
  volume: V1Volume;
  /** IfNotPresent: pull when the volume lacks the model; Never: the volume must hold it. */
  pullPolicy: 'IfNotPresent' | 'Never';
  /** The claim mounted, if any. */
  claimName?: string;
  /** Whether the operator creates that claim (false for spec.cache.existingClaim). */
  ownClaim: boolean;
  /**
   * The volume mounts on one node at a time (ReadWriteOnce): replicas must share that node,
   * and a rollout must let the old pod go before the new one starts, or it waits forever.
   */
  singleNode: boolean;
}

/**
 * The store of a deployment's pods. `observed` is the claim as the API server has it (ours, or
 * the existing one): its access modes are the ones that count, as they cannot change.
 */
export function modelStore(
  md: ModelDeployment,
  model: CatalogModel,
  cache: ModelCacheSetting | undefined,
  observed?: V1PersistentVolumeClaim,
): ModelStore {
  const existing = md.spec.cache?.existingClaim;
  const claimName = mountedClaimName(md, cache);
  if (!claimName) {
    return {
      volume: { name: 'models', emptyDir: { sizeLimit: `${cacheSizeGiB(model)}Gi` } },
      pullPolicy: 'IfNotPresent',
      ownClaim: false,
      singleNode: false,
    };
  }
  const modes = observed?.spec?.accessModes ?? (!existing && cache ? [cache.accessMode] : []);
  return {
    // Read-only when the user filled it: nothing here writes to it, so nothing can damage it.
    volume: { name: 'models', persistentVolumeClaim: existing ? { claimName, readOnly: true } : { claimName } },
    pullPolicy: existing ? 'Never' : 'IfNotPresent',
    claimName,
    ownClaim: !existing,
    singleNode: modes.length > 0 && !modes.includes('ReadWriteMany') && !modes.includes('ReadOnlyMany'),
  };
}

const UNITS: Record<string, number> = {
  '': 1,
  k: 1e3,
  M: 1e6,
  G: 1e9,
  T: 1e12,
  P: 1e15,
  E: 1e18,
  Ki: 2 ** 10,
  Mi: 2 ** 20,
  Gi: 2 ** 30,
  Ti: 2 ** 40,
  Pi: 2 ** 50,
  Ei: 2 ** 60,
};

/** Bytes of a storage quantity (12Gi, 500M, 1.5Ti, 1e9); undefined when not one. */
export function quantityBytes(q: string | undefined): number | undefined {
  const m = /^([0-9]+(?:\.[0-9]+)?)(?:(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)|[eE]([0-9]+))?$/.exec(q ?? '');
  if (!m) return undefined;
  const unit = m[3] !== undefined ? 10 ** Number(m[3]) : (UNITS[m[2] ?? ''] ?? 1);
  return Number(m[1]) * unit;
}

/**
 * The claim to apply for a deployment with the cache on, or undefined (cache off, or an existing
 * claim). A claim's spec cannot change once created except to grow its storage request, so
 * when it exists its access modes and class are carried over as they are (applying without
 * them would ask to remove them), and its size only ever grows: the larger of what it asks
 * for now and what the model needs. Re-applying it to an unchanged claim changes nothing.
 */
export function desiredCacheClaim(
  md: ModelDeployment,
  model: CatalogModel,
  cache: ModelCacheSetting | undefined,
  metadata: {
    namespace: string;
    labels: Record<string, string>;
    ownerReferences: NonNullable<ModelDeployment['metadata']['ownerReferences']>;
  },
  observed?: V1PersistentVolumeClaim,
): V1PersistentVolumeClaim | undefined {
  if (!cache || md.spec.cache?.existingClaim) return undefined;
  const wanted = `${cacheSizeGiB(model)}Gi`;
  const had = observed?.spec?.resources?.requests?.storage;
  const hadBytes = quantityBytes(had);
  const storage =
    had !== undefined && hadBytes !== undefined && hadBytes >= (quantityBytes(wanted) ?? 0) ? had : wanted;
  const accessModes = observed?.spec?.accessModes ?? [cache.accessMode];
  const storageClassName = observed ? observed.spec?.storageClassName : cache.storageClassName;
  return {
    apiVersion: 'v1',
    kind: 'PersistentVolumeClaim',
    metadata: { name: cacheClaimName(md), ...metadata },
    spec: {
      accessModes,
      ...(storageClassName !== undefined ? { storageClassName } : {}),
      resources: { requests: { storage } },
    },
  };
}

export type CacheCondition = Omit<Condition, 'lastTransitionTime' | 'observedGeneration'>;

/**
 * The ModelCache condition: whether the pods' model volume is there for them. A claim that does
 * not bind keeps the pods Pending with only the scheduler's terse "unbound immediate
 * PersistentVolumeClaims"; this says which claim, why that happens and what to change.
 * `applyError` is the API's answer when creating or growing the claim failed.
 */
export function cacheCondition(
  md: ModelDeployment,
  store: ModelStore,
  claim: V1PersistentVolumeClaim | undefined,
  applyError?: string,
): CacheCondition {
  const name = store.claimName;
  if (!name) {
    return {
      type: CACHE_CONDITION,
      status: 'False',
      reason: 'EmptyDir',
      message:
        'no model cache: each pod pulls the model into its own emptyDir when it starts (operator --model-cache off / chart modelCache.enabled false)',
    };
  }
  const what = store.ownClaim
    ? `PersistentVolumeClaim ${name}`
    : `PersistentVolumeClaim ${name} (spec.cache.existingClaim)`;
  if (applyError) {
    return {
      type: CACHE_CONDITION,
      status: 'False',
      reason: 'ClaimNotApplied',
      message: `${what} could not be ${claim ? 'updated' : 'created'}: ${applyError}`,
    };
  }
  if (!claim) {
    return store.ownClaim
      ? { type: CACHE_CONDITION, status: 'False', reason: 'ClaimPending', message: `creating ${what}` }
      : {
          type: CACHE_CONDITION,
          status: 'False',
          reason: 'ClaimNotFound',
          message: `${what} does not exist in ${md.metadata.namespace}: the model server pods wait for it. Create it and copy the model onto it (README: Model cache), or remove spec.cache.existingClaim`,
        };
  }
  if (claim.metadata?.deletionTimestamp) {
    return {
      type: CACHE_CONDITION,
      status: 'False',
      reason: 'ClaimTerminating',
      message: `${what} is being deleted (a previous deployment of this name, or by hand); pods start once ${store.ownClaim ? 'it is gone and a new one is bound' : 'it is created again'}`,
    };
  }
  const modes = (claim.spec?.accessModes ?? []).join(',');
  const cls = claim.spec?.storageClassName;
  const phase = claim.status?.phase ?? 'Pending';
  if (phase === 'Bound') {
    const size = claim.status?.capacity?.storage ?? claim.spec?.resources?.requests?.storage ?? '?';
    return {
      type: CACHE_CONDITION,
      status: 'True',
      reason: 'Bound',
      message: `the model is kept on ${what}, ${size} ${modes}${cls ? ` of class ${cls}` : ''}: restarted pods and new replicas ${store.pullPolicy === 'Never' ? 'use it' : 'pull nothing'}`,
    };
  }
  if (phase === 'Lost') {
    return {
      type: CACHE_CONDITION,
      status: 'False',
      reason: 'ClaimLost',
      message: `${what} lost its PersistentVolume: ${store.ownClaim ? 'delete the claim to have a new one created (the model is pulled again)' : 'restore the volume or point spec.cache.existingClaim at another claim'}`,
    };
  }
  const fix = store.ownClaim
    ? ` If it stays Pending, ${cls ? `class ${cls}` : 'the default class (or the lack of one)'} cannot provide ${modes} volumes: set the chart's modelCache.storageClassName to a class that can (ReadWriteMany: EFS, Filestore, Azure Files), or modelCache.accessMode ReadWriteOnce (one node, one replica), or modelCache.enabled false`
    : ' Bind it to the PersistentVolume holding the model';
  return {
    type: CACHE_CONDITION,
    status: 'False',
    reason: 'ClaimPending',
    message: `${what} is not bound to a volume yet; the model server pods cannot start before it is (kubectl -n ${md.metadata.namespace} describe pvc ${name}).${fix}`,
  };
}
