import type { AuditActor } from '../../crds/audit/audit-record.js';
import { fingerprint } from '../../crds/audit/object-change.js';
import type { KubeObject } from '../../crds/kube/kube-client.js';

/**
 * Who asked for a change: the API server's AdmissionReview of a create, update or delete of one
 * of our objects, remembered until the informer shows the change stored (operator/audit/
 * audit-watcher.ts). The webhook always allows; the API server calls it with failurePolicy
 * Ignore, so an operator that is down never stops a change, it only leaves its author unknown.
 */

type Operation = 'CREATE' | 'UPDATE' | 'DELETE' | 'CONNECT';

/** The fields of an AdmissionReview's request this reads (admission.k8s.io/v1). */
interface AdmissionRequest {
  uid: string;
  operation: Operation;
  name?: string;
  namespace?: string;
  kind?: { kind?: string };
  userInfo?: { username?: string; groups?: string[] };
  object?: KubeObject | null;
  oldObject?: KubeObject | null;
  dryRun?: boolean;
}

/** One admission, as the informer's event is matched to it. */
export interface Admission {
  operation: Operation;
  actor: AuditActor;
  /** The admitted object's digest (crds/audit/object-change.ts): the stored object has the same. */
  fingerprint?: string;
  at: number;
}

const SA_PREFIX = 'system:serviceaccount:';

/** A Kubernetes user as an audit actor: a ServiceAccount as namespace/name, a person by name, with groups. */
function actorOf(user: AdmissionRequest['userInfo']): AuditActor {
  const name = user?.username ?? '';
  if (name.startsWith(SA_PREFIX))
    return { kind: 'service-account', name: name.slice(SA_PREFIX.length).replace(':', '/') };
  const groups = (user?.groups ?? []).filter((g) => g !== 'system:authenticated').slice(0, 50);
  return { kind: name ? 'user' : 'unknown', name, ...(groups.length ? { groups } : {}) };
}

/** The allowing answer to an AdmissionReview, and what it says of who asked (none for a dry run). */
export function answerReview(review: unknown): { answer: unknown; object?: string; admission?: Admission } | string {
  const request = (review as { request?: AdmissionRequest } | null)?.request;
  if (typeof request?.uid !== 'string') return 'not an AdmissionReview with a request';
  const answer = {
    apiVersion: 'admission.k8s.io/v1',
    kind: 'AdmissionReview',
    response: { uid: request.uid, allowed: true },
  };
  const obj = request.operation === 'DELETE' ? request.oldObject : request.object;
  if (request.dryRun || !obj) return { answer };
  const admission: Admission = {
    operation: request.operation,
    actor: actorOf(request.userInfo),
    ...(request.operation === 'DELETE' ? {} : { fingerprint: fingerprint(obj) }),
    at: Date.now(),
  };
  return { answer, object: objectKey(obj, request), admission };
}

/** An object's uid where it has one, else kind/namespace/name. */
function objectKey(obj: KubeObject, request: AdmissionRequest): string {
  return (
    obj.metadata?.uid ??
    `${request.kind?.kind ?? ''}/${request.namespace ?? ''}/${request.name ?? obj.metadata?.name ?? ''}`
  );
}

/** Admissions kept at most: each holds an actor of at most about 4 KiB. */
const MAX_PENDING = 10_000;

/** Admissions waiting for their change to be seen stored, kept at most `ttlMs` and MAX_PENDING in all. */
export class Admissions {
  private readonly pending = new Map<string, Admission[]>();
  private size = 0;
  private swept = 0;

  constructor(private readonly ttlMs = 60_000) {}

  remember(object: string, admission: Admission): void {
    if (admission.at - this.swept > 1_000) this.sweep(admission.at);
    const list = this.pending.get(object) ?? [];
    list.push(admission);
    this.size++;
    if (list.length > 20) {
      list.shift();
      this.size--;
    }
    // Last seen last: the oldest objects leave first when a flood of changes passes the bound.
    this.pending.delete(object);
    this.pending.set(object, list);
    while (this.size > MAX_PENDING) {
      const [oldest, entries] = this.pending.entries().next().value ?? ['', []];
      this.pending.delete(oldest);
      this.size -= entries.length;
    }
  }

  /**
   * The admission of a change seen stored: for a deletion, the object's DELETE; else the newest
   * create or update whose object is the one stored (its fingerprint), taken so that it answers once.
   */
  take(keys: string[], deleted: boolean, stored: string): Admission | undefined {
    for (const key of keys) {
      const list = this.pending.get(key);
      if (!list) continue;
      const i = list.findLastIndex((a) => (deleted ? a.operation === 'DELETE' : a.fingerprint === stored));
      if (i < 0) continue;
      const [found] = list.splice(i, 1);
      this.size--;
      if (!list.length) this.pending.delete(key);
      return found;
    }
    return undefined;
  }

  private sweep(now: number): void {
    this.swept = now;
    for (const [key, list] of this.pending) {
      const live = list.filter((a) => now - a.at < this.ttlMs);
      this.size -= list.length - live.length;
      if (live.length) this.pending.set(key, live);
      else this.pending.delete(key);
    }
  }
}
