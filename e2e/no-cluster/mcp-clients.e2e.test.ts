import { execFile, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ApiKey } from '../../crds/api-key.js';
import type { McpServer } from '../../crds/mcp-server.js';
import { ApiKeys, policyOf, sha256 } from '../../proxy/access/auth.js';
import { McpServerTable } from '../../proxy/mcp/servers.js';
import { MemoryUsage } from '../../proxy/usage/record.js';
import { clientBin, type RunningServer, startEverything } from '../mcp/servers.js';
import { startGateway, type TestGateway } from '../support/gateway.js';

/**
 * MCP clients other than the TypeScript SDK's (mcp-gateway.e2e.test.ts has that one), at pinned
 * versions, against server-everything (e2e/clients/package.json) directly and through the
 * gateway, /mcp/everything (the server's own names) and /mcp (federated: <server>_<name>,
 * <server>+<uri>), every answer compared with the direct one:
 *
 * - the official MCP Python SDK (PyPI `mcp`, e2e/python/requirements.txt, the cached venv of
 *   e2e/python/venv.sh), running e2e/python/mcp_client.py: a ClientSession with the initialize
 *   handshake, and the SDK's high-level Client whose default connect probes server/discover
 *   (the 2026-07-28 era) before falling back to the handshake;
 * - the MCP Inspector's CLI mode (@modelcontextprotocol/inspector, e2e/clients/package.json).
 *
 * Every tool call through the gateway leaves a usage record (endpoint mcp, the server as the
 * provider, the tool as the model). The closing table prints per client what was negotiated and
 * how the gateway's answers compared.
 */

const KEY = 'sk-mcp-clients';
const SERVER = 'everything';
const PROMPT = 'simple-prompt';
const RESOURCE = 'demo://resource/static/document/features.md';

const apiKey: ApiKey = {
  apiVersion: 'ai.platform/v1beta1',
  kind: 'ApiKey',
  metadata: { name: 'clients', namespace: 'platform-agent' },
  spec: { team: 'tools', role: 'User', rotation: 0, tags: { project: 'agents' } },
  status: { digest: `sha256:${sha256(KEY).toString('hex')}` },
};

const mcpServer = (url: string): McpServer => ({
  apiVersion: 'ai.platform/v1beta1',
  kind: 'McpServer',
  metadata: { name: SERVER, namespace: 'platform-agent' },
  spec: { url },
});

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
type Obj = { [k: string]: Json };

/** How an endpoint names what the server serves: as it is (direct, /mcp/<server>) or federated. */
interface Names {
  name(n: string): string;
  uri(u: string): string;
}
const own: Names = { name: (n) => n, uri: (u) => u };
const federated: Names = { name: (n) => `${SERVER}_${n}`, uri: (u) => `${SERVER}+${u}` };

/** A list as the direct server answered it, renamed as `names` serves it (only name, uri, uriTemplate change). */
const renamed = (items: Obj[], names: Names): Obj[] =>
  items.map((item) => ({
    ...item,
    ...(typeof item.name === 'string' ? { name: names.name(item.name) } : {}),
    ...(typeof item.uri === 'string' ? { uri: names.uri(item.uri) } : {}),
  }));

/** A resources/read result with the server's own URIs: the gateway may pass them through or namespace them. */
const ownUris = (result: Json | undefined): Json | undefined => {
  if (!result || typeof result !== 'object' || Array.isArray(result) || !Array.isArray(result.contents)) return result;
  const contents = result.contents.map((c) =>
    c && typeof c === 'object' && !Array.isArray(c) && typeof c.uri === 'string'
      ? { ...c, uri: c.uri.replace(`${SERVER}+`, '') }
      : c,
  );
  return { ...result, contents };
};

const namesOf = (items: Obj[] | undefined): string[] => (items ?? []).map((t) => String(t.name));

/** The closing table: one row per client. */
const table: string[] = [];
const row = (client: string, revision: string, list: string, call: string, notes: string) =>
  table.push(`| ${client} | ${revision} | ${list} | ${call} | ${notes} |`);

/* ---------------------------------------------------------------- the Python SDK */

