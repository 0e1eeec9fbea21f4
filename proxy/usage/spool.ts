import {
  closeSync,
  existsSync,
  fstatSync,
  ftruncateSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  renameSync,
  rmSync,
  statSync,
  utimesSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { cutByRestart, leftBeforeDelivery, type UsageRecord } from './record.js';
import { decodeRecords, encodeRecord, type Skipped } from './spool-format.js';

/**
 * The usage spool: every record on local disk before it can be lost, until the store has it.
 *
 * A record is appended to the active segment file when it is made; the appends of one event-loop
 * turn go out in one `write` (group commit), and the answers they account for wait for it
 * (`durable()`), so a record is in the kernel before its answer is on the wire. There is no
 * `fsync`: a process crash (OOM kill, `kill -9`, a panic) keeps what the kernel has; a machine
 * crash may lose the last seconds.
 *
 * A stream is recorded when it ends, so a stream cut by the crash would leave nothing: at its
 * start a provisional record of it goes to `open.log`, and a start-up that finds one without
 * the stream's final record stores it as cut short (status 502, `gateway_restarted`).
 *
 * Segments are deleted once the store has committed every record in them; before a segment is
 * deleted `open.log` is rewritten without the streams that have ended, so a provisional record
 * never outlives its stream's final record. The spool is bounded in bytes: past the bound the
 * oldest segment goes, and its records not yet stored are counted as dropped.
 *
 * On start the replica replays its own directory and adopts the directories of replicas whose
 * heartbeat stopped (a shared volume after a pod moved): their segments become the backlog,
 * written to the store before newer records. Records carry their request id and the stores
 * ignore one they have stored, so a replay after a partial commit counts each record once.
 */

export interface SpoolPosition {
  seq: number;
  /** Where the record starts in its segment, and where the next one does. */
  start: number;
  end: number;
}

export interface SpoolOptions {
  /** The directory of all replicas' spools; this replica's is `<root>/<replica>`. */
  root: string;
  replica: string;
  /** Segments and open.log together at most. */
  maxBytes: number;
  segmentBytes?: number;
  /** A replica whose heartbeat is older than this has stopped: its spool is adopted. */
  staleMs?: number;
  /** Damaged or torn records skipped while reading the spool back. */
  onSkipped?: (file: string, skipped: Skipped) => void;
  /** Writing failed (a full disk): records are held in memory only until it works again. */
  onWriteError?: (err: unknown) => void;
  /** Records whose write failed: only the caller's memory has them now. */
  onUnwritten?: (records: UsageRecord[]) => void;
  /** Writing works again after failing. */
  onWriteRecovered?: () => void;
}

/** What a start found in the spool. */
export interface Replayed {
  /** Records in segments from before this start (the backlog, written before newer ones). */
  records: number;
  /** Streams cut by the crash, now recorded as such. */
  cutStreams: number;
  /** Whole answers of the backlog the crash cut before their last byte reached the socket (no delivery mark). */
  undelivered: number;
  /** Spools of other replicas adopted. */
  adopted: number;
}

interface Segment {
  seq: number;
  /** Bytes in the file (written; the pending group not included). */
  size: number;
  /** Records in it. */
  records: number;
}

const SEGMENT = /^seg-(\d{12})\.log$/;
const OPEN_LOG = 'open.log';
const HEARTBEAT = 'heartbeat';
const LOCK = 'lock';
const ADOPTED = 'adopted-';
const READ_CHUNK = 1024 * 1024;
/** How often a replica says it is alive, and how long a failed disk waits before the next try. */
const HEARTBEAT_MS = 10_000;
const RETRY_WRITE_MS = 5_000;

const alive = (pid: number): boolean => {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    // EPERM: alive, someone else's.
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
};

const readText = (file: string): string => {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return '';
  }
};

const mtime = (file: string): number => {
  try {
    return statSync(file).mtimeMs;
  } catch {
    return 0;
  }
};

const segmentName = (seq: number) => `seg-${String(seq).padStart(12, '0')}.log`;

