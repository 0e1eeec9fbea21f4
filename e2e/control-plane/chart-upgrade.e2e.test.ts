import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import yaml from 'js-yaml';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { adoptLlmsNamespace, helmOk, kubectl, kubectlOk } from '../support/kube.js';

/**
 * The upgrade a user makes from the last release (chart 0.1.0, e2e/charts/: `helm package` of
 * the chart at 7b46bf8, whose CRDs came from the chart's crds/ folder, which Helm installs once
 * and never upgrades) to this one, where CRDs have their own chart (platform-ai-optimizer-crds)
 * that installs and upgrades them, on the real control plane: the objects made under 0.1.0 stay
 * as they were, the new API (spec.autoscaling, the scale subresource) is served afterwards, and
 * uninstalling either chart keeps the CRDs and every object.
 */

const NS = 'platform-agent';
const RELEASE = 'platform-ai-optimizer';
const CRDS_RELEASE = 'platform-ai-optimizer-crds';
const OLD_CHART = 'e2e/charts/platform-ai-optimizer-0.1.0.tgz';
const values = ['--set', 'cluster.organizationId=acme', '--set', 'cluster.clusterId=upgrade'];

const modelDeployment = (name: string, extra: Record<string, unknown> = {}) => ({
  apiVersion: 'ai.platform/v1beta1',
  kind: 'ModelDeployment',
  metadata: { name, namespace: 'platform-llms' },
  spec: { model: 'qwen2.5:0.5b', serviceName: name, ...extra },
});

const get = (what: string, ns = 'platform-llms') =>
  JSON.parse(kubectlOk(['get', what, '-n', ns, '-o', 'json'])) as {
    metadata: {
      uid: string;
      generation: number;
      labels?: Record<string, string>;
      annotations?: Record<string, string>;
    };
    spec: Record<string, unknown>;
  };

const crd = (name: string) =>
  JSON.parse(kubectlOk(['get', 'crd', name, '-o', 'json'])) as {
    metadata: { labels?: Record<string, string>; annotations?: Record<string, string> };
    spec: { versions: { name: string; subresources?: { scale?: unknown } }[] };
  };