/** What e2e/python/mcp_client.py prints. */
interface PySeen {
  sdk: { name: string; version: string };
  mode: 'session' | 'auto';
  protocolVersion: string;
  serverInfo: Obj | null;
  errors: Record<string, string>;
  tools?: Obj[];
  call?: Obj;
  prompts?: Obj[];
  prompt?: Obj;
  resources?: Obj[];
  resource?: Obj;
}

let python = '';
const PY_CLIENT = join(import.meta.dirname, '..', 'python', 'mcp_client.py');

async function runPython(
  url: string,
  names: Names,
  headers: string[],
  mode: 'session' | 'auto' = 'session',
): Promise<PySeen> {
  const args = [PY_CLIENT, '--url', url, '--tool', names.name('echo'), '--message', 'hello from the Python SDK'];
  args.push('--prompt', names.name(PROMPT), '--resource', names.uri(RESOURCE), '--mode', mode);
  for (const h of headers) args.push('--header', h);
  const { stdout } = await promisify(execFile)(python, args, { encoding: 'utf8', timeout: 120_000 });
  return JSON.parse(stdout.trim().split('\n').pop() as string) as PySeen;
}

/* ---------------------------------------------------------------- the MCP Inspector CLI */

interface InspectorOut {
  result?: Obj;
  error?: { code: Json; message: string };
}

let inspectorHome = '';

/** `mcp-inspector --cli <url> --transport http --method ... --format json`, in a fresh HOME (its catalog and OAuth store). */
async function inspector(url: string, headers: string[], method: string, extra: string[] = []): Promise<InspectorOut> {
  const args = ['--cli', url, '--transport', 'http', '--method', method, ...extra, '--format', 'json', '--quiet'];
  for (const h of headers) args.push('--header', h);
  const { stdout } = await promisify(execFile)(clientBin('mcp-inspector'), args, {
    encoding: 'utf8',
    timeout: 60_000,
    env: { PATH: process.env.PATH ?? '', HOME: inspectorHome },
  }).catch((e: { stdout?: string; stderr?: string; message: string }) => {
    if (e.stdout?.trim()) return { stdout: e.stdout };
    throw new Error(`mcp-inspector ${method} failed: ${e.stderr ?? e.message}`);
  });
  return JSON.parse(stdout.trim().split('\n').pop() as string) as InspectorOut;
}

/* ---------------------------------------------------------------- the setting */