/** A record as spooled: with a whole answer's, whether a delivery mark is to follow. */
type Spooled = UsageRecord & { awaitingDelivery?: true };
/** A delivery mark as spooled (its own magic: spool-format.ts). */
interface Mark {
  requestId: string;
  ok: boolean;
}

/**
 * What a record read back is: one awaiting a delivery mark is delivered with a mark that says
 * so, its caller's leaving with one that says not; with none, a crash cut it (`before`: a
 * record of an earlier run), or it is still on its way (this run: the answer was handed to the
 * socket, and counts as delivered).
 */
function settled(spooled: Spooled, mark: boolean | undefined, before: boolean): UsageRecord {
  const { awaitingDelivery, ...rec } = spooled;
  if (!awaitingDelivery || mark === true) return rec;
  if (mark === false) return leftBeforeDelivery(rec);
  return before ? cutByRestart(rec) : rec;
}

export class Spool {
  readonly dir: string;
  private readonly segmentBytes: number;
  private readonly segments: Segment[] = [];
  private fd = -1;
  private active!: Segment;
  /** Appends of this run, written by the microtask. */
  private pending: Buffer[] = [];
  private pendingRecs: UsageRecord[] = [];
  private pendingBytes = 0;
  private flushQueued = false;
  /** Resolved once the appends queued so far are written: what answers wait for. */
  private group: { promise: Promise<void>; resolve: () => void } | undefined;
  /** Streams open: their provisional records (for rewriting open.log) and whether any ended since. */
  private readonly open = new Map<string, Buffer>();
  private openFd = -1;
  private openBytes = 0;
  private openDirty = false;
  private openPending: Buffer[] = [];
  private failedAt = 0;
  private heartbeat: NodeJS.Timeout | undefined;
  readonly replayed: Replayed = { records: 0, cutStreams: 0, adopted: 0, undelivered: 0 };
  /**
   * Delivery marks of records read back from the spool: those of earlier runs (read at start),
   * and this run's of records only the spool holds (mark's `keep`). Each goes once its record is read.
   */
  private readonly marks = new Map<string, boolean>();
  /** Segments before this are of earlier runs (the backlog). */
  private liveSeq = 0;
  /** Damaged or torn records skipped since start. */
  skipped = 0;

  /** This replica's name in the root (its preferred one, or that with a suffix when taken). */
  readonly replica: string;

  constructor(private readonly opts: SpoolOptions) {
    this.segmentBytes = opts.segmentBytes ?? 8 * 1024 * 1024;
    mkdirSync(opts.root, { recursive: true });
    this.replica = this.claim();
    this.dir = join(opts.root, this.replica);
  }

  /**
   * A directory of its own: the preferred name unless a live process holds it (two standalone
   * proxies sharing a root), then the name with a suffix. A lock left by a process that died is
   * taken over: that is a restart finding its own spool (in a pod, the new container is pid 1
   * again, as the lock says).
   */
  private claim(): string {
    for (let n = 0; ; n++) {
      const name = n === 0 ? this.opts.replica : `${this.opts.replica}-${n}`;
      const dir = join(this.opts.root, name);
      mkdirSync(dir, { recursive: true });
      const lock = join(dir, LOCK);
      const mine = `${hostname()} ${process.pid}`;
      try {
        writeFileSync(lock, mine, { flag: 'wx' });
        this.touchDir(dir);
        return name;
      } catch {
        // Held: by whom?
      }
      let holder = '';
      try {
        holder = readFileSync(lock, 'utf8');
      } catch {
        // Gone meanwhile: taken over below.
      }
      const [host, pid] = holder.split(' ');
      const dead = host === hostname() && (Number(pid) === process.pid || !alive(Number(pid)));
      const silent = Date.now() - mtime(join(dir, HEARTBEAT)) > (this.opts.staleMs ?? 60_000);
      if (holder === '' || dead || (host !== hostname() && silent)) {
        writeFileSync(lock, mine);
        this.touchDir(dir);
        return name;
      }
    }
  }

