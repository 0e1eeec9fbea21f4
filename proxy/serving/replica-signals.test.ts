import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { LoadSignals } from '../../crds/engines/engine.js';
import { type Lease, ReplicaPools } from './replica-pool.js';
import { parseSignals, ReplicaSignals, replicaSignals, type SignalTarget } from './replica-signals.js';
import { type InClusterRoute, type RouteEntry, RouteTable } from './routes.js';

const VLLM: LoadSignals = {
  path: '/metrics',
  waiting: 'vllm:num_requests_waiting',
  running: 'vllm:num_requests_running',
  kvCacheUsage: 'vllm:kv_cache_usage_perc',
};

const MODEL = 'Qwen/Qwen3-8B';

/**
 * A vLLM 0.32 /metrics page as it comes (trimmed: the process collector and most histograms'
 * buckets): HELP and TYPE lines, labels on every series, a `_by_reason` gauge whose name begins
 * with the waiting gauge's, an info gauge whose label values hold braces, quotes and spaces.
 */
const page = (
  o: { waiting?: number; running?: number; kv?: number } = {},
) => `# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 12817.0
python_gc_objects_collected_total{generation="1"} 1462.0
# HELP process_resident_memory_bytes Resident memory size in bytes.
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 2.174779392e+09
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="${MODEL}"} ${o.running ?? 24}.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="${MODEL}"} ${o.waiting ?? 7}.0
# HELP vllm:num_requests_waiting_by_reason Number of waiting requests by reason.
# TYPE vllm:num_requests_waiting_by_reason gauge
vllm:num_requests_waiting_by_reason{engine="0",model_name="${MODEL}",reason="capacity"} ${o.waiting ?? 7}.0
vllm:num_requests_waiting_by_reason{engine="0",model_name="${MODEL}",reason="deferred"} 0.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="${MODEL}"} ${o.kv ?? 0.4123}
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",engine="0",kv_sharing_fast_prefill="False",mm_processor_cache_type="{\\"kind\\": \\"lru\\"} vllm:num_requests_waiting 99"} 1.0
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="${MODEL}"} 1.843968e+06
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="${MODEL}"} 1.6128e+06
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="${MODEL}"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="${MODEL}"} 811.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="${MODEL}"} 1204.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="${MODEL}"} 1204.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="${MODEL}"} 187.52931213378906
`;

describe('parseSignals', () => {
  it('reads the three gauges of a vLLM page, not the gauges whose names begin like theirs', () => {
    expect(parseSignals(page(), VLLM)).toEqual({ waiting: 7, running: 24, kvCacheUsage: 0.4123 });
    expect(parseSignals(page({ waiting: 0, running: 3, kv: 1 }), VLLM)).toEqual({
      waiting: 0,
      running: 3,
      kvCacheUsage: 1,
    });
  });

  it('sums the queues of data-parallel engines and averages their cache use', () => {
    const two = `${page()}vllm:num_requests_waiting{engine="1",model_name="${MODEL}"} 5.0
vllm:num_requests_running{engine="1",model_name="${MODEL}"} 16.0
vllm:kv_cache_usage_perc{engine="1",model_name="${MODEL}"} 0.8123
`;
    expect(parseSignals(two, VLLM)).toEqual({ waiting: 12, running: 40, kvCacheUsage: expect.closeTo(0.6123, 9) });
  });

  it('reads unlabelled series, CRLF lines and timestamps', () => {
    const text =
      'vllm:num_requests_waiting 3 1700000000000\r\nvllm:num_requests_running\t2\r\nvllm:kv_cache_usage_perc 5e-1\r\n';
    expect(parseSignals(text, VLLM)).toEqual({ waiting: 3, running: 2, kvCacheUsage: 0.5 });
  });

  it('reads a gauge the engine lacks as NaN, and a page with none of them as nothing', () => {
    const old = page().replaceAll('vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc');
    const s = parseSignals(old, VLLM);
    expect(s).toMatchObject({ waiting: 7, running: 24 });
    expect(s?.kvCacheUsage).toBeNaN();
    expect(parseSignals('# HELP ollama nothing here\nfoo 1\n', VLLM)).toBeUndefined();
    expect(parseSignals('', VLLM)).toBeUndefined();
    // Broken lines are skipped, not read as zero.
    expect(parseSignals('vllm:num_requests_waiting{engine="0"\nvllm:num_requests_waiting NaN\n', VLLM)).toBeUndefined();
  });
});

