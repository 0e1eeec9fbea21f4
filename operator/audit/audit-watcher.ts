import type { AuditActor, AuditRecord } from '../../crds/audit/audit-record.js';
import { changeOf, type ObjectChange } from '../../crds/audit/object-change.js';
import { AGENT_NAMESPACE, KINDS, type KindName, LLMS_NAMESPACE } from '../../crds/constants.js';
import { Informer, type InformerEvent } from '../../crds/kube/informer.js';
import type { KubeClient, KubeObject } from '../../crds/kube/kube-client.js';
import { errorMessage, type Logger } from '../../crds/observability/log.js';
import { collectionPath, platformCollection } from '../runtime/collection.js';
import type { Admissions } from './admissions.js';

/**
 * Every change to our objects that is stored, as one audit record: the informers of each kind (in
 * the namespace the product reads it from) say what changed; the webhook's admissions say who.
 * Each operator replica watches, leader or not, since the API server sends an admission to any
 * of them: a replica records a change it saw admitted at once, and one it did not after a
 * moment, its author unknown; the store keeps one record per change (its id), the one that
 * knows who. The first list of a start is what exists, not a change.
 */

/** Where the product reads each kind: ModelDeployments in platform-llms, the others in platform-agent, or the cluster. */
const namespaceOf = (kind: KindName): string | undefined => {
  if (!KINDS[kind].namespaced) return undefined;
  return kind === 'ModelDeployment' ? LLMS_NAMESPACE : AGENT_NAMESPACE;
};

/** The team an object belongs to: an ApiKey's, or a Budget's team tag. */
function teamOf(obj: KubeObject): string | undefined {
  const spec = (obj as { spec?: { team?: unknown; tag?: { key?: unknown; value?: unknown } } }).spec;
  if (typeof spec?.team === 'string') return spec.team;
  return spec?.tag?.key === 'team' && typeof spec.tag.value === 'string' ? spec.tag.value : undefined;
}

export interface AuditWatcherOptions {
  /** How long a change no admission explained waits for another replica's record to win. Default 3 s. */
  graceMs?: number;
  log: Logger;
}

export class AuditWatcher {
  private readonly informers: Informer<KubeObject>[] = [];
  /** Records waiting out the grace; sent at once when the watcher stops. */
  private readonly waiting = new Map<NodeJS.Timeout, () => void>();

  constructor(
    private readonly client: KubeClient,
    private readonly admissions: Admissions,
    private readonly record: (r: AuditRecord) => void,
    private readonly opts: AuditWatcherOptions,
  ) {}

  async start(): Promise<void> {
    const kinds = Object.keys(KINDS) as KindName[];
    await Promise.all(
      kinds.map(async (kind) => {
        const path = collectionPath(platformCollection(KINDS[kind].plural, namespaceOf(kind)));
        const informer = new Informer<KubeObject>(this.client, {
          path,
          onError: (err) => this.opts.log.warn('audit watch failed, retrying', { path, error: errorMessage(err) }),
        });
        this.informers.push(informer);
        await informer.start();
        // After the first list: what exists at start is not a change anyone made now.
        informer.on((event, obj, old) => this.seen(kind, event, obj, old));
      }),
    );
  }

  private seen(kind: KindName, event: InformerEvent, obj: KubeObject, old?: KubeObject): void {
    const change = changeOf(event, obj, old);
    if (!change) return;
    const m = obj.metadata ?? {};
    const keys = [m.uid ?? '', `${kind}/${m.namespace ?? ''}/${m.name ?? ''}`];
    const admission = this.admissions.take(keys, change.action === 'deleted', change.fingerprint);
    if (admission) {
      this.record(this.recordOf(kind, obj, change, admission.actor, new Date(admission.at)));
      return;
    }
    const at = new Date();
    const send = () => this.record(this.recordOf(kind, obj, change, { kind: 'unknown', name: '' }, at));
    const timer = setTimeout(() => {
      this.waiting.delete(timer);
      send();
    }, this.opts.graceMs ?? 3_000);
    this.waiting.set(timer, send);
  }

  private recordOf(kind: KindName, obj: KubeObject, c: ObjectChange, actor: AuditActor, at: Date): AuditRecord {
    const m = obj.metadata ?? {};
    const team = teamOf(obj);
    return {
      id: c.id,
      at: at.toISOString(),
      source: 'kubernetes',
      action: c.action,
      actor,
      target: { kind, ...(m.namespace ? { namespace: m.namespace } : {}), name: m.name ?? '' },
      ...(team ? { team } : {}),
      ...(c.manager ? { from: `field manager ${c.manager}` } : {}),
      ...(c.changed.length ? { changed: c.changed } : {}),
      ...(c.before ? { before: c.before } : {}),
      ...(c.after ? { after: c.after } : {}),
    };
  }

  async stop(): Promise<void> {
    for (const [timer, send] of this.waiting) {
      clearTimeout(timer);
      send();
    }
    this.waiting.clear();
    await Promise.all(this.informers.map((i) => i.stop()));
  }
}
