import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer as createHttpServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gunzipSync } from 'node:zlib';
import { cachedBuild, freePort } from '../support/cached-build.js';

/**
 * A real OpenTelemetry Collector for the tests: the binary e2e/otel/build.sh builds into ~/.cache
 * with the collector's own builder, from the Go module proxy. Its `otlp` receiver listens on free
 * loopback ports (OTLP/HTTP and OTLP/gRPC); its `otlp_http` exporter sends what it received, as
 * OTLP/JSON (`encoding: json`), to an HTTP sink in this process, which keeps every span.
 *
 *   const otel = await startCollector();
 *   // point the proxy's OTLP exporter at `${otel.otlpHttpUrl}/v1/traces`
 *   const [span] = await otel.waitForSpans((s) => s.name === 'POST /v1/chat/completions');
 *   await otel.stop();
 */

const HERE = fileURLToPath(new URL('./', import.meta.url));

/** Builds (or finds in the cache) the collector; returns the binary's path. Cold: ~5 min. */
const otelcolBin: () => string = cachedBuild(HERE);

/**
 * An attribute value as the tests compare it. OTLP/JSON's int64 (`intValue`, a decimal string) becomes
 * a number (exact up to 2^53); `arrayValue` and `kvlistValue` become the JSON text of their flattened
 * values (a JS array, an object); `bytesValue` stays base64.
 */
type AttributeValue = string | number | boolean;

type SpanKind = 'UNSPECIFIED' | 'INTERNAL' | 'SERVER' | 'CLIENT' | 'PRODUCER' | 'CONSUMER';
type StatusCode = 'UNSET' | 'OK' | 'ERROR';

interface ReceivedSpan {
  /** 32 lowercase hex digits. */
  traceId: string;
  /** 16 lowercase hex digits. */
  spanId: string;
  /** '' for a root span. */
  parentSpanId: string;
  name: string;
  kind: SpanKind;
  /** Nanoseconds since the epoch, as decimal strings (int64 in OTLP/JSON). */
  startTimeUnixNano: string;
  endTimeUnixNano: string;
  attributes: Record<string, AttributeValue>;
  /** The attributes of the resource the span came with (service.name, ...). */
  resource: Record<string, AttributeValue>;
  /** The instrumentation scope. */
  scope: { name: string; version: string };
  status: { code: StatusCode; message: string };
  events: { name: string; timeUnixNano: string; attributes: Record<string, AttributeValue> }[];
}

export interface CollectorOptions {
  /** Puts a `batch` processor in the pipeline with this timeout (default: none, spans go straight out). */
  batchTimeoutMs?: number;
  /** Extra environment for the collector process. */
  env?: Record<string, string>;
}

export interface Collector {
  /** http://127.0.0.1:PORT: where to send OTLP/HTTP (POST /v1/traces, protobuf or JSON). */
  otlpHttpUrl: string;
  /** 127.0.0.1:PORT: the OTLP/gRPC receiver (plaintext). */
  otlpGrpcEndpoint: string;
  /** Every span the collector has exported so far, in arrival order. */
  spans(): ReceivedSpan[];
  /** Raw OTLP/JSON ExportTraceServiceRequest bodies the sink received, in arrival order. */
  requests(): unknown[];
  /**
   * The received spans that match `pred`, once there are at least `min` (default 1) of them;
   * rejects after `timeoutMs` (default 10 s) with what did arrive and the collector's log.
   */
  waitForSpans(pred: (span: ReceivedSpan) => boolean, timeoutMs?: number, min?: number): Promise<ReceivedSpan[]>;
  /** Forgets every span received so far. */
  reset(): void;
  /** The collector's stdout and stderr so far (its own log), plus sink errors. */
  output(): string;
  /** The collector's pid. */
  pid(): number;
  /** SIGTERM (the collector flushes), then SIGKILL after 5 s; closes the sink, removes the temp dir. */
  stop(): Promise<void>;
}

// ---- OTLP/JSON flattening ----------------------------------------------------------------------

type Json = Record<string, unknown>;

const isObj = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);
const arr = (v: unknown): unknown[] => (Array.isArray(v) ? v : []);
const str = (v: unknown): string => (typeof v === 'string' ? v : typeof v === 'number' ? String(v) : '');

type Plain = AttributeValue | Plain[] | { [k: string]: Plain } | null;

