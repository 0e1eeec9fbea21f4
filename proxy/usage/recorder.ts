import type { Counter } from 'prom-client';
import { leftBeforeDelivery, type UsageRecord, type UsageSink } from './record.js';
import { boundRecord } from './record-columns.js';
import type { Spool, SpoolPosition } from './spool.js';
import type { StoredUsage, UsageStore } from './store.js';

/**
 * Records usage off the hot path: record() appends to the spool (proxy/usage/spool.ts: local
 * disk, so a crash loses nothing) and to a small in-memory buffer; a timer writes what is
 * buffered to the store in batches. When the store is away for long, the buffer stops growing
 * and the backlog is read back from the spool once the store answers: memory stays flat
 * however long the outage. Without a spool the buffer holds the backlog, as before. A store that fails (the database is down,
 * restarting, failing over, out of disk) never fails or slows a request: the batch goes back
 * to the front of the buffer and is written once the store answers again, with backoff in
 * between. Only past the buffer's bound are records dropped, and then counted (metric) and
 * reported (onError, once per outage), never silently. Writes are idempotent per request id
 * in the stores, so a batch whose commit was not acknowledged can be retried without counting
 * twice. A record's `payload` (a tool call's arguments and result) is cut to MAX_PAYLOAD_BYTES
 * here, before the spool, whatever its producer sent.
 */
export interface UsageRecorderOptions {
  /** Only its writes: a thread may do them (proxy/usage/reports.ts WorkerInserts). */
  store: Pick<UsageStore, 'insert'>;
  /** Records held in memory at most (buffered while the store is down; with a spool, the rest wait there). */
  maxQueue?: number;
  /** Where records wait on disk until stored; started (replayed) by the caller. */
  spool?: Spool;
  /** Where the spool's backlog from before this start begins (Spool.start's answer). */
  backlog?: SpoolPosition;
  /** Records per write. */
  batchSize?: number;
  flushMs?: number;
  /** Longest wait between retries while the store fails. */
  maxBackoffMs?: number;
  dropped?: Counter;
  onError?: (err: unknown) => void;
  /** Records were dropped (buffer full): said once until the store recovers, then counted there. */
  onDropping?: () => void;
  /** The store answers again after failing: how many records are held and how many were dropped meanwhile. */
  onRecovered?: (held: number, dropped: number) => void;
  /** A batch is in the store (budgets stop counting it as this replica's own). */
  onWritten?: (records: StoredUsage[]) => void;
}

interface Entry {
  rec: StoredUsage;
  /** Where it lies in the spool; none without one (or while its disk fails). */
  pos?: SpoolPosition;
  /** Since when its answer is being written (Date.now()): not stored until delivered() says how it went. */
  awaiting?: number;
}

/**
 * How long a record waits for its answer's delivery before it is stored as delivered anyway (a
 * caller reading a large answer slowly): the store must not wait on a caller for ever.
 */
export const DELIVERY_WAIT_MS = 10_000;

export class UsageRecorder implements UsageSink {
  private queue: Entry[] = [];
  /** Records from here on are in the spool only (the buffer was full): read back from there. */
  private spilled: SpoolPosition | undefined;
  /** Records only the spool holds (not in the buffer): what a failed spool write would lose. */
  private readonly spoolOnly = new WeakSet<UsageRecord>();
  /**
   * Records whose answers are being written, by request id: the entry in the buffer, or
   * undefined for one only the spool holds (its mark is kept by the spool for its read-back).
   */
  private readonly awaiting = new Map<string, Entry | undefined>();
  private closing = false;
  /** Where the batch being written from the spool ends, while it is. */
  private reading: SpoolPosition | undefined;
  private readonly timer: NodeJS.Timeout;
  private readonly max: number;
  private readonly batchSize: number;
  private readonly flushMs: number;
  private writing: Promise<void> | undefined;
  /** A flush asked for while one was writing: it runs after that one (which took only what it found). */
  private following: Promise<void> | undefined;
  private failing = false;
  private retryAt = 0;
  private backoffMs = 0;
  /** Records written to the store since start. */
  written = 0;
  /** Records dropped since start (buffer full). */
  droppedCount = 0;