describe.runIf(inject('localControlPlane'))('upgrading from chart 0.1.0 on the real control plane', () => {
  beforeAll(() => {
    // The cluster as 0.1.0 left it: its CRDs (from the packaged chart), applied as Helm's crds/
    // folder applies them (no release owns them), then the 0.1.0 chart itself.
    const dir = mkdtempSync(join(tmpdir(), 'pao-chart-0.1.0-'));
    execFileSync('tar', ['xzf', OLD_CHART, '-C', dir]);
    kubectlOk([
      'apply',
      '--server-side',
      '--force-conflicts',
      '--field-manager=e2e',
      '-f',
      join(dir, 'platform-ai-optimizer', 'crds'),
    ]);
    adoptLlmsNamespace(RELEASE);
    helmOk('install', RELEASE, OLD_CHART, '-n', NS, ...values);
  });

  afterAll(() => {
    kubectl(['delete', 'modeldeployment', 'made-under-010', 'scaled-after', '-n', 'platform-llms', '--wait=false']);
    helmOk('uninstall', RELEASE, '-n', NS, '--ignore-not-found', '--wait');
    helmOk('uninstall', CRDS_RELEASE, '-n', NS, '--ignore-not-found');
    // Whatever happened above, the next suite gets this version's CRDs.
    kubectlOk(['apply', '--server-side', '--force-conflicts', '--field-manager=e2e', '-f', 'crds/']);
  });

  it('the CRD chart renders crds/ unchanged but for its labels and the keep policy', () => {
    const rendered = yaml
      .loadAll(helmOk('template', CRDS_RELEASE, 'charts/platform-ai-optimizer-crds'))
      .filter(Boolean) as { metadata: { name: string; labels: object; annotations: object } }[];
    const sources = readdirSync('crds')
      .filter((f) => f.endsWith('.yaml'))
      .map((f) => yaml.load(readFileSync(join('crds', f), 'utf8')) as { kind?: string; metadata: { name: string } })
      .filter((d) => d.kind === 'CustomResourceDefinition');
    expect(rendered.map((d) => d.metadata.name).sort()).toEqual(sources.map((d) => d.metadata.name).sort());
    for (const doc of rendered) {
      expect(doc.metadata.annotations).toEqual({ 'helm.sh/resource-policy': 'keep' });
      const source = sources.find((s) => s.metadata.name === doc.metadata.name);
      if (!source) throw new Error(`${doc.metadata.name} has no source in crds/`);
      const { labels: _l, annotations: _a, ...meta } = doc.metadata;
      const { labels: _sl, ...sourceMeta } = source.metadata as { labels?: object; name: string };
      expect({ ...doc, metadata: meta }).toEqual({ ...source, metadata: sourceMeta });
    }
  });

  it('upgrades in place: objects made under 0.1.0 stay, the new API is served, uninstall keeps the CRDs', () => {
    // Under 0.1.0: a model, and the API of that day (no autoscaling, no scale subresource).
    kubectlOk(['apply', '-f', '-'], JSON.stringify(modelDeployment('made-under-010', { replicas: 2 })));
    const before = get('modeldeployment/made-under-010');
    const refused = kubectl(
      ['apply', '--dry-run=server', '-f', '-'],
      JSON.stringify(modelDeployment('scaled-after', { autoscaling: { minReplicas: 0, maxReplicas: 2 } })),
    );
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toMatch(/unknown field "spec.autoscaling"/);
    expect(crd('modeldeployments.ai.platform').spec.versions[0]?.subresources?.scale).toBeUndefined();

    // The documented upgrade: the CRD chart first (taking over the CRDs 0.1.0's crds/ folder
    // left unowned, and their fields from whoever applied them), then the product's chart.
    helmOk(
      'upgrade',
      '--install',
      CRDS_RELEASE,
      'charts/platform-ai-optimizer-crds',
      '-n',
      NS,
      '--take-ownership',
      '--force-conflicts',
    );
    helmOk('upgrade', RELEASE, 'charts/platform-ai-optimizer', '-n', NS, ...values);
    expect(helmOk('list', '-n', NS, '-o', 'json')).toMatch(/"chart":"platform-ai-optimizer-0\.2\.0"/);

    const md = crd('modeldeployments.ai.platform');
    expect(md.metadata.labels?.['app.kubernetes.io/managed-by']).toBe('Helm');
    expect(md.metadata.annotations?.['meta.helm.sh/release-name']).toBe(CRDS_RELEASE);
    expect(md.spec.versions[0]?.subresources?.scale).toBeDefined();
    const after = get('modeldeployment/made-under-010');
    expect(after.metadata.uid).toBe(before.metadata.uid);
    // A field added since, with a default, reads as its default on the old object (as the API server defaults on read).
    expect(after.spec).toEqual({ ...before.spec, includeInCLI: true, engine: 'Ollama' });
    // What 0.2.0 added works on the old object and on new ones.
    kubectlOk(['scale', 'modeldeployment/made-under-010', '-n', 'platform-llms', '--replicas=3']);
    expect(get('modeldeployment/made-under-010').spec.replicas).toBe(3);
    kubectlOk(
      ['apply', '-f', '-'],
      JSON.stringify(modelDeployment('scaled-after', { autoscaling: { minReplicas: 0, maxReplicas: 2 } })),
    );
    expect(get('modeldeployment/scaled-after').spec.autoscaling).toMatchObject({ minReplicas: 0, maxReplicas: 2 });

    // Uninstalling either release keeps the CRDs, and so every object in the cluster.
    helmOk('uninstall', RELEASE, '-n', NS, '--wait');
    helmOk('uninstall', CRDS_RELEASE, '-n', NS);
    expect(kubectlOk(['get', 'crd', 'modeldeployments.ai.platform', '-o', 'name']).trim()).toBe(
      'customresourcedefinition.apiextensions.k8s.io/modeldeployments.ai.platform',
    );
    expect(get('modeldeployment/made-under-010').metadata.uid).toBe(before.metadata.uid);
  });
});
