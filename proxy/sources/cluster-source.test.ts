import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { KubeConfig } from '@kubernetes/client-node';
import { afterEach, describe, expect, it } from 'vitest';
import type { McpServer } from '../../crds/mcp-server.js';
import type { RoutingPolicy } from '../../crds/routing-policy.js';
import { loopbackKubeConfig } from '../../e2e/doubles/kube-api.js';
import { ApiKeys } from '../access/auth.js';
import { RouteTable } from '../serving/routes.js';
import { ClusterSource, MAX_CONFIGMAP_EXAMPLES, routingExamplesOf } from './cluster-source.js';

/**
 * The McpServers and RoutingPolicies a ClusterSource reads, against a fake API server that
 * answers lists and holds watches open (the e2e tier runs the whole source against a real one).
 */

interface Stored {
  metadata: { name: string; namespace: string; resourceVersion?: string; labels?: Record<string, string> };
  [field: string]: unknown;
}

interface Watch {
  collection: string;
  name: string | undefined;
  label: string | undefined;
  res: ServerResponse;
}

/** Whether an object matches a watch's or list's selectors (name=..., and one label=value). */
const selected = (o: Stored, name: string | undefined, label: string | undefined): boolean => {
  const [key = '', value] = label?.split('=') ?? [];
  return (!name || o.metadata.name === name) && (!label || o.metadata.labels?.[key] === value);
};

/** Collections by path, each a list of objects; watches get every later change as a JSON line. */
class FakeApi {
  readonly collections = new Map<string, Stored[]>();
  private readonly watches: Watch[] = [];
  private version = 1;
  private server: Server | undefined;

  set(collection: string, obj: Stored): void {
    const items = this.collections.get(collection) ?? [];
    const stored = { ...obj, metadata: { ...obj.metadata, resourceVersion: String(++this.version) } };
    const index = items.findIndex((o) => o.metadata.name === obj.metadata.name);
    const type = index >= 0 ? 'MODIFIED' : 'ADDED';
    if (index >= 0) items[index] = stored;
    else items.push(stored);
    this.collections.set(collection, items);
    for (const w of this.watches) {
      if (w.collection !== collection || !selected(obj, w.name, w.label)) continue;
      w.res.write(`${JSON.stringify({ type, object: stored })}\n`);
    }
  }

  async start(): Promise<KubeConfig> {
    this.server = createServer((req, res) => {
      const url = new URL(req.url ?? '/', 'http://fake');
      const name = /^metadata\.name=(.+)$/.exec(url.searchParams.get('fieldSelector') ?? '')?.[1];
      const label = url.searchParams.get('labelSelector') ?? undefined;
      if (url.searchParams.get('watch') === 'true') {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.flushHeaders();
        const watch = { collection: url.pathname, name, label, res };
        this.watches.push(watch);
        res.on('close', () => this.watches.splice(this.watches.indexOf(watch), 1));
        return;
      }
      const items = (this.collections.get(url.pathname) ?? []).filter((o) => selected(o, name, label));
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ metadata: { resourceVersion: String(this.version) }, items }));
    });
    await new Promise<void>((resolve) => this.server?.listen(0, '127.0.0.1', resolve));
    const { port } = this.server.address() as AddressInfo;
    return loopbackKubeConfig(`http://127.0.0.1:${port}`);
  }

  async stop(): Promise<void> {
    for (const w of this.watches.splice(0)) w.res.destroy();
    this.server?.closeAllConnections();
    await new Promise((resolve) => this.server?.close(resolve));
  }
}

const MCP_SERVERS = '/apis/ai.platform/v1beta1/namespaces/platform-agent/mcpservers';
const SECRETS = '/api/v1/namespaces/platform-agent/secrets';

const server = (name: string, spec: McpServer['spec']): Stored => ({
  apiVersion: 'ai.platform/v1beta1',
  kind: 'McpServer',
  metadata: { name, namespace: 'platform-agent' },
  spec,
});

const secret = (name: string, data: Record<string, string>): Stored => ({
  apiVersion: 'v1',
  kind: 'Secret',
  metadata: { name, namespace: 'platform-agent' },
  data: Object.fromEntries(Object.entries(data).map(([k, v]) => [k, Buffer.from(v).toString('base64')])),
});

async function eventually<T>(what: string, read: () => T | undefined): Promise<T> {
  for (let i = 0; i < 200; i++) {
    const value = read();
    if (value !== undefined) return value;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`timed out waiting for ${what}`);
}

describe('ClusterSource McpServers', () => {
  let api: FakeApi;
  let source: ClusterSource | undefined;

  afterEach(async () => {
    await source?.stop();
    await api.stop();
  });

  it('tells the listener every McpServer at start and on change, with their Secrets watched by name', async () => {
    api = new FakeApi();
    api.set(
      MCP_SERVERS,
      server('code-search', {
        url: 'http://code-search.tools.svc:8080/mcp',
        auth: { method: 'Bearer', secretRef: { name: 'code-search-token' } },
      }),
    );
    api.set(SECRETS, secret('code-search-token', { token: 'tok-1' }));
    api.set(SECRETS, secret('tickets-oauth', { clientSecret: 'cs-1' }));
    const told: string[][] = [];
    source = new ClusterSource({
      kubeConfig: await api.start(),
      routes: new RouteTable(),
      keys: new ApiKeys(),
      onMcpServers: (servers) => told.push(servers.map((s) => s.metadata.name ?? '').sort()),
    });
    await source.start();
    expect(source.ready()).toBe(true);
    expect(told).toEqual([['code-search']]);
    expect(source.secret('code-search-token').data?.token).toBe(Buffer.from('tok-1').toString('base64'));
    // Not named by any McpServer yet: not watched, so not seen.
    expect(source.secret('tickets-oauth').data).toBeUndefined();

    api.set(
      MCP_SERVERS,
      server('tickets', {
        url: 'https://mcp.tickets.example.com/mcp',
        auth: {
          method: 'OAuthClientCredentials',
          tokenUrl: 'https://auth.tickets.example.com/oauth2/token',
          clientId: 'gateway',
          secretRef: { name: 'tickets-oauth' },
        },
      }),
    );
    await eventually('the second server', () => (told.length === 2 ? told : undefined));
    expect(told[1]).toEqual(['code-search', 'tickets']);
    // By the time the listener hears of a server, its Secret is read.
    expect(source.secret('tickets-oauth').data?.clientSecret).toBe(Buffer.from('cs-1').toString('base64'));
  });
});

