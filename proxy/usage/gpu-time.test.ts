import { afterEach, describe, expect, it, vi } from 'vitest';
import { loadCatalog, pricing } from '../../crds/catalog/catalog.js';
import { range, rec, T0, tag } from '../../e2e/support/usage-store-contract.js';
import type { InClusterRoute } from '../serving/routes.js';
import { RouteTable } from '../serving/routes.js';
import { loadBedrockPrices, PriceBook } from './cost.js';
import { GpuTimeLedger, startGpuTimeLedger } from './gpu-time.js';
import type { UsageRecord, UsageSink } from './record.js';
import { SqliteUsageStore } from './sqlite-store.js';
import type { GpuTimeRow, UsageStore } from './store.js';

const SECOND = 1000;
const MINUTE = 60 * SECOND;
const day = { ...range, granularity: 'day' as const, tags: [] };

const route = (replicas: number | undefined, o: Partial<InClusterRoute> = {}): InClusterRoute => ({
  kind: 'in-cluster',
  model: 'llama3.1:8b',
  baseUrl: 'http://llama.platform-llms.svc.cluster.local:11434',
  provider: 'platform-llms/llama',
  ...(replicas === undefined
    ? {}
    : { replicas: Array.from({ length: replicas }, (_, i) => `http://10.0.0.${i + 1}:11434`) }),
  ...o,
});

/** A store that keeps what it is sent, optionally failing. */
class Rows implements Pick<UsageStore, 'recordGpuTime'> {
  readonly batches: GpuTimeRow[][] = [];
  fail = false;
  async recordGpuTime(rows: GpuTimeRow[]): Promise<void> {
    if (this.fail) throw new Error('store down');
    this.batches.push(rows);
  }
  /** The latest figures per (deployment, minute), as a store keeping the largest would. */
  get latest(): Map<string, GpuTimeRow> {
    const out = new Map<string, GpuTimeRow>();
    for (const r of this.batches.flat()) out.set(`${r.deployment} ${r.minute}`, r);
    return out;
  }
}

/** A ledger over mutable routes and a clock the test moves. */
function ledgerOf(store: Pick<UsageStore, 'recordGpuTime'>, routes: InClusterRoute[], usdPerHour = 3.6) {
  const clock = { now: T0 };
  const ledger = new GpuTimeLedger({ routes: () => routes, usdPerHour: () => usdPerHour, store, now: () => clock.now });
  /** Looks every 15 s for `ms`. */
  const run = (ms: number) => {
    for (let t = 0; t < ms; t += 15 * SECOND) {
      clock.now += 15 * SECOND;
      ledger.observe();
    }
  };
  return { ledger, clock, run };
}

