import { describe, expect, it } from 'vitest';
import type { ModelDeployment } from '../crds/model-deployment.js';
import { buildRoutes, RouteTable } from './routing.js';

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
      kind: 'openai-compatible',
      model: 'llama3.1:8b',
      baseUrl: 'http://llama.platform-llms.svc.cluster.local:11434',
      provider: 'platform-llms/llama',
    });
    expect(snap.models).toEqual([
      { id: 'llama3.1:8b', object: 'model', created: 1793491200, owned_by: 'platform-llms/llama' },
    ]);
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
      kind: 'openai-compatible',
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
    expect(table.lookup('llama3.1:8b')?.kind).toBe('openai-compatible');
    expect(table.models()).toHaveLength(1);
  });
});
