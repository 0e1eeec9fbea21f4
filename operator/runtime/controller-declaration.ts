import { type InformerEvent, keyOf } from '../../crds/kube/informer.js';
import type { KubeClient, KubeObject } from '../../crds/kube/kube-client.js';
import type { Logger } from '../../crds/observability/log.js';
import type { OperatorOptions } from '../operator.js';
import type { Collection } from './collection.js';
import type { Reconcile } from './controller-metrics.js';
import type { EventRecorder } from './events.js';
import type { RbacRule } from './rbac-rule.js';
import type { Caches } from './shared-informers.js';
import type { Enqueue } from './work-queue.js';

/**
 * What a controller declares about itself, once, beside its reconcile: the kind it reconciles,
 * the collections whose events requeue its keys, the RBAC it needs and how it starts. The
 * operator builds the informers, the work queue, its metrics, resync and teardown from this;
 * the shape follows controller-runtime's builder (For, Owns, Watches), as plain values.
 */

/** The keys of a controller's queue that one event of a watched collection requeues. */
export type KeysOf<T extends KubeObject> = (
  event: InformerEvent,
  obj: T,
  old: T | undefined,
  caches: Caches,
) => Iterable<string>;

export interface Watch {
  collection: Collection<KubeObject>;
  // A method, so that the watch of any collection is a Watch: its events carry its collection's
  // objects, which watch() ties to its keys' parameter type.
  keys(event: InformerEvent, obj: KubeObject, old: KubeObject | undefined, caches: Caches): Iterable<string>;
}

/** A watch of `collection` whose events requeue `keys`. */
export function watch<T extends KubeObject>(collection: Collection<T>, keys: KeysOf<T>): Watch {
  return { collection, keys };
}

/** The object's own key (controller-runtime's EnqueueRequestForObject): how `for` is watched. */
const ownKey = <T extends KubeObject>(_event: InformerEvent, obj: T): string[] => [keyOf(obj)];

/** The owner named by a label the controller puts on what it creates, in `namespace`. */
export const ownerByLabel =
  <T extends KubeObject & { metadata?: { labels?: Record<string, string> } }>(label: string, namespace: string) =>
  (_event: InformerEvent, obj: T): string[] => {
    const owner = obj.metadata?.labels?.[label];
    return owner ? [`${namespace}/${owner}`] : [];
  };

/** Every object of `of`, when `when` holds: a change that may concern any of them. */
export const everyKeyOf =
  <T extends KubeObject>(
    of: Collection<KubeObject>,
    when: (event: InformerEvent, obj: T, old: T | undefined) => boolean,
  ) =>
  (event: InformerEvent, obj: T, old: T | undefined, caches: Caches): string[] =>
    when(event, obj, old) ? caches.of(of).list().map(keyOf) : [];

/** Everything a controller is started with: shared by all, except `enqueue`, its own queue's. */
interface ControllerContext {
  client: KubeClient;
  caches: Caches;
  events: EventRecorder;
  options: OperatorOptions;
  now: () => Date;
  log: Logger;
  /** Adds a key to this controller's queue, for what is not a watched collection's event. */
  enqueue: Enqueue;
}

/** A started controller. */
export interface RunningController {
  reconcile: Reconcile;
  /**
   * Periodic work beside the queue that writes (the model autoscaler): started once the queue
   * runs, stopped before the queue drains, so nothing of it writes after leadership ends.
   */
  loop?: { start(): void; tick(): Promise<void>; stop(): Promise<void> };
  /** Watches the controller opened itself (Secrets by name): stopped with the informers, once the queue drained. */
  watches?: { stop(): Promise<void> };
}

export interface ControllerDeclaration {
  /** Its work queue's name and the `controller` label of its metrics: dashboards read it, never rename. */
  name: string;
  /** The kind it reconciles: each event requeues the object's own key, and every object is queued at start and resync. */
  for: Collection<KubeObject>;
  /** Other collections whose events requeue keys (what it owns, what its decisions read). */
  watches: Watch[];
  /** What the operator must be granted for it beyond reading the collections it watches (derived from them). */
  rbac: RbacRule[];
  /** The log line of a failed reconcile. */
  failure: string;
  /** Called once every watched collection is cached; resolves when the controller may reconcile. */
  start(ctx: ControllerContext): Promise<RunningController>;
}

/** The controller's watches, `for` first. */
export const watchesOf = (d: ControllerDeclaration): Watch[] => [watch(d.for, ownKey), ...d.watches];
