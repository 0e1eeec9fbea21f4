import { describe, expect, it } from 'vitest';
import { invalidExamples, validExamples } from './examples.js';
import { formatIssues, kindOf, validateResource } from './validation.js';

describe('valid examples', () => {
  const examples = validExamples();

  it('cover every kind of the API', () => {
    const kinds = new Set(examples.flatMap((e) => e.documents.map((d) => kindOf(d)).filter(Boolean)));
    expect([...kinds].sort()).toEqual(
      [
        'ApiKey',
        'AutoscalerPolicy',
        'Budget',
        'ExternalProvider',
        'Guardrail',
        'IdentityProvider',
        'McpServer',
        'ModelDeployment',
        'NodeConfiguration',
        'NodeTemplate',
        'RoutingPolicy',
      ].sort(),
    );
    // Every provider, and every way each authenticates, has an example.
    const ways = examples.flatMap((e) =>
      e.documents
        .filter((d) => d.kind === 'ExternalProvider')
        .map((d) => {
          const spec = d.spec as { provider: string; auth: { method: string } };
          return `${spec.provider}/${spec.auth.method}`;
        }),
    );
    expect([...new Set(ways)].sort()).toEqual([
      'anthropic/APIKey',
      'azure-openai/APIKey',
      'azure-openai/WorkloadIdentity',
      'bedrock/AccessKey',
      'bedrock/IAMRole',
      'openai-compatible/None',
      'openai/APIKey',
      'vertex-ai/WorkloadIdentity',
    ]);
  });

  for (const example of examples) {
    it(`${example.file.split('/').pop()} passes the schema`, () => {
      for (const doc of example.documents.filter((d) => kindOf(d))) {
        const result = validateResource(doc);
        expect(result.ok ? '' : formatIssues(result.issues)).toBe('');
      }
    });
  }
});

describe('invalid examples', () => {
  for (const example of invalidExamples()) {
    it(`${example.file.split('/').pop()} is rejected at ${example.expectField}`, () => {
      const docs = example.documents;
      const update = docs.at(-1);
      const previous = docs.length > 1 ? docs.at(-2) : undefined;
      if (previous) {
        // The stored object of an update example is itself valid; only the change is not.
        const created = validateResource(previous);
        expect(created.ok ? '' : formatIssues(created.issues)).toBe('');
      }
      const result = validateResource(update, { old: previous });
      expect(result.ok).toBe(false);
      if (result.ok) return;
      // Only the field the file is named for is broken (possibly by more than one keyword).
      expect([...new Set(result.issues.map((i) => i.field))]).toEqual([example.expectField]);
      if (example.expectMessage) expect(result.issues[0]?.message).toBe(example.expectMessage);
    });
  }
});

describe('validateResource', () => {
  const md = {
    apiVersion: 'ai.platform/v1beta1',
    kind: 'ModelDeployment',
    metadata: { name: 'llm', namespace: 'platform-llms' },
    spec: { model: 'llama3.1:8b', serviceName: 'llm' },
  };

  it('applies schema defaults like the API server and leaves the input untouched', () => {
    const result = validateResource(md);
    expect(result.ok).toBe(true);
    if (!result.ok) return;
    expect(result.resource.spec).toEqual({
      engine: 'Ollama',
      model: 'llama3.1:8b',
      serviceName: 'llm',
      port: 11434,
      replicas: 1,
      includeInCLI: true,
    });
    expect(md.spec).toEqual({ model: 'llama3.1:8b', serviceName: 'llm' });
  });

  it('defaults nested objects of the AutoscalerPolicy', () => {
    const result = validateResource({
      apiVersion: 'ai.platform/v1beta1',
      kind: 'AutoscalerPolicy',
      metadata: { name: 'cluster' },
    });
    expect(result.ok && result.resource.spec).toEqual({
      optimizationMode: 'ReadOnly',
      unschedulablePods: { enabled: false },
    });
  });

  it('rejects documents of other APIs and names what it accepts', () => {
    const result = validateResource({ apiVersion: 'v1', kind: 'Secret', metadata: { name: 'x' } });
    expect(result).toEqual({
      ok: false,
      issues: [
        {
          field: 'kind',
          message: expect.stringContaining('not a resource of ai.platform/v1beta1') as string,
        },
      ],
    });
  });

  it('requires a valid metadata.name', () => {
    const result = validateResource({ ...md, metadata: { name: 'Not_A_Name' } });
    expect(result.ok === false && result.issues.map((i) => i.field)).toEqual(['metadata.name']);
  });

  it('reports every broken field at once', () => {
    const result = validateResource({ ...md, spec: { model: 'x y', serviceName: 'UPPER', port: 0 } });
    expect(result.ok === false && result.issues.map((i) => i.field).sort()).toEqual([
      'spec.model',
      'spec.port',
      'spec.serviceName',
    ]);
  });

  it('skips transition rules on create and applies them on update', () => {
    const renamed = { ...md, spec: { ...md.spec, serviceName: 'other' } };
    expect(validateResource(renamed).ok).toBe(true);
    const update = validateResource(renamed, { old: md });
    expect(update.ok === false && formatIssues(update.issues)).toBe(
      'spec.serviceName: serviceName is immutable; create a new ModelDeployment instead',
    );
    // An unchanged update passes: port was defaulted in neither, so it is not compared.
    expect(validateResource(md, { old: md }).ok).toBe(true);
  });

  it('accepts inference-profile ids and gov-cloud role ARNs in the matching partition', () => {
    const result = validateResource({
      apiVersion: 'ai.platform/v1beta1',
      kind: 'ExternalProvider',
      metadata: { name: 'gov' },
      spec: {
        provider: 'bedrock',
        displayName: 'Gov',
        region: 'us-gov-west-1',
        auth: { method: 'IAMRole', roleArn: 'arn:aws-us-gov:iam::123456789012:role/path/bedrock' },
        models: ['us-gov.anthropic.claude-3-5-sonnet-20240620-v1:0'],
      },
    });
    expect(result.ok ? '' : formatIssues(result.issues)).toBe('');
  });
});

