import { createHash } from 'node:crypto';
import type { KubeObject } from '../kube/kube-client.js';
import type { AuditAction } from './audit-record.js';

/**
 * What a change to one of our objects is, as an audit record shows it: its spec, labels and
 * annotations before and after (status, resourceVersion and managedFields are the system's
 * bookkeeping, not a change anyone made), the fields that changed, with every secret redacted.
 */

export const REDACTED = '<redacted>';

/**
 * Fields never shown, whatever their kind: names of Secrets (secretRef), key material, tokens,
 * passwords and credentials, ARNs and account ids (roleArn), an AssumeRole's externalId, and an
 * McpServer's environment values. `tokensPerMinute` and `maxTokens` are limits, not tokens: only
 * a name ending in `token` (or `Token`) counts.
 */
const SECRET_FIELD = /secret|password|credential|privatekey|(^|[a-z_])token$|arn$|accountid|externalid/i;

/** A URL's user and password, and its query (where servers take keys: ?token=, ?api_key=). */
function withoutCredentials(value: string): string {
  if (!/^[a-z][a-z0-9+.-]*:\/\//i.test(value)) return value;
  try {
    const url = new URL(value);
    if (!url.username && !url.password && !url.search) return value;
    const user = url.username || url.password ? `${REDACTED}@` : '';
    return `${url.protocol}//${user}${url.host}${url.pathname}${url.search ? `?${REDACTED}` : ''}`;
  } catch {
    return value;
  }
}

/** kubectl's copy of the whole last applied object: it would show every field a second time. */
const LAST_APPLIED = 'kubectl.kubernetes.io/last-applied-configuration';

/** The metadata a change is read from (KubeObject names only what every object has). */
interface Meta {
  uid?: string;
  resourceVersion?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  deletionTimestamp?: string;
  managedFields?: { manager?: string; time?: string; subresource?: string }[];
}
const metaOf = (obj: KubeObject): Meta => (obj.metadata ?? {}) as Meta;

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** A value with every secret field's value replaced by `<redacted>`. */
export function redact(value: unknown, field = ''): unknown {
  if (field && SECRET_FIELD.test(field)) return REDACTED;
  if (field === 'env' && Array.isArray(value)) {
    return value.map((e) => (isObject(e) ? { ...e, ...('value' in e ? { value: REDACTED } : {}) } : REDACTED));
  }
  if (Array.isArray(value)) return value.map((v) => redact(v));
  if (typeof value === 'string') return withoutCredentials(value);
  if (!isObject(value)) return value;
  return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, redact(v, k)]));
}

/** The part of an object people change: spec, labels and annotations. */
function content(obj: KubeObject): Record<string, unknown> {
  const m = metaOf(obj);
  const annotations = Object.fromEntries(Object.entries(m.annotations ?? {}).filter(([k]) => k !== LAST_APPLIED));
  const spec = (obj as { spec?: unknown }).spec;
  return {
    ...(spec === undefined ? {} : { spec }),
    ...(m.labels && Object.keys(m.labels).length ? { labels: m.labels } : {}),
    ...(Object.keys(annotations).length ? { annotations } : {}),
  };
}

/** What a record shows of an object's content: redacted. */
const shown = (c: Record<string, unknown>): Record<string, unknown> => redact(c) as Record<string, unknown>;

/** JSON with keys sorted, so that equal values print alike. */
function stable(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(stable).join(',')}]`;
  if (!isObject(value)) return JSON.stringify(value) ?? 'null';
  return `{${Object.keys(value)
    .sort()
    .map((k) => `${JSON.stringify(k)}:${stable(value[k])}`)
    .join(',')}}`;
}

/** A digest of what an object holds that people change: an admission's object and the stored one match by it. */
export const fingerprint = (obj: KubeObject): string => digestOf(content(obj));

const digestOf = (c: Record<string, unknown>): string =>
  createHash('sha256').update(stable(c)).digest('hex').slice(0, 32);

/** The dotted paths where two values differ (arrays compared whole), at most 200; paths only, so secrets may be compared. */
function changedPaths(before: unknown, after: unknown, at = ''): string[] {
  if (stable(before) === stable(after)) return [];
  if (!isObject(before) || !isObject(after)) return [at || '.'];
  const out: string[] = [];
  for (const k of new Set([...Object.keys(before), ...Object.keys(after)])) {
    out.push(...changedPaths(before[k], after[k], at ? `${at}.${k}` : k));
    if (out.length >= 200) break;
  }
  return out.slice(0, 200);
}

export interface ObjectChange {
  /** The record's id: uid and resourceVersion, or uid@deleted for a deletion (seen once, however it was seen). */
  id: string;
  action: Extract<AuditAction, 'created' | 'updated' | 'deleted'>;
  before?: Record<string, unknown>;
  after?: Record<string, unknown>;
  changed: string[];
  /** The field manager that wrote last (kubectl-edit, kubectl-client-side-apply, helm...). */
  manager?: string;
  fingerprint: string;
}

/** The manager of the object's newest managedFields entry that is not the status's. */
function lastManager(obj: KubeObject): string | undefined {
  const entries = (metaOf(obj).managedFields ?? []).filter((e) => !e.subresource);
  entries.sort((a, b) => (a.time ?? '').localeCompare(b.time ?? ''));
  return entries.at(-1)?.manager;
}

/**
 * An informer's event as a change, or undefined where nothing people change did (a status
 * write, a resync). A deletion that waits on finalizers is recorded when it is asked for (its
 * deletionTimestamp set), with the same id as its end, so it is one record.
 */
export function changeOf(
  event: 'add' | 'update' | 'delete' | 'resync',
  obj: KubeObject,
  old?: KubeObject,
): ObjectChange | undefined {
  const uid = obj.metadata?.uid ?? '';
  const now = content(obj);
  const after = shown(now);
  const manager = lastManager(obj);
  const common = { fingerprint: digestOf(now), ...(manager ? { manager } : {}) };
  if (event === 'add')
    return { id: `${uid}@${obj.metadata?.resourceVersion ?? ''}`, action: 'created', after, changed: [], ...common };
  if (event === 'delete') return { id: `${uid}@deleted`, action: 'deleted', before: after, changed: [], ...common };
  if (event !== 'update' || !old) return undefined;
  const was = content(old);
  const before = shown(was);
  if (metaOf(obj).deletionTimestamp && !metaOf(old).deletionTimestamp) {
    return { id: `${uid}@deleted`, action: 'deleted', before, changed: ['metadata.deletionTimestamp'], ...common };
  }
  const changed = changedPaths(was, now).map((p) => (p.startsWith('spec') ? p : `metadata.${p}`).slice(0, 300));
  if (!changed.length) return undefined;
  return { id: `${uid}@${obj.metadata?.resourceVersion ?? ''}`, action: 'updated', before, after, changed, ...common };
}
