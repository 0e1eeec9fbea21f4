import type { AddressInfo } from 'node:net';
import { createServer } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LoadSignals } from '../../crds/engines/engine.js';
import { vllm } from '../../crds/engines/vllm.js';
import { type OllamaDouble, startOllamaDouble } from '../../e2e/doubles/ollama.js';
import { startGateway, type TestGateway } from '../../e2e/support/gateway.js';
import { ApiKeys } from '../access/auth.js';
import { ProxyError } from '../endpoints/errors.js';
import { ProxyMetrics } from '../telemetry/metrics.js';
import { OpenAICompatibleUpstream } from '../upstreams/openai-compatible.js';
import { MemoryUsage } from '../usage/record.js';
import {
  EJECT_MS,
  KV_FULL,
  type Lease,
  LOAD_BOUND,
  QUEUE_SLACK,
  ReplicaPools,
  type RoutingDecision,
  routedPools,
} from './replica-pool.js';
import type { ReplicaSignal } from './replica-signals.js';
import { type InClusterRoute, type RouteEntry, type RouteScaling, RouteTable } from './routes.js';

const route = (over: Partial<InClusterRoute> = {}): InClusterRoute => ({
  kind: 'in-cluster',
  model: 'qwen2.5:0.5b',
  baseUrl: 'http://qwen.platform-llms.svc.cluster.local:11434',
  provider: 'platform-llms/qwen',
  replicas: ['http://10.0.0.1:11434', 'http://10.0.0.2:11434'],
  slots: 2,
  ...over,
});

const scaling = (over: Partial<RouteScaling> = {}): RouteScaling => ({
  namespace: 'platform-llms',
  name: 'qwen',
  replicas: 0,
  autoscaled: true,
  whileWaking: 'Wait',
  ...over,
});

function pools(
  table: Map<string, RouteEntry> = new Map(),
  over: Partial<ConstructorParameters<typeof ReplicaPools>[0]> = {},
) {
  const woken: RouteScaling[] = [];
  const p = new ReplicaPools({
    maxQueued: 3,
    queueMs: 200,
    lookup: (m) => table.get(m),
    wake: async (s) => {
      woken.push(s);
    },
    ...over,
  });
  return { p, woken, table };
}

const never = new AbortController().signal;
const failure = (err: unknown) =>
  err instanceof ProxyError ? { status: err.status, code: err.code, headers: err.headers } : err;

