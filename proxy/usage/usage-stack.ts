import { createHash } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { errorMessage, type Logger } from '../../crds/observability/log.js';
import type { ProxyMetrics } from '../telemetry/metrics.js';
import { GPU_MINUTES_KEPT_MS } from './gpu-cost.js';
import { isPostgresUrl, openUsageStore } from './open-store.js';
import type { UsageRecord } from './record.js';
import { UsageRecorder } from './recorder.js';
import { inThreadReports, type UsageReports, WorkerInserts, WorkerReports } from './reports.js';
import { Spool } from './spool.js';
import type { UsageStore } from './store.js';

/**
 * Where the gateway's usage records go, assembled once: the store (an SQLite file, a PVC in a
 * cluster, or PostgreSQL shared by replicas), pruned hourly; a file's inserts and reports on
 * threads of their own so they never hold chat traffic; the spool, each record on local disk
 * from the moment it is made until the store has it, so a crash (OOM kill, node failure) loses
 * none, replayed here before serving; and the recorder writing in batches off the hot path.
 */

export interface UsageSettings {
  /** An SQLite file path, ':memory:', or postgres://... */
  db: string;
  /** Where records wait on local disk until the store has them; 'off': memory only. Default beside the file. */
  spoolDir?: string;
  spoolMaxBytes?: number;
  /** Records held in memory while the store is unreachable; past it they wait in the spool (or are dropped, counted). */
  bufferRecords?: number;
  retentionDays?: number;
  rollupRetentionDays?: number;
  /** A pod's name: its container restarts find their own spool; a pod gone is adopted by another. */
  replica: string;
}

export interface UsageStack {
  store: UsageStore;
  /** Where in-cluster GPU time goes (proxy/usage/gpu-time.ts): a file's insert thread, or the store. */
  gpuTime: Pick<UsageStore, 'recordGpuTime'>;
  recorder: UsageRecorder;
  reports: UsageReports;
  /** Records of the spool's backlog that cost something: they count toward budgets until written. */
  backlogSpend: UsageRecord[];
  /** Told of records once the store wrote them (the budgets). */
  onWritten(hook: (records: UsageRecord[]) => void): void;
  close(): Promise<void>;
}

/**
 * Where the spool goes when not told: beside an SQLite file; for PostgreSQL, under the temp
 * directory in a folder named for the database (host, port, name; never its credentials), so
 * that a standalone proxy's records are replayed only into the database they were meant for.
 */
function defaultSpool(usageDb: string): string {
  if (usageDb === ':memory:') return 'off';
  if (!isPostgresUrl(usageDb)) return `${usageDb}-spool`;
  const u = new URL(usageDb);
  const id = createHash('sha256').update(`${u.hostname}:${u.port}${u.pathname}`).digest('hex').slice(0, 16);
  return join(tmpdir(), 'platform-ai-optimizer', `usage-spool-${id}`);
}

