import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client, ProtocolError, StreamableHTTPClientTransport, specTypeSchemas } from '@modelcontextprotocol/client';
import { InMemorySpanExporter } from '@opentelemetry/sdk-trace-base';
import { createParser } from 'eventsource-parser';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ApiKey } from '../../crds/api-key.js';
import type { McpServer } from '../../crds/mcp-server.js';
import { ApiKeys, policyOf, sha256 } from '../../proxy/access/auth.js';
import { McpServerTable } from '../../proxy/mcp/servers.js';
import { ProxyMetrics } from '../../proxy/telemetry/metrics.js';
import { OtelRequestTracer } from '../../proxy/telemetry/otel-tracer.js';
import { MemoryUsage } from '../../proxy/usage/record.js';
import { type RunningServer, startEverything, startMemoryBridged } from '../mcp/servers.js';
import {
  CaptureSink,
  capturingFetch,
  SCHEMA_REVISION,
  specSchema,
  validateGatewayMessage,
} from '../mcp/spec-schema.js';
import { freePort } from '../support/cached-build.js';
import { startGateway, type TestGateway } from '../support/gateway.js';
import { eventually } from '../support/kube.js';

/**
 * The MCP gateway against real servers from npm: server-everything over Streamable HTTP and
 * server-memory on stdio behind the bridge, called with the official TypeScript SDK client,
 * each call made directly and through /mcp and compared.
 */

const FULL = 'sk-mcp-full';
const NARROW = 'sk-mcp-narrow';
const SECRET = 'test-session-secret';
const TRACEPARENT = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
const exporter = new InMemorySpanExporter();
const tracer = new OtelRequestTracer(exporter, { name: 'proxy', version: 'test' });
const metrics = new ProxyMetrics(['team']);
/** Every message the SDK clients below receive, checked against the spec's schema by the last test. */
const capture = new CaptureSink();

function apiKey(name: string, key: string, mcp?: ApiKey['spec']['mcp']): ApiKey {
  return {
    apiVersion: 'ai.platform/v1beta1',
    kind: 'ApiKey',
    metadata: { name, namespace: 'platform-agent' },
    spec: {
      team: name === 'full' ? 'search' : 'narrow',
      role: 'User',
      rotation: 0,
      tags: { project: 'agents' },
      ...(mcp ? { mcp } : {}),
    },
    status: { digest: `sha256:${sha256(key).toString('hex')}` },
  };
}

const mcpServer = (name: string, url: string, spec: Partial<McpServer['spec']> = {}): McpServer => ({
  apiVersion: 'ai.platform/v1beta1',
  kind: 'McpServer',
  metadata: { name, namespace: 'platform-agent' },
  spec: { url, ...spec },
});

/** A JSON-RPC answer's body, as a test reads it. */
/** A JSON-RPC answer's body as a test reads it, checked against the spec's schema (refusals at the HTTP level included). */
const rpc = async (res: Response) => {
  const body: unknown = await res.json();
  expect(validateGatewayMessage(undefined, body)).toEqual([]);
  return body as { error?: { code: number }; result?: { protocolVersion?: string } };
};

/** The SSE events of a GET stream, read until `until` holds or for `forMs`, then the stream is dropped. */
async function readEvents(
  url: string,
  headers: Record<string, string>,
  stop: { until?: (events: Array<{ id?: string; data: unknown }>) => boolean; forMs?: number },
): Promise<Array<{ id?: string; data: unknown }>> {
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), stop.forMs ?? 30_000);
  const events: Array<{ id?: string; data: unknown }> = [];
  try {
    const res = await fetch(url, { headers, signal: abort.signal });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const parser = createParser({
      onEvent: (e) => {
        events.push({ ...(e.id ? { id: e.id } : {}), data: JSON.parse(e.data) as unknown });
        if (stop.until?.(events)) abort.abort();
      },
    });
    const decoder = new TextDecoder();
    for await (const chunk of res.body ?? []) parser.feed(decoder.decode(chunk as Uint8Array, { stream: true }));
  } catch (err) {
    if (!abort.signal.aborted) throw err;
  } finally {
    clearTimeout(timer);
  }
  return events;
}

/**
 * The first event-stream answer to a POST reaches the client as far as its first event, then the
 * connection breaks (its body errors); every other answer is as it came. `cut` says whether it did.
 */
function breakingFirstStream(send: typeof fetch = fetch): { fetch: typeof fetch; cut: () => boolean } {
  let cut = false;
  const breaking: typeof fetch = async (input, init) => {
    const res = await send(input, init);
    if (cut || init?.method !== 'POST' || !res.headers.get('content-type')?.startsWith('text/event-stream')) {
      return res;
    }
    cut = true;
    // The first event reaches the client (a read waits for it), then the connection breaks.
    const reader = res.body?.getReader();
    const body = new ReadableStream<Uint8Array>({
      async pull(ctl) {
        const next = await reader?.read();
        if (!next || next.done) return ctl.close();
        ctl.enqueue(next.value);
        await reader?.cancel();
        ctl.error(new TypeError('terminated: the connection broke'));
      },
    });
    return new Response(body, { status: res.status, headers: res.headers });
  };
  return { fetch: breaking, cut: () => cut };
}

/** Quick reconnections: a broken stream is resumed within a second. */
const QUICK_RECONNECTION = {
  initialReconnectionDelay: 200,
  maxReconnectionDelay: 1000,
  reconnectionDelayGrowFactor: 1,
  maxRetries: 3,
};