describe('ReplicaPools', () => {
  it('sends each call to the replica with the fewest in flight, never past its slots', async () => {
    const { p } = pools();
    const r = route();
    const a = await p.acquire(r, never);
    const b = await p.acquire(r, never);
    expect(new Set([a.url, b.url]).size).toBe(2);
    const c = await p.acquire(r, never);
    const d = await p.acquire(r, never);
    expect(p.replicaLoad(r.model)).toEqual({ 'http://10.0.0.1:11434': 2, 'http://10.0.0.2:11434': 2 });
    // Every slot is taken: the fifth waits, and takes the first slot that frees.
    const e = p.acquire(r, never);
    expect(p.load()[r.model]).toEqual({ inFlight: 4, queued: 1, requests: 5 });
    c.release();
    c.release(); // a second release changes nothing
    expect((await e).url).toBe(c.url);
    expect(p.load()[r.model]).toEqual({ inFlight: 4, queued: 0, requests: 5 });
    for (const l of [a, b, d]) l.release();
    expect(p.load()[r.model]?.inFlight).toBe(1);
  });

  it('refuses past the queue bound and after the queue wait, with Retry-After', async () => {
    const { p } = pools();
    const r = route({ replicas: ['http://10.0.0.1:11434'], slots: 1 });
    await p.acquire(r, never);
    const waiting = [p.acquire(r, never), p.acquire(r, never), p.acquire(r, never)].map((w) =>
      Promise.resolve(w).catch(failure),
    );
    expect(() => p.acquire(r, never)).toThrow(ProxyError);
    try {
      p.acquire(r, never);
    } catch (err) {
      expect(failure(err)).toEqual({ status: 503, code: 'model_queue_full', headers: { 'Retry-After': '2' } });
    }
    const results = await Promise.all(waiting);
    expect(results).toEqual(
      Array(3).fill({ status: 503, code: 'model_queue_timeout', headers: { 'Retry-After': '5' } }),
    );
    expect(p.load()[r.model]?.queued).toBe(0);
  });

  it('lets a caller that goes away leave the queue', async () => {
    const { p } = pools();
    const r = route({ replicas: ['http://10.0.0.1:11434'], slots: 1 });
    await p.acquire(r, never);
    const gone = new AbortController();
    const w = Promise.resolve(p.acquire(r, gone.signal)).catch(failure);
    gone.abort();
    expect(await w).toMatchObject({ code: 'client_closed' });
    expect(p.load()[r.model]?.queued).toBe(0);
  });

  it('wakes a hibernated model once, holds its requests and serves them when a replica is ready', async () => {
    const table = new Map<string, RouteEntry>();
    const { p, woken } = pools(table, { queueMs: 5_000 });
    const asleep = route({ replicas: [], scaling: scaling() });
    table.set(asleep.model, asleep);
    const first = p.acquire(asleep, never);
    const second = p.acquire(asleep, never);
    expect(woken).toEqual([scaling()]);
    expect(p.load()[asleep.model]).toEqual({ inFlight: 0, queued: 2, requests: 2 });

    table.set(asleep.model, route({ replicas: ['http://10.0.0.9:11434'], scaling: scaling({ replicas: 1 }) }));
    p.refresh();
    expect((await first).url).toBe('http://10.0.0.9:11434');
    expect((await second).url).toBe('http://10.0.0.9:11434');
    expect(p.load()[asleep.model]).toEqual({ inFlight: 2, queued: 0, requests: 2 });
  });

  it('says when nothing woke the model in time', async () => {
    const { p } = pools();
    const asleep = route({ replicas: [], scaling: scaling() });
    expect(await Promise.resolve(p.acquire(asleep, never)).catch(failure)).toEqual({
      status: 503,
      code: 'model_queue_timeout',
      headers: { 'Retry-After': '30' },
    });
  });

  it('with whileWaking Fallback, wakes the model and hands the request to its fallback at once', () => {
    const { p, woken } = pools();
    const asleep = route({ replicas: [], scaling: scaling({ whileWaking: 'Fallback' }), fallback: ['llama3.1:8b'] });
    expect(() => p.acquire(asleep, never)).toThrow(expect.objectContaining({ code: 'model_waking', status: 503 }));
    expect(woken).toHaveLength(1);
  });

  it('refuses at once a model scaled to zero by hand (nothing would wake it)', () => {
    const { p, woken } = pools();
    const manual = route({ replicas: [], scaling: scaling({ autoscaled: false }) });
    expect(() => p.acquire(manual, never)).toThrow(expect.objectContaining({ code: 'model_scaled_to_zero' }));
    expect(woken).toHaveLength(0);
  });

  it('without the replicas (standalone, or no slice seen) calls the base URL without a slot limit', async () => {
    const { p } = pools();
    const r = route({ replicas: undefined, slots: undefined });
    const leases = await Promise.all(Array.from({ length: 50 }, () => p.acquire(r, never)));
    expect(new Set(leases.map((l) => l.url))).toEqual(new Set([r.baseUrl]));
  });
});

describe('a replica that refuses connections', () => {
  it('gets no new calls for a while, unless no other replica has a slot', () => {
    let t = 0;
    const { p } = pools(new Map(), { now: () => t });
    const r = route({ slots: 1 });
    const [one, two] = r.replicas as [string, string];
    const first = p.acquire(r, never) as Lease;
    expect(first.url).toBe(one);
    first.unreachable();
    first.release();
    const b = p.acquire(r, never) as Lease;
    expect(b.url).toBe(two);
    // The other one busy (one slot): the ejected replica serves rather than the call waiting.
    const c = p.acquire(r, never) as Lease;
    expect(c.url).toBe(one);
    b.release();
    c.release();
    for (let i = 0; i < 4; i++) {
      const l = p.acquire(r, never) as Lease;
      expect(l.url).toBe(two);
      l.release();
    }
    // Its time over, it is balanced as before.
    t += EJECT_MS;
    const both = [p.acquire(r, never), p.acquire(r, never)].map((l) => (l as Lease).url).sort();
    expect(both).toEqual([one, two]);
  });
});

