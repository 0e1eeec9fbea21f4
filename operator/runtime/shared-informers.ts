import { Informer } from '../../crds/kube/informer.js';
import type { KubeClient, KubeObject } from '../../crds/kube/kube-client.js';
import { type Collection, collectionKey, collectionPath } from './collection.js';

/**
 * The informers of one leadership term, one per collection (path and label selector) however
 * many controllers watch it, so that each collection is listed and watched once and every
 * controller reads the same cache.
 */

/** Where a controller reads the cached objects of a collection it watches. */
export interface Caches {
  of<T extends KubeObject>(collection: Collection<T>): Informer<T>;
}

export interface SharedInformersOptions {
  resyncMs: number;
  onError: (path: string, err: unknown) => void;
}

export class SharedInformers implements Caches {
  private readonly informers = new Map<string, Informer<KubeObject>>();

  constructor(
    private readonly client: KubeClient,
    private readonly opts: SharedInformersOptions,
  ) {}

  of<T extends KubeObject>(collection: Collection<T>): Informer<T> {
    const key = collectionKey(collection);
    let informer = this.informers.get(key);
    if (!informer) {
      const path = collectionPath(collection);
      informer = new Informer<KubeObject>(this.client, {
        path,
        ...(collection.labelSelector ? { labelSelector: collection.labelSelector } : {}),
        resyncMs: this.opts.resyncMs,
        onError: (err) => this.opts.onError(path, err),
      });
      this.informers.set(key, informer);
    }
    // The path decides what the cache holds, and a collection's type is what that path serves:
    // every collection of one key is of one type.
    return informer as unknown as Informer<T>;
  }

  /** The number of collections listed and watched. */
  get size(): number {
    return this.informers.size;
  }

  /** Starts every informer; resolves once each holds its first full list. */
  async start(): Promise<void> {
    await Promise.all([...this.informers.values()].map((i) => i.start()));
  }

  async stop(): Promise<void> {
    await Promise.all([...this.informers.values()].map((i) => i.stop()));
  }
}