function anyValue(v: unknown): Plain {
  if (!isObj(v)) return null;
  if ('stringValue' in v) return str(v.stringValue);
  if ('boolValue' in v) return v.boolValue === true;
  if ('intValue' in v) return Number(v.intValue);
  if ('doubleValue' in v) {
    // protojson writes NaN and the infinities as strings
    const d = v.doubleValue;
    return typeof d === 'number' ? d : Number(d);
  }
  if ('bytesValue' in v) return str(v.bytesValue);
  if ('arrayValue' in v) return arr(isObj(v.arrayValue) ? v.arrayValue.values : undefined).map(anyValue);
  if ('kvlistValue' in v) {
    const out: { [k: string]: Plain } = {};
    for (const kv of arr(isObj(v.kvlistValue) ? v.kvlistValue.values : undefined)) {
      if (isObj(kv)) out[str(kv.key)] = anyValue(kv.value);
    }
    return out;
  }
  return null;
}

function attributes(list: unknown): Record<string, AttributeValue> {
  const out: Record<string, AttributeValue> = {};
  for (const kv of arr(list)) {
    if (!isObj(kv)) continue;
    const v = anyValue(kv.value);
    if (v === null) continue;
    out[str(kv.key)] = typeof v === 'object' ? JSON.stringify(v) : v;
  }
  return out;
}

const KINDS: readonly SpanKind[] = ['UNSPECIFIED', 'INTERNAL', 'SERVER', 'CLIENT', 'PRODUCER', 'CONSUMER'];
const STATUS_CODES: readonly StatusCode[] = ['UNSET', 'OK', 'ERROR'];

/** An enum as OTLP/JSON may carry it: its number (what the collector writes) or its full name. */
function enumName<T extends string>(v: unknown, names: readonly T[], prefix: string, fallback: T): T {
  if (typeof v === 'number') return names[v] ?? fallback;
  if (typeof v === 'string') {
    const short = v.startsWith(prefix) ? v.slice(prefix.length) : v;
    return names.find((n) => n === short) ?? fallback;
  }
  return fallback;
}

/** The spans of one ExportTraceServiceRequest (OTLP/JSON), flattened. */
function flattenTraces(body: unknown): ReceivedSpan[] {
  const spans: ReceivedSpan[] = [];
  for (const rs of arr(isObj(body) ? body.resourceSpans : undefined)) {
    if (!isObj(rs)) continue;
    const resource = attributes(isObj(rs.resource) ? rs.resource.attributes : undefined);
    for (const ss of arr(rs.scopeSpans)) {
      if (!isObj(ss)) continue;
      const scope = isObj(ss.scope)
        ? { name: str(ss.scope.name), version: str(ss.scope.version) }
        : { name: '', version: '' };
      for (const s of arr(ss.spans)) {
        if (!isObj(s)) continue;
        const status = isObj(s.status) ? s.status : {};
        spans.push({
          traceId: str(s.traceId).toLowerCase(),
          spanId: str(s.spanId).toLowerCase(),
          parentSpanId: str(s.parentSpanId).toLowerCase(),
          name: str(s.name),
          kind: enumName(s.kind, KINDS, 'SPAN_KIND_', 'UNSPECIFIED'),
          startTimeUnixNano: str(s.startTimeUnixNano),
          endTimeUnixNano: str(s.endTimeUnixNano),
          attributes: attributes(s.attributes),
          resource,
          scope,
          status: { code: enumName(status.code, STATUS_CODES, 'STATUS_CODE_', 'UNSET'), message: str(status.message) },
          events: arr(s.events)
            .filter(isObj)
            .map((e) => ({
              name: str(e.name),
              timeUnixNano: str(e.timeUnixNano),
              attributes: attributes(e.attributes),
            })),
        });
      }
    }
  }
  return spans;
}

// ---- the collector -----------------------------------------------------------------------------

async function readBody(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  const raw = Buffer.concat(chunks);
  return req.headers['content-encoding'] === 'gzip' ? gunzipSync(raw) : raw;
}

async function portOpen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const sock = connect({ host: '127.0.0.1', port });
    sock.once('connect', () => {
      sock.destroy();
      resolve(true);
    });
    sock.once('error', () => resolve(false));
  });
}

