import yaml from 'js-yaml';
import { afterAll, describe, expect, it } from 'vitest';
import { invalidExamples, validExamples } from '../../crds/examples.js';
import { kubectl, kubectlOk } from '../support/kube.js';

/**
 * The CRDs against the real API server: the schemas and CEL rules accept every valid
 * example and reject every invalid one with the message the example names; the status
 * subresource and the printer columns behave as documented.
 */

const fileName = (f: string) => f.split('/').pop() ?? f;
const created: string[][] = [];

afterAll(() => {
  for (const ref of created.reverse()) kubectl(['delete', '--ignore-not-found', '--wait=false', ...ref]);
});

describe('CRD manifests', () => {
  it('are established and parse with kubectl apply --dry-run=client', () => {
    const out = kubectlOk(['apply', '--dry-run=client', '-f', 'crds/', '-o', 'name']);
    expect(out.trim().split('\n').sort()).toEqual([
      'customresourcedefinition.apiextensions.k8s.io/apikeys.ai.platform',
      'customresourcedefinition.apiextensions.k8s.io/autoscalerpolicies.ai.platform',
      'customresourcedefinition.apiextensions.k8s.io/budgets.ai.platform',
      'customresourcedefinition.apiextensions.k8s.io/externalproviders.ai.platform',
      'customresourcedefinition.apiextensions.k8s.io/guardrails.ai.platform',
      'customresourcedefinition.apiextensions.k8s.io/identityproviders.ai.platform',
      'customresourcedefinition.apiextensions.k8s.io/mcpservers.ai.platform',
      'customresourcedefinition.apiextensions.k8s.io/modeldeployments.ai.platform',
      'customresourcedefinition.apiextensions.k8s.io/nodeconfigurations.ai.platform',
      'customresourcedefinition.apiextensions.k8s.io/nodetemplates.ai.platform',
      'customresourcedefinition.apiextensions.k8s.io/routingpolicies.ai.platform',
    ]);
    const established = kubectlOk([
      'get',
      'crd',
      '-l',
      'app.kubernetes.io/part-of=platform-ai-optimizer',
      '-o',
      'jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Established")].status}{"\\n"}{end}',
    ]);
    expect(established.trim().split('\n').sort()).toEqual([
      'apikeys.ai.platform=True',
      'autoscalerpolicies.ai.platform=True',
      'budgets.ai.platform=True',
      'externalproviders.ai.platform=True',
      'guardrails.ai.platform=True',
      'identityproviders.ai.platform=True',
      'mcpservers.ai.platform=True',
      'modeldeployments.ai.platform=True',
      'nodeconfigurations.ai.platform=True',
      'nodetemplates.ai.platform=True',
      'routingpolicies.ai.platform=True',
    ]);
  });
});

describe('valid examples', () => {
  for (const example of validExamples()) {
    it(`${fileName(example.file)} is accepted by the API server`, () => {
      // The cluster's singletons (the AutoscalerPolicy "cluster", the operator's NodeTemplate) may
      // exist already when an operator ran in an earlier suite: then the example must pass as an
      // update of them, checked without changing them.
      const tried = kubectl(['create', '-f', example.file, '-o', 'name']);
      if (tried.code !== 0 && /AlreadyExists/.test(tried.stderr)) {
        const dry = kubectl(['apply', '--dry-run=server', '-f', example.file, '-o', 'name']);
        expect(dry.stderr).toBe('');
        expect(dry.stdout.trim().split('\n')).toHaveLength(example.documents.length);
        return;
      }
      expect(tried.stderr).toBe('');
      const names = tried.stdout.trim().split('\n');
      expect(names).toHaveLength(example.documents.length);
      for (const doc of example.documents) {
        const meta = doc.metadata as { name: string; namespace?: string };
        created.push([String(doc.kind).toLowerCase(), meta.name, ...(meta.namespace ? ['-n', meta.namespace] : [])]);
      }
    });
  }

  it('get the schema defaults applied by the API server', () => {
    const spec = JSON.parse(kubectlOk(['get', 'md', 'qwen25-7b', '-n', 'platform-llms', '-o', 'jsonpath={.spec}'])) as {
      port: number;
      replicas: number;
    };
    expect(spec.port).toBe(11434);
    expect(spec.replicas).toBe(2);
    const ep = JSON.parse(
      kubectlOk(['get', 'externalproviders', 'bedrock-us-east-1', '-n', 'platform-agent', '-o', 'jsonpath={.spec}']),
    ) as { streaming: boolean; includeInCLI: boolean };
    expect(ep.streaming).toBe(true);
  });
});