describe('two replicas of different speed behind the proxy’s balancing', () => {
  let fast: OllamaDouble;
  let slow: OllamaDouble;
  let upstream: OpenAICompatibleUpstream;
  const table = new Map<string, RouteEntry>();

  beforeAll(async () => {
    fast = await startOllamaDouble({ models: ['qwen2.5:0.5b', 'llama3.1:8b'] });
    slow = await startOllamaDouble({ models: ['qwen2.5:0.5b', 'llama3.1:8b'] });
    fast.behave({ firstByteDelayMs: 10 });
    slow.behave({ firstByteDelayMs: 150 });
    upstream = new OpenAICompatibleUpstream({
      pools: new ReplicaPools({ maxQueued: 100, queueMs: 30_000, lookup: (m) => table.get(m) }),
    });
  });

  afterAll(async () => {
    await upstream?.close();
    await fast?.close();
    await slow?.close();
  });

  const call = (r: InClusterRoute) => async () => {
    const res = await upstream.send({
      route: r,
      dialect: 'openai-chat',
      body: { model: r.model, messages: [{ role: 'user', content: 'hi' }] },
      stream: false,
      clientWantsUsage: false,
      signal: never,
    });
    expect(res.kind).toBe('json');
  };
  const callers = (n: number, each: number, one: () => Promise<void>) =>
    Promise.all(
      Array.from({ length: n }, async () => {
        for (let i = 0; i < each; i++) await one();
      }),
    );

  it('sends more to the faster one: the fewest in flight first (round robin would split evenly)', async () => {
    fast.reset();
    slow.reset();
    fast.behave({ firstByteDelayMs: 10 });
    slow.behave({ firstByteDelayMs: 150 });
    const r = route({ replicas: [fast.url, slow.url], slots: undefined });
    table.set(r.model, r);
    await callers(4, 10, call(r));
    expect(fast.requests.length + slow.requests.length).toBe(40);
    expect(fast.requests.length).toBeGreaterThan(3 * slow.requests.length);
  });

  it('sends the retry of a refused call, and the calls after it, to the replica that is up', async () => {
    fast.reset();
    fast.behave({ firstByteDelayMs: 1 });
    // A port nothing listens on: every connection is refused, as to a restarting container.
    const closed = await new Promise<number>((resolve) => {
      const srv = createServer().listen(0, '127.0.0.1', () => {
        const port = (srv.address() as AddressInfo).port;
        srv.close(() => resolve(port));
      });
    });
    const dead = `http://127.0.0.1:${closed}`;
    const r = route({ model: 'llama3.1:8b', replicas: [dead, fast.url], slots: undefined });
    table.set(r.model, r);
    let refused = 0;
    for (let i = 0; i < 20; i++) {
      // One retry, as the pipeline makes for upstream_unreachable.
      await call(r)().catch(async (err: unknown) => {
        expect(failure(err)).toMatchObject({ status: 502, code: 'upstream_unreachable' });
        refused++;
        await call(r)();
      });
    }
    expect(refused).toBe(1);
    expect(fast.requests.length).toBe(20);
  });

  it('does not eject a replica for a call its client abandoned', async () => {
    fast.reset();
    slow.reset();
    slow.behave({ firstByteDelayMs: 400 });
    fast.behave({ firstByteDelayMs: 1 });
    // A pool of its own: its first call goes to the first replica, the slow one.
    const own = new Map<string, RouteEntry>();
    const up = new OpenAICompatibleUpstream({
      pools: new ReplicaPools({ maxQueued: 100, queueMs: 30_000, lookup: (m) => own.get(m) }),
    });
    const r = route({ replicas: [slow.url, fast.url], slots: undefined });
    own.set(r.model, r);
    const send = (signal: AbortSignal) =>
      up.send({
        route: r,
        dialect: 'openai-chat',
        body: { model: r.model, messages: [{ role: 'user', content: 'hi' }] },
        stream: false,
        clientWantsUsage: false,
        signal,
      });
    const gone = new AbortController();
    const abandoned = send(gone.signal);
    setTimeout(() => gone.abort(), 50);
    await expect(abandoned).rejects.toBeDefined();
    expect(slow.requests.length).toBe(1);
    slow.behave({ firstByteDelayMs: 1 });
    for (let i = 0; i < 4; i++) await send(never);
    await up.close();
    // Balanced over both as before: the abandoned call said nothing about the replica.
    expect(slow.requests.length).toBeGreaterThanOrEqual(2);
  });

  it('holds the excess in the proxy and never sends a replica more than its slots', async () => {
    fast.reset();
    slow.reset();
    fast.behave({ firstByteDelayMs: 10 });
    slow.behave({ firstByteDelayMs: 150 });
    const r = route({ model: 'llama3.1:8b', replicas: [fast.url, slow.url], slots: 2 });
    table.set(r.model, r);
    let peak = 0;
    let queuedSeen = 0;
    const sample = setInterval(() => {
      peak = Math.max(peak, ...Object.values(upstream.pools.replicaLoad(r.model)));
      queuedSeen = Math.max(queuedSeen, upstream.pools.load()[r.model]?.queued ?? 0);
    }, 2);
    // 8 callers against 4 slots in all.
    await callers(8, 6, call(r));
    clearInterval(sample);
    expect(fast.requests.length + slow.requests.length).toBe(48);
    expect(peak).toBeLessThanOrEqual(2);
    expect(queuedSeen).toBeGreaterThan(0);
    expect(upstream.pools.load()[r.model]).toMatchObject({ inFlight: 0, queued: 0 });
  });
});