describe('GpuTimeLedger', () => {
  it('counts replica-seconds per minute at the GPU price, a change of replicas from when it is seen', async () => {
    const routes = [route(2)];
    const store = new Rows();
    const { ledger, clock, run } = ledgerOf(store, routes);
    ledger.observe();
    run(MINUTE);
    // Half-way through the second minute a replica goes; the route table's change is a look.
    clock.now += 30 * SECOND;
    routes[0] = route(1);
    ledger.observe();
    clock.now += 30 * SECOND;
    ledger.observe();
    await ledger.flush();
    const [m0, m1] = [...store.latest.values()];
    expect(m0).toMatchObject({ minute: T0, gpuSeconds: 120, busy: false });
    expect(m0?.usd).toBeCloseTo((120 * 3.6) / 3600, 12);
    expect(m1).toMatchObject({ minute: T0 + MINUTE, gpuSeconds: 2 * 30 + 1 * 30 });
    expect(m1?.usd).toBeCloseTo((90 * 3.6) / 3600, 12);
  });

  it('counts nothing while scaled to zero, nor where it cannot see the replicas (standalone)', async () => {
    const routes = [route(0), route(undefined, { provider: 'standalone/qwen', model: 'qwen2.5:0.5b' })];
    const store = new Rows();
    const { ledger, run } = ledgerOf(store, routes);
    ledger.observe();
    run(5 * MINUTE);
    ledger.served(rec({ at: T0 + MINUTE, provider: 'standalone/qwen' }));
    await ledger.flush();
    expect(store.batches).toEqual([]);
    // Woken: counted from then on.
    routes[0] = route(1);
    ledger.observe();
    run(MINUTE);
    await ledger.flush();
    expect([...store.latest.values()].reduce((n, r) => n + r.gpuSeconds, 0)).toBe(60);
  });

  it('does not count a gap it did not see (a suspended process) beyond a minute', async () => {
    const store = new Rows();
    const { ledger, clock } = ledgerOf(store, [route(1)]);
    ledger.observe();
    clock.now += 10 * MINUTE;
    ledger.observe();
    await ledger.flush();
    expect([...store.latest.values()].reduce((n, r) => n + r.gpuSeconds, 0)).toBe(60);
  });

  it('marks the minutes a request with tokens was in flight busy, through the usage sink it wraps', async () => {
    const store = new Rows();
    const { ledger, run } = ledgerOf(store, [route(1)]);
    ledger.observe();
    run(5 * MINUTE);
    const inner: UsageSink & { seen: UsageRecord[]; begun: number } = {
      seen: [],
      begun: 0,
      record(r) {
        this.seen.push(r);
      },
      begin() {
        this.begun++;
      },
    };
    const sink = ledger.sink(inner);
    // Ended in minute 3 after 2.5 minutes: minutes 0 (its last half), 1, 2 and 3.
    const streamed = { ...rec({ at: T0 + 3 * MINUTE + 10 * SECOND }), latencyMs: 150 * SECOND };
    sink.begin?.(streamed);
    sink.record(streamed);
    // No tokens (refused, failed): the minute stays idle. Another provider: not the ledger's.
    sink.record(rec({ at: T0 + 4 * MINUTE + SECOND, promptTokens: 0, completionTokens: 0, status: 502 }));
    sink.record(rec({ at: T0 + 4 * MINUTE + SECOND, provider: 'platform-agent/bedrock' }));
    expect(inner.seen).toHaveLength(3);
    expect(inner.begun).toBe(1);
    expect(sink.durable).toBeUndefined();
    await ledger.flush();
    expect([...store.latest.values()].map((r) => [(r.minute - T0) / MINUTE, r.busy])).toEqual([
      [0, true],
      [1, true],
      [2, true],
      [3, true],
      [4, false],
    ]);
    expect([...store.latest.values()].every((r) => r.deployment === 'platform-llms/llama')).toBe(true);
  });

  it('writes only what changed, and writes again what a failing store did not take', async () => {
    const store = new Rows();
    const { ledger, run } = ledgerOf(store, [route(1)]);
    ledger.observe();
    run(MINUTE);
    await ledger.flush();
    expect(store.batches.flat()).toHaveLength(1);
    await ledger.flush();
    expect(store.batches).toHaveLength(1);
    store.fail = true;
    run(MINUTE);
    await expect(ledger.flush()).rejects.toThrow('store down');
    store.fail = false;
    await ledger.flush();
    expect(store.batches.at(-1)?.map((r) => [(r.minute - T0) / MINUTE, r.gpuSeconds])).toEqual([[1, 60]]);
  });

  it('drops, counted, minutes the store failed to take for longer than it accepts them (it may have folded them)', async () => {
    const store = new Rows();
    const { ledger, clock, run } = ledgerOf(store, [route(1)]);
    ledger.observe();
    run(MINUTE);
    store.fail = true;
    clock.now += 5 * 60 * MINUTE;
    await expect(ledger.flush()).rejects.toThrow();
    expect(ledger.dropped).toBe(0);
    clock.now += 2 * 60 * MINUTE;
    await expect(ledger.flush()).rejects.toThrow();
    expect(ledger.dropped).toBe(1);
    store.fail = false;
    await ledger.flush();
    expect(store.batches).toEqual([]);
  });
});

