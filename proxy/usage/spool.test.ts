import {
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  statSync,
  symlinkSync,
  truncateSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, vi } from 'vitest';
import { range, rec, routedRecords, T0, toolCall } from '../../e2e/support/usage-store-contract.js';
import type { UsageRecord } from './record.js';
import { MAX_PAYLOAD_BYTES, PAYLOAD_CUT } from './record-columns.js';
import { DELIVERY_WAIT_MS, UsageRecorder } from './recorder.js';
import { Spool, type SpoolOptions } from './spool.js';
import { encodeRecord } from './spool-format.js';
import { SqliteUsageStore } from './sqlite-store.js';
import type { StoredUsage, UsageStore } from './store.js';

const root = () => mkdtempSync(join(tmpdir(), 'spool-'));
const segments = (dir: string) => readdirSync(dir).filter((n) => n.startsWith('seg-'));
const ids = (records: UsageRecord[]) => records.map((r) => r.requestId);
const numbered = (n: number, from = 0) =>
  Array.from({ length: n }, (_, i) => ({ ...rec({ at: T0 }), requestId: `req_${from + i}` }));

/** A store that keeps what it is given, counting each request id once (as the real stores do), and can fail. */
class FakeStore implements Pick<UsageStore, 'insert'> {
  readonly rows = new Map<string, StoredUsage>();
  inserts = 0;
  down = false;
  async insert(records: StoredUsage[]): Promise<void> {
    if (this.down) throw new Error('store down');
    this.inserts += 1;
    for (const r of records) if (!this.rows.has(r.requestId)) this.rows.set(r.requestId, r);
  }
}

/** A spool started the way the proxy starts it, with what its replay handed over. */
function started(opts: Partial<SpoolOptions> & { root: string }) {
  const seen: UsageRecord[] = [];
  const skipped: number[] = [];
  const spool = new Spool({
    replica: 'proxy-a',
    maxBytes: 64 * 1024 * 1024,
    onSkipped: (_f, s) => skipped.push(s.records),
    ...opts,
  });
  const backlog = spool.start((r) => seen.push(r));
  return { spool, backlog, seen, skipped };
}

/**
 * Lets the recorder's timer and the spool's queued write run, past that write (a setImmediate): a timer alone can fire first, where the write
 * was queued from the check phase and a loaded machine let 1 ms pass; an immediate queued after it
 * runs after it.
 */
const tick = () => new Promise((r) => setTimeout(r, 0)).then(() => new Promise((r) => setImmediate(r)));