/** A replica's metrics endpoint on a free loopback port; `answer` decides each response. */
async function metricsServer(answer: (res: import('node:http').ServerResponse) => void) {
  let hits = 0;
  const server: Server = createServer((req, res) => {
    hits++;
    if (req.url !== '/metrics') {
      res.writeHead(404).end();
      return;
    }
    answer(res);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url,
    hits: () => hits,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

const serving = (text: () => string) => (res: import('node:http').ServerResponse) =>
  res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4' }).end(text());

describe('ReplicaSignals against replicas over HTTP', () => {
  const cleanup: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const c of cleanup.splice(0)) await c();
  });
  const poller = (
    targets: () => SignalTarget[],
    over: Partial<ConstructorParameters<typeof ReplicaSignals>[0]> = {},
  ) => {
    const s = new ReplicaSignals({ targets, intervalMs: 60_000, ...over });
    cleanup.push(() => s.close());
    return s;
  };
  const served = async (answer: Parameters<typeof metricsServer>[0]) => {
    const srv = await metricsServer(answer);
    cleanup.push(srv.close);
    return srv;
  };

  it('keeps the latest reading per replica, ignores it once stale, and forgets replicas no longer listed', async () => {
    let waiting = 3;
    const a = await served(serving(() => page({ waiting })));
    const b = await served(serving(() => page({ waiting: 0, kv: 0.97 })));
    let t = 1_000;
    let listed = [a.url, `${b.url}/`];
    const s = poller(() => listed.map((url) => ({ url, signals: VLLM })), { now: () => t });
    expect(s.of(a.url)).toBeUndefined();
    await s.poll();
    expect(s.of(a.url)).toEqual({ waiting: 3, running: 24, kvCacheUsage: 0.4123, at: 1_000 });
    expect(s.of(`${b.url}/`)).toMatchObject({ waiting: 0, kvCacheUsage: 0.97 });
    waiting = 9;
    t = 2_000;
    await s.poll();
    expect(s.of(a.url)).toMatchObject({ waiting: 9, at: 2_000 });
    // Past the staleness bound, a reading is as good as none.
    t = 2_000 + 5_001;
    expect(s.of(a.url)).toBeUndefined();
    listed = [a.url];
    await s.poll();
    expect(s.of(a.url)).toMatchObject({ waiting: 9 });
    t += 1;
    expect(s.of(`${b.url}/`)).toBeUndefined();
    expect(b.hits()).toBe(2);
  });

  it('reads on its own every interval, and stops when closed', async () => {
    const a = await served(serving(() => page()));
    const s = new ReplicaSignals({ targets: () => [{ url: a.url, signals: VLLM }], intervalMs: 20 });
    await vi.waitFor(() => expect(s.of(a.url)).toMatchObject({ waiting: 7 }), { timeout: 2_000 });
    await s.close();
    expect(s.of(a.url)).toBeUndefined();
    const hits = a.hits();
    await new Promise((r) => setTimeout(r, 100));
    expect(a.hits()).toBe(hits);
  });

  it('does without replicas that fail, hang or send too much, within its timeout', async () => {
    const failing = await served((res) => res.writeHead(500).end(page()));
    const hanging = await served(() => {});
    const huge = await served(serving(() => page() + `# ${'x'.repeat(200_000)}\n`.repeat(10)));
    const good = await served(serving(() => page({ waiting: 1 })));
    const urls = [failing.url, hanging.url, huge.url, good.url, 'http://127.0.0.1:1'];
    const s = poller(() => urls.map((url) => ({ url, signals: VLLM })), { timeoutMs: 200, maxBytes: 1_000_000 });
    const started = performance.now();
    await s.poll();
    expect(performance.now() - started).toBeLessThan(1_500);
    expect(urls.map((u) => s.of(u)?.waiting)).toEqual([undefined, undefined, undefined, 1, undefined]);
    expect(hanging.hits()).toBe(1);
  });

  it('reads one page per replica at a time: a slow replica is not asked again before it answers', async () => {
    let pending: (() => void)[] = [];
    const slow = await served((res) => pending.push(() => res.writeHead(200).end(page({ waiting: 4 }))));
    const s = poller(() => [{ url: slow.url, signals: VLLM }], { timeoutMs: 2_000 });
    const first = s.poll();
    await vi.waitFor(() => expect(slow.hits()).toBe(1));
    await s.poll(); // the first read is still under way: no second one
    expect(slow.hits()).toBe(1);
    for (const p of pending) p();
    pending = [];
    await first;
    expect(s.of(slow.url)).toMatchObject({ waiting: 4 });
  });
});