  /**
   * Replays what the spool holds: adopts stopped replicas' spools, reads the segments (each record
   * handed to `backlog`, e.g. for budgets), turns streams cut by the crash into their records,
   * and opens a new active segment. Returns where the backlog starts, if there is one.
   */
  start(backlog: (rec: UsageRecord) => void): SpoolPosition | undefined {
    this.touchDir(this.dir);
    this.replayed.adopted = this.adopt();
    const finals = new Set<string>();
    const awaiting: string[] = [];
    for (const name of readdirSync(this.dir).sort()) {
      const m = SEGMENT.exec(name);
      if (!m) continue;
      const seg: Segment = { seq: Number(m[1]), size: statSync(join(this.dir, name)).size, records: 0 };
      // Damage is reported by this start-up scan only (later reads meet the same bytes).
      this.scanRange(
        seg.seq,
        0,
        seg.size,
        (rec: Spooled) => {
          seg.records += 1;
          finals.add(rec.requestId);
          if (rec.awaitingDelivery) awaiting.push(rec.requestId);
          backlog(rec);
        },
        Number.POSITIVE_INFINITY,
        true,
        (mark) => this.marks.set(mark.requestId, mark.ok),
      );
      this.segments.push(seg);
    }
    this.replayed.records = this.segments.reduce((n, s) => n + s.records, 0);
    this.replayed.undelivered = awaiting.filter((id) => !this.marks.has(id)).length;
    const first = this.segments[0];
    this.openSegment((this.segments.at(-1)?.seq ?? 0) + 1);
    this.liveSeq = this.active.seq;
    // Streams whose final record never came: recorded as cut, in the new segment (after the backlog).
    const cut: UsageRecord[] = [];
    this.readFile(join(this.dir, OPEN_LOG), (rec) => {
      if (!finals.has(rec.requestId)) {
        finals.add(rec.requestId);
        cut.push({ ...cutByRestart(rec), stream: true });
      }
    });
    for (const rec of cut) {
      this.append(rec);
      backlog(rec);
    }
    this.replayed.cutStreams = cut.length;
    this.flush();
    // The cut records written: open.log starts empty. Not written (a full disk): it stays as it
    // is, and the next start records them again, under the same request id and time (once).
    if (this.failedAt === 0) this.rewriteOpenLog();
    else this.reopenOpenLog();
    this.heartbeat = setInterval(() => this.touchDir(this.dir), HEARTBEAT_MS);
    this.heartbeat.unref();
    if (first) return { seq: first.seq, start: 0, end: 0 };
    if (cut.length > 0) return { seq: this.active.seq, start: 0, end: 0 };
    return undefined;
  }

  /**
   * Appends a record; where it lies, or nothing when the disk fails (the caller holds it in memory).
   * `awaitsDelivery`: a whole answer's, whose delivery mark follows (mark); read back without
   * one after a crash, it is recorded as cut (cutByRestart).
   */
  append(rec: UsageRecord, awaitsDelivery = false): SpoolPosition | undefined {
    // The stream has its final record now (on disk or in memory): its provisional one must go,
    // whatever happens to this write, or a restart would record it a second time, as cut.
    if (this.open.delete(rec.requestId)) this.openDirty = true;
    if (this.closed) return undefined;
    if (this.failedAt > 0 && Date.now() - this.failedAt < RETRY_WRITE_MS) return undefined;
    // A segment that could not be created (a full disk): tried again.
    if (this.fd < 0 && this.started) this.openSegment(this.active.seq);
    if (this.fd < 0) return undefined;
    const bytes = encodeRecord(awaitsDelivery ? { ...rec, awaitingDelivery: true } : rec);
    const start = this.active.size + this.pendingBytes;
    this.pending.push(bytes);
    this.pendingRecs.push(rec);
    this.pendingBytes += bytes.length;
    this.queueFlush();
    return { seq: this.active.seq, start, end: start + bytes.length };
  }

