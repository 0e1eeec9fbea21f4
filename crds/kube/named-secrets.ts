import type { SecretLookup } from '../providers/aws-credentials.js';
import { Informer } from './informer.js';
import { KubeApiError, type KubeClient, resourcePath } from './kube-client.js';

/**
 * Secrets of one namespace, each watched by its name (list and watch with the field selector
 * `metadata.name=<name>`), never the namespace as a whole.
 *
 * Why: RBAC can grant a Secret by name (`resourceNames`) and the API server authorizes a
 * single-name list or watch against it, but a namespace-wide list or watch needs read access
 * to every Secret there, Helm's release records (which hold the rendered API key) included.
 * Watching by name lets the chart grant each component exactly the Secrets it uses. A name the
 * component may not read is reported as `forbidden` (the owner of the reference is told how to
 * grant it) and retried with backoff, so a later `helm upgrade` that grants it takes effect
 * without a restart.
 */

export interface SecretObject {
  metadata?: { name?: string; namespace?: string; resourceVersion?: string };
  data?: Record<string, string>;
}

/** `pending` until the first answer; `readable` (the Secret may still be missing) or `forbidden` after. */
export type SecretAccess = 'pending' | 'readable' | 'forbidden';

/**
 * How soon a controller looks again at an object whose Secret was not read yet, should no change
 * enqueue it first (the read's `onChange` does).
 */
export const SECRET_READ_WAIT_MS = 1000;

export interface NamedSecretsOptions {
  /** A watched name's Secret changed, appeared, went away, or its access changed. */
  onChange?: (name: string) => void;
  /** Failures other than a refusal (those are `access`), for the log: status and reason only, no name. */
  onError?: (summary: string) => void;
  backoff?: { initialMs: number; maxMs: number };
}

interface Watch {
  informer: Informer<SecretObject>;
  access: SecretAccess;
  settled: Promise<void>;
}

const isForbidden = (err: unknown): boolean => err instanceof KubeApiError && err.status === 403;

export class NamedSecrets {
  private readonly watches = new Map<string, Watch>();
  private readonly path: string;

  constructor(
    private readonly client: KubeClient,
    private readonly namespace: string,
    private readonly opts: NamedSecretsOptions = {},
  ) {
    this.path = resourcePath({ group: '', version: 'v1', plural: 'secrets', namespace });
  }

  /** Watches exactly these names from now on; resolves once each of them was read or refused. */
  async track(names: Iterable<string>): Promise<void> {
    const want = new Set([...names].filter((n) => n.length > 0));
    const stopping: Promise<void>[] = [];
    for (const [name, w] of this.watches) {
      if (want.has(name)) continue;
      this.watches.delete(name);
      stopping.push(w.informer.stop());
    }
    for (const name of want) if (!this.watches.has(name)) this.watch(name);
    await Promise.all([...stopping, ...[...want].map((n) => this.watches.get(n)?.settled)]);
  }

  private watch(name: string): void {
    let settle = () => {};
    const w: Watch = {
      access: 'pending',
      settled: new Promise((resolve) => {
        settle = resolve;
      }),
      informer: new Informer<SecretObject>(this.client, {
        path: this.path,
        fieldSelector: `metadata.name=${name}`,
        bookmarks: true,
        // A refused name is retried at least every 10 s, so that a grant is picked up soon.
        backoff: this.opts.backoff ?? { initialMs: 500, maxMs: 10_000 },
        onError: (err) => {
          if (!isForbidden(err)) {
            this.opts.onError?.(
              err instanceof KubeApiError ? `${err.status} ${err.reason}` : err instanceof Error ? err.name : 'error',
            );
            return;
          }
          settle();
          this.set(w, name, 'forbidden');
        },
      }),
    };
    this.watches.set(name, w);
    // Any event means the list or watch was allowed; the first list may also find nothing.
    w.informer.on((event) => {
      if (event === 'resync') return;
      w.access = 'readable';
      if (this.watches.get(name) === w) this.opts.onChange?.(name);
    });
    void w.informer.start().then(() => {
      settle();
      this.set(w, name, 'readable');
    });
  }

  private set(w: Watch, name: string, access: SecretAccess): void {
    if (w.access === access) return;
    w.access = access;
    if (this.watches.get(name) === w) this.opts.onChange?.(name);
  }

  /** Data of a watched Secret (values base64, as the API returns them); undefined when missing or unreadable. */
  data(name: string): Record<string, string> | undefined {
    return this.get(name)?.data;
  }

  get(name: string): SecretObject | undefined {
    return this.watches.get(name)?.informer.get(`${this.namespace}/${name}`);
  }

  /** What a component may use of a Secret: its data, or that RBAC refuses it (for providerCredentials). */
  lookup(name: string): SecretLookup {
    const data = this.data(name);
    return { ...(data ? { data } : {}), forbidden: this.access(name) === 'forbidden' };
  }

  /** Undefined for a name that is not watched. */
  access(name: string): SecretAccess | undefined {
    return this.watches.get(name)?.access;
  }

  /**
   * A name whose Secret is not known yet: not read or refused since it was tracked, or not tracked
   * yet (a watch starts on its owner's event, which the owner's reconcile can come before). What
   * an owner would report of it now (missing) may be false, so its reconcile waits.
   */
  unread(name: string | undefined): boolean {
    return name !== undefined && name.length > 0 && (this.access(name) ?? 'pending') === 'pending';
  }

  /** Every watched name was read or refused at least once. */
  settled(): boolean {
    return [...this.watches.values()].every((w) => w.access !== 'pending');
  }

  async stop(): Promise<void> {
    const all = [...this.watches.values()];
    this.watches.clear();
    await Promise.all(all.map((w) => w.informer.stop()));
  }
}
