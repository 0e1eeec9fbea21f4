import { describe, expect, it } from 'vitest';
import type { ExternalProvider } from '../../crds/external-provider.js';
import type { ModelDeployment } from '../../crds/model-deployment.js';
import { replicasByService } from '../sources/cluster-source.js';
import { buildRoutes, RouteTable } from './routes.js';

function md(name: string, model: string, status?: ModelDeployment['status'], endpoint?: string): ModelDeployment {
  return {
    apiVersion: 'ai.platform/v1beta1',
    kind: 'ModelDeployment',
    metadata: { name, namespace: 'platform-llms', creationTimestamp: '2026-11-01T00:00:00Z' },
    spec: { model, serviceName: name, port: 11434, replicas: 1, ...(endpoint ? { endpoint } : {}) },
    ...(status ? { status } : {}),
  };
}
const running = (name: string) => ({
  phase: 'Running' as const,
  endpoint: `http://${name}.platform-llms.svc.cluster.local:11434`,
});

describe('buildRoutes (cluster)', () => {
  it('routes a Running deployment to its Service and lists it', () => {
    const snap = buildRoutes([md('llama', 'llama3.1:8b', running('llama'))], { standalone: false });
    expect(snap.entries.get('llama3.1:8b')).toEqual({
      kind: 'in-cluster',
      model: 'llama3.1:8b',
      baseUrl: 'http://llama.platform-llms.svc.cluster.local:11434',
      provider: 'platform-llms/llama',
      engine: 'Ollama',
      scaling: { namespace: 'platform-llms', name: 'llama', replicas: 1, autoscaled: false, whileWaking: 'Wait' },
    });
    expect(snap.models).toEqual([
      { id: 'llama3.1:8b', model: 'llama3.1:8b', created: 1793491200, provider: 'platform-llms/llama', cli: true },
    ]);
  });

  it('names the engine, and where a vLLM replica exports its queue and KV-cache gauges', () => {
    const m = md('smol', 'HuggingFaceTB/SmolLM2-135M-Instruct', running('smol'));
    m.spec.engine = 'VLLM';
    const ollama = md('llama', 'llama3.1:8b', running('llama'));
    const snap = buildRoutes([m, ollama], { standalone: false });
    expect(snap.entries.get('HuggingFaceTB/SmolLM2-135M-Instruct')).toMatchObject({
      kind: 'in-cluster',
      engine: 'VLLM',
      loadSignals: { path: '/metrics', waiting: 'vllm:num_requests_waiting', kvCacheUsage: 'vllm:kv_cache_usage_perc' },
    });
    // Ollama exports no such gauges: its replicas are balanced on the proxy's own in-flight count.
    expect(snap.entries.get('llama3.1:8b')).not.toHaveProperty('loadSignals');
  });

  it('carries the ready replicas of its Service, the slots per replica and how it scales', () => {
    const m = md('llama', 'llama3.1:8b', running('llama'));
    m.spec.replicas = 0;
    m.spec.autoscaling = { minReplicas: 0, maxReplicas: 2, scaleDownDelaySeconds: 60, whileWaking: 'Fallback' };
    m.spec.timeouts = { queueSeconds: 30 };
    const replicas = ['http://10.0.0.7:11434'];
    const snap = buildRoutes([m], {
      standalone: false,
      replicasOf: (service) => (service === 'llama' ? replicas : undefined),
      slotsOf: () => 4,
    });
    expect(snap.entries.get('llama3.1:8b')).toMatchObject({
      replicas,
      slots: 4,
      timeouts: { queueMs: 30_000 },
      scaling: { namespace: 'platform-llms', name: 'llama', replicas: 0, autoscaled: true, whileWaking: 'Fallback' },
    });
    // No slice seen for the Service: no replica list, the Service's address is called.
    expect(
      buildRoutes([m], { standalone: false, replicasOf: () => undefined }).entries.get('llama3.1:8b'),
    ).not.toHaveProperty('replicas');
  });

  it('carries a deployment’s own timeouts, in ms, and only the fields it sets', () => {
    const a = md('a', 'llama3.1:8b', running('a'));
    a.spec.timeouts = { firstByteSeconds: 900 };
    const b = md('b', 'qwen2.5:7b', undefined, 'http://localhost:11434');
    b.spec.timeouts = { firstByteSeconds: 5, idleSeconds: 7 };
    expect(buildRoutes([a], { standalone: false }).entries.get('llama3.1:8b')).toMatchObject({
      timeouts: { firstByteMs: 900_000 },
    });
    expect(buildRoutes([b], { standalone: true }).entries.get('qwen2.5:7b')).toMatchObject({
      timeouts: { firstByteMs: 5_000, idleMs: 7_000 },
    });
    expect(buildRoutes([md('c', 'x:1', running('c'))], { standalone: false }).entries.get('x:1')).not.toHaveProperty(
      'timeouts',
    );
  });

  it('marks deploying and failed models unavailable and does not list them', () => {
    const snap = buildRoutes(
      [
        md('a', 'qwen2.5:7b', { phase: 'Deploying' }),
        md('b', 'gemma2:9b', {
          phase: 'Failed',
          conditions: [
            {
              type: 'Ready',
              status: 'False',
              reason: 'DeploymentTimeout',
              message: 'not ready',
              lastTransitionTime: 't',
            },
          ],
        }),
        md('c', 'phi3:mini'),
      ],
      { standalone: false },
    );
    expect(snap.entries.get('qwen2.5:7b')).toMatchObject({ kind: 'unavailable', phase: 'Deploying' });
    expect(snap.entries.get('gemma2:9b')).toMatchObject({ kind: 'unavailable', phase: 'Failed', reason: 'not ready' });
    expect(snap.entries.get('phi3:mini')).toMatchObject({ kind: 'unavailable', phase: 'Deploying' });
    expect(snap.models).toEqual([]);
  });

  it('never routes to an address a status or spec field names (no SSRF through a resource)', () => {
    const forged = md('evil', 'llama3.1:8b', { phase: 'Running', endpoint: 'http://169.254.169.254/latest' });
    const withSpec = md('evil2', 'mistral:7b', running('evil2'), 'http://10.0.0.1:80');
    const snap = buildRoutes([forged, withSpec], { standalone: false });
    expect(snap.entries.get('llama3.1:8b')?.kind).toBe('unavailable');
    expect(snap.entries.get('mistral:7b')).toMatchObject({
      baseUrl: 'http://evil2.platform-llms.svc.cluster.local:11434',
    });
  });

  it('prefers a Running deployment over a deploying one serving the same model', () => {
    const snap = buildRoutes(
      [md('a-new', 'llama3.1:8b', { phase: 'Deploying' }), md('b-old', 'llama3.1:8b', running('b-old'))],
      {
        standalone: false,
      },
    );
    expect(snap.entries.get('llama3.1:8b')).toMatchObject({
      kind: 'in-cluster',
      provider: 'platform-llms/b-old',
    });
  });
});