describe('usage spool', () => {
  it('has a record in its file before the answer it accounts for may go out', async () => {
    const dir = root();
    const { spool } = started({ root: dir });
    const size = () => statSync(join(spool.dir, segments(spool.dir)[0] ?? '')).size;
    expect(spool.durable()).toBeUndefined();
    // Other requests in progress: the answer waits for the turn's one write.
    spool.append(numbered(1)[0] as UsageRecord);
    const durable = spool.durable();
    expect(durable).toBeInstanceOf(Promise);
    expect(size()).toBe(0);
    await durable;
    const one = size();
    expect(one).toBeGreaterThan(100);
    expect(spool.durable()).toBeUndefined();
    // A lone request: written at once, its answer waits for nothing.
    spool.append(numbered(1, 1)[0] as UsageRecord);
    expect(spool.durable(true)).toBeUndefined();
    expect(size()).toBeGreaterThan(one);
    spool.close();
  });

  it('writes the records of one event-loop turn in one write', async () => {
    const dir = root();
    const { spool } = started({ root: dir });
    const file = () => join(spool.dir, segments(spool.dir)[0] ?? '');
    // Records made by separate jobs of one turn (microtasks here; I/O callbacks in the proxy).
    for (const r of numbered(50)) queueMicrotask(() => spool.append(r));
    await Promise.resolve();
    expect(statSync(file()).size).toBe(0);
    const writes = (spool as unknown as { write(): void }).write.bind(spool);
    let calls = 0;
    (spool as unknown as { write(): void }).write = () => {
      calls += 1;
      writes();
    };
    await spool.durable();
    expect(calls).toBe(1);
    expect(statSync(file()).size).toBeGreaterThan(50 * 200);
    spool.close();
  });

  it('replays after a crash what the store never got, and a replay after a partial commit counts each record once', async () => {
    const dir = root();
    const store = new FakeStore();
    const a = started({ root: dir });
    const recorder = new UsageRecorder({ store, spool: a.spool, flushMs: 60_000 });
    for (const r of numbered(10)) recorder.record(r);
    await recorder.flush();
    expect(store.rows.size).toBe(10);
    for (const r of numbered(5, 10)) recorder.record(r);
    await tick();
    // kill -9 here: the process goes, its files stay as the kernel has them (nothing closed).
    const b = started({ root: dir });
    // The 5 unwritten, and those of the 10 written whose segment was not yet deleted (at most all).
    expect(ids(b.seen)).toEqual(expect.arrayContaining(['req_10', 'req_11', 'req_12', 'req_13', 'req_14']));
    const again = new UsageRecorder({
      store,
      spool: b.spool,
      ...(b.backlog ? { backlog: b.backlog } : {}),
      flushMs: 60_000,
    });
    await again.flush();
    expect(store.rows.size).toBe(15);
    // Replayed twice (a crash during the replay): still 15.
    const c = started({ root: dir });
    const third = new UsageRecorder({
      store,
      spool: c.spool,
      ...(c.backlog ? { backlog: c.backlog } : {}),
      flushMs: 60_000,
    });
    await third.flush();
    expect(store.rows.size).toBe(15);
    await third.close();
  });

  it('deletes segments once the store has every record in them', async () => {
    const dir = root();
    const store = new FakeStore();
    const { spool } = started({ root: dir, segmentBytes: 4096 });
    const recorder = new UsageRecorder({ store, spool, flushMs: 60_000, batchSize: 25 });
    for (let i = 0; i < 10; i++) {
      for (const r of numbered(20, i * 20)) recorder.record(r);
      await tick();
    }
    expect(segments(spool.dir).length).toBeGreaterThan(5);
    await recorder.flush();
    expect(store.rows.size).toBe(200);
    expect(segments(spool.dir).length).toBeLessThanOrEqual(2);
    await recorder.close();
  });

  it('skips a torn last record (a crash mid-write) and says so', async () => {
    const dir = root();
    const a = started({ root: dir });
    for (const r of numbered(4)) a.spool.append(r);
    await tick();
    const file = join(a.spool.dir, segments(a.spool.dir)[0] ?? '');
    truncateSync(file, statSync(file).size - 7);
    const b = started({ root: dir });
    expect(ids(b.seen)).toEqual(['req_0', 'req_1', 'req_2']);
    expect(b.skipped).toEqual([1]);
    expect(b.spool.skipped).toBe(1);
  });

  it('skips a record with a flipped byte and keeps the ones after it', async () => {
    const dir = root();
    const a = started({ root: dir });
    for (const r of numbered(5)) a.spool.append(r);
    await tick();
    const file = join(a.spool.dir, segments(a.spool.dir)[0] ?? '');
    const bytes = readFileSync(file);
    // Inside the third record's JSON.
    const at = bytes.indexOf('req_2') + 2;
    bytes[at] = (bytes[at] as number) ^ 0x20;
    writeFileSync(file, bytes);
    const b = started({ root: dir });
    expect(ids(b.seen)).toEqual(['req_0', 'req_1', 'req_3', 'req_4']);
    expect(b.spool.skipped).toBe(1);
  });

  it('records a stream cut by the crash as cut, and a stream that ended only by its final record', async () => {
    const dir = root();
    const a = started({ root: dir });
    const [open, ended] = numbered(2);
    a.spool.begin({ ...(open as UsageRecord), stream: true, status: 200, completionTokens: 0 });
    a.spool.begin({ ...(ended as UsageRecord), stream: true, status: 200, completionTokens: 0 });
    await tick();
    a.spool.append({ ...(ended as UsageRecord), stream: true, completionTokens: 57 });
    await tick();
    const b = started({ root: dir });
    expect(b.seen).toHaveLength(2);
    const cut = b.seen.find((r) => r.requestId === 'req_0');
    expect(cut).toMatchObject({ status: 502, errorType: 'gateway_restarted', stream: true });
    expect(b.seen.find((r) => r.requestId === 'req_1')).toMatchObject({ status: 200, completionTokens: 57 });
    expect(b.spool.replayed.cutStreams).toBe(1);
    // The cut stream is a record now: a third start does not cut it again.
    const c = started({ root: dir });
    expect(c.seen.filter((r) => r.requestId === 'req_0')).toHaveLength(1);
  });

  it('keeps a long stream open across segment deletions, and forgets it once it ends', async () => {
    const dir = root();
    const store = new FakeStore();
    const a = started({ root: dir, segmentBytes: 2048 });
    const recorder = new UsageRecorder({ store, spool: a.spool, flushMs: 60_000 });
    const long = { ...(numbered(1, 999)[0] as UsageRecord), stream: true };
    recorder.begin(long);
    for (let i = 0; i < 5; i++) {
      for (const r of numbered(10, i * 10)) recorder.record(r);
      await tick();
      await recorder.flush();
    }
    // Crash with the long stream still open: it is recorded as cut.
    const b = started({ root: dir });
    expect(b.seen.filter((r) => r.requestId === 'req_999')).toMatchObject([{ errorType: 'gateway_restarted' }]);
    b.spool.close();

    // The same, but the stream ends and its record is stored and its segment deleted before the crash.
    const dir2 = root();
    const store2 = new FakeStore();
    const c = started({ root: dir2, segmentBytes: 2048 });
    const rec2 = new UsageRecorder({ store: store2, spool: c.spool, flushMs: 60_000 });
    rec2.begin(long);
    await tick();
    rec2.record({ ...long, completionTokens: 300 });
    for (let i = 0; i < 5; i++) {
      for (const r of numbered(10, i * 10)) rec2.record(r);
      await tick();
      await rec2.flush();
    }
    const d = started({ root: dir2 });
    expect(d.seen.filter((r) => r.requestId === 'req_999')).toEqual([]);
  });

  it('holds a store outage on disk, not in memory, and writes it all once the store is back', async () => {
    const dir = root();
    const store = new FakeStore();
    store.down = true;
    const { spool } = started({ root: dir, segmentBytes: 64 * 1024 });
    const recorder = new UsageRecorder({ store, spool, flushMs: 60_000, maxQueue: 100, batchSize: 500 });
    for (let i = 0; i < 20; i++) {
      for (const r of numbered(250, i * 250)) recorder.record(r);
      await tick();
      await recorder.flush();
      expect(recorder.pending).toBeLessThanOrEqual(100);
    }
    expect(spool.bytes()).toBeGreaterThan(5000 * 200);
    store.down = false;
    (recorder as unknown as { retryAt: number }).retryAt = 0;
    await recorder.flush();
    expect(store.rows.size).toBe(5000);
    // In the order they came.
    expect([...store.rows.keys()].slice(0, 3)).toEqual(['req_0', 'req_1', 'req_2']);
    expect([...store.rows.keys()].at(-1)).toBe('req_4999');
    expect(spool.bytes()).toBeLessThan(128 * 1024);
    // Caught up: new records go to memory again.
    recorder.record(numbered(1, 6000)[0] as UsageRecord);
    expect(recorder.pending).toBe(1);
    await recorder.close();
  });

  it('past its byte bound drops the oldest records, counts them, and keeps serving', async () => {
    const dir = root();
    const store = new FakeStore();
    store.down = true;
    let dropped = 0;
    const { spool } = started({ root: dir, segmentBytes: 16 * 1024, maxBytes: 64 * 1024 });
    const recorder = new UsageRecorder({
      store,
      spool,
      flushMs: 60_000,
      maxQueue: 10,
      onDropping: () => {
        dropped = -1;
      },
    });
    for (let i = 0; i < 10; i++) {
      for (const r of numbered(100, i * 100)) recorder.record(r);
      await tick();
    }
    expect(dropped).toBe(-1);
    expect(recorder.droppedCount).toBeGreaterThan(0);
    expect(spool.bytes()).toBeLessThanOrEqual(64 * 1024 + 16 * 1024);
    store.down = false;
    (recorder as unknown as { retryAt: number }).retryAt = 0;
    await recorder.flush();
    // Every record is either stored or counted as dropped, none twice, the newest kept.
    expect(store.rows.size + recorder.droppedCount).toBe(1000);
    expect(store.rows.has('req_999')).toBe(true);
    await recorder.close();
  });

  it('keeps serving on a disk that takes no write, holding records in memory, and says so once', async () => {
    const dir = root();
    const errors: unknown[] = [];
    const store = new FakeStore();
    // Every write fills a segment: the second one the spool opens is a full disk.
    const { spool } = started({ root: dir, segmentBytes: 1, onWriteError: (e) => errors.push(e) });
    symlinkSync('/dev/full', join(spool.dir, 'seg-000000000002.log'));
    const recorder = new UsageRecorder({ store, spool, flushMs: 60_000 });
    for (let i = 0; i < 3; i++) {
      for (const r of numbered(10, i * 10)) recorder.record(r);
      await tick();
    }
    expect(errors).toHaveLength(1);
    expect(String((errors[0] as NodeJS.ErrnoException).code)).toBe('ENOSPC');
    await recorder.flush();
    expect(store.rows.size).toBe(30);
    await recorder.close();
  });

  it('takes a directory of its own when a live process holds its name, and takes over one a dead process left', () => {
    const dir = root();
    mkdirSync(join(dir, 'proxy-a'), { recursive: true });
    // Held by a live process on this host (the test runner's parent).
    writeFileSync(join(dir, 'proxy-a', 'lock'), `${hostname()} ${process.ppid}`);
    const a = started({ root: dir });
    expect(a.spool.replica).toBe('proxy-a-1');
    // Left by a process that is gone.
    mkdirSync(join(dir, 'proxy-c'), { recursive: true });
    writeFileSync(join(dir, 'proxy-c', 'lock'), `${hostname()} 999999999`);
    expect(started({ root: dir, replica: 'proxy-c' }).spool.replica).toBe('proxy-c');
  });

  it('adopts the spool of a replica whose heartbeat stopped, not of one alive', async () => {
    const dir = root();
    const alive = started({ root: dir, replica: 'proxy-alive' });
    const gone = started({ root: dir, replica: 'proxy-gone' });
    for (const r of numbered(3)) gone.spool.append(r);
    gone.spool.begin({ ...(numbered(1, 50)[0] as UsageRecord), stream: true });
    await tick();
    const old = new Date(Date.now() - 120_000);
    utimesSync(join(dir, 'proxy-gone', 'heartbeat'), old, old);
    for (const r of numbered(2, 10)) alive.spool.append(r);
    await tick();

    const b = started({ root: dir, replica: 'proxy-b' });
    expect(b.spool.replayed.adopted).toBe(1);
    expect(ids(b.seen).sort()).toEqual(['req_0', 'req_1', 'req_2', 'req_50']);
    expect(b.seen.find((r) => r.requestId === 'req_50')).toMatchObject({ errorType: 'gateway_restarted' });
    expect(readdirSync(dir).sort()).toEqual(['proxy-alive', 'proxy-b']);
  });

  it("keeps a tool call's sizes and payload through a crash and replay, the payload cut to 16 KiB before the spool", async () => {
    const dir = root();
    const a = started({ root: dir });
    const recorder = new UsageRecorder({ store: new FakeStore(), spool: a.spool, flushMs: 60_000 });
    const long = JSON.stringify({ arguments: { q: 'ü'.repeat(40_000) }, result: 'r' });
    recorder.record({ ...toolCall({ at: T0, bytesIn: 123, bytesOut: 45_678, payload: long }), requestId: 'tool_0' });
    recorder.record({ ...toolCall({ at: T0, bytesIn: 9, bytesOut: 10 }), requestId: 'tool_1' });
    await tick();
    // kill -9: the next start replays them into a real store.
    const b = started({ root: dir });
    const [cut, plain] = b.seen;
    expect(cut).toMatchObject({ requestId: 'tool_0', endpoint: 'mcp', bytesIn: 123, bytesOut: 45_678 });
    expect(Buffer.byteLength(cut?.payload ?? '')).toBeLessThanOrEqual(MAX_PAYLOAD_BYTES);
    expect(cut?.payload?.endsWith(PAYLOAD_CUT)).toBe(true);
    expect(plain).toMatchObject({ requestId: 'tool_1', bytesIn: 9, bytesOut: 10 });
    expect(plain && 'payload' in plain).toBe(false);
    const store = new SqliteUsageStore(':memory:');
    const again = new UsageRecorder({
      store,
      spool: b.spool,
      ...(b.backlog ? { backlog: b.backlog } : {}),
      flushMs: 60_000,
    });
    await again.flush();
    const calls = await store.toolCalls({ ...range, tags: [] });
    expect(calls.map((c) => [c.requestId, c.bytesIn, c.bytesOut, c.payload === cut?.payload])).toEqual([
      ['tool_1', 9, 10, false],
      ['tool_0', 123, 45_678, true],
    ]);
    await again.close();
    await store.close();
  });

  it("keeps a routed request's routing fields through a crash and replay, and the store's routing savings are exact", async () => {
    const dir = root();
    const a = started({ root: dir });
    const recorder = new UsageRecorder({ store: new FakeStore(), spool: a.spool, flushMs: 60_000 });
    const records = routedRecords();
    for (const r of records) recorder.record(r);
    await tick();
    // kill -9: the next start replays them, fields and all, into a real store.
    const b = started({ root: dir });
    expect(b.seen).toEqual(records);
    expect(b.seen[1]).toMatchObject({
      requestedModel: 'auto',
      routingPolicy: 'cheap',
      routingReason: 'escalated',
      escalations: 1,
      counterfactualCostUsd: 0.5,
    });
    expect(b.seen[2] && 'routingPolicy' in b.seen[2]).toBe(false);
    const store = new SqliteUsageStore(':memory:');
    const again = new UsageRecorder({
      store,
      spool: b.spool,
      ...(b.backlog ? { backlog: b.backlog } : {}),
      flushMs: 60_000,
    });
    await again.flush();
    const usage = await store.usage({ ...range, granularity: 'day', groupBy: 'team', tags: [] });
    expect(usage.totals).toMatchObject({ requests: 3, routedRequests: 2, routingSavingsUsd: 0.9, escalationRate: 0.5 });
    await again.close();
    await store.close();
  });

  it('replays a spool written before tool calls: its records, with none of the new fields, are stored as they were', async () => {
    const dir = root();
    const a = started({ root: dir });
    // A record exactly as the versions before endpoints, teams and tool calls serialized it.
    const before = {
      time: new Date(T0).toISOString(),
      requestId: 'old_0',
      keyHashPrefix: 'abc123def456',
      model: 'llama3.1:8b',
      provider: 'platform-llms/llama',
      tags: [{ key: 'team', value: 'ml' }],
      promptTokens: 10,
      completionTokens: 20,
      costUsd: 0.001,
      savingsUsd: 0,
      latencyMs: 40,
      status: 200,
      stream: false,
    };
    mkdirSync(a.spool.dir, { recursive: true });
    writeFileSync(join(a.spool.dir, 'seg-000000000000.log'), encodeRecord(before));
    const b = started({ root: dir });
    expect(b.seen).toEqual([before]);
    const store = new SqliteUsageStore(':memory:');
    const recorder = new UsageRecorder({
      store,
      spool: b.spool,
      ...(b.backlog ? { backlog: b.backlog } : {}),
      flushMs: 60_000,
    });
    await recorder.flush();
    const q = { ...range, granularity: 'day' as const, tags: [] };
    expect((await store.usage({ ...q, groupBy: 'team' })).groups).toMatchObject([{ group: 'ml', requests: 1 }]);
    expect((await store.tools({ ...q, groupBy: 'tool' })).totals.calls).toBe(0);
    // Nor was it routed.
    expect((await store.usage({ ...q, groupBy: 'team' })).totals).toMatchObject({
      routedRequests: 0,
      routingSavingsUsd: 0,
    });
    expect((await store.routing({ ...q, groupBy: 'model' })).groups).toEqual([]);
    await recorder.close();
    await store.close();
  });
});

