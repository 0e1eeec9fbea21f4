import { readFileSync } from 'node:fs';
import { Agent as HttpAgent } from 'node:http';
import { Agent as HttpsAgent } from 'node:https';
import { setTimeout as sleep } from 'node:timers/promises';
import { BedrockRuntimeClient, ConverseStreamCommand } from '@aws-sdk/client-bedrock-runtime';
import { NodeHttpHandler } from '@smithy/node-http-handler';
import { Agent, request } from 'undici';

/**
 * The load generator of the stream-holding bench (streams.ts), in a process of its own: S callers,
 * each opening a stream, reading it to its end and opening the next, so that S streams stay open
 * for the whole run, as agents' answers do. The callers start spread over one stream's length (a
 * gateway in service sees arrivals spread, not S at the same instant), then a measured window.
 * Events are counted as they arrive: SSE `data:` lines, or a Bedrock event stream's events when
 * the caller is the AWS SDK (direct to the AWS double, or through a bare proxy to it).
 * Prints JSON lines: {"event":"start"} and {"event":"stop"} around the window (the parent samples
 * CPU and memory between them), then {"event":"result",...}.
 * Run: node --import tsx e2e/bench/streams-load.ts '<StreamLoadArgs as JSON>' (or @FILE)
 */

export interface StreamLoadArgs {
  kind: 'sse' | 'bedrock';
  /** sse: the full URL; bedrock: the endpoint the SDK calls. */
  url: string;
  headers?: Record<string, string>;
  body?: string;
  bedrock?: { modelId: string; region: string; accessKeyId: string; secretAccessKey: string };
  /** Callers, each holding one stream open at a time. */
  streams: number;
  /**
   * Of those, callers that read slowly: at most slowBytesPerS, asking with slowBody (a long answer, so
   * their sockets fill and backpressure, not buffering, must pace them). SSE only.
   */
  slow?: number;
  slowBytesPerS?: number;
  slowBody?: string;
  /** Seconds over which the callers start (one stream's length), before the window. */
  rampS: number;
  /** Seconds after the ramp before the window opens. */
  settleS: number;
  durationS: number;
  /** ms a stream may take to its first event before it counts as an error. */
  firstEventTimeoutMs?: number;
}

export interface StreamLoadResult {
  /** Events received within the window, per second (normal callers). */
  eventsPerS: number;
  /** Streams that ended complete within the window (normal callers). */
  completed: number;
  /** Streams started in the window (normal callers): their time to first event. */
  started: number;
  ttfeP50Ms: number;
  ttfeP99Ms: number;
  ttfeMaxMs: number;
  /** Non-200 answers, transport errors, streams ended without their terminator (any time in the run). */
  errors: number;
  errorSamples: string[];
  /** The slow callers: events and bytes they read in the window, and their time to first event. */
  slow?: { callers: number; eventsPerS: number; bytesPerS: number; ttfeP99Ms: number; completed: number };
  windowS: number;
  /** CPU of this process over the window, % of one core: whether the generator itself saturated. */
  loadCpuPct: number;
}

const emit = (o: object) => process.stdout.write(`${JSON.stringify(o)}\n`);
const pct = (xs: number[], p: number) => {
  if (xs.length === 0) return Number.NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] as number;
};
const r2 = (v: number) => (Number.isFinite(v) ? +v.toFixed(2) : Number.NaN);

/** Occurrences of `data:` at the start of a line in a chunk (an SSE event each; chunks split only between writes). */
function sseEvents(chunk: Buffer): number {
  let n = 0;
  let i = chunk.indexOf('data:');
  while (i !== -1) {
    if (i === 0 || chunk[i - 1] === 10) n++;
    i = chunk.indexOf('data:', i + 5);
  }
  return n;
}

interface Tally {
  events: number;
  bytes: number;
  completed: number;
  ttfe: number[];
  started: number;
}

const UNCAPPED = { keepAlive: true, maxSockets: Number.POSITIVE_INFINITY, maxFreeSockets: 256 };