describe('buildRoutes (standalone)', () => {
  it('routes to spec.endpoint and ignores deployments without one', () => {
    const snap = buildRoutes(
      [md('local', 'llama3.1:8b', undefined, 'http://localhost:11434/'), md('x', 'qwen2.5:7b')],
      {
        standalone: true,
      },
    );
    expect(snap.entries.get('llama3.1:8b')).toMatchObject({ baseUrl: 'http://localhost:11434' });
    expect(snap.entries.has('qwen2.5:7b')).toBe(false);
  });
});

describe('RouteTable', () => {
  it('swaps snapshots whole', () => {
    const table = new RouteTable();
    expect(table.lookup('llama3.1:8b')).toBeUndefined();
    table.set(buildRoutes([md('llama', 'llama3.1:8b', running('llama'))], { standalone: false }));
    expect(table.lookup('llama3.1:8b')?.kind).toBe('in-cluster');
    expect(table.models()).toHaveLength(1);
  });
});

describe('buildRoutes (external providers)', () => {
  const ep = (
    name: string,
    includeInCLI: boolean,
    status?: ExternalProvider['status'],
    models = ['anthropic.claude-3-haiku-20240307-v1:0', 'meta.llama3-1-8b-instruct-v1:0'],
  ): ExternalProvider => ({
    apiVersion: 'ai.platform/v1beta1',
    kind: 'ExternalProvider',
    metadata: { name, namespace: 'platform-agent' },
    spec: {
      provider: 'bedrock',
      displayName: name,
      region: 'us-east-1',
      auth: { method: 'IAMRole', roleArn: 'arn:aws:iam::123456789012:role/r' },
      includeInCLI,
      streaming: true,
      models,
    },
    ...(status ? { status } : {}),
  });

  it('routes and lists the selected models a Ready provider found available, in the CLI list only with includeInCLI', () => {
    const snap = buildRoutes([], { standalone: false }, [
      ep('listed', true, { phase: 'Degraded', availableModels: ['anthropic.claude-3-haiku-20240307-v1:0'] }),
      ep('hidden', false, { phase: 'Ready', availableModels: ['amazon.nova-lite-v1:0'] }, ['amazon.nova-lite-v1:0']),
      ep('broken', true, { phase: 'Failed', availableModels: ['x.y-v1:0'] }, ['x.y-v1:0']),
    ]);
    expect(snap.entries.get('anthropic.claude-3-haiku-20240307-v1:0')).toMatchObject({
      kind: 'external',
      provider: 'platform-agent/listed',
      target: { type: 'bedrock', region: 'us-east-1', streaming: true },
    });
    expect(snap.entries.has('meta.llama3-1-8b-instruct-v1:0')).toBe(false);
    expect(snap.entries.get('amazon.nova-lite-v1:0')?.kind).toBe('external');
    // A Failed provider's models exist but are unavailable (503 naming why, fallbacks apply); never listed.
    expect(snap.entries.get('x.y-v1:0')).toMatchObject({ kind: 'unavailable', phase: 'Failed' });
    expect(snap.models.map((m) => [m.id, m.cli])).toEqual([
      ['amazon.nova-lite-v1:0', false],
      ['anthropic.claude-3-haiku-20240307-v1:0', true],
    ]);
  });

  it('routes aliases to their model, lists them beside it, and leaves a clashing alias with its older claim', () => {
    const haiku = 'anthropic.claude-3-haiku-20240307-v1:0';
    const provider = ep('bedrock', true, { phase: 'Ready', availableModels: [haiku] }, [haiku]);
    provider.metadata.creationTimestamp = '2026-10-01T00:00:00Z';
    provider.spec.aliases = [
      { name: 'claude-haiku-4-5', model: haiku },
      { name: 'llama3.1:8b', model: haiku },
    ];
    const llama = md('llama', 'llama3.1:8b', running('llama'));
    llama.spec.aliases = ['claude-haiku-4-5', 'house-model'];
    llama.spec.includeInCLI = false;
    const snap = buildRoutes([llama], { standalone: false }, [provider]);
    // The provider is older: its claim on claude-haiku-4-5 stands; llama3.1:8b stays the deployment's model.
    expect(snap.entries.get('claude-haiku-4-5')).toBe(snap.entries.get(haiku));
    expect(snap.entries.get('house-model')).toBe(snap.entries.get('llama3.1:8b'));
    expect(snap.entries.get('llama3.1:8b')?.kind).toBe('in-cluster');
    expect(snap.models.map((m) => [m.id, m.model, m.cli])).toEqual([
      [haiku, haiku, true],
      ['claude-haiku-4-5', haiku, true],
      ['house-model', 'llama3.1:8b', false],
      ['llama3.1:8b', 'llama3.1:8b', false],
    ]);
    // An alias of a model that takes no traffic routes (503, fallbacks) but is not listed.
    const pending = md('llama', 'llama3.1:8b');
    pending.spec.aliases = ['house-model'];
    const down = buildRoutes([pending], { standalone: false });
    expect(down.entries.get('house-model')).toMatchObject({ kind: 'unavailable', model: 'llama3.1:8b' });
    expect(down.models).toEqual([]);
  });

  it('carries fallbacks, and lets a usable provider win a model over an unusable one', () => {
    const failing = ep('a-failing', true, { phase: 'Failed' }, ['amazon.nova-lite-v1:0']);
    failing.spec.fallback = ['llama3.1:8b'];
    const pending = ep('c-pending', true, undefined, ['amazon.nova-pro-v1:0']);
    const working = ep('b-working', true, { phase: 'Ready', availableModels: ['amazon.nova-lite-v1:0'] }, [
      'amazon.nova-lite-v1:0',
    ]);
    working.spec.fallback = ['qwen2.5:0.5b'];
    const snap = buildRoutes([], { standalone: false }, [failing, working, pending]);
    expect(snap.entries.get('amazon.nova-lite-v1:0')).toMatchObject({
      kind: 'external',
      provider: 'platform-agent/b-working',
      fallback: ['qwen2.5:0.5b'],
    });
    expect(snap.entries.get('amazon.nova-pro-v1:0')).toMatchObject({ kind: 'unavailable', phase: 'Deploying' });
    const alone = buildRoutes([], { standalone: false }, [failing]);
    expect(alone.entries.get('amazon.nova-lite-v1:0')).toMatchObject({
      kind: 'unavailable',
      phase: 'Failed',
      fallback: ['llama3.1:8b'],
    });
  });

  it('routes every selected model in standalone mode, where nothing runs discovery', () => {
    const snap = buildRoutes([], { standalone: true }, [ep('local', true)]);
    expect([...snap.entries.keys()].sort()).toEqual([
      'anthropic.claude-3-haiku-20240307-v1:0',
      'meta.llama3-1-8b-instruct-v1:0',
    ]);
  });
});

describe('replicasByService', () => {
  it('takes the ready endpoints of each Service’s slices on the http port', () => {
    const slice = (service: string, addressType: string, endpoints: Array<[string, boolean | undefined]>) => ({
      metadata: { labels: { 'kubernetes.io/service-name': service } },
      addressType,
      ports: [{ name: 'http', port: 11434 }],
      endpoints: endpoints.map(([ip, ready]) => ({
        addresses: [ip],
        ...(ready === undefined ? {} : { conditions: { ready } }),
      })),
    });
    const got = replicasByService([
      slice('llama', 'IPv4', [
        ['10.0.0.2', true],
        ['10.0.0.1', undefined],
        ['10.0.0.3', false],
      ]),
      slice('llama', 'IPv6', [['fd00::1', true]]),
      slice('empty', 'IPv4', []),
      { metadata: { labels: {} }, addressType: 'IPv4', endpoints: [{ addresses: ['10.9.9.9'] }] },
    ]);
    expect(Object.fromEntries(got)).toEqual({
      llama: ['http://10.0.0.1:11434', 'http://10.0.0.2:11434', 'http://[fd00::1]:11434'],
      empty: [],
    });
  });
});