  /**
   * Whether the answer of a record appended with `awaitsDelivery` reached the socket whole. No
   * write of its own: it goes with the next group commit (or the recorder's next tick, flushMarks),
   * so a crash before that records the answer as cut, erring toward not served. `keep`: only the
   * spool holds the record (read back later), so the mark is kept in memory for that read.
   */
  mark(requestId: string, ok: boolean, keep = false): void {
    if (keep) this.marks.set(requestId, ok);
    // A failing disk is tried again by records, on their schedule (append), not by marks.
    if (this.closed || this.fd < 0 || (this.failedAt > 0 && Date.now() - this.failedAt < RETRY_WRITE_MS)) return;
    const bytes = encodeRecord({ requestId, ok } satisfies Mark, true);
    this.pending.push(bytes);
    this.pendingBytes += bytes.length;
  }

  /**
   * Writes the delivery marks waiting for a group commit, when no record brought one (off the
   * request path). A commit queued meanwhile may find its records written already (an answer
   * alone writes its own at once) and then leaves marks for this tick: so written here whatever
   * is queued, the queued records going with them a turn early.
   */
  flushMarks(): void {
    if (this.pending.length > 0) this.flush();
  }

  /** A stream began: its provisional record, stored as cut should the process die before it ends. */
  begin(rec: UsageRecord): void {
    if (this.closed || (this.failedAt > 0 && Date.now() - this.failedAt < RETRY_WRITE_MS)) return;
    // open.log not open (its rewrite failed, a full disk): opened again as it is.
    if (this.openFd < 0) this.reopenOpenLog();
    if (this.openFd < 0) return;
    const bytes = encodeRecord(rec);
    this.open.set(rec.requestId, bytes);
    this.openPending.push(bytes);
    this.queueFlush();
  }

  private queueFlush(): void {
    if (this.flushQueued) return;
    this.flushQueued = true;
    setImmediate(() => {
      // Written meanwhile (a lone request's record goes at once): delivery marks alone wait for
      // the next record's write, or the recorder's tick (flushMarks), not a write of their own.
      if (this.pendingRecs.length === 0 && this.openPending.length === 0) this.flushQueued = false;
      else this.flush();
    });
  }

  /**
   * A promise resolved once every record appended so far is written (or its write failed and
   * only memory holds it); nothing when there is nothing to write, or when `alone` (the caller
   * knows no other request is in progress) and they were written at once. The gateway writes an answer
   * only after its record: a crash between the two cannot leave an answered request unrecorded.
   */
  durable(alone = false): Promise<void> | undefined {
    // Delivery marks alone make no answer wait.
    if (this.pendingRecs.length === 0 && this.openPending.length === 0) return undefined;
    // No other request in progress: nothing to group with, so written now and its answer waits for no turn.
    if (alone) {
      this.flush();
      return undefined;
    }
    if (!this.group) {
      let resolve: () => void = () => {};
      const promise = new Promise<void>((r) => {
        resolve = r;
      });
      this.group = { promise, resolve };
    }
    return this.group.promise;
  }

  /** Writes the appends of this event-loop turn: one write per file, then their answers go out. */
  flush(): void {
    this.flushQueued = false;
    const group = this.group;
    this.group = undefined;
    try {
      this.write();
    } finally {
      group?.resolve();
    }
  }

  private write(): void {
    if (this.openPending.length > 0) {
      const buf = this.openPending.length === 1 ? (this.openPending[0] as Buffer) : Buffer.concat(this.openPending);
      this.openPending = [];
      if (this.writeAll(this.openFd, buf, this.openBytes)) this.openBytes += buf.length;
    }
    if (this.pending.length === 0) return;
    const buf = this.pending.length === 1 ? (this.pending[0] as Buffer) : Buffer.concat(this.pending);
    const records = this.pendingRecs;
    this.pending = [];
    this.pendingRecs = [];
    this.pendingBytes = 0;
    if (!this.writeAll(this.fd, buf, this.active.size)) {
      this.opts.onUnwritten?.(records);
      return;
    }
    this.active.size += buf.length;
    this.active.records += records.length;
    if (this.active.size >= this.segmentBytes) this.openSegment(this.active.seq + 1);
    this.bound();
  }