async function connect(url: string, headers: Record<string, string> = {}, sessionId?: string): Promise<Client> {
  const client = new Client({ name: 'e2e', version: '1.0.0' });
  await client.connect(
    new StreamableHTTPClientTransport(new URL(url), {
      requestInit: { headers },
      fetch: capturingFetch(capture),
      ...(sessionId ? { sessionId } : {}),
    }),
  );
  return client;
}

describe('MCP gateway with real servers and the official SDK client', () => {
  let everything: RunningServer;
  let memory: RunningServer;
  let gateway: TestGateway;
  const usage = new MemoryUsage();
  const servers = new McpServerTable();
  const keys = new ApiKeys();

  beforeAll(async () => {
    [everything, memory] = await Promise.all([
      startEverything(),
      startMemoryBridged(join(mkdtempSync(join(tmpdir(), 'pao-mcp-memory-')), 'memory.jsonl')),
    ]);
    servers.set([
      mcpServer('everything', everything.url, { tools: { deny: ['get-env'] } }),
      mcpServer('memory', memory.url),
    ]);
    keys.setManaged(
      [apiKey('full', FULL), apiKey('narrow', NARROW, { servers: [{ name: 'everything', tools: ['echo'] }] })].flatMap(
        (k) => policyOf(k) ?? [],
      ),
    );
    gateway = await startGateway(
      { mcp: { sessionSecret: SECRET } },
      { keys, usage, mcpServers: servers, tracer, metrics },
    );
  }, 180_000);

  afterAll(async () => {
    await gateway?.stop();
    await Promise.all([everything?.stop(), memory?.stop()]);
  });

  it('federates both servers: tools named <server>_<tool>, the same result as the direct call, recorded under the key', async () => {
    const direct = await connect(everything.url);
    // The CLI sends its tags in X-LiteLLM-Tags, merged with those of X-Tags.
    const via = await connect(`${gateway.url}/mcp`, {
      'X-API-Key': FULL,
      'X-Tags': 'ticket:T-1',
      'X-LiteLLM-Tags': 'client:cli',
    });
    const directTools = (await direct.listTools()).tools.map((t) => t.name);
    const viaTools = (await via.listTools()).tools.map((t) => t.name);
    expect(directTools).toContain('echo');
    expect(viaTools).toContain('everything_echo');
    expect(viaTools).toContain('memory_read_graph');
    // The McpServer's deny-list holds: get-env is served by the server, not through the gateway.
    expect(directTools).toContain('get-env');
    expect(viaTools).not.toContain('everything_get-env');
    expect(viaTools.filter((n) => n.startsWith('everything_')).length).toBe(directTools.length - 1);

    const args = { message: 'hello through the gateway' };
    const a = await direct.callTool({ name: 'echo', arguments: args });
    const b = await via.callTool({ name: 'everything_echo', arguments: args });
    expect(b).toEqual(a);

    const rec = usage.records.find((r) => r.endpoint === 'mcp' && r.model === 'echo');
    expect(rec).toMatchObject({ provider: 'everything', team: 'search', apiKey: 'full', status: 200 });
    expect(rec?.tags).toEqual(
      expect.arrayContaining([
        { key: 'ticket', value: 'T-1' },
        { key: 'client', value: 'cli' },
        { key: 'project', value: 'agents' },
      ]),
    );
    expect(rec?.bytesIn).toBeGreaterThan(50);
    expect(rec?.bytesOut).toBeGreaterThan(50);
    expect(rec?.payload).toBeUndefined();
    await Promise.all([direct.close(), via.close()]);
  });

  it('a key without a tool neither sees nor calls it', async () => {
    const via = await connect(`${gateway.url}/mcp`, { Authorization: `Bearer ${NARROW}` });
    const names = (await via.listTools()).tools.map((t) => t.name);
    expect(names).toEqual(['everything_echo']);
    const err = await via.callTool({ name: 'everything_get-sum', arguments: { a: 1, b: 2 } }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Error);
    expect(String((err as Error).message)).toMatch(/Unknown tool/);
    const refused = usage.records.filter((r) => r.endpoint === 'mcp' && r.apiKey === 'narrow' && r.status !== 200);
    expect(refused.length).toBeGreaterThan(0);
    await via.close();
  });

  it('relays progress on the way and the result at the end, as the server sends them', async () => {
    const via = await connect(`${gateway.url}/mcp/everything`, { 'X-API-Key': FULL });
    const seen: number[] = [];
    const result = await via.callTool(
      { name: 'trigger-long-running-operation', arguments: { duration: 1, steps: 4 } },
      { onprogress: (p) => seen.push(p.progress) },
    );
    expect(seen).toEqual([1, 2, 3, 4]);
    expect(JSON.stringify(result)).toMatch(/Long running operation completed/);
    await via.close();
  });

  it('a call whose answer stream broke goes on: the SDK resumes it with Last-Event-ID and gets every event and the result', async () => {
    // The client's connection breaks after the call's first event: its fetch errors the body there.
    const gets: string[] = [];
    const breaking = breakingFirstStream(async (input, init) => {
      if ((init?.method ?? 'GET') === 'GET') gets.push(new Headers(init?.headers).get('last-event-id') ?? '');
      return fetch(input, init);
    });
    const before = usage.records.length;
    const client = new Client({ name: 'e2e-resume', version: '1.0.0' });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${gateway.url}/mcp/everything`), {
        requestInit: { headers: { 'X-API-Key': FULL } },
        fetch: breaking.fetch,
        reconnectionOptions: QUICK_RECONNECTION,
      }),
    );
    // Listed first: a tool the gateway has seen listed is recorded by its name.
    await client.listTools();
    const seen: number[] = [];
    const result = await client.callTool(
      { name: 'trigger-long-running-operation', arguments: { duration: 2, steps: 4 } },
      { onprogress: (p) => seen.push(p.progress) },
    );
    expect(breaking.cut()).toBe(true);
    // The SDK came back with the id of the event it had, and got the rest: nothing lost, nothing twice.
    expect(gets.filter((id) => id !== '')).toHaveLength(1);
    expect(seen).toEqual([1, 2, 3, 4]);
    expect(JSON.stringify(result)).toMatch(/Long running operation completed/);
    // One call, recorded once, as served.
    const calls = usage.records.slice(before).filter((r) => r.model === 'trigger-long-running-operation');
    expect(calls.map((r) => r.status)).toEqual([200]);
    // Read again within a minute: the whole stream, as it went. Past what this replica keeps (another
    // replica's stream, or one long gone), the call is answered with an error at once.
    const token = gets.find((id) => id !== '')?.split('.')[0];
    const again = (lastEventId: string) =>
      fetch(`${gateway.url}/mcp/everything`, {
        headers: {
          accept: 'text/event-stream',
          'x-api-key': FULL,
          'mcp-session-id': (client.transport as StreamableHTTPClientTransport).sessionId ?? '',
          'mcp-protocol-version': '2025-11-25',
          'last-event-id': lastEventId,
        },
      }).then(async (r) => ({ status: r.status, text: await r.text() }));
    const whole = await again(`${token}.0`);
    expect(whole.status).toBe(200);
    expect(whole.text.match(/notifications\/progress/g)).toHaveLength(4);
    expect(whole.text).toMatch(/Long running operation completed/);
    const lost = await again(`${token}.999`);
    expect(lost.status).toBe(200);
    expect(lost.text).toMatch(
      /"error":\{"code":-32000,"message":"The answer stream of this call cannot be resumed here/,
    );
    await client.close();
  });

  it('another replica that gets the resumption or the retry passes it to the replica serving the call', async () => {
    // Two replicas, each knowing where its peers reach it (the chart gives the pod's IP).
    const ports = [await freePort(), await freePort()];
    const [a, b] = await Promise.all(
      ports.map((port) =>
        startGateway(
          { mcp: { sessionSecret: SECRET, replicaUrl: `http://127.0.0.1:${port}` } },
          { keys, usage, mcpServers: servers },
          { port },
        ),
      ),
    );
    try {
      // The client's first requests reach replica a; once its connection broke (or for a retry with
      // the input asked for), its next request reaches replica b, as a Service may send it.
      const sentTo: string[] = [];
      const breaking = breakingFirstStream(async (input, init) => {
        const url = new URL(String(input instanceof Request ? input.url : input));
        const body = typeof init?.body === 'string' ? init.body : '';
        const toB = new Headers(init?.headers).has('last-event-id') || body.includes('"requestState"');
        url.port = String(toB ? ports[1] : ports[0]);
        sentTo.push(`${init?.method ?? 'GET'} ${toB ? 'b' : 'a'}`);
        return fetch(url, init);
      });
      const transport = (path: string) =>
        new StreamableHTTPClientTransport(new URL(`${a?.url}${path}`), {
          requestInit: { headers: { 'X-API-Key': FULL } },
          fetch: breaking.fetch,
          reconnectionOptions: QUICK_RECONNECTION,
        });
      const streaming = new Client({ name: 'e2e-replicas', version: '1.0.0' });
      await streaming.connect(transport('/mcp/everything'));
      const seen: number[] = [];
      const result = await streaming.callTool(
        { name: 'trigger-long-running-operation', arguments: { duration: 2, steps: 4 } },
        { onprogress: (p) => seen.push(p.progress) },
      );
      expect(breaking.cut()).toBe(true);
      expect(sentTo).toContain('GET b');
      expect(seen).toEqual([1, 2, 3, 4]);
      expect(JSON.stringify(result)).toMatch(/Long running operation completed/);
      await streaming.close();

      const asking = new Client(
        { name: 'e2e-replicas', version: '1.0.0' },
        { capabilities: { elicitation: { form: {} } }, versionNegotiation: { mode: 'auto' } },
      );
      asking.setRequestHandler('elicitation/create', () => ({ action: 'accept', content: { name: 'Grace Hopper' } }));
      sentTo.length = 0;
      await asking.connect(transport('/mcp/everything'));
      expect(asking.getNegotiatedProtocolVersion()).toBe('2026-07-28');
      const answered = await asking.callTool({ name: 'trigger-elicitation-request', arguments: {} });
      expect(JSON.stringify(answered)).toMatch(/Grace Hopper/);
      expect(sentTo).toContain('POST b');
      await asking.close();
    } finally {
      await Promise.all([a?.stop(), b?.stop()]);
    }
  });

  it('traces a tool call as execute_tool after the GenAI conventions, and counts it in the metrics', async () => {
    const via = await connect(`${gateway.url}/mcp`, { 'X-API-Key': FULL, traceparent: TRACEPARENT });
    await via.listTools();
    await via.callTool({ name: 'everything_get-sum', arguments: { a: 2, b: 3 } });
    await via.close();
    await tracer.flush();
    // The last one: the narrow key's refused call of the same tool was traced before it (status 400).
    const span = exporter
      .getFinishedSpans()
      .filter((s) => s.name === 'execute_tool get-sum')
      .at(-1);
    expect(span?.attributes).toMatchObject({
      'gen_ai.operation.name': 'execute_tool',
      'gen_ai.tool.name': 'get-sum',
      'gen_ai.tool.type': 'extension',
      'mcp.method.name': 'tools/call',
      'mcp.protocol.version': '2025-11-25',
      'gateway.route.provider': 'everything',
      'http.response.status_code': 200,
    });
    // The caller's trace goes on through the gateway.
    expect(span?.spanContext().traceId).toBe(TRACEPARENT.split('-')[1]);
    const text = await metrics.registry.metrics();
    expect(text).toMatch(/pao_gateway_mcp_tool_calls_total\{server="everything",tool="get-sum",status="200"\} 1/);
    expect(text).toMatch(/pao_gateway_mcp_tool_calls_total\{server="everything",tool="get-sum",status="400"\} 1/);
    expect(text).toMatch(/pao_gateway_mcp_tool_call_seconds_count\{server="everything"\} \d+/);
  });

  it('a stdio server behind the bridge works through /mcp like any other', async () => {
    const via = await connect(`${gateway.url}/mcp`, { 'X-API-Key': FULL });
    await via.callTool({
      name: 'memory_create_entities',
      arguments: { entities: [{ name: 'gateway', entityType: 'service', observations: ['speaks MCP'] }] },
    });
    const graph = await via.callTool({ name: 'memory_read_graph', arguments: {} });
    expect(JSON.stringify(graph)).toMatch(/speaks MCP/);
    await via.close();
  });

  it('a session outlives the replica that began it', async () => {
    const transport = new StreamableHTTPClientTransport(new URL(`${gateway.url}/mcp`), {
      requestInit: { headers: { 'X-API-Key': FULL } },
      fetch: capturingFetch(capture),
    });
    const first = new Client({ name: 'e2e', version: '1.0.0' });
    await first.connect(transport);
    const sessionId = transport.sessionId as string;
    expect(sessionId).toBeTruthy();
    // Another replica (same sealing secret), a new process as far as the client can tell.
    const other = await startGateway({ mcp: { sessionSecret: SECRET } }, { keys, usage, mcpServers: servers });
    try {
      const res = await fetch(`${other.url}/mcp`, {
        method: 'POST',
        headers: {
          'X-API-Key': FULL,
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
          'mcp-session-id': sessionId,
          'mcp-protocol-version': '2025-11-25',
        },
        body: JSON.stringify({
          jsonrpc: '2.0',
          id: 7,
          method: 'tools/call',
          params: { name: 'everything_echo', arguments: { message: 'x' } },
        }),
      });
      expect(res.status).toBe(200);
      expect(await res.json()).toMatchObject({ id: 7, result: { content: [{ type: 'text' }] } });
      // Another key cannot use it.
      const stolen = await fetch(`${other.url}/mcp`, {
        method: 'POST',
        headers: { 'X-API-Key': NARROW, 'content-type': 'application/json', 'mcp-session-id': sessionId },
        body: JSON.stringify({ jsonrpc: '2.0', id: 8, method: 'tools/list' }),
      });
      expect(stolen.status).toBe(404);
    } finally {
      await other.stop();
      await first.close();
    }
  });

  it('opens the servers’ stream on GET: a subscribed resource’s updates reach the client through /mcp as they do directly, named as /mcp names it', async () => {
    const updatesVia = async (url: string, headers: Record<string, string>, prefix: string) => {
      const client = await connect(url, headers);
      try {
        const got: string[] = [];
        client.setNotificationHandler('notifications/resources/updated', (n) => {
          got.push(n.params.uri);
        });
        const doc = (await client.listResources()).resources.find((r) => r.uri.includes('demo://'));
        expect(doc).toBeDefined();
        await client.subscribeResource({ uri: doc?.uri ?? '' });
        await client.callTool({ name: `${prefix}toggle-subscriber-updates`, arguments: {} });
        await eventually('a resource update', 20_000, () => got[0]);
        // Off again: the server stops sending for this session.
        await client.callTool({ name: `${prefix}toggle-subscriber-updates`, arguments: {} });
        return { uri: doc?.uri, updated: got[0] };
      } finally {
        await client.close();
      }
    };
    const direct = await updatesVia(everything.url, {}, '');
    expect(direct.updated).toBe(direct.uri);
    const federated = await updatesVia(`${gateway.url}/mcp`, { 'X-API-Key': FULL }, 'everything_');
    expect(federated.updated).toBe(federated.uri);
    expect(federated.updated).toBe(`everything+${direct.uri}`);
    const single = await updatesVia(`${gateway.url}/mcp/everything`, { 'X-API-Key': FULL }, '');
    expect(single.updated).toBe(direct.uri);
    // The capabilities say so.
    const via = await connect(`${gateway.url}/mcp`, { 'X-API-Key': FULL });
    expect(via.getServerCapabilities()?.resources).toMatchObject({ subscribe: true, listChanged: true });
    expect(via.getServerCapabilities()?.tools).toMatchObject({ listChanged: true });
    await via.close();
  }, 90_000);

  it('a broken stream resumes with Last-Event-ID on another replica: what the servers sent meanwhile arrives at once', async () => {
    const client = await connect(`${gateway.url}/mcp`, { 'X-API-Key': FULL });
    const doc = (await client.listResources()).resources.find((r) => r.uri.includes('demo://'));
    await client.subscribeResource({ uri: doc?.uri ?? '' });
    await client.callTool({ name: 'everything_toggle-subscriber-updates', arguments: {} });
    const sessionId = (client.transport as StreamableHTTPClientTransport | undefined)?.sessionId ?? '';
    // The SDK client's own stream closes with it; the session stays.
    await client.close();
    const headers = { 'X-API-Key': FULL, 'mcp-session-id': sessionId, accept: 'text/event-stream' };
    const first = await readEvents(`${gateway.url}/mcp`, headers, { until: (events) => events.length >= 1 });
    const resumeFrom = first.at(-1)?.id;
    expect(resumeFrom).toBeTruthy();
    expect(first[0]?.data).toMatchObject({ method: 'notifications/resources/updated', params: { uri: doc?.uri } });
    // Two updates (5 s apart) go out while nobody listens.
    await new Promise((r) => setTimeout(r, 11_000));
    const other = await startGateway({ mcp: { sessionSecret: SECRET } }, { keys, mcpServers: servers });
    try {
      // Within 4 s of the reconnection: without the replay at most one update could arrive.
      const resumed = await readEvents(
        `${other.url}/mcp`,
        { ...headers, 'last-event-id': resumeFrom ?? '' },
        { forMs: 4_000 },
      );
      expect(resumed.length).toBeGreaterThanOrEqual(2);
      for (const e of resumed) expect(e.data).toMatchObject({ params: { uri: doc?.uri } });
      // Each event says where the stream now stands: a later reconnection resumes from there.
      expect(resumed.every((e) => typeof e.id === 'string' && e.id !== resumeFrom)).toBe(true);
    } finally {
      await other.stop();
      const off = await connect(`${gateway.url}/mcp`, { 'X-API-Key': FULL }, sessionId);
      await off.callTool({ name: 'everything_toggle-subscriber-updates', arguments: {} }).catch(() => undefined);
      await off.close();
    }
  }, 90_000);

  it('bounds the streams a key holds open on a replica: one past the bound is a 429, and a closed one frees its place', async () => {
    const other = await startGateway(
      { mcp: { sessionSecret: SECRET, maxStreamsPerKey: 1 } },
      { keys, mcpServers: servers },
    );
    try {
      // The SDK client opens its GET stream after initialize: the key's one place.
      const client = await connect(`${other.url}/mcp/everything`, { 'X-API-Key': FULL });
      const sessionId = (client.transport as StreamableHTTPClientTransport | undefined)?.sessionId ?? '';
      const headers = { 'X-API-Key': FULL, 'mcp-session-id': sessionId, accept: 'text/event-stream' };
      const get = async () => {
        const abort = new AbortController();
        const res = await fetch(`${other.url}/mcp/everything`, { headers, signal: abort.signal });
        const body = res.status === 200 ? undefined : ((await res.json()) as { error?: { code: number } });
        abort.abort();
        return { status: res.status, body };
      };
      const refused = await eventually('the second stream refused', 10_000, async () => {
        const r = await get();
        return r.status === 429 ? r : undefined;
      });
      expect(refused.body?.error?.code).toBe(-32000);
      await client.close();
      // Its stream closed: the place is free again (the server may take a moment to let its own go).
      await eventually('a stream again', 10_000, async () => ((await get()).status === 200 ? true : undefined));
    } finally {
      await other.stop();
    }
  });

  it('serves the 2026-07-28 revision to a client that probes for it, and the session revisions beside it', async () => {
    // As the SDKs probe: server/discover first, initialize where the answer does not offer 2026-07-28.
    const connectAs = async (url: string) => {
      const client = new Client({ name: 'e2e-stateless', version: '1.0.0' }, { versionNegotiation: { mode: 'auto' } });
      await client.connect(
        new StreamableHTTPClientTransport(new URL(url), {
          requestInit: { headers: { 'X-API-Key': FULL } },
          fetch: capturingFetch(capture),
        }),
      );
      return client;
    };
    // Directly, server-everything speaks only the session revisions: the probe falls back.
    const direct = await connectAs(everything.url);
    expect(direct.getNegotiatedProtocolVersion()).toBe('2025-11-25');
    const directEcho = await direct.callTool({ name: 'echo', arguments: { message: 'stateless' } });
    const directTools = (await direct.listTools()).tools.map((t) => t.name).sort();
    await direct.close();
    for (const [url, prefix] of [
      [`${gateway.url}/mcp`, 'everything_'],
      [`${gateway.url}/mcp/everything`, ''],
    ] as const) {
      const before = usage.records.length;
      const via = await connectAs(url);
      expect(via.getNegotiatedProtocolVersion()).toBe('2026-07-28');
      const tools = (await via.listTools()).tools.map((t) => t.name);
      expect(tools).toContain(`${prefix}echo`);
      // The same tools as directly, renamed at /mcp (get-env is denied by the McpServer).
      const own = tools.filter((t) => t.startsWith(prefix)).map((t) => t.slice(prefix.length));
      expect(own.sort()).toEqual(directTools.filter((t) => t !== 'get-env'));
      expect(await via.callTool({ name: `${prefix}echo`, arguments: { message: 'stateless' } })).toMatchObject({
        content: directEcho.content,
      });
      // A second call reuses the gateway's session at the server; both are recorded under the key.
      await via.callTool({ name: `${prefix}echo`, arguments: { message: 'again' } });
      const calls = usage.records.slice(before).filter((r) => r.endpoint === 'mcp' && r.model === 'echo');
      expect(calls).toHaveLength(2);
      expect(calls.every((r) => r.apiKey === 'full' && r.status === 200)).toBe(true);
      await via.close();
    }
    // Changes reach a 2026-07-28 client through subscriptions/listen: a watched resource's updates, named as /mcp names it.
    const listener = await connectAs(`${gateway.url}/mcp`);
    const updated: string[] = [];
    listener.setNotificationHandler('notifications/resources/updated', (n) => {
      updated.push(n.params.uri);
    });
    const doc = (await listener.listResources()).resources.find((r) => r.uri.startsWith('everything+demo://'));
    const subscription = await listener.listen({ resourceSubscriptions: [doc?.uri ?? ''] });
    expect(subscription.honoredFilter).toEqual({ resourceSubscriptions: [doc?.uri] });
    await listener.callTool({ name: 'everything_toggle-subscriber-updates', arguments: {} });
    await eventually('a resource update on the listen stream', 20_000, () => updated[0]);
    expect(updated[0]).toBe(doc?.uri);
    await listener.callTool({ name: 'everything_toggle-subscriber-updates', arguments: {} });
    await subscription.close();
    await listener.close();
    // An older client on the same endpoint still gets its session revision.
    const legacy = await connect(`${gateway.url}/mcp`, { 'X-API-Key': FULL });
    expect(legacy.getNegotiatedProtocolVersion()).toBe('2025-11-25');
    await legacy.close();
  });

  it('asks a 2026-07-28 client for the input its servers ask for (input_required rounds), with the answers the session revision gets on its stream', async () => {
    const asked: string[] = [];
    const connectWithInput = async (url: string, mode: 'legacy' | 'auto') => {
      const client = new Client(
        { name: 'e2e-input', version: '1.0.0' },
        { capabilities: { elicitation: { form: {} }, sampling: {}, roots: {} }, versionNegotiation: { mode } },
      );
      client.setRequestHandler('elicitation/create', (req) => {
        asked.push(`elicitation ${mode}`);
        expect(req.params.message).toMatch(/provide inputs/);
        return { action: 'accept', content: { name: 'Ada Lovelace', check: true, email: 'ada@example.com' } };
      });
      client.setRequestHandler('sampling/createMessage', (req) => {
        asked.push(`sampling ${mode}`);
        return {
          model: 'client-model',
          role: 'assistant',
          content: { type: 'text', text: `sampled: ${JSON.stringify(req.params.messages[0]?.content)}` },
        };
      });
      client.setRequestHandler('roots/list', () => {
        asked.push(`roots ${mode}`);
        return { roots: [{ uri: 'file:///work/project', name: 'project' }] };
      });
      await client.connect(
        new StreamableHTTPClientTransport(new URL(url), {
          requestInit: { headers: { 'X-API-Key': FULL } },
          fetch: capturingFetch(capture),
        }),
      );
      return client;
    };
    const calls = [
      { name: 'trigger-elicitation-request', arguments: {} },
      { name: 'trigger-sampling-request', arguments: { prompt: 'a haiku about gateways', maxTokens: 50 } },
      { name: 'get-roots-list', arguments: {} },
    ];
    // Directly, in the session revision: the server asks on the call's stream.
    const direct = await connectWithInput(everything.url, 'legacy');
    const expected = [];
    for (const c of calls) expected.push(await direct.callTool(c));
    await direct.close();
    expect(asked).toEqual(['elicitation legacy', 'sampling legacy', 'roots legacy']);
    for (const [url, prefix] of [
      [`${gateway.url}/mcp`, 'everything_'],
      [`${gateway.url}/mcp/everything`, ''],
    ] as const) {
      asked.length = 0;
      const before = usage.records.length;
      const via = await connectWithInput(url, 'auto');
      expect(via.getNegotiatedProtocolVersion()).toBe('2026-07-28');
      // The server offers the tools that need the client's capabilities: its session declares them.
      const tools = (await via.listTools()).tools.map((t) => t.name);
      for (const c of calls) expect(tools).toContain(`${prefix}${c.name}`);
      for (const [i, c] of calls.entries()) {
        const got = await via.callTool({ ...c, name: `${prefix}${c.name}` });
        expect(got.content).toEqual(expected[i]?.content);
      }
      // The key's session at the server is the same at both paths (same capabilities): the server
      // asked for the roots once, outside the call (on its stream), and keeps them.
      expect(asked).toEqual(['elicitation auto', 'sampling auto', ...(prefix ? ['roots auto'] : [])]);
      // One record per call, however many rounds it took.
      const recorded = usage.records.slice(before).filter((r) => r.endpoint === 'mcp');
      expect(recorded.map((r) => r.model).sort()).toEqual(calls.map((c) => c.name).sort());
      expect(recorded.every((r) => r.status === 200)).toBe(true);
      await via.close();
    }
    // A state the gateway did not give, or another key's, takes up nothing.
    const retry = (key: string, requestState: string) =>
      fetch(`${gateway.url}/mcp/everything`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
          'x-api-key': key,
          'mcp-protocol-version': '2026-07-28',
          'mcp-method': 'tools/call',
          'mcp-name': 'trigger-elicitation-request',
        },
        body: JSON.stringify({
          jsonrpc: '2.0',
          id: 7,
          method: 'tools/call',
          params: {
            name: 'trigger-elicitation-request',
            arguments: {},
            inputResponses: {},
            requestState,
            _meta: {
              'io.modelcontextprotocol/protocolVersion': '2026-07-28',
              'io.modelcontextprotocol/clientCapabilities': { elicitation: {} },
            },
          },
        }),
      }).then((r) => r.json() as Promise<{ error?: { code: number; message: string } }>);
    const forged = await retry(FULL, 'not-a-state');
    expect(forged.error).toMatchObject({ code: -32602, message: expect.stringMatching(/requestState names no call/) });
  });

  it('refuses a stateless request that contradicts itself, in the revision’s own errors', async () => {
    const envelope = {
      'io.modelcontextprotocol/protocolVersion': '2026-07-28',
      'io.modelcontextprotocol/clientCapabilities': {},
    };
    const send = (body: object, headers: Record<string, string>) =>
      fetch(`${gateway.url}/mcp`, {
        method: 'POST',
        headers: { 'X-API-Key': FULL, 'content-type': 'application/json', accept: 'application/json', ...headers },
        body: JSON.stringify(body),
      });
    const list = { jsonrpc: '2.0', id: 1, method: 'tools/list', params: { _meta: envelope } };
    const ok = await send(list, { 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/list' });
    expect(ok.status).toBe(200);
    expect((await ok.json()) as unknown).toMatchObject({ result: { resultType: 'complete', ttlMs: 0 } });
    const mismatch = await send(list, { 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/call' });
    expect(mismatch.status).toBe(400);
    expect((await mismatch.json()) as unknown).toMatchObject({ id: 1, error: { code: -32020 } });
    const future = await send(
      { ...list, params: { _meta: { ...envelope, 'io.modelcontextprotocol/protocolVersion': '2099-01-01' } } },
      { 'mcp-protocol-version': '2099-01-01', 'mcp-method': 'tools/list' },
    );
    expect(future.status).toBe(400);
    expect((await future.json()) as unknown).toMatchObject({
      error: { code: -32022, data: { supported: expect.arrayContaining(['2026-07-28', '2025-11-25']) } },
    });
    const removed = await send(
      { jsonrpc: '2.0', id: 2, method: 'ping', params: { _meta: envelope } },
      { 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'ping' },
    );
    expect(removed.status).toBe(404);
    expect((await removed.json()) as unknown).toMatchObject({ id: 2, error: { code: -32601 } });
  });

  it('answers bad input with the spec errors', async () => {
    const post = (body: string, headers: Record<string, string> = {}) =>
      fetch(`${gateway.url}/mcp`, {
        method: 'POST',
        headers: {
          'X-API-Key': FULL,
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
          ...headers,
        },
        body,
      });
    const notJson = await post('{"jsonrpc":');
    expect(notJson.status).toBe(400);
    expect((await rpc(notJson)).error?.code).toBe(-32700);
    const notRpc = await post('{"hello":1}');
    expect((await rpc(notRpc)).error?.code).toBe(-32600);
    const noSession = await post(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }));
    expect(noSession.status).toBe(400);
    const unknownSession = await post(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }), {
      'mcp-session-id': 'nope',
    });
    expect(unknownSession.status).toBe(404);
    const noKey = await fetch(`${gateway.url}/mcp`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{}',
    });
    expect(noKey.status).toBe(401);
    expect((await rpc(noKey)).error?.code).toBeLessThan(0);

    const init = await post(
      JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'initialize',
        params: { protocolVersion: '2099-01-01', capabilities: {}, clientInfo: { name: 'raw', version: '0' } },
      }),
    );
    // A revision it does not speak: the newest it does, the client decides.
    expect((await rpc(init)).result?.protocolVersion).toBe('2025-11-25');
    const session = { 'mcp-session-id': init.headers.get('mcp-session-id') ?? '' };
    const unknown = await post(JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'no/such/method' }), session);
    expect(await unknown.json()).toMatchObject({ id: 2, error: { code: -32601 } });
    const badVersion = await post(JSON.stringify({ jsonrpc: '2.0', id: 3, method: 'ping' }), {
      ...session,
      'mcp-protocol-version': '1999-01-01',
    });
    expect(badVersion.status).toBe(400);
    const notification = await post(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }), session);
    expect(notification.status).toBe(202);
    // GET opens an event stream: a client that does not read one is told so.
    const get = await fetch(`${gateway.url}/mcp`, {
      headers: { 'X-API-Key': FULL, accept: 'application/json', ...session },
    });
    expect(get.status).toBe(406);
    expect((await rpc(get)).error?.code).toBeLessThan(0);
    const del = await fetch(`${gateway.url}/mcp`, { method: 'DELETE', headers: { 'X-API-Key': FULL, ...session } });
    expect(del.status).toBe(200);
    const after = await post(JSON.stringify({ jsonrpc: '2.0', id: 4, method: 'ping' }), session);
    expect(after.status).toBe(404);
  });

  it('every message the gateway sent the SDK clients validates against the spec schema of the negotiated revision', async () => {
    // The schema first (generated once per pinned SDK and generator, then read from the cache).
    specSchema();
    const via = await connect(`${gateway.url}/mcp`, { 'X-API-Key': FULL });
    // Each method at least once through /mcp, on top of what the tests above sent.
    expect((await via.listTools()).tools.map((t) => t.name)).toContain('everything_echo');
    const prompts = (await via.listPrompts()).prompts.map((p) => p.name);
    expect(prompts).toContain('everything_args-prompt');
    const prompt = await via.getPrompt({ name: 'everything_args-prompt', arguments: { city: 'Paris' } });
    expect(JSON.stringify(prompt.messages)).toMatch(/Paris/);
    const resources = (await via.listResources()).resources;
    const doc = resources.find((r) => r.uri.startsWith('everything+demo://'));
    expect(doc).toBeDefined();
    const read = await via.readResource({ uri: doc?.uri ?? '' });
    expect(read.contents.length).toBeGreaterThan(0);
    const templates = (await via.listResourceTemplates()).resourceTemplates;
    const template = templates.find((t) => t.uriTemplate.startsWith('everything+'));
    expect(template).toBeDefined();
    const departments = await via.complete({
      ref: { type: 'ref/prompt', name: 'everything_completable-prompt' },
      argument: { name: 'department', value: 'E' },
    });
    expect(departments.completion.values).toEqual(['Engineering']);
    await via.complete({
      ref: { type: 'ref/resource', uri: template?.uriTemplate ?? '' },
      argument: { name: 'resourceId', value: '1' },
    });
    await via.ping();
    await via.setLoggingLevel('info');
    // Content of every kind a tool answers with: image, resource link, embedded resource, structured.
    await via.callTool({ name: 'everything_get-tiny-image', arguments: {} });
    await via.callTool({ name: 'everything_get-resource-links', arguments: { count: 2 } });
    await via.callTool({
      name: 'everything_get-resource-reference',
      arguments: { resourceType: 'Blob', resourceId: 2 },
    });
    await via.callTool({ name: 'everything_get-structured-content', arguments: { location: 'Chicago' } });
    await via.callTool({
      name: 'everything_get-annotated-message',
      arguments: { messageType: 'error', includeImage: true },
    });
    const seen: number[] = [];
    await via.callTool(
      { name: 'everything_trigger-long-running-operation', arguments: { duration: 0.4, steps: 2 } },
      { onprogress: (p) => seen.push(p.progress) },
    );
    expect(seen).toEqual([1, 2]);
    // Error answers of the gateway's own: a tool of no server of the session (-32602), an
    // unknown method (-32601). (A server's unknown tool is the server's answer, passed through.)
    const unknownTool = await via.callTool({ name: 'nowhere_echo', arguments: {} }).catch((e: unknown) => e);
    expect(unknownTool).toBeInstanceOf(ProtocolError);
    expect((unknownTool as ProtocolError).code).toBe(-32602);
    const unknownMethod = await via
      .request({ method: 'no/such/method' }, specTypeSchemas.EmptyResult)
      .catch((e: unknown) => e);
    expect(unknownMethod).toBeInstanceOf(ProtocolError);
    expect((unknownMethod as ProtocolError).code).toBe(-32601);
    await via.close();

    await capture.settled();
    // Messages of the 2026-07-28 revision are not of this schema: the SDK client read each with
    // that revision's own schemas (a result it refuses fails the call, and the test that made it).
    const stateless = capture.messages.filter((m) => m.url.startsWith(gateway.url) && m.revision === '2026-07-28');
    expect(stateless.length).toBeGreaterThan(0);
    const sent = capture.messages.filter((m) => m.url.startsWith(gateway.url) && m.revision !== '2026-07-28');
    const failures = sent.flatMap((m) =>
      validateGatewayMessage(m.method, m.message).map(
        (e) => `${m.method ?? '(no request)'} ${m.via} ${m.status}: ${e}\n  ${JSON.stringify(m.message).slice(0, 300)}`,
      ),
    );
    if (failures.length > 0) console.error(`messages of the gateway the schema refuses:\n${failures.join('\n')}`);
    expect(failures).toEqual([]);
    expect(sent.filter((m) => m.unparsed !== undefined)).toEqual([]);

    // The schema is that of the revision negotiated.
    const initialized = sent.filter((m) => m.method === 'initialize');
    expect(initialized.length).toBeGreaterThan(0);
    for (const m of initialized) expect(m.message).toMatchObject({ result: { protocolVersion: SCHEMA_REVISION } });
    const answered = (m: { message: unknown }, key: 'result' | 'error') =>
      typeof m.message === 'object' && m.message !== null && key in m.message;
    const results = new Set(sent.filter((m) => answered(m, 'result')).map((m) => m.method));
    for (const method of [
      'initialize',
      'tools/list',
      'tools/call',
      'prompts/list',
      'prompts/get',
      'resources/list',
      'resources/read',
      'resources/templates/list',
      'completion/complete',
      'ping',
      'logging/setLevel',
    ]) {
      expect(results, method).toContain(method);
    }
    const errors = sent.filter((m) => answered(m, 'error')).map((m) => m.message);
    expect(errors).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ error: expect.objectContaining({ code: -32602 }) }),
        expect.objectContaining({ error: expect.objectContaining({ code: -32601 }) }),
      ]),
    );
    // Progress on the way, on the SSE stream of the tools/call it reports on.
    const progress = sent.filter(
      (m) => m.via === 'sse' && m.message && (m.message as { method?: string }).method === 'notifications/progress',
    );
    expect(progress.length).toBeGreaterThanOrEqual(2);
    expect(new Set(progress.map((m) => m.method))).toEqual(new Set(['tools/call']));
  });
});