describe('GPU time in the usage reports', () => {
  it('two proxies ledgering one deployment into one store count its GPU time once', async () => {
    const store = new SqliteUsageStore(':memory:');
    const a = ledgerOf(store, [route(2)]);
    const b = ledgerOf(store, [route(2)]);
    // b starts 20 s after a (a replica of the proxy rolled out later).
    b.clock.now += 20 * SECOND;
    a.ledger.observe();
    b.ledger.observe();
    a.run(10 * MINUTE);
    b.run(10 * MINUTE - 30 * SECOND);
    await Promise.all([a.ledger.flush(), b.ledger.flush()]);
    await store.insert([rec({ at: T0 + MINUTE })]);
    const r = await store.usage({ ...day, groupBy: 'model' });
    expect(r.deployments).toEqual([
      {
        deployment: 'platform-llms/llama',
        model: 'llama3.1:8b',
        gpuSeconds: 10 * 60 * 2,
        gpuCostUsd: expect.closeTo(((10 * 60 * 2) / 3600) * 3.6, 9),
        // Nobody marked a minute busy (no sink): the hour's cost is its requests'.
        idleCostUsd: 0,
      },
    ]);
    expect(r.totals.actualCostUsd).toBeCloseTo(((10 * 60 * 2) / 3600) * 3.6, 9);
    await store.close();
  });

  it("shares the GPU cost by tokens: tags with 3:1 tokens get 3:1 of it, idle minutes are the deployment's", async () => {
    const store = new SqliteUsageStore(':memory:');
    const { ledger, run } = ledgerOf(store, [route(1)], 6);
    const sink = ledger.sink({ record: (r) => void store.insert([r]) });
    ledger.observe();
    run(20 * MINUTE);
    // Busy in minutes 0-9 only: 10 minutes of one replica at $6/h = $1 served, $1 idle.
    sink.record({
      ...rec({ at: T0 + 9 * MINUTE, tags: [tag('project', 'x')], promptTokens: 200, completionTokens: 100 }),
      latencyMs: 9 * MINUTE,
    });
    sink.record(rec({ at: T0 + 5 * MINUTE, tags: [tag('project', 'y')], promptTokens: 50, completionTokens: 50 }));
    await ledger.flush();
    await vi.waitFor(async () => expect(await store.count()).toBe(2));
    const r = await store.usage({ ...day, groupBy: 'project' });
    const cost = Object.fromEntries(r.groups.map((g) => [g.group, g.actualCostUsd]));
    expect(cost.x).toBeCloseTo(0.75, 9);
    expect(cost.y).toBeCloseTo(0.25, 9);
    expect(r.deployments[0]?.gpuCostUsd).toBeCloseTo(2, 9);
    expect(r.deployments[0]?.idleCostUsd).toBeCloseTo(1, 9);
    await store.close();
  });
});

describe('the GPU price of a replica-hour', () => {
  it("is the catalog's: the model's GPUs on its recommended type, by engine; none for a model it does not know", () => {
    const catalog = loadCatalog();
    const prices = new PriceBook(catalog, loadBedrockPrices());
    const llama = catalog.models.find((m) => m.name === 'llama3.1:8b');
    expect(llama).toBeDefined();
    if (!llama) return;
    expect(prices.gpuHourPrice('llama3.1:8b')).toBe(pricing(catalog, llama, llama.gpu.recommended).usdPerHour);
    expect(prices.gpuHourPrice('llama3.1:8b')).toBeGreaterThan(0);
    expect(prices.gpuHourPrice('no-such-model:1b')).toBeUndefined();
  });
});

describe('startGpuTimeLedger', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('looks on every tick and route change, writes every tick, and writes the last minutes when stopped', async () => {
    vi.useFakeTimers({ now: T0 });
    const routes = new RouteTable();
    const table = (r: InClusterRoute) => ({
      entries: new Map([[r.model, r]]),
      models: [{ id: r.model, model: r.model, created: 0, provider: r.provider, cli: true }],
    });
    routes.set(table(route(1)));
    const store = new Rows();
    const warnings: string[] = [];
    const log = { info: () => {}, warn: (m: string) => void warnings.push(m), error: () => {} };
    const tracking = startGpuTimeLedger({ routes, prices: { gpuHourPrice: () => 3.6 }, store, log });
    await vi.advanceTimersByTimeAsync(60 * SECOND);
    expect([...store.latest.values()].map((r) => r.gpuSeconds)).toEqual([60]);
    // Scaled to zero 10 s into the next minute: counted up to the change, not to the next tick.
    vi.setSystemTime(T0 + 70 * SECOND);
    routes.set(table(route(0)));
    store.fail = true;
    await vi.advanceTimersByTimeAsync(60 * SECOND);
    await vi.advanceTimersByTimeAsync(60 * SECOND);
    expect(warnings).toEqual(['GPU time not written: retrying']);
    store.fail = false;
    await tracking.stop();
    expect([...store.latest.values()].map((r) => r.gpuSeconds)).toEqual([60, 10]);
  });
});