describe('a wake the API server refuses', () => {
  it('is tried again while requests wait', async () => {
    const table = new Map<string, RouteEntry>();
    let calls = 0;
    const p = new ReplicaPools({
      maxQueued: 3,
      queueMs: 5_000,
      lookup: (m) => table.get(m),
      wake: async () => {
        calls++;
        if (calls === 1) throw new Error('429 TooManyRequests: storage is (re)initializing');
        table.set(asleep.model, route({ replicas: ['http://10.0.0.9:11434'], scaling: scaling({ replicas: 1 }) }));
        p.refresh();
      },
    });
    const asleep = route({ replicas: [], scaling: scaling() });
    table.set(asleep.model, asleep);
    const lease = await p.acquire(asleep, never);
    expect(lease.url).toBe('http://10.0.0.9:11434');
    expect(calls).toBe(2);
  });
});

describe('a hibernated model through the whole pipeline', () => {
  let double: OllamaDouble;
  const KEY = 'sk-wake-test';
  beforeAll(async () => {
    double = await startOllamaDouble({ models: ['qwen2.5:0.5b', 'llama3.1:8b'] });
  });
  const started: TestGateway[] = [];
  afterAll(async () => {
    for (const g of started) await g.stop();
    await double?.close();
  });

  async function gateway(whileWaking: 'Wait' | 'Fallback') {
    const routes = new RouteTable();
    const asleep = (replicas: string[]) =>
      route({
        replicas,
        scaling: scaling({ whileWaking, replicas: replicas.length }),
        fallback: ['llama3.1:8b'],
      });
    const awake = route({ model: 'llama3.1:8b', provider: 'platform-llms/llama', replicas: [double.url] });
    const set = (replicas: string[]) =>
      routes.set({
        entries: new Map<string, RouteEntry>([
          ['qwen2.5:0.5b', asleep(replicas)],
          ['llama3.1:8b', awake],
        ]),
        models: [],
      });
    set([]);
    const woken: RouteScaling[] = [];
    const pools = new ReplicaPools({
      maxQueued: 10,
      queueMs: 5_000,
      lookup: (m) => routes.lookup(m),
      // The wake lands, and a moment later the replica is ready (as the API server would tell).
      wake: async (s) => {
        woken.push(s);
        setTimeout(() => set([double.url]), 200);
      },
    });
    routes.onChange(() => pools.refresh());
    const app = await startGateway(
      {},
      {
        keys: ApiKeys.fromKeys([KEY]),
        routes,
        inCluster: new OpenAICompatibleUpstream({ pools }),
        usage: new MemoryUsage(),
        metrics: new ProxyMetrics(),
      },
    );
    started.push(app);
    const chat = () =>
      app.request('/openai/v1/chat/completions', {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-api-key': KEY },
        body: JSON.stringify({ model: 'qwen2.5:0.5b', messages: [{ role: 'user', content: 'hi' }] }),
      });
    return { chat, woken };
  }

  it('Wait: the caller is held until the replica is ready, then served by the model itself', async () => {
    const { chat, woken } = await gateway('Wait');
    const started = performance.now();
    const res = await chat();
    expect(res.status).toBe(200);
    expect(res.headers.get('x-gateway-fallback')).toBeNull();
    expect(((await res.json()) as { model: string }).model).toBe('qwen2.5:0.5b');
    expect(performance.now() - started).toBeGreaterThanOrEqual(150);
    expect(woken).toHaveLength(1);
  });

  it('Fallback: the caller is served by the fallback at once, and the model wakes all the same', async () => {
    const { chat, woken } = await gateway('Fallback');
    const res = await chat();
    expect(res.status).toBe(200);
    expect(res.headers.get('x-gateway-fallback')).toBe('llama3.1:8b');
    expect(woken).toHaveLength(1);
    await new Promise((r) => setTimeout(r, 300));
    // Awake now: the model serves its own requests again.
    const next = await chat();
    expect(next.headers.get('x-gateway-fallback')).toBeNull();
  });
});