export async function startCollector(opts: CollectorOptions = {}): Promise<Collector> {
  const bin = otelcolBin();
  let out = '';
  const log = (s: string) => {
    out = (out + s).slice(-200_000);
  };
  const received: ReceivedSpan[] = [];
  const bodies: unknown[] = [];

  // The sink: what the collector's otlp_http exporter POSTs (OTLP/JSON) lands here.
  const sink: Server = createHttpServer((req: IncomingMessage, res: ServerResponse) => {
    readBody(req)
      .then((body) => {
        if (req.method === 'POST' && req.url === '/v1/traces') {
          const parsed: unknown = JSON.parse(body.toString('utf8'));
          bodies.push(parsed);
          received.push(...flattenTraces(parsed));
        }
        res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      })
      .catch((err: unknown) => {
        log(`[sink] ${req.method} ${req.url}: ${String(err)}\n`);
        res.writeHead(400, { 'content-type': 'application/json' }).end('{}');
      });
  });
  await new Promise<void>((resolve, reject) => {
    sink.once('error', reject);
    sink.listen(0, '127.0.0.1', () => resolve());
  });
  const sinkPort = (sink.address() as { port: number }).port;

  const [httpPort, grpcPort] = [await freePort(), await freePort()];
  const dir = mkdtempSync(join(tmpdir(), 'pao-otelcol-'));
  const configPath = join(dir, 'config.yaml');
  // YAML is a superset of JSON: the config is written as JSON.
  const config = {
    receivers: {
      otlp: {
        protocols: {
          grpc: { endpoint: `127.0.0.1:${grpcPort}` },
          http: { endpoint: `127.0.0.1:${httpPort}` },
        },
      },
    },
    processors: opts.batchTimeoutMs === undefined ? {} : { batch: { timeout: `${opts.batchTimeoutMs}ms` } },
    exporters: {
      otlp_http: {
        traces_endpoint: `http://127.0.0.1:${sinkPort}/v1/traces`,
        encoding: 'json',
        compression: 'none',
        // Synchronous export: when the receiver answers an OTLP request, the sink has its spans.
        sending_queue: { enabled: false },
        retry_on_failure: { enabled: false },
      },
    },
    service: {
      // No internal metrics server (it would take the fixed port 8888).
      telemetry: { metrics: { level: 'none' }, logs: { level: 'info' } },
      pipelines: {
        traces: {
          receivers: ['otlp'],
          processors: opts.batchTimeoutMs === undefined ? [] : ['batch'],
          exporters: ['otlp_http'],
        },
      },
    },
  };
  writeFileSync(configPath, JSON.stringify(config, null, 2));

  const child: ChildProcess = spawn(bin, ['--config', `file:${configPath}`], {
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: dir, ...opts.env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout?.on('data', (d: Buffer) => log(d.toString()));
  child.stderr?.on('data', (d: Buffer) => log(d.toString()));
  const gone = () => child.exitCode !== null || child.signalCode !== null;
  const reap = () => {
    if (!gone()) child.kill('SIGKILL');
  };
  // On the test process's exit without stop(): kill the collector and drop its config dir.
  const onExit = () => {
    reap();
    rmSync(dir, { recursive: true, force: true });
  };
  process.once('exit', onExit);

  const cleanup = async () => {
    reap();
    process.off('exit', onExit);
    sink.closeAllConnections();
    await new Promise<void>((resolve) => sink.close(() => resolve()));
    rmSync(dir, { recursive: true, force: true });
  };

  // Receivers start after the exporters and processors: both ports open means the pipeline is up.
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (gone()) {
      await cleanup();
      throw new Error(`otelcol exited (${child.exitCode ?? child.signalCode}):\n${out.slice(-4000)}`);
    }
    if ((await portOpen(httpPort)) && (await portOpen(grpcPort))) break;
    if (Date.now() > deadline) {
      await cleanup();
      throw new Error(`otelcol did not open 127.0.0.1:${httpPort} and :${grpcPort} in 30 s:\n${out.slice(-4000)}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }

  return {
    otlpHttpUrl: `http://127.0.0.1:${httpPort}`,
    otlpGrpcEndpoint: `127.0.0.1:${grpcPort}`,
    spans: () => [...received],
    requests: () => [...bodies],
    waitForSpans: async (pred, timeoutMs = 10_000, min = 1) => {
      const until = Date.now() + timeoutMs;
      for (;;) {
        const hits = received.filter(pred);
        if (hits.length >= min) return hits;
        if (Date.now() > until) {
          const seen = received.map((s) => `${s.name} (${s.kind}, ${s.traceId}/${s.spanId})`).join('\n  ');
          throw new Error(
            `waitForSpans: ${hits.length}/${min} matching spans after ${timeoutMs} ms; received ${received.length}:\n  ${seen}\n` +
              `otelcol output:\n${out.slice(-4000)}`,
          );
        }
        await new Promise((r) => setTimeout(r, 25));
      }
    },
    reset: () => {
      received.length = 0;
      bodies.length = 0;
    },
    output: () => out,
    pid: () => child.pid ?? 0,
    stop: async () => {
      if (!gone()) {
        const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
        const timer = setTimeout(reap, 5_000);
        child.kill('SIGTERM');
        await exited;
        clearTimeout(timer);
      }
      await cleanup();
    },
  };
}
