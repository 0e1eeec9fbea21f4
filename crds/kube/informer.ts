import { isGone, type KubeClient, type KubeObject, type WatchEvent } from './kube-client.js';

/**
 * List + watch of one resource collection into an in-memory cache, like client-go's
 * reflector: the initial list fills the cache, the watch keeps it current from the list's
 * resourceVersion, an ended watch is resumed from the last seen version (bookmarks keep it
 * fresh), 410 Gone (the version was compacted away) triggers a relist, other failures are
 * retried with exponential backoff, and a periodic resync replays every cached object to
 * the handlers so that missed side effects are reconciled again.
 */

export type InformerEvent = 'add' | 'update' | 'delete' | 'resync';
export type InformerHandler<T> = (event: InformerEvent, obj: T, old?: T) => void;

export interface InformerOptions {
  /** Collection path, e.g. /apis/ai.platform/v1beta1/namespaces/platform-llms/modeldeployments. */
  path: string;
  labelSelector?: string;
  fieldSelector?: string;
  /** Replay the cache to handlers this often; 0 disables. */
  resyncMs?: number;
  /** Ask for bookmarks, which keep the resume point fresh on quiet collections (default true). */
  bookmarks?: boolean;
  /** Server-side timeout of one watch request; the watch is then resumed. */
  watchTimeoutSeconds?: number;
  backoff?: { initialMs: number; maxMs: number };
  onError?: (err: unknown) => void;
}

export const keyOf = (obj: KubeObject): string =>
  obj.metadata?.namespace ? `${obj.metadata.namespace}/${obj.metadata.name}` : (obj.metadata?.name ?? '');

export class Informer<T extends KubeObject> {
  private readonly store = new Map<string, T>();
  private readonly handlers: InformerHandler<T>[] = [];
  private resourceVersion = '';
  private abort = new AbortController();
  private running = false;
  private synced = false;
  private syncedWaiters: Array<() => void> = [];
  private resyncTimer: NodeJS.Timeout | undefined;
  private loop: Promise<void> | undefined;
  /** Number of full lists done (the first one plus relists); observable by tests and metrics. */
  lists = 0;

  constructor(
    private readonly client: KubeClient,
    private readonly options: InformerOptions,
  ) {}

  on(handler: InformerHandler<T>): this {
    this.handlers.push(handler);
    return this;
  }

  get(key: string): T | undefined {
    return this.store.get(key);
  }

  list(): T[] {
    return [...this.store.values()];
  }

  hasSynced(): boolean {
    return this.synced;
  }

  /** Starts the list/watch loop; resolves once the cache holds the first full list. */
  start(): Promise<void> {
    if (!this.running) {
      this.running = true;
      this.abort = new AbortController();
      this.loop = this.run();
      const resync = this.options.resyncMs ?? 0;
      if (resync > 0) {
        this.resyncTimer = setInterval(() => {
          for (const obj of this.store.values()) this.emit('resync', obj);
        }, resync);
        this.resyncTimer.unref();
      }
    }
    return this.synced ? Promise.resolve() : new Promise((resolve) => this.syncedWaiters.push(resolve));
  }

  async stop(): Promise<void> {
    this.running = false;
    this.abort.abort();
    if (this.resyncTimer) clearInterval(this.resyncTimer);
    await this.loop;
  }

  private emit(event: InformerEvent, obj: T, old?: T): void {
    for (const h of this.handlers) {
      try {
        h(event, obj, old);
      } catch (err) {
        this.options.onError?.(err);
      }
    }
  }

  private query() {
    return { labelSelector: this.options.labelSelector, fieldSelector: this.options.fieldSelector };
  }

  private async relist(): Promise<void> {
    const list = await this.client.list<T>(this.options.path, this.query(), this.abort.signal);
    this.lists++;
    const seen = new Set<string>();
    // The API server leaves apiVersion and kind off list items (watch events carry them). The
    // cache must hold whole objects either way: controllers compare them with what they apply.
    const apiVersion = list.apiVersion;
    const kind = list.kind?.replace(/List$/, '');
    for (const item of list.items) {
      if (apiVersion && item.apiVersion === undefined) item.apiVersion = apiVersion;
      if (kind && item.kind === undefined) item.kind = kind;
      const key = keyOf(item);
      seen.add(key);
      const old = this.store.get(key);
      this.store.set(key, item);
      if (!old) this.emit('add', item);
      else if (old.metadata?.resourceVersion !== item.metadata?.resourceVersion) this.emit('update', item, old);
    }
    for (const [key, old] of this.store) {
      if (!seen.has(key)) {
        this.store.delete(key);
        this.emit('delete', old);
      }
    }
    this.resourceVersion = list.metadata.resourceVersion ?? '';
    if (!this.synced) {
      this.synced = true;
      for (const w of this.syncedWaiters.splice(0)) w();
    }
  }

  private onEvent(e: WatchEvent<T>): void {
    if (e.type === 'ERROR') {
      const status = e.object as unknown as { code?: number; message?: string };
      if (status.code === 410) {
        this.resourceVersion = '';
        throw new GoneError();
      }
      throw new Error(`watch error: ${status.message ?? JSON.stringify(e.object)}`);
    }
    const obj = e.object;
    if (obj.metadata?.resourceVersion) this.resourceVersion = obj.metadata.resourceVersion;
    if (e.type === 'BOOKMARK') return;
    const key = keyOf(obj);
    const old = this.store.get(key);
    if (e.type === 'DELETED') {
      this.store.delete(key);
      this.emit('delete', obj);
    } else {
      this.store.set(key, obj);
      this.emit(old ? 'update' : 'add', obj, old);
    }
  }

  private async run(): Promise<void> {
    const { initialMs, maxMs } = this.options.backoff ?? { initialMs: 500, maxMs: 30_000 };
    let delay = initialMs;
    while (this.running) {
      try {
        if (!this.resourceVersion) await this.relist();
        await this.client.watch<T>(
          this.options.path,
          {
            ...this.query(),
            resourceVersion: this.resourceVersion,
            allowWatchBookmarks: this.options.bookmarks ?? true,
            timeoutSeconds: this.options.watchTimeoutSeconds ?? 300,
          },
          (e) => this.onEvent(e),
          this.abort.signal,
        );
        delay = initialMs;
      } catch (err) {
        if (!this.running) break;
        if (err instanceof GoneError || isGone(err)) {
          // The watch's version was compacted: only a fresh list can resume consistently.
          this.resourceVersion = '';
          continue;
        }
        this.options.onError?.(err);
        await sleep(delay + Math.random() * delay * 0.2, this.abort.signal);
        delay = Math.min(delay * 2, maxMs);
      }
    }
  }
}

class GoneError extends Error {
  constructor() {
    super('410 Gone: resource version too old');
  }
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener(
      'abort',
      () => {
        clearTimeout(t);
        resolve();
      },
      { once: true },
    );
  });
}