describe('MCP clients at pinned versions, directly and through the gateway', () => {
  let everything: RunningServer;
  let gateway: TestGateway;
  const usage = new MemoryUsage();
  const servers = new McpServerTable();
  const keys = new ApiKeys();

  /** Tool calls recorded for a client's X-Tags (client:<name>). */
  const echoRecords = (client: string) =>
    usage.records.filter(
      (r) =>
        r.endpoint === 'mcp' &&
        r.provider === SERVER &&
        r.model === 'echo' &&
        r.tags.some((t) => t.key === 'client' && t.value === client),
    );

  beforeAll(async () => {
    python = execFileSync('bash', [join(import.meta.dirname, '..', 'python', 'venv.sh')], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'inherit'],
    })
      .trim()
      .split('\n')
      .pop() as string;
    inspectorHome = mkdtempSync(join(tmpdir(), 'pao-inspector-home-'));
    everything = await startEverything();
    servers.set([mcpServer(everything.url)]);
    keys.setManaged([apiKey].flatMap((k) => policyOf(k) ?? []));
    gateway = await startGateway(
      { mcp: { sessionSecret: 'mcp-clients-secret' } },
      { keys, usage, mcpServers: servers },
    );
  }, 600_000);

  afterAll(async () => {
    console.log(
      [
        '| client (pinned) | protocol revision negotiated | tools/list direct vs gateway | tools/call direct vs gateway | notes |',
        '|---|---|---|---|---|',
        ...table,
      ].join('\n'),
    );
    await gateway?.stop();
    await everything?.stop();
    if (inspectorHome) rmSync(inspectorHome, { recursive: true, force: true });
  });

  it('Python SDK (ClientSession, initialize handshake): /mcp/everything answers as the server, /mcp the same renamed', async () => {
    const tag = 'python-session';
    const headers = [`X-Tags: client:${tag}`];
    const direct = await runPython(everything.url, own, []);
    const single = await runPython(`${gateway.url}/mcp/${SERVER}`, own, [`X-API-Key: ${KEY}`, ...headers]);
    const fed = await runPython(`${gateway.url}/mcp`, federated, [`Authorization: Bearer ${KEY}`, ...headers]);

    for (const seen of [direct, single, fed]) {
      expect(seen.errors).toEqual({});
      expect(seen.sdk.version).toBe('2.3.0');
    }
    expect(direct.protocolVersion).toBe('2025-11-25');
    expect(single.protocolVersion).toBe(direct.protocolVersion);
    expect(fed.protocolVersion).toBe(direct.protocolVersion);

    // tools/list, prompts/list, resources/list (every page): the same items, names the endpoint's.
    expect(namesOf(direct.tools)).toContain('echo');
    expect(single.tools).toEqual(direct.tools);
    expect(fed.tools).toEqual(renamed(direct.tools ?? [], federated));
    expect(single.prompts).toEqual(direct.prompts);
    expect(fed.prompts).toEqual(renamed(direct.prompts ?? [], federated));
    expect(direct.resources?.length).toBeGreaterThan(0);
    expect(single.resources).toEqual(direct.resources);
    expect(fed.resources).toEqual(renamed(direct.resources ?? [], federated));

    // tools/call, prompts/get, resources/read: the same results.
    expect(direct.call).toMatchObject({ content: [{ type: 'text', text: 'Echo: hello from the Python SDK' }] });
    expect(single.call).toEqual(direct.call);
    expect(fed.call).toEqual(direct.call);
    expect(single.prompt).toEqual(direct.prompt);
    expect(fed.prompt).toEqual(direct.prompt);
    expect(single.resource).toEqual(direct.resource);
    expect(ownUris(fed.resource)).toEqual(direct.resource);
    const fedUri = (fed.resource?.contents as Obj[] | undefined)?.[0]?.uri;

    await expect.poll(() => echoRecords(tag).length).toBe(2);
    for (const r of echoRecords(tag)) {
      expect(r).toMatchObject({
        endpoint: 'mcp',
        provider: SERVER,
        model: 'echo',
        team: 'tools',
        apiKey: 'clients',
        status: 200,
      });
      expect(r.tags).toEqual(expect.arrayContaining([{ key: 'project', value: 'agents' }]));
    }

    row(
      `Python \`mcp\` SDK ${direct.sdk.version}, ClientSession`,
      `${direct.protocolVersion} (direct, /mcp/${SERVER} and /mcp)`,
      `equal: ${direct.tools?.length} tools; /mcp the same renamed \`${SERVER}_<tool>\` (prompts, ${direct.resources?.length} resources over every page likewise)`,
      'equal (echo; prompts/get and resources/read too)',
      `X-API-Key and Authorization: Bearer both taken; 2 usage records (mcp/${SERVER}/echo); /mcp resources/read contents[].uri is ${fedUri === RESOURCE ? "the server's own URI, not the namespaced one asked for" : `namespaced (${String(fedUri)})`}`,
    );
  }, 300_000);

  it('Python SDK (Client, default connect: server/discover probe, then the handshake)', async () => {
    const tag = 'python-auto';
    const headers = [`X-API-Key: ${KEY}`, `X-Tags: client:${tag}`];
    const direct = await runPython(everything.url, own, [], 'auto');
    const fed = await runPython(`${gateway.url}/mcp`, federated, headers, 'auto');
    expect(direct.errors).toEqual({});
    expect(fed.errors).toEqual({});
    // server-everything does not serve the 2026-07-28 era (the SDK falls back to the handshake); the gateway does.
    expect(direct.protocolVersion).toBe('2025-11-25');
    expect(fed.protocolVersion).toBe('2026-07-28');
    // The same tools, but for `execution` (tasks): the 2026-07-28 revision has no tasks.
    const untasked = (direct.tools ?? []).map(({ execution: _e, ...t }) => t);
    expect(fed.tools).toEqual(renamed(untasked, federated));
    expect(fed.call).toEqual(direct.call);
    await expect.poll(() => echoRecords(tag).length).toBe(1);
    row(
      `Python \`mcp\` SDK ${direct.sdk.version}, Client (mode auto)`,
      `${direct.protocolVersion} direct (server/discover refused, handshake fallback); ${fed.protocolVersion} through /mcp (server/discover answered)`,
      `equal modulo renaming and \`execution\` (tasks, not of 2026-07-28) (${fed.tools?.length} tools)`,
      'equal',
      'the SDK default for a URL; the gateway serves the stateless era on its own sessions at the server; 1 usage record',
    );
  }, 300_000);

  it('MCP Inspector CLI: initialize, tools/list and tools/call the same directly and through the gateway', async () => {
    const tag = 'inspector-cli';
    const singleHeaders = [`X-API-Key: ${KEY}`, `X-Tags: client:${tag}`];
    const fedHeaders = [`Authorization: Bearer ${KEY}`, `X-Tags: client:${tag}`];
    const targets = [
      { url: everything.url, headers: [] as string[], names: own },
      { url: `${gateway.url}/mcp/${SERVER}`, headers: singleHeaders, names: own },
      { url: `${gateway.url}/mcp`, headers: fedHeaders, names: federated },
    ];
    const seen: { init: InspectorOut; list: InspectorOut; call: InspectorOut }[] = [];
    for (const t of targets) {
      const init = await inspector(t.url, t.headers, 'initialize');
      const list = await inspector(t.url, t.headers, 'tools/list');
      const call = await inspector(t.url, t.headers, 'tools/call', [
        '--tool-name',
        t.names.name('echo'),
        '--tool-arg',
        'message=hi',
      ]);
      seen.push({ init, list, call });
    }
    const [direct, single, fed] = seen as [(typeof seen)[0], (typeof seen)[0], (typeof seen)[0]];
    for (const s of seen) for (const out of [s.init, s.list, s.call]) expect(out.error).toBeUndefined();

    const revision = String(direct.init.result?.protocolVersion);
    expect(revision).toBe('2025-11-25');
    expect(single.init.result?.protocolVersion).toBe(revision);
    expect(fed.init.result?.protocolVersion).toBe(revision);

    // The Inspector declares the roots capability, so server-everything adds get-roots-list for it:
    // the gateway declares the client's own capabilities to the server (and relays its requests),
    // so the same tools are served through it.
    const directTools = (direct.list.result?.tools ?? []) as Obj[];
    expect(namesOf(directTools)).toEqual(expect.arrayContaining(['echo', 'get-roots-list']));
    expect(single.list.result?.tools).toEqual(directTools);
    expect(fed.list.result?.tools).toEqual(renamed(directTools, federated));

    expect(direct.call.result).toEqual({ content: [{ type: 'text', text: 'Echo: hi' }] });
    expect(single.call.result).toEqual(direct.call.result);
    expect(fed.call.result).toEqual(direct.call.result);
    await expect.poll(() => echoRecords(tag).length).toBe(2);

    // --protocol-era auto: the Inspector's SDK probes server/discover first; server-everything refuses
    // it (the SDK falls back to the handshake), the gateway answers it (the 2026-07-28 era).
    const autoDirect = await inspector(everything.url, [], 'initialize', ['--protocol-era', 'auto']);
    const autoFed = await inspector(`${gateway.url}/mcp`, fedHeaders, 'initialize', ['--protocol-era', 'auto']);
    expect(autoDirect.result?.protocolVersion).toBe(revision);
    expect(autoFed.error).toBeUndefined();
    expect(autoFed.result?.protocolVersion).toBe('2026-07-28');
    const autoCall = await inspector(`${gateway.url}/mcp`, fedHeaders, 'tools/call', [
      '--protocol-era',
      'auto',
      '--tool-name',
      federated.name('echo'),
      '--tool-arg',
      'message=hi',
    ]);
    expect(autoCall.result).toEqual(direct.call.result);

    row(
      'MCP Inspector CLI 2.12.0 (`--cli`, default protocol era legacy)',
      `${revision} (direct, /mcp/${SERVER} and /mcp)`,
      `${directTools.length} direct and through the gateway (\`get-roots-list\` too: the client's roots capability is declared upstream), /mcp renamed`,
      'equal (echo)',
      '`--header "X-API-Key: …"` / `--header "Authorization: Bearer …"`; runs without the package postinstall; `--protocol-era auto` falls back to the handshake directly and speaks 2026-07-28 through /mcp (tools/call equal); 2 usage records from the default era',
    );
  }, 300_000);
});