  /** One write of a whole buffer at the file's end; on failure the file is cut back to `size`. */
  private writeAll(fd: number, buf: Buffer, size: number): boolean {
    try {
      let done = 0;
      while (done < buf.length) done += writeSync(fd, buf, done, buf.length - done, size + done);
      if (this.failedAt > 0) {
        this.failedAt = 0;
        this.opts.onWriteRecovered?.();
      }
      return true;
    } catch (err) {
      try {
        ftruncateSync(fd, size);
      } catch {
        // The file keeps a torn record at its end; a reader skips it.
      }
      if (this.failedAt === 0) this.opts.onWriteError?.(err);
      this.failedAt = Date.now();
      return false;
    }
  }

  private started = false;
  private closed = false;

  private openSegment(seq: number): void {
    this.started = true;
    if (this.fd >= 0) closeSync(this.fd);
    this.fd = -1;
    try {
      this.fd = openSync(join(this.dir, segmentName(seq)), 'a');
    } catch (err) {
      // No room for even a new file: appends are refused (held in memory) until a later commit retries.
      if (this.failedAt === 0) this.opts.onWriteError?.(err);
      this.failedAt = Date.now();
      this.active = { seq, size: 0, records: 0 };
      return;
    }
    this.active = { seq, size: fstatSync(this.fd).size, records: 0 };
    this.segments.push(this.active);
  }

  /**
   * Everything up to and including the record at `pos` is in the store: segments before it go
   * (open.log first rewritten without the streams that ended, see the class comment).
   */
  commit(pos: SpoolPosition): void {
    if (!this.segments.some((s) => s.seq < pos.seq)) return;
    if (this.openDirty) this.rewriteOpenLog();
    // Not rewritten (a full disk): open.log may still name streams whose final records are in
    // these segments, so they stay until it is.
    if (this.openDirty) return;
    while ((this.segments[0]?.seq ?? Number.POSITIVE_INFINITY) < pos.seq) this.remove(this.segments[0] as Segment);
  }

  /**
   * The store has every record: the active segment too, once it is large (or the disk is full),
   * is replaced by a new one and goes.
   */
  drained(): void {
    if (this.pendingRecs.length > 0 || this.fd < 0) return;
    if (this.failedAt === 0 && this.active.size < this.segmentBytes / 4) return;
    this.openSegment(this.active.seq + 1);
    this.commit({ seq: this.active.seq, start: 0, end: 0 });
  }

  private remove(seg: Segment): void {
    if (seg === this.active) return;
    this.segments.splice(this.segments.indexOf(seg), 1);
    rmSync(join(this.dir, segmentName(seg.seq)), { force: true });
  }

  private dropHook: ((seq: number) => void) | undefined;

  /** Told of each segment the bound is about to drop (the recorder counts and moves past it). */
  onDrop(hook: (seq: number) => void): void {
    this.dropHook = hook;
  }

  private bound(): void {
    while (this.bytes() > this.opts.maxBytes && this.segments.length > 1) {
      const oldest = this.segments[0] as Segment;
      if (this.openDirty) this.rewriteOpenLog();
      if (this.openDirty) return;
      this.dropHook?.(oldest.seq);
      this.remove(oldest);
    }
  }

  /** Bytes on disk: segments and open.log. */
  bytes(): number {
    let n = this.openBytes;
    for (const s of this.segments) n += s.size;
    return n;
  }

  /** Records in segment `seq` from byte `from` on (to count what a dropped segment held). */
  recordsFrom(seq: number, from: number): number {
    const seg = this.segments.find((s) => s.seq === seq);
    if (!seg) return 0;
    if (from === 0) return seg.records;
    let n = 0;
    this.scanRange(seg.seq, from, seg.size, () => {
      n += 1;
    });
    return n;
  }