describe('replicaSignals over a route table', () => {
  it('reads the replicas of routes with signals and more than one replica, each once a round', async () => {
    const servers = await Promise.all(Array.from({ length: 5 }, () => metricsServer(serving(() => page()))));
    const [a, b, single, ollamaA, ollamaB] = servers.map((srv) => srv.url) as [string, string, string, string, string];
    const r = (model: string, over: Partial<InClusterRoute>): InClusterRoute => ({
      kind: 'in-cluster',
      model,
      baseUrl: `http://${model}:8000`,
      provider: `platform-llms/${model}`,
      ...over,
    });
    const vllm = r('qwen', { replicas: [a, b], loadSignals: VLLM });
    const routes = new RouteTable();
    routes.set({
      entries: new Map<string, RouteEntry>([
        ['qwen', vllm],
        ['qwen-alias', vllm],
        ['single', r('single', { replicas: [single], loadSignals: VLLM })],
        ['ollama', r('ollama', { replicas: [ollamaA, ollamaB] })],
        ['standalone', r('standalone', { loadSignals: VLLM })],
      ]),
      models: ['qwen', 'qwen-alias', 'single', 'ollama', 'standalone'].map((id) => ({
        id,
        model: id,
        created: 0,
        provider: id,
        cli: true,
      })),
    });
    const s = replicaSignals(routes, { intervalMs: 60_000 });
    try {
      await s.poll();
      expect(servers.map((srv) => srv.hits())).toEqual([1, 1, 0, 0, 0]);
      expect(s.of(a)).toMatchObject({ waiting: 7 });
      expect(s.of(single)).toBeUndefined();
    } finally {
      await s.close();
      for (const srv of servers) await srv.close();
    }
  });
});

describe('cache-aware routing on the engines’ signals', () => {
  it('sends a prefix away from its replica while that replica’s KV cache is full, and back after', async () => {
    const kv = new Map<string, number>();
    // Three replicas whose metrics pages are this test's to set.
    const replicas = await Promise.all(
      [0, 1, 2].map(async () => {
        const srv = await metricsServer(serving(() => page({ waiting: 0, kv: kv.get(srv.url) ?? 0.3 })));
        return srv;
      }),
    );
    const urls = replicas.map((r) => r.url);
    const route: InClusterRoute = {
      kind: 'in-cluster',
      model: MODEL,
      baseUrl: 'http://qwen:8000',
      provider: 'platform-llms/qwen',
      replicas: urls,
      loadSignals: VLLM,
    };
    const signals = new ReplicaSignals({
      targets: () => urls.map((url) => ({ url, signals: VLLM })),
      intervalMs: 60_000,
    });
    const pools = new ReplicaPools({ maxQueued: 10, queueMs: 1_000, lookup: () => route, signals });
    const never = new AbortController().signal;
    const place = () => {
      const l = pools.acquire(route, never, 'a-prefix-key') as Lease;
      l.release();
      return l.url;
    };
    try {
      await signals.poll();
      const home = place();
      kv.set(home, 0.97);
      await signals.poll();
      const away = place();
      expect(away).not.toBe(home);
      // Every replica full: none is better, the prefix goes home.
      for (const u of urls) kv.set(u, 0.99);
      await signals.poll();
      expect(place()).toBe(home);
      kv.clear();
      await signals.poll();
      expect(place()).toBe(home);
    } finally {
      await signals.close();
      for (const r of replicas) await r.close();
    }
  });
});
