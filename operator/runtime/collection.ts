import { API_GROUP, API_VERSION } from '../../crds/constants.js';
import { type KubeObject, resourcePath } from '../../crds/kube/kube-client.js';

/**
 * A collection the operator lists and watches: one resource, in one namespace or all of them,
 * optionally narrowed by a label selector. Controllers name the collections they watch with
 * these values; the operator keeps one informer per path and selector however many controllers
 * name it, and the RBAC a watch needs (list, watch) is derived from the same value.
 */
export interface Collection<T extends KubeObject> {
  group: string;
  version: string;
  plural: string;
  /** Absent: every namespace, or a cluster-scoped resource. */
  namespace?: string;
  labelSelector?: string;
  /** Never set: carries the object type, so that a cache of this collection is typed. */
  readonly object?: T;
}

/** A collection of `T`, typed by the caller (what the API serves at that path). */
export const collection = <T extends KubeObject>(c: Omit<Collection<T>, 'object'>): Collection<T> => c;

/** A collection of one of this platform's custom resources (ai.platform). */
export const platformCollection = <T extends KubeObject>(plural: string, namespace?: string): Collection<T> =>
  collection<T>({ group: API_GROUP, version: API_VERSION, plural, ...(namespace ? { namespace } : {}) });

export const collectionPath = (c: Collection<KubeObject>): string => resourcePath(c);

/** Two controllers naming the same path and selector share one informer. */
export const collectionKey = (c: Collection<KubeObject>): string => `${collectionPath(c)}?${c.labelSelector ?? ''}`;