  constructor(private readonly opts: UsageRecorderOptions) {
    this.max = opts.maxQueue ?? 50_000;
    this.batchSize = opts.batchSize ?? 2_000;
    this.flushMs = opts.flushMs ?? 250;
    this.timer = setInterval(() => void this.flush(), this.flushMs);
    this.timer.unref();
    this.spilled = opts.backlog;
    // A segment the spool's byte bound drops: what of it was not yet read back is lost, counted.
    opts.spool?.onDrop((seq) => {
      const from = this.spilled;
      if (!from || from.seq > seq) return;
      // A batch read from the spool and being written is not lost: counted from past it.
      const at = this.reading ?? from;
      const lost = at.seq > seq ? 0 : (opts.spool?.recordsFrom(seq, at.end) ?? 0);
      this.spilled = { seq: seq + 1, start: 0, end: 0 };
      if (lost > 0) this.drop(lost);
    });
  }

  record(given: UsageRecord, awaitsDelivery = false): void {
    // Bounded before the spool: a record past the spool's own bound would be read back as damage.
    const rec = boundRecord(given);
    const pos = this.opts.spool?.append(rec, awaitsDelivery);
    if (this.spilled === undefined && this.queue.length < this.max) {
      const entry: Entry = pos ? { rec, pos } : { rec };
      if (awaitsDelivery) {
        entry.awaiting = Date.now();
        this.awaiting.set(rec.requestId, entry);
      }
      this.queue.push(entry);
      return;
    }
    if (pos) {
      // The spool holds it (and everything after it) until the store takes the backlog.
      this.spilled ??= { seq: pos.seq, start: pos.start, end: pos.start };
      this.spoolOnly.add(rec);
      if (awaitsDelivery) this.awaiting.set(rec.requestId, undefined);
      return;
    }
    this.drop(1);
  }

  /**
   * The answer of a record made with `awaitsDelivery` reached the socket whole (ok) or not (the
   * caller left first): the record is stored as such, and the spool gets the mark with its next
   * write (none of its own), for a restart to tell a delivered answer from one a crash cut.
   */
  delivered(requestId: string, ok: boolean): void {
    if (!this.awaiting.has(requestId)) return;
    const entry = this.awaiting.get(requestId);
    this.awaiting.delete(requestId);
    // A record the spool could not take (a full disk) needs no mark there.
    if (!entry || entry.pos) this.opts.spool?.mark(requestId, ok, entry === undefined);
    if (!entry) return;
    entry.awaiting = undefined;
    if (!ok) entry.rec = leftBeforeDelivery(entry.rec);
  }

  /** A stream began: on disk at once, so a crash before it ends still records it (as cut). */
  begin(rec: UsageRecord): void {
    this.opts.spool?.begin(boundRecord(rec));
  }

  durable(alone = false): Promise<void> | undefined {
    return this.opts.spool?.durable(alone);
  }

  /** Records the spool could not write (full disk) while they were only there: held in memory if room. */
  unwritten(records: UsageRecord[]): void {
    // Those in the buffer are written from there; only the spool had the others.
    this.hold(records.filter((rec) => this.spoolOnly.has(rec)));
  }

  /** Records only memory can hold now (their spool write failed): in the buffer if there is room. */
  hold(records: UsageRecord[]): void {
    for (const rec of records) {
      if (this.queue.length < this.max) this.queue.push({ rec });
      else this.drop(1);
    }
  }

  /** Records waiting in memory (the spool may hold more: see `spilled`). */
  get pending(): number {
    return this.queue.length;
  }

  private droppedInOutage = 0;

  private drop(n: number): void {
    if (this.droppedInOutage === 0) this.opts.onDropping?.();
    this.droppedInOutage += n;
    this.droppedCount += n;
    this.opts.dropped?.inc(n);
  }

  /**
   * Writes what is buffered, batch by batch; resolves when done or when the store fails. Asked
   * while a flush writes, it runs after that one.
   */
  flush(): Promise<void> {
    // The delivery marks no group commit took (a quiet moment): written on this tick.
    this.opts.spool?.flushMarks();
    if (this.writing) {
      const again = () => {
        this.following = undefined;
        return this.flush();
      };
      this.following ??= this.writing.then(again, again);
      return this.following;
    }
    if ((this.queue.length === 0 && !this.spilled) || Date.now() < this.retryAt) return Promise.resolve();
    this.writing = this.drain().finally(() => {
      this.writing = undefined;
    });
    return this.writing;
  }

  /** The next batch: the buffer's oldest records, else the spool's backlog (none: caught up). */
  private next(): { entries: Entry[]; next?: SpoolPosition } {
    if (this.queue.length > 0) return { entries: this.ready() };
    const spool = this.opts.spool;
    if (!this.spilled || !spool) return { entries: [] };
    const { records, next } = spool.read(this.spilled, this.batchSize);
    // Caught up: from here on new records go to the buffer again (decided in this same turn).
    if (records.length === 0) this.spilled = undefined;
    return { entries: records, next };
  }

