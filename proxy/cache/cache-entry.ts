import { isRecord } from '../../crds/is-record.js';
import type { Usage } from '../upstreams/upstream.js';

/**
 * An answer as the response cache keeps it: the whole answer's JSON, or a stream's events as
 * they went out (a hit replays them), what the upstream used and what it cost then. Read back
 * only when it is whole and of this version: anything else (an older version, a torn write, a
 * value another program put there) is dropped as a miss.
 */

export interface CacheEntry {
  v: 1;
  kind: 'json' | 'stream';
  /** The answer's JSON text, or the stream's SSE text. */
  body: string;
  usage?: Pick<Usage, 'promptTokens' | 'completionTokens'>;
  model: string;
  provider: string;
  /** What the answer cost when it was made: what a hit avoids. */
  costUsd: number;
  /** Epoch ms it was kept. */
  at: number;
}

/** The most bytes (UTF-16 units) an entry may hold: a larger answer is not kept. */
export const MAX_ENTRY_CHARS = 1024 * 1024;

export const encodeEntry = (e: CacheEntry): string => JSON.stringify(e);

/** A kept entry as read back: a whole answer's body parsed once. */
export type ReadEntry = CacheEntry & { parsed?: unknown };

/**
 * An entry read back; 'other-version' for one another version of the gateway kept (left alone: a
 * replica of a rolling upgrade reads it), 'broken' for anything else that is not whole.
 */
export function decodeEntry(text: string): ReadEntry | 'other-version' | 'broken' {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    return 'broken';
  }
  if (isRecord(v) && typeof v.v === 'number' && v.v !== 1) return 'other-version';
  if (!isRecord(v) || v.v !== 1 || (v.kind !== 'json' && v.kind !== 'stream')) return 'broken';
  if (typeof v.body !== 'string' || typeof v.model !== 'string' || typeof v.provider !== 'string') return 'broken';
  if (typeof v.costUsd !== 'number' || !Number.isFinite(v.costUsd) || typeof v.at !== 'number') return 'broken';
  const u = v.usage;
  if (u !== undefined && !(isRecord(u) && typeof u.promptTokens === 'number' && typeof u.completionTokens === 'number'))
    return 'broken';
  if (v.kind === 'stream') return v as unknown as ReadEntry;
  try {
    return { ...(v as unknown as CacheEntry), parsed: JSON.parse(v.body) as unknown };
  } catch {
    return 'broken';
  }
}