const ROUTING_POLICIES = '/apis/ai.platform/v1beta1/namespaces/platform-agent/routingpolicies';
const CONFIG_MAPS = '/api/v1/namespaces/platform-agent/configmaps';

const routingPolicy = (name: string, semantic: NonNullable<RoutingPolicy['spec']['scorer']>['semantic']): Stored => ({
  apiVersion: 'ai.platform/v1beta1',
  kind: 'RoutingPolicy',
  metadata: { name, namespace: 'platform-agent' },
  spec: { models: [{ name: 'llama3.2:3b', tier: 'Light' }], scorer: { semantic } },
});

const examplesMap = (name: string, text: string, labelled = true): Stored => ({
  apiVersion: 'v1',
  kind: 'ConfigMap',
  metadata: {
    name,
    namespace: 'platform-agent',
    ...(labelled ? { labels: { 'ai.platform/routing-examples': 'true' } } : {}),
  },
  data: { 'examples.yaml': text },
});

describe('ClusterSource RoutingPolicies', () => {
  let api: FakeApi;
  let source: ClusterSource | undefined;

  afterEach(async () => {
    await source?.stop();
    await api.stop();
  });

  it("tells the listener every policy at start and on change, a labelled ConfigMap's examples inline", async () => {
    api = new FakeApi();
    const from = { configMapName: 'support-examples', key: 'examples.yaml' };
    api.set(
      ROUTING_POLICIES,
      routingPolicy('support', {
        embeddingModel: 'nomic-embed-text',
        examples: [{ tier: 'Frontier', prompt: 'prove it' }],
        examplesFrom: from,
      }),
    );
    api.set(
      CONFIG_MAPS,
      examplesMap('support-examples', '- {tier: Light, prompt: hi}\n- {tier: Premium, prompt: x}\n'),
    );
    // Not labelled: never read, even when a policy names it.
    api.set(CONFIG_MAPS, examplesMap('unlabelled', '- {tier: Light, prompt: secret}\n', false));
    api.set(
      ROUTING_POLICIES,
      routingPolicy('other', { embeddingModel: 'e', examplesFrom: { ...from, configMapName: 'unlabelled' } }),
    );
    const told: RoutingPolicy[][] = [];
    source = new ClusterSource({
      kubeConfig: await api.start(),
      routes: new RouteTable(),
      keys: new ApiKeys(),
      onRoutingPolicies: (policies) => told.push(policies),
    });
    await source.start();
    expect(source.ready()).toBe(true);
    const semantics = () => told.at(-1)?.map((p) => [p.metadata.name, p.spec.scorer?.semantic]);
    expect(told).toHaveLength(1);
    expect(semantics()).toEqual([
      [
        'support',
        {
          embeddingModel: 'nomic-embed-text',
          examples: [
            { tier: 'Frontier', prompt: 'prove it' },
            { tier: 'Light', prompt: 'hi' },
          ],
        },
      ],
      ['other', { embeddingModel: 'e', examples: [] }],
    ]);

    api.set(CONFIG_MAPS, examplesMap('support-examples', '- {tier: Standard, prompt: summarise}\n'));
    await eventually('the changed examples', () => (told.length === 2 ? told : undefined));
    expect(semantics()?.[0]?.[1]).toMatchObject({
      examples: [{ tier: 'Frontier' }, { tier: 'Standard', prompt: 'summarise' }],
    });

    api.set(
      ROUTING_POLICIES,
      routingPolicy('third', { embeddingModel: 'e', examples: [{ tier: 'Light', prompt: 'a' }] }),
    );
    await eventually('the new policy', () => (told.length === 3 ? told : undefined));
    expect(told[2]?.map((p) => p.metadata.name)).toEqual(['support', 'other', 'third']);
  });
});

describe('routingExamplesOf', () => {
  it('keeps the entries the schema would take inline, at most 500', () => {
    expect(
      routingExamplesOf(
        [
          '- {tier: Light, prompt: a}',
          '- {tier: light, prompt: b}',
          '- {tier: Standard}',
          '- just text',
          `- {tier: Frontier, prompt: ${'x'.repeat(4001)}}`,
          '- {tier: Frontier, prompt: c}',
        ].join('\n'),
      ),
    ).toEqual([
      { tier: 'Light', prompt: 'a' },
      { tier: 'Frontier', prompt: 'c' },
    ]);
    const many = Array.from({ length: 600 }, (_, i) => `- {tier: Light, prompt: p${i}}`).join('\n');
    expect(routingExamplesOf(many)).toHaveLength(MAX_CONFIGMAP_EXAMPLES);
    expect(routingExamplesOf('tier: Light')).toEqual([]);
    expect(routingExamplesOf('[')).toEqual([]);
  });
});