async function main(): Promise<void> {
  const raw = process.argv[2] ?? '';
  const args = JSON.parse(raw.startsWith('@') ? readFileSync(raw.slice(1), 'utf8') : raw) as StreamLoadArgs;
  const dispatcher = new Agent({ keepAliveTimeout: 30_000, connect: { timeout: 30_000 } });
  const sdk =
    args.kind === 'bedrock' && args.bedrock
      ? new BedrockRuntimeClient({
          region: args.bedrock.region,
          endpoint: args.url,
          credentials: { accessKeyId: args.bedrock.accessKeyId, secretAccessKey: args.bedrock.secretAccessKey },
          maxAttempts: 1,
          // HTTP/1.1 keep-alive, no socket cap: the SDK's defaults (an HTTP/2 session per call, or
          // 50 sockets) would measure the SDK's pool rather than the double.
          requestHandler: new NodeHttpHandler({
            httpAgent: new HttpAgent(UNCAPPED),
            httpsAgent: new HttpsAgent(UNCAPPED),
            connectionTimeout: 30_000,
          }),
        })
      : undefined;
  const t0 = performance.now();
  const windowStart = t0 + (args.rampS + args.settleS) * 1000;
  const windowEnd = windowStart + args.durationS * 1000;
  const inWindow = (t: number) => t >= windowStart && t < windowEnd;
  const normal: Tally = { events: 0, bytes: 0, completed: 0, ttfe: [], started: 0 };
  const slowTally: Tally = { events: 0, bytes: 0, completed: 0, ttfe: [], started: 0 };
  let errors = 0;
  const errorSamples: string[] = [];
  const fail = (what: string) => {
    errors++;
    if (errorSamples.length < 5) errorSamples.push(what.slice(0, 300));
  };
  const stop = new AbortController();
  const slowCount = args.slow ?? 0;

  /** One stream: resolves when it ended (complete or not). */
  /** One stream; a slow caller (bytesPerS > 0) reads at most that many bytes a second. */
  async function one(tally: Tally, bytesPerS: number): Promise<void> {
    const began = performance.now();
    let first = 0;
    let ended = false;
    const seen = (n: number, bytes = 0) => {
      const now = performance.now();
      if (inWindow(now)) tally.bytes += bytes;
      if (first === 0 && n > 0) {
        first = now;
        if (inWindow(began)) tally.ttfe.push(now - began);
      }
      if (inWindow(now)) tally.events += n;
    };
    try {
      if (sdk && args.bedrock) {
        const out = await sdk.send(
          new ConverseStreamCommand({
            modelId: args.bedrock.modelId,
            messages: [{ role: 'user', content: [{ text: 'hello there' }] }],
          }),
          { abortSignal: stop.signal },
        );
        for await (const e of out.stream ?? []) {
          seen(1);
          if (e.metadata) ended = true;
        }
      } else {
        const res = await request(args.url, {
          method: 'POST',
          headers: args.headers,
          body: bytesPerS > 0 ? (args.slowBody ?? args.body) : args.body,
          dispatcher,
          signal: stop.signal,
          headersTimeout: args.firstEventTimeoutMs ?? 60_000,
        });
        if (res.statusCode !== 200) {
          const text = await res.body.text();
          fail(`HTTP ${res.statusCode}: ${text}`);
          return;
        }
        for await (const chunk of res.body as AsyncIterable<Buffer>) {
          seen(sseEvents(chunk), chunk.length);
          if (chunk.includes('[DONE]')) ended = true;
          // Not reading meanwhile: undici stops reading the socket once its buffer is full.
          if (bytesPerS > 0) await sleep((chunk.length / bytesPerS) * 1000);
        }
      }
      if (!ended) fail('stream ended without its terminator');
      else if (inWindow(performance.now())) tally.completed++;
      if (inWindow(began)) tally.started++;
    } catch (err) {
      if (stop.signal.aborted) return;
      fail(err instanceof Error ? `${err.name}: ${err.message}` : String(err));
    }
  }

  async function caller(i: number): Promise<void> {
    const isSlow = i < slowCount;
    // Spread over the ramp; slow callers interleaved among the others by their index.
    await sleep(((i * 7919) % args.streams) * ((args.rampS * 1000) / args.streams));
    while (!stop.signal.aborted) {
      await one(isSlow ? slowTally : normal, isSlow ? (args.slowBytesPerS ?? 64 * 1024) : 0);
    }
  }

  const callers = Array.from({ length: args.streams }, (_, i) => caller(i));
  await sleep(Math.max(0, windowStart - performance.now()));
  const cpu0 = process.cpuUsage();
  emit({ event: 'start' });
  await sleep(Math.max(0, windowEnd - performance.now()));
  emit({ event: 'stop' });
  const cpu = process.cpuUsage(cpu0);
  stop.abort();
  await Promise.race([Promise.allSettled(callers), sleep(10_000)]);
  const windowS = args.durationS;
  const result: StreamLoadResult = {
    eventsPerS: r2(normal.events / windowS),
    completed: normal.completed,
    started: normal.started,
    ttfeP50Ms: r2(pct(normal.ttfe, 50)),
    ttfeP99Ms: r2(pct(normal.ttfe, 99)),
    ttfeMaxMs: r2(Math.max(...normal.ttfe)),
    errors,
    errorSamples,
    ...(slowCount > 0
      ? {
          slow: {
            callers: slowCount,
            eventsPerS: r2(slowTally.events / windowS),
            bytesPerS: r2(slowTally.bytes / windowS),
            ttfeP99Ms: r2(pct(slowTally.ttfe, 99)),
            completed: slowTally.completed,
          },
        }
      : {}),
    windowS,
    loadCpuPct: r2(((cpu.user + cpu.system) / 1000 / (windowS * 1000)) * 100),
  };
  emit({ event: 'result', ...result });
  sdk?.destroy();
  void dispatcher.destroy();
  process.exit(0);
}

await main();