describe('defaults before CEL rules', () => {
  it('evaluates an object’s rules with its fields’ defaults filled in, as the API server does', () => {
    const r = validateResource({
      apiVersion: 'ai.platform/v1beta1',
      kind: 'ModelDeployment',
      metadata: { name: 'a', namespace: 'platform-llms' },
      spec: { model: 'llama3.1:8b', serviceName: 's', autoscaling: { maxReplicas: 2 } },
    });
    expect(r.ok).toBe(true);
    if (r.ok) expect(r.resource.spec).toMatchObject({ autoscaling: { minReplicas: 1, scaleDownDelaySeconds: 120 } });
  });
});

describe('McpServer', () => {
  const server = (spec: object) => ({
    apiVersion: 'ai.platform/v1beta1',
    kind: 'McpServer',
    metadata: { name: 'docs', namespace: 'platform-agent' },
    spec,
  });

  it('defaults auth to None, the timeout to 60 s and a stdio server to one replica', () => {
    const url = validateResource(server({ url: 'https://mcp.example.com/mcp' }));
    expect(url.ok && url.resource.spec).toEqual({
      url: 'https://mcp.example.com/mcp',
      auth: { method: 'None' },
      timeoutSeconds: 60,
    });
    const stdio = validateResource(server({ stdio: { image: 'node:24-bookworm-slim', command: ['npx', 'x'] } }));
    expect(stdio.ok && stdio.resource.spec).toEqual({
      stdio: { image: 'node:24-bookworm-slim', command: ['npx', 'x'], replicas: 1 },
      auth: { method: 'None' },
      timeoutSeconds: 60,
    });
  });

  it('needs one of url and stdio', () => {
    const neither = validateResource(server({}));
    expect(neither.ok === false && formatIssues(neither.issues)).toBe(
      'spec.url: exactly one of url (a Streamable HTTP server) and stdio (a server the operator runs) is required',
    );
  });

  it('takes in-cluster, external and trailing-slash URLs, not user info', () => {
    for (const url of [
      'http://code-search.tools.svc:8080/mcp',
      'https://api.githubcopilot.com/mcp/',
      'http://localhost:3001/mcp',
    ]) {
      const r = validateResource(server({ url }));
      expect(r.ok ? '' : formatIssues(r.issues), url).toBe('');
    }
    const userInfo = validateResource(server({ url: 'https://user:pass@mcp.example.com/mcp' }));
    expect(userInfo.ok === false && userInfo.issues.map((i) => i.field)).toEqual(['spec.url']);
  });
});

describe('RoutingPolicy', () => {
  const policy = (name: string, spec: object) => ({
    apiVersion: 'ai.platform/v1beta1',
    kind: 'RoutingPolicy',
    metadata: { name, namespace: 'platform-agent' },
    spec,
  });

  it('defaults the objective, enabled, the cascade and the semantic scorer', () => {
    const r = validateResource(
      policy('default', {
        models: [{ name: 'llama3.2:3b', tier: 'Light' }],
        scorer: { semantic: { embeddingModel: 'nomic-embed-text', examples: [{ tier: 'Light', prompt: 'hi' }] } },
      }),
    );
    expect(r.ok && r.resource.spec).toEqual({
      models: [{ name: 'llama3.2:3b', tier: 'Light' }],
      objective: 'Balanced',
      enabled: false,
      scorer: {
        semantic: {
          embeddingModel: 'nomic-embed-text',
          examples: [{ tier: 'Light', prompt: 'hi' }],
          neighbours: 5,
          weight: 0.5,
        },
      },
      cascade: { maxEscalations: 1 },
    });
  });

  it('takes enabled: true on the policy named default only', () => {
    const spec = { models: [{ name: 'gpt-4o', tier: 'Frontier' }], enabled: true };
    expect(validateResource(policy('default', spec)).ok).toBe(true);
    const other = validateResource(policy('support', spec));
    expect(other.ok === false && other.issues.map((i) => i.field)).toEqual(['spec.enabled']);
  });
});

describe('ApiKey and Budget routing fields', () => {
  it('default routing to Inherit and a budget to Refuse when spent', () => {
    const key = validateResource({
      apiVersion: 'ai.platform/v1beta1',
      kind: 'ApiKey',
      metadata: { name: 'k', namespace: 'platform-agent' },
      spec: { team: 'ml', budget: { usd: 1, period: 'Daily' } },
    });
    expect(key.ok && key.resource.spec).toMatchObject({ routing: 'Inherit', budget: { whenSpent: 'Refuse' } });
    const budget = validateResource({
      apiVersion: 'ai.platform/v1beta1',
      kind: 'Budget',
      metadata: { name: 'b', namespace: 'platform-agent' },
      spec: { tag: 'team:ml', usd: 1, period: 'Daily' },
    });
    expect(budget.ok && budget.resource.spec).toMatchObject({ whenSpent: 'Refuse' });
  });
});