  /**
   * The buffer's oldest records whose delivery is known (or waited for long enough, or the
   * recorder is closing): a record is stored once, so as delivered or not, never before it is known.
   */
  private ready(): Entry[] {
    const now = Date.now();
    const out: Entry[] = [];
    for (const e of this.queue) {
      if (out.length >= this.batchSize) break;
      if (e.awaiting !== undefined) {
        if (!this.closing && now - e.awaiting < DELIVERY_WAIT_MS) continue;
        // Stored as delivered: its answer was handed to the socket, and its caller is still reading.
        e.awaiting = undefined;
        this.awaiting.delete(e.rec.requestId);
      }
      out.push(e);
    }
    return out;
  }

  /** Takes a stored batch out of the buffer: its head, unless it skipped records awaiting delivery. */
  private taken(entries: Entry[]): void {
    if (this.queue[entries.length - 1] === entries.at(-1)) {
      this.queue.splice(0, entries.length);
      return;
    }
    const done = new Set(entries);
    this.queue = this.queue.filter((e) => !done.has(e));
  }

  /**
   * Writes the records buffered when it began (and the spool's backlog): those that come while it
   * writes wait for the next flush. Draining on until the buffer is empty made a transaction of
   * the few records each insert's time let in: at one caller, 117 transactions a second of 6
   * records each, every one a commit (its pages to the WAL, its locks) on the store's thread.
   */
  private async drain(): Promise<void> {
    let owed = this.queue.length;
    for (;;) {
      if (owed <= 0 && this.spilled === undefined && !this.closing) return;
      const { entries, next } = this.next();
      if (entries.length === 0) return;
      if (!next) owed -= entries.length;
      const batch = entries.map((e) => e.rec);
      this.reading = next;
      try {
        await this.opts.store.insert(batch);
      } catch (err) {
        this.reading = undefined;
        // Held for the next attempt; the buffer's bound still holds (the oldest go first).
        if (!this.failing) this.opts.onError?.(err);
        this.failing = true;
        this.backoffMs = Math.min(this.opts.maxBackoffMs ?? 5_000, Math.max(this.flushMs, this.backoffMs * 2));
        this.retryAt = Date.now() + this.backoffMs;
        const over = this.queue.length - this.max;
        if (over > 0) {
          this.queue.splice(0, over);
          this.drop(over);
        }
        return;
      }
      this.reading = undefined;
      if (next) {
        // From the spool: read on after this batch, unless the bound dropped past it meanwhile.
        const at = this.spilled;
        if (at && (at.seq < next.seq || (at.seq === next.seq && at.end <= next.end))) this.spilled = next;
      } else this.taken(entries);
      const last = entries.findLast((e) => e.pos)?.pos;
      // A record still awaiting delivery keeps its segment (and those after it) until it is stored.
      const held = this.queue.find((e) => e.pos)?.pos;
      if (last) this.opts.spool?.commit(held && held.seq < last.seq ? { seq: held.seq, start: 0, end: 0 } : last);
      if (this.queue.length === 0 && this.spilled === undefined) this.opts.spool?.drained();
      this.written += batch.length;
      this.opts.onWritten?.(batch);
      if (this.failing) {
        this.failing = false;
        this.backoffMs = 0;
        this.retryAt = 0;
        this.opts.onRecovered?.(this.queue.length, this.droppedInOutage);
        this.droppedInOutage = 0;
      }
    }
  }

  /**
   * Writes what is buffered (trying until `deadlineMs`) and stops the timer (shutdown). With a
   * spool, what the store did not take stays there for the next start; without, it is dropped.
   */
  async close(deadlineMs = 5_000): Promise<void> {
    clearInterval(this.timer);
    // Answers still being written when the server stopped: stored as delivered (they were handed to their sockets).
    this.closing = true;
    const until = Date.now() + deadlineMs;
    while ((this.queue.length > 0 || this.spilled) && Date.now() < until) {
      this.retryAt = 0;
      await this.flush();
      if (this.failing) await new Promise((r) => setTimeout(r, Math.min(250, Math.max(0, until - Date.now()))));
    }
    if (this.opts.spool) {
      // Only the records its disk failed to take are lost.
      const unspooled = this.queue.filter((e) => !e.pos).length;
      if (unspooled > 0) this.drop(unspooled);
      const stored = this.queue.length === 0 && this.spilled === undefined;
      this.queue = [];
      this.opts.spool.close(stored);
      return;
    }
    if (this.queue.length > 0) {
      this.drop(this.queue.length);
      this.queue = [];
    }
  }
}