  /**
   * Up to `max` records from `from` on, each with its position; `next` is where the next read
   * starts. Nothing read means the reader has caught up with the appends.
   */
  read(
    from: SpoolPosition,
    max: number,
  ): { records: Array<{ rec: UsageRecord; pos: SpoolPosition }>; next: SpoolPosition } {
    this.flush();
    const out: Array<{ rec: UsageRecord; pos: SpoolPosition }> = [];
    let seq = from.seq;
    let offset = from.end;
    for (;;) {
      const seg = this.segments.find((s) => s.seq >= seq);
      if (!seg) break;
      if (seg.seq !== seq) {
        seq = seg.seq;
        offset = 0;
      }
      this.scanRange(
        seq,
        offset,
        seg.size,
        (rec, start, end) => {
          out.push({ rec: this.settle(rec, seq), pos: { seq, start, end } });
          offset = end;
        },
        max - out.length,
        false,
        (_mark, end) => {
          offset = end;
        },
      );
      if (out.length >= max || seg === this.active) break;
      // The rest of this segment is damage: on to the next.
      seq += 1;
      offset = 0;
    }
    return { records: out, next: { seq, start: offset, end: offset } };
  }

  /** A record read back, its delivery mark applied (see settled). */
  private settle(rec: Spooled, seq: number): UsageRecord {
    if (!rec.awaitingDelivery) return rec;
    const mark = this.marks.get(rec.requestId);
    this.marks.delete(rec.requestId);
    return settled(rec, mark, seq < this.liveSeq);
  }

  /** Records (to `each`) and delivery marks (to `onMark`) of a segment's range. */
  private scanRange(
    seq: number,
    from: number,
    to: number,
    each: (rec: UsageRecord, start: number, end: number) => void,
    max = Number.POSITIVE_INFINITY,
    report = false,
    onMark?: (mark: Mark, end: number) => void,
  ): void {
    const file = join(this.dir, segmentName(seq));
    let fd: number;
    try {
      fd = openSync(file, 'r');
    } catch {
      return;
    }
    const skipped: Skipped = { records: 0, bytes: 0 };
    try {
      let count = 0;
      let at = from;
      let carry = Buffer.alloc(0);
      let carryAt = from;
      while (at < to && count < max) {
        const chunk = Buffer.allocUnsafe(Math.min(READ_CHUNK, to - at));
        const n = readSync(fd, chunk, 0, chunk.length, at);
        if (n <= 0) break;
        at += n;
        const buf = carry.length > 0 ? Buffer.concat([carry, chunk.subarray(0, n)]) : chunk.subarray(0, n);
        const { records, next } = decodeRecords(buf, 0, at >= to, skipped);
        for (const r of records) {
          if (count >= max) break;
          if (r.mark) {
            onMark?.(r.value as Mark, carryAt + r.end);
            continue;
          }
          each(r.value as UsageRecord, carryAt + r.start, carryAt + r.end);
          count += 1;
        }
        if (count >= max) break;
        carry = Buffer.from(buf.subarray(next));
        carryAt += next;
      }
    } finally {
      closeSync(fd);
    }
    // Said once, by the start-up scan: later reads of the same bytes meet the same damage.
    if (report && skipped.records > 0) this.reportSkipped(file, skipped);
  }

  private readFile(file: string, each: (rec: UsageRecord) => void): void {
    if (!existsSync(file)) return;
    const size = statSync(file).size;
    const skipped: Skipped = { records: 0, bytes: 0 };
    const fd = openSync(file, 'r');
    try {
      const buf = Buffer.allocUnsafe(size);
      const n = size > 0 ? readSync(fd, buf, 0, size, 0) : 0;
      for (const r of decodeRecords(buf.subarray(0, n), 0, true, skipped).records)
        if (!r.mark) each(r.value as UsageRecord);
    } finally {
      closeSync(fd);
    }
    if (skipped.records > 0) this.reportSkipped(file, skipped);
  }

  private reportSkipped(file: string, skipped: Skipped): void {
    this.skipped += skipped.records;
    this.opts.onSkipped?.(file, skipped);
  }

  private reopenOpenLog(): void {
    try {
      this.openFd = openSync(join(this.dir, OPEN_LOG), 'a');
      this.openBytes = fstatSync(this.openFd).size;
    } catch (err) {
      if (this.failedAt === 0) this.opts.onWriteError?.(err);
      this.failedAt = Date.now();
    }
  }