describe('usage spool: whether an answer was delivered', () => {
  /** A recorder on a started spool, its backlog handed over, written by hand (flush()). */
  const recording = (s: ReturnType<typeof started>, store: Pick<UsageStore, 'insert'>) =>
    new UsageRecorder({ store, spool: s.spool, ...(s.backlog ? { backlog: s.backlog } : {}), flushMs: 60_000 });

  it('stores a whole answer a kill cut before its last byte as not delivered (502, its cost kept), a delivered one as served, once', async () => {
    const dir = root();
    const a = started({ root: dir });
    const before = new FakeStore();
    const live = recording(a, before);
    const [cut, sent, tool, next] = numbered(4).map((r) => ({ ...r, costUsd: 0.25, promptTokens: 7 }));
    live.record(cut as UsageRecord, true);
    live.record(sent as UsageRecord, true);
    // A record no answer waits on (a tool call, a stream's final record): no mark to wait for.
    live.record(tool as UsageRecord);
    await tick();
    live.delivered('req_1', true);
    // The mark has no write of its own: it goes with the next group commit.
    live.record(next as UsageRecord, true);
    live.delivered('req_3', true);
    await tick();
    await live.flush();
    // Stored once known: the answer still being written waits, the others are in.
    expect([...before.rows.keys()].sort()).toEqual(['req_1', 'req_2', 'req_3']);
    // kill -9: no close. The next start replays the spool into a store that has none of it.
    const b = started({ root: dir });
    const after = new FakeStore();
    const replay = recording(b, after);
    await replay.flush();
    expect(after.rows.get('req_0')).toMatchObject({
      status: 502,
      errorType: 'gateway_restarted',
      delivered: false,
      costUsd: 0.25,
      promptTokens: 7,
    });
    for (const id of ['req_1', 'req_2', 'req_3']) {
      expect(after.rows.get(id)).toMatchObject({ status: 200 });
      expect(after.rows.get(id)).not.toHaveProperty('delivered');
      // The spool's own bookkeeping stays in the spool.
      expect(after.rows.get(id)).not.toHaveProperty('awaitingDelivery');
    }
    expect(b.spool.replayed.undelivered).toBe(1);
    // Replayed again (a crash during the replay): the same verdicts, each request once.
    const c = started({ root: dir });
    const again = recording(c, after);
    await again.flush();
    expect(after.rows.size).toBe(4);
    expect(after.rows.get('req_0')).toMatchObject({ delivered: false });
    await again.close();
  });

  it('a delivery mark has no write of its own: it goes with the next record, or on the recorder tick', async () => {
    const a = started({ root: root() });
    const size = () => statSync(join(a.spool.dir, segments(a.spool.dir)[0] ?? '')).size;
    const [first, second] = numbered(2);
    a.spool.append(first as UsageRecord, true);
    // A lone request: its record written at once (the group commit queued for it finds nothing left).
    expect(a.spool.durable(true)).toBeUndefined();
    const one = size();
    a.spool.mark('req_0', true);
    await tick();
    await new Promise((r) => setImmediate(r));
    expect(size()).toBe(one);
    a.spool.append(second as UsageRecord, true);
    a.spool.durable(true);
    const two = size();
    // The second record and the first one's mark, in that one write.
    expect(two - one).toBeGreaterThan(one);
    a.spool.mark('req_1', true);
    a.spool.flushMarks();
    expect(size()).toBeGreaterThan(two);
    a.spool.close();
  });

  it('the recorder tick writes a mark even while a group commit is queued (before that commit runs)', () => {
    const a = started({ root: root() });
    const size = () => statSync(join(a.spool.dir, segments(a.spool.dir)[0] ?? '')).size;
    const [first, second] = numbered(2);
    a.spool.append(first as UsageRecord, true);
    a.spool.durable(true);
    const one = size();
    // A record appended (its commit queued, not yet run), then the first one's mark and the tick:
    // both are on disk when the tick returns, whatever runs next.
    a.spool.append(second as UsageRecord, true);
    a.spool.mark('req_0', true);
    a.spool.flushMarks();
    expect(size()).toBeGreaterThan(2 * one);
    a.spool.close();
  });

  it('a caller that left before the last byte: not delivered (499, an error answer keeps its status), live and after a restart', async () => {
    const dir = root();
    const a = started({ root: dir });
    const store = new FakeStore();
    const live = recording(a, store);
    const [ok, failed] = numbered(2);
    live.record(ok as UsageRecord, true);
    live.record({ ...(failed as UsageRecord), status: 429, errorType: 'rate_limit_exceeded' }, true);
    await tick();
    live.delivered('req_0', false);
    live.delivered('req_1', false);
    await live.flush();
    expect(store.rows.get('req_0')).toMatchObject({
      status: 499,
      errorType: 'client_closed_request',
      delivered: false,
    });
    expect(store.rows.get('req_1')).toMatchObject({ status: 429, errorType: 'rate_limit_exceeded', delivered: false });
    // The marks went out with the recorder's tick (no record came to carry them): a restart agrees.
    const b = started({ root: dir });
    const after = new FakeStore();
    await recording(b, after).flush();
    expect(after.rows.get('req_0')).toMatchObject({ status: 499, delivered: false });
    expect(b.spool.replayed.undelivered).toBe(0);
  });

  it('does not keep the store waiting on a caller that reads slowly for ever, nor at shutdown', async () => {
    const dir = root();
    const a = started({ root: dir });
    const store = new FakeStore();
    const live = recording(a, store);
    const [slow, stuck] = numbered(2);
    live.record(slow as UsageRecord, true);
    live.record(stuck as UsageRecord, true);
    await tick();
    await live.flush();
    expect(store.rows.size).toBe(0);
    const now = Date.now();
    const clock = vi.spyOn(Date, 'now').mockReturnValue(now + DELIVERY_WAIT_MS + 1);
    try {
      await live.flush();
    } finally {
      clock.mockRestore();
    }
    // Handed to its socket long ago: stored as delivered.
    expect(store.rows.get('req_0')).not.toHaveProperty('delivered');
    live.record(numbered(1, 2)[0] as UsageRecord, true);
    await tick();
    await live.close();
    expect(store.rows.size).toBe(3);
  });
});
