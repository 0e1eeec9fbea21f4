import { crc32 } from 'node:zlib';

/**
 * How a usage record lies in a spool file: a 12-byte header (the magic `PAU1`, the payload's
 * length and its CRC-32, both big-endian) and the payload, the record's JSON.
 *
 * The magic lets a reader find the next record after a damaged one: a flipped byte costs that
 * record only, not the rest of the file. A record cut by a crash mid-write (the file's last one)
 * is too short for its length and is skipped. Neither is ever fatal.
 *
 * The payload is the record as JSON, optional fields absent when unset: a field added since
 * (endpoint, team, bytesIn, bytesOut, payload, requestedModel, routingPolicy, routingReason,
 * escalations, counterfactualCostUsd, ...) is absent from the records of an older
 * spool, which replay as records without it. Fields are only ever added, never renamed.
 */

const MAGIC = Buffer.from('PAU1', 'latin1');
/**
 * A delivery mark (Spool.mark): whether a whole answer's last byte reached the socket. A magic of
 * its own, so that a reader of before (a rollback) skips it as damage instead of storing it.
 */
const MARK_MAGIC = Buffer.from('PAD1', 'latin1');
const HEADER_BYTES = 12;
/**
 * No usage record comes near this (the largest field, a tool call's payload, is cut at 16 KiB by
 * the recorder before the spool: record-columns.ts MAX_PAYLOAD_BYTES); a larger length is damage, not a record.
 */
const MAX_RECORD_BYTES = 1024 * 1024;

export function encodeRecord(value: unknown, mark = false): Buffer {
  const json = JSON.stringify(value);
  const length = Buffer.byteLength(json);
  const out = Buffer.allocUnsafe(HEADER_BYTES + length);
  (mark ? MARK_MAGIC : MAGIC).copy(out, 0);
  out.writeUInt32BE(length, 4);
  out.write(json, HEADER_BYTES, 'utf8');
  out.writeUInt32BE(crc32(out.subarray(HEADER_BYTES)), 8);
  return out;
}

export interface Decoded {
  /** The record's JSON, parsed. */
  value: unknown;
  /** Where it starts and where the next one starts, in the buffer given. */
  start: number;
  end: number;
  /** A delivery mark, not a record. */
  mark: boolean;
}

export interface Skipped {
  /** Damaged records (bad checksum or header), or a record cut at the end. */
  records: number;
  bytes: number;
}

/**
 * The whole records in `buf` from `from`, and where reading should go on (the start of a record
 * not yet complete in `buf`, or its end). With `final`, what is left at the end is a torn record
 * and is counted as skipped.
 */
export function decodeRecords(
  buf: Buffer,
  from: number,
  final: boolean,
  skipped: Skipped,
): { records: Decoded[]; next: number } {
  const records: Decoded[] = [];
  let at = from;
  while (at < buf.length) {
    if (buf.length - at < HEADER_BYTES) break;
    const mark = buf.compare(MARK_MAGIC, 0, 4, at, at + 4) === 0;
    if (!mark && buf.compare(MAGIC, 0, 4, at, at + 4) !== 0) {
      at = resync(buf, at, skipped);
      continue;
    }
    const length = buf.readUInt32BE(at + 4);
    if (length > MAX_RECORD_BYTES) {
      at = resync(buf, at, skipped);
      continue;
    }
    if (buf.length - at - HEADER_BYTES < length) break;
    const payload = buf.subarray(at + HEADER_BYTES, at + HEADER_BYTES + length);
    let value: unknown;
    let ok = crc32(payload) === buf.readUInt32BE(at + 8);
    if (ok) {
      try {
        value = JSON.parse(payload.toString('utf8'));
      } catch {
        ok = false;
      }
    }
    if (!ok) {
      at = resync(buf, at, skipped);
      continue;
    }
    records.push({ value, start: at, end: at + HEADER_BYTES + length, mark });
    at += HEADER_BYTES + length;
  }
  if (final && at < buf.length) {
    skipped.records += 1;
    skipped.bytes += buf.length - at;
    at = buf.length;
  }
  return { records, next: at };
}

/** Past a damaged record: to the next magic (a record's or a mark's), the bytes between counted as one skipped record. */
function resync(buf: Buffer, at: number, skipped: Skipped): number {
  const record = buf.indexOf(MAGIC, at + 1);
  const mark = buf.indexOf(MARK_MAGIC, at + 1);
  const next = record < 0 ? mark : mark < 0 ? record : Math.min(record, mark);
  const to = next < 0 ? Math.max(at + 1, buf.length - (MAGIC.length - 1)) : next;
  skipped.records += 1;
  skipped.bytes += to - at;
  return to;
}