export function openUsageStack(settings: UsageSettings, metrics: ProxyMetrics, log: Logger): UsageStack {
  const { db } = settings;
  const store = openUsageStore(db, (err) =>
    log.warn('usage database unreachable at start: serving anyway, holding records', { error: errorMessage(err) }),
  );
  const stopPruning = pruneHourly(store, settings, log);
  const inThread = db === ':memory:' || isPostgresUrl(db);
  // A file's inserts go to a thread of their own; PostgreSQL's run in the database already.
  const inserts = inThread ? undefined : new WorkerInserts(db, store);
  const spool = openSpool(settings, metrics, log, (records) => unwrittenHook(records));
  // Until the recorder exists: records whose spool write failed during the replay, held for it.
  const unwrittenAtStart: UsageRecord[] = [];
  let unwrittenHook = (records: UsageRecord[]) => {
    unwrittenAtStart.push(...records);
  };
  const backlogSpend: UsageRecord[] = [];
  const backlog = spool?.start((rec) => {
    if (rec.costUsd > 0) backlogSpend.push(rec);
  });
  if (spool) {
    metrics.usageSpoolBytes = () => spool.bytes();
    const { records, cutStreams, undelivered, adopted } = spool.replayed;
    if (records > 0 || cutStreams > 0 || adopted > 0)
      log.info('usage spool replayed: writing its records to the store', {
        records,
        cutStreams,
        // Whole answers the crash cut before their last byte reached the socket: stored as not delivered.
        undelivered,
        adoptedReplicas: adopted,
        skipped: spool.skipped,
      });
  }
  let written: (records: UsageRecord[]) => void = () => {};
  const recorder: UsageRecorder = new UsageRecorder({
    store: inserts ?? store,
    maxQueue: settings.bufferRecords ?? (spool ? 2_000 : 50_000),
    ...(spool ? { spool } : {}),
    ...(backlog ? { backlog } : {}),
    dropped: metrics.usageDropped,
    onError: (err) =>
      log.error(`usage store failing: holding records ${spool ? 'in the spool' : 'in memory'} until it answers`, {
        error: errorMessage(err),
        buffer: recorder.pending,
      }),
    onDropping: () =>
      log.error(
        `usage ${spool ? 'spool' : 'buffer'} full: dropping records until the store answers, oldest first (counted in pao_gateway_usage_records_dropped_total)`,
        { buffer: recorder.pending },
      ),
    onRecovered: (held, dropped) => log.info('usage store answering again', { held, dropped }),
    onWritten: (records) => written(records),
  });
  unwrittenHook = (records) => recorder.unwritten(records);
  // Streams cut by a crash, recorded at start on a disk that took no write: in memory now.
  recorder.hold(unwrittenAtStart);
  unwrittenAtStart.length = 0;
  const workerReports = inThread ? undefined : new WorkerReports(db);
  return {
    store,
    gpuTime: inserts ?? store,
    recorder,
    reports: workerReports ?? inThreadReports(store),
    backlogSpend,
    onWritten: (hook) => {
      written = hook;
    },
    close: async () => {
      stopPruning();
      await recorder.close();
      await inserts?.close();
      await workerReports?.close();
      await store.close();
    },
  };
}

/** Raw records past retentionDays and rollups past rollupRetentionDays (reports span up to 400 days), hourly. */
function pruneHourly(store: UsageStore, settings: UsageSettings, log: Logger): () => void {
  const retentionDays = settings.retentionDays ?? 30;
  const rollupDays = Math.max(retentionDays, settings.rollupRetentionDays ?? 400);
  const prune = () =>
    store
      .prune(
        new Date(Date.now() - retentionDays * 86_400_000),
        new Date(Date.now() - rollupDays * 86_400_000),
        new Date(Date.now() - GPU_MINUTES_KEPT_MS),
      )
      .catch((err: unknown) => log.warn('usage retention not applied', { error: errorMessage(err) }));
  void prune();
  const timer = setInterval(prune, 3_600_000);
  timer.unref();
  return () => clearInterval(timer);
}

function openSpool(
  settings: UsageSettings,
  metrics: ProxyMetrics,
  log: Logger,
  onUnwritten: (records: UsageRecord[]) => void,
): Spool | undefined {
  const root = settings.spoolDir ?? defaultSpool(settings.db);
  if (root === 'off') return undefined;
  return new Spool({
    root,
    replica: settings.replica.replace(/[^A-Za-z0-9._-]/g, '_') || 'proxy',
    maxBytes: settings.spoolMaxBytes ?? 512 * 1024 * 1024,
    onSkipped: (_file, skipped) => {
      metrics.usageSpoolSkipped.inc(skipped.records);
      log.warn('usage spool: damaged or torn records skipped', { records: skipped.records, bytes: skipped.bytes });
    },
    onWriteError: (err) =>
      log.error('usage spool not writable: records held in memory only until it is', { error: errorMessage(err) }),
    onWriteRecovered: () => log.info('usage spool writable again'),
    // The recorder is made after the spool's replay (whose writes may fail too).
    onUnwritten,
  });
}