  /** open.log holding only the streams still open (a new file renamed over the old). */
  private rewriteOpenLog(): void {
    const file = join(this.dir, OPEN_LOG);
    const tmp = `${file}.tmp`;
    const live = [...this.open.values()];
    const buf = live.length > 0 ? Buffer.concat(live) : Buffer.alloc(0);
    try {
      writeFileSync(tmp, buf);
      renameSync(tmp, file);
    } catch (err) {
      if (this.failedAt === 0) this.opts.onWriteError?.(err);
      this.failedAt = Date.now();
      return;
    }
    if (this.openFd >= 0) closeSync(this.openFd);
    this.openFd = openSync(file, 'a');
    this.openBytes = buf.length;
    this.openPending = [];
    this.openDirty = false;
  }

  /**
   * Spools of replicas whose heartbeat stopped: claimed by renaming their directory into this
   * one's (atomic: of two replicas claiming the same spool, one rename succeeds), then their
   * segments numbered after this replica's own and their open streams added to its open.log.
   */
  private adopt(): number {
    let adopted = 0;
    const stale = this.opts.staleMs ?? 60_000;
    // Claimed earlier but not yet merged (a crash in between) come first.
    const claimed = readdirSync(this.dir)
      .filter((n) => n.startsWith(ADOPTED))
      .map((n) => join(this.dir, n));
    for (const name of readdirSync(this.opts.root)) {
      if (name === this.replica) continue;
      const other = join(this.opts.root, name);
      try {
        if (!statSync(other).isDirectory()) continue;
      } catch {
        continue;
      }
      // No heartbeat: a replica that died before its first one.
      if (Date.now() - mtime(join(other, HEARTBEAT)) < stale) continue;
      // A live process on this host holds it (a replay longer than the heartbeat's period).
      const [host, pid] = readText(join(other, LOCK)).split(' ');
      if (host === hostname() && Number(pid) !== process.pid && alive(Number(pid))) continue;
      const to = join(this.dir, `${ADOPTED}${name}-${Date.now()}`);
      try {
        renameSync(other, to);
      } catch {
        continue;
      }
      claimed.push(to);
      adopted += 1;
    }
    const own = readdirSync(this.dir)
      .map((n) => SEGMENT.exec(n))
      .filter((m) => m !== null);
    let seq = own.reduce((max, m) => Math.max(max, Number(m[1])), 0);
    for (const dir of claimed) {
      for (const name of readdirSync(dir).sort())
        if (SEGMENT.test(name)) renameSync(join(dir, name), join(this.dir, segmentName(++seq)));
      const open = join(dir, OPEN_LOG);
      if (existsSync(open)) writeFileSync(join(this.dir, OPEN_LOG), readFileSync(open), { flag: 'a' });
      rmSync(dir, { recursive: true, force: true });
    }
    return adopted;
  }

  private touchDir(dir: string): void {
    const file = join(dir, HEARTBEAT);
    const now = new Date();
    try {
      utimesSync(file, now, now);
    } catch {
      try {
        writeFileSync(file, '');
      } catch {
        // A disk that takes no write: the spool says so on its next append.
      }
    }
  }

  /**
   * Writes what is pending and closes the files; what the store has not got stays for the next
   * start. `stored`: the store has every record (a clean shutdown), so no segment is kept.
   */
  close(stored = false): void {
    this.flush();
    this.closed = true;
    clearInterval(this.heartbeat);
    if (this.openDirty) this.rewriteOpenLog();
    if (this.fd >= 0) closeSync(this.fd);
    if (this.openFd >= 0) closeSync(this.openFd);
    this.fd = -1;
    this.openFd = -1;
    rmSync(join(this.dir, LOCK), { force: true });
    if (stored && this.open.size === 0) {
      for (const seg of this.segments) rmSync(join(this.dir, segmentName(seg.seq)), { force: true });
      this.segments.length = 0;
    }
  }
}