describe('prefix affinity, bounded by load', () => {
  const four = ['http://10.0.0.1:8000', 'http://10.0.0.2:8000', 'http://10.0.0.3:8000', 'http://10.0.0.4:8000'];
  const r4 = route({ replicas: four, slots: undefined });
  /** Where a call with this key goes when nothing else is in flight. */
  const placeOnce = (p: ReplicaPools, r: InClusterRoute, key: string | undefined) => {
    const l = p.acquire(r, never, key) as Lease;
    l.release();
    return l.url;
  };
  const recorded = (
    table = new Map<string, RouteEntry>(),
    over: Partial<ConstructorParameters<typeof ReplicaPools>[0]> = {},
  ) => {
    const decisions: RoutingDecision[] = [];
    const { p } = pools(table, { onRoute: (_, d) => decisions.push(d), ...over });
    return { p, decisions };
  };
  const keys = (n: number) => Array.from({ length: n }, (_, i) => `prefix-${i}`);

  it('sends every call with the same prefix to the same replica', () => {
    const { p, decisions } = recorded();
    const homes = new Set<string>();
    for (const key of ['alpha', 'beta', 'gamma', 'delta', 'epsilon']) {
      const urls = new Set(Array.from({ length: 40 }, () => placeOnce(p, r4, key)));
      expect(urls.size).toBe(1);
      homes.add([...urls][0] as string);
    }
    expect(homes.size).toBeGreaterThan(1);
    expect(decisions).toEqual(Array(200).fill('affinity'));
  });

  it('spreads different prefixes evenly over the replicas', () => {
    const { p } = recorded();
    const count = new Map<string, number>();
    for (const key of keys(4000)) {
      const url = placeOnce(p, r4, key);
      count.set(url, (count.get(url) ?? 0) + 1);
    }
    expect([...count.keys()].sort()).toEqual(four);
    for (const n of count.values()) {
      expect(n / 4000).toBeGreaterThan(0.21);
      expect(n / 4000).toBeLessThan(0.29);
    }
  });

  it('never lets a prefix’s calls in flight take its replica past 1.25× the mean', () => {
    const { p } = recorded();
    const home = placeOnce(p, r4, 'hot');
    for (let i = 1; i <= 60; i++) {
      p.acquire(r4, never, 'hot');
      const loads = Object.values(p.replicaLoad(r4.model));
      expect(Math.max(...loads)).toBeLessThanOrEqual(Math.ceil((LOAD_BOUND * i) / 4));
    }
    // The hot prefix's replica holds the most: the others took only what it could not.
    const loads = p.replicaLoad(r4.model);
    expect(loads[home]).toBe(Math.max(...Object.values(loads)));
    expect(loads[home]).toBe(Math.ceil((LOAD_BOUND * 60) / 4));
  });

  it('overflows a hot prefix to the next replica once its own would pass the bound', () => {
    const { p, decisions } = recorded();
    const home = placeOnce(p, r4, 'hot');
    decisions.length = 0;
    // Background load: 4 calls on each replica.
    for (let i = 0; i < 16; i++) p.acquire(r4, never);
    expect(Object.values(p.replicaLoad(r4.model))).toEqual([4, 4, 4, 4]);
    const hot = Array.from({ length: 3 }, () => p.acquire(r4, never, 'hot') as Lease);
    // 5 and 6 of 17 and 18 in flight stay within ceil(1.25 × mean) = 6; a 7th would not.
    expect(hot.map((l) => l.url === home)).toEqual([true, true, false]);
    expect(decisions).toEqual([...Array(16).fill('least_loaded'), 'affinity', 'affinity', 'overflow']);
    // The overflow goes to the same next replica every time: the prefix's second home.
    const second = (hot[2] as Lease).url;
    (hot[2] as Lease).release();
    expect((p.acquire(r4, never, 'hot') as Lease).url).toBe(second);
  });

  it('places calls without a prefix key (short prompts) by least load, as before', () => {
    const { p, decisions } = recorded();
    const home = placeOnce(p, r4, 'hot');
    expect((p.acquire(r4, never, 'hot') as Lease).url).toBe(home);
    decisions.length = 0;
    const free = Array.from({ length: 3 }, () => (p.acquire(r4, never) as Lease).url);
    expect(free).not.toContain(home);
    expect(new Set(free).size).toBe(3);
    expect(decisions).toEqual(['least_loaded', 'least_loaded', 'least_loaded']);
  });

  it('moves only the prefixes of a replica that leaves, and only prefixes to a replica that joins', () => {
    const table = new Map<string, RouteEntry>();
    const { p } = recorded(table);
    const placeAll = (replicas: string[]) => {
      const r = route({ replicas, slots: undefined });
      table.set(r.model, r);
      return new Map(keys(2000).map((k) => [k, placeOnce(p, r, k)]));
    };
    const before = placeAll(four);
    const gone = four[2] as string;
    const after = placeAll(four.filter((u) => u !== gone));
    let moved = 0;
    for (const [k, url] of before) {
      if (url === gone) {
        moved++;
        expect(after.get(k)).not.toBe(gone);
      } else expect(after.get(k)).toBe(url);
    }
    expect(moved).toBeGreaterThan(300);

    const joined = 'http://10.0.0.5:8000';
    const grown = placeAll([...four, joined]);
    let took = 0;
    for (const [k, url] of before) {
      if (grown.get(k) === url) continue;
      expect(grown.get(k)).toBe(joined);
      took++;
    }
    expect(took / 2000).toBeGreaterThan(0.15);
    expect(took / 2000).toBeLessThan(0.25);
  });

  it('skips, in the prefix’s order, a replica whose engine is crowded while another is not', () => {
    const readings = new Map<string, ReplicaSignal>();
    const reading = (over: Partial<ReplicaSignal>): ReplicaSignal => ({
      waiting: 0,
      running: 4,
      kvCacheUsage: 0.5,
      at: 0,
      ...over,
    });
    const { p, decisions } = recorded(new Map(), { signals: { of: (url) => readings.get(url) } });
    const home = placeOnce(p, r4, 'k');
    const all = (over: Partial<ReplicaSignal>) => {
      for (const u of four) readings.set(u, reading(over));
    };
    all({});
    expect(placeOnce(p, r4, 'k')).toBe(home);
    // Its KV cache all but full, others' not: the next replica in its order.
    readings.set(home, reading({ kvCacheUsage: 0.96 }));
    const next = placeOnce(p, r4, 'k');
    expect(next).not.toBe(home);
    expect(decisions.at(-1)).toBe('overflow');
    // Both the first and the second full: the third (never the least loaded by rotation).
    readings.set(next, reading({ kvCacheUsage: 0.99 }));
    const third = placeOnce(p, r4, 'k');
    expect([home, next]).not.toContain(third);
    // Every engine full: none is better, the prefix stays home.
    all({ kvCacheUsage: 0.97 });
    expect(placeOnce(p, r4, 'k')).toBe(home);
    // A queue clearly longer than the others' least (more than twice it, plus QUEUE_SLACK).
    all({ waiting: 1 });
    readings.set(home, reading({ waiting: 2 * 1 + QUEUE_SLACK + 1 }));
    expect(placeOnce(p, r4, 'k')).not.toBe(home);
    readings.set(home, reading({ waiting: 2 * 1 + QUEUE_SLACK }));
    expect(placeOnce(p, r4, 'k')).toBe(home);
    // Only its own reading: nothing says another is better.
    readings.clear();
    readings.set(home, reading({ kvCacheUsage: 0.99, waiting: 50 }));
    expect(placeOnce(p, r4, 'k')).toBe(home);
    expect(KV_FULL).toBeLessThan(0.96);
  });

  it('passes over a replica that refused connections, and returns once its ejection ends', () => {
    let t = 0;
    const { p } = recorded(new Map(), { now: () => t });
    const home = placeOnce(p, r4, 'k');
    const l = p.acquire(r4, never, 'k') as Lease;
    l.unreachable();
    l.release();
    expect(placeOnce(p, r4, 'k')).not.toBe(home);
    t += EJECT_MS;
    expect(placeOnce(p, r4, 'k')).toBe(home);
  });

  it('gives a queued call with a prefix the first slot that frees, whichever replica it is on', async () => {
    const { p } = recorded();
    const r = route({ slots: 1 });
    const [one, two] = r.replicas as [string, string];
    // A key whose home is the first replica.
    const key = keys(50).find((k) => placeOnce(p, r, k) === one) as string;
    const a = p.acquire(r, never) as Lease;
    const b = p.acquire(r, never) as Lease;
    expect([a.url, b.url].sort()).toEqual([one, two]);
    const waiting = p.acquire(r, never, key);
    (a.url === two ? a : b).release();
    expect((await waiting).url).toBe(two);
  });
});

