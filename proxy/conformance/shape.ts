/**
 * Copy-on-write edits of plain JSON values for the normalizers: each returns the very value it
 * was given where nothing had to change, so a caller learns whether to re-serialize by `!==`
 * (an answer already conformant goes out as the bytes that came in).
 */

export type Json = Record<string, unknown>;

import { isRecord } from '../../crds/is-record.js';

/** A fresh copy of a default: the shared defaults below are never handed out themselves. */
const fresh = (v: unknown): unknown => (Array.isArray(v) ? [...v] : isRecord(v) ? { ...v } : v);

/** `obj` with each key of `defaults` it lacks set to that default. */
export function filled(obj: Json, defaults: Readonly<Json>): Json {
  let out: Json | undefined;
  for (const key in defaults) {
    if (Object.hasOwn(obj, key)) continue;
    out ??= { ...obj };
    out[key] = fresh(defaults[key]);
  }
  return out ?? obj;
}

/** `obj` without those of `keys` whose value is null (fields the spec types as absent or a value, never null). */
export function withoutNulls(obj: Json, keys: readonly string[]): Json {
  let out: Json | undefined;
  for (const key of keys) {
    if (obj[key] !== null || !Object.hasOwn(obj, key)) continue;
    out ??= { ...obj };
    delete out[key];
  }
  return out ?? obj;
}

/** `obj` with `key` set to what `edit` makes of its value, where that differs. */
export function edited(obj: Json, key: string, edit: (v: unknown) => unknown): Json {
  const before = obj[key];
  const after = edit(before);
  return after === before ? obj : { ...obj, [key]: after };
}

/** An array with `edit` applied to each record in it; the same array where none changed. */
export function eachRecord(list: unknown, edit: (item: Json) => Json): unknown {
  if (!Array.isArray(list)) return list;
  let out: unknown[] | undefined;
  for (const [i, item] of list.entries()) {
    if (!isRecord(item)) continue;
    const after = edit(item);
    if (after === item) continue;
    out ??= [...list];
    out[i] = after;
  }
  return out ?? list;
}

/** A record edited, anything else left as it is. */
export const ifRecord =
  (edit: (item: Json) => Json) =>
  (v: unknown): unknown =>
    isRecord(v) ? edit(v) : v;