describe('invalid examples', () => {
  for (const example of invalidExamples()) {
    it(`${fileName(example.file)} is rejected at ${example.expectField}`, () => {
      const docs = example.documents;
      const update = docs.at(-1);
      if (docs.length > 1) {
        const first = docs[0];
        if (!first) throw new Error('no first document');
        kubectlOk(['create', '-f', '-'], JSON.stringify(first));
        const meta = first.metadata as { name: string; namespace: string };
        created.push([String(first.kind).toLowerCase(), meta.name, '-n', meta.namespace]);
      }
      const res = kubectl([docs.length > 1 ? 'apply' : 'create', '-f', '-'], yaml.dump(update));
      expect(res.code, res.stdout).not.toBe(0);
      expect(res.stderr).toContain(example.expectField);
      if (example.expectMessage) expect(res.stderr).toContain(example.expectMessage);
    });
  }
});

describe('status subresource', () => {
  const md = (model: string, extra: object = {}) =>
    JSON.stringify({
      apiVersion: 'ai.platform/v1beta1',
      kind: 'ModelDeployment',
      metadata: { name: 'status-probe', namespace: 'platform-llms' },
      spec: { model, serviceName: 'status-probe' },
      ...extra,
    });
  const get = (path: string) =>
    kubectlOk(['get', 'md', 'status-probe', '-n', 'platform-llms', '-o', `jsonpath=${path}`]);
  const patch = (body: unknown, subresource?: 'status') =>
    kubectl([
      'patch',
      'md',
      'status-probe',
      '-n',
      'platform-llms',
      ...(subresource ? [`--subresource=${subresource}`] : []),
      '--type=merge',
      '-p',
      JSON.stringify(body),
    ]);

  it('bumps generation on spec changes and not on status writes', () => {
    kubectlOk(['create', '-f', '-'], md('llama3.1:8b'));
    created.push(['md', 'status-probe', '-n', 'platform-llms']);
    expect(get('{.metadata.generation}')).toBe('1');

    expect(patch({ spec: { model: 'qwen2.5:7b' } }).code).toBe(0);
    expect(get('{.metadata.generation}')).toBe('2');

    const status = {
      status: {
        phase: 'Running',
        endpoint: 'http://status-probe.platform-llms.svc.cluster.local:11434',
        observedGeneration: 2,
      },
    };
    expect(patch(status, 'status').code).toBe(0);
    expect(get('{.metadata.generation}')).toBe('2');
    expect(get('{.status.phase}')).toBe('Running');
    expect(get('{.spec.model}')).toBe('qwen2.5:7b');
  });

  it('ignores status sent to the main resource', () => {
    expect(patch({ status: { phase: 'Failed' } }).code).toBe(0);
    expect(get('{.status.phase}')).toBe('Running');
  });

  it('rejects a status that breaks the schema', () => {
    const res = patch({ status: { phase: 'Exploded' } }, 'status');
    expect(res.code).not.toBe(0);
    expect(res.stderr).toContain('status.phase');
  });
});

describe('printer columns', () => {
  const header = (out: string) => out.split('\n')[0]?.split(/\s{2,}/);

  it('kubectl get md shows MODEL, ENGINE, STATUS, READY, DESIRED, ENDPOINT, AGE', () => {
    const out = kubectlOk(['get', 'md', '-n', 'platform-llms']);
    expect(header(out)).toEqual(['NAME', 'MODEL', 'ENGINE', 'STATUS', 'READY', 'DESIRED', 'ENDPOINT', 'AGE']);
    const row = out.split('\n').find((l) => l.startsWith('status-probe'));
    // Its status was written by hand without replica counts: READY is blank, DESIRED the default.
    expect(row?.split(/\s+/).slice(0, 6)).toEqual([
      'status-probe',
      'qwen2.5:7b',
      'Ollama',
      'Running',
      '1',
      'http://status-probe.platform-llms.svc.cluster.local:11434',
    ]);
  });

  it('kubectl get externalproviders shows PROVIDER, REGION, AUTH, STATUS, MODELS, AGE', () => {
    const out = kubectlOk(['get', 'externalproviders', '-n', 'platform-agent']);
    expect(header(out)).toEqual(['NAME', 'PROVIDER', 'REGION', 'AUTH', 'STATUS', 'MODELS', 'AGE']);
    const row = out.split('\n').find((l) => l.startsWith('bedrock-us-east-1'));
    expect(row).toMatch(/^bedrock-us-east-1\s+bedrock\s+us-east-1\s+IAMRole\s+/);
  });

  it('short names reach the kinds: xp; ep stays core Endpoints’ (the CRD does not claim it)', () => {
    expect(header(kubectlOk(['get', 'xp', '-n', 'platform-agent']))).toContain('PROVIDER');
    expect(header(kubectlOk(['get', 'md', '-A']))).toContain('MODEL');
    // `ep` is core Endpoints' short name: ExternalProvider does not declare it.
    const ep = kubectl(['get', 'ep', '-n', 'platform-agent']);
    expect(ep.stdout).not.toContain('bedrock-us-east-1');
    expect(ep.stderr).toContain('No resources found');
    const categories = kubectlOk(['get', 'platform-ai', '-A', '-o', 'name']);
    expect(categories).toContain('modeldeployment.ai.platform/llama31-8b');
    expect(categories).toContain('externalprovider.ai.platform/bedrock-us-east-1');
  });
});