describe('cache-aware routing through the in-cluster upstream', () => {
  let doubles: OllamaDouble[];
  beforeAll(async () => {
    doubles = await Promise.all([0, 1, 2].map(() => startOllamaDouble({ models: ['qwen2.5:0.5b'] })));
  });
  afterAll(async () => {
    for (const d of doubles ?? []) await d.close();
  });

  it('sends a long shared prompt to one replica of an engine with load signals, short ones and Ollama by load', async () => {
    const table = new Map<string, RouteEntry>();
    const upstream = new OpenAICompatibleUpstream({
      pools: new ReplicaPools({ maxQueued: 100, queueMs: 30_000, lookup: (m) => table.get(m) }),
    });
    // A vLLM deployment (its gauges are what make affinity safe across proxies); the double speaks its chat API.
    const ollama = route({ replicas: doubles.map((d) => d.url), slots: undefined });
    const r: InClusterRoute = { ...ollama, engine: 'VLLM', loadSignals: vllm.loadSignals as LoadSignals };
    table.set(r.model, r);
    const system = 'You are a careful assistant. '.repeat(100);
    const send = (messages: { role: string; content: string }[]) =>
      upstream.send({
        route: r,
        dialect: 'openai-chat',
        body: { model: r.model, messages },
        stream: false,
        clientWantsUsage: false,
        signal: never,
      });
    try {
      for (const d of doubles) d.reset();
      for (let i = 0; i < 12; i++) {
        await send([
          { role: 'system', content: system },
          { role: 'user', content: `question ${i}` },
        ]);
      }
      expect(doubles.map((d) => d.requests.length).sort()).toEqual([0, 0, 12]);
      for (const d of doubles) d.reset();
      // Short prompts, one at a time: the rotation among equally idle replicas spreads them.
      for (let i = 0; i < 12; i++) await send([{ role: 'user', content: `question ${i}` }]);
      expect(doubles.map((d) => d.requests.length)).toEqual([4, 4, 4]);
      // Ollama exports no load signals: the long shared prompt is balanced by load like the rest.
      for (const d of doubles) d.reset();
      table.set(ollama.model, ollama);
      for (let i = 0; i < 12; i++) {
        await upstream.send({
          route: ollama,
          dialect: 'openai-chat',
          body: {
            model: ollama.model,
            messages: [
              { role: 'system', content: system },
              { role: 'user', content: `q ${i}` },
            ],
          },
          stream: false,
          clientWantsUsage: false,
          signal: never,
        });
      }
      expect(doubles.map((d) => d.requests.length)).toEqual([4, 4, 4]);
    } finally {
      await upstream.close();
    }
  });
});

describe('routing decisions on the gateway’s metrics', () => {
  it('counts affinity, overflow and least-loaded placements per model', async () => {
    const routes = new RouteTable();
    const r = route({ slots: undefined });
    routes.set({ entries: new Map<string, RouteEntry>([[r.model, r]]), models: [] });
    const metrics = new ProxyMetrics();
    const p = routedPools(routes, metrics, { maxQueued: 1, queueMs: 100 });
    // A second gateway on the same metrics registers nothing twice.
    expect(() => routedPools(routes, metrics, { maxQueued: 1, queueMs: 100 })).not.toThrow();
    for (let i = 0; i < 3; i++) (p.acquire(r, never, 'k') as Lease).release();
    p.acquire(r, never);
    p.acquire(r, never, 'k');
    p.acquire(r, never, 'k');
    const text = await metrics.registry.metrics();
    const value = (decision: string) =>
      Number(
        text.match(
          new RegExp(`pao_gateway_replica_routing_total\\{model="${r.model}",decision="${decision}"\\} (\\d+)`),
        )?.[1],
      );
    expect([value('affinity'), value('overflow'), value('least_loaded')]).toEqual([4, 1, 1]);
  });
});
