import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parse as parseCel } from '@marcbachmann/cel-js';
import { describe, expect, it } from 'vitest';
import type { ApiKeySpec, ApiKeyStatus, UsageStatus } from './api-key.js';
import type { AutoscalerPolicySpec } from './autoscaler-policy.js';
import type { BudgetStatus, TagBudgetSpec } from './budget.js';
import { API_GROUP, API_VERSION, KINDS, type KindName } from './constants.js';
import { invalidExamples, validExamples } from './examples.js';
import type { ExternalProviderSpec, ExternalProviderStatus } from './external-provider.js';
import type { GuardrailSpec, GuardrailStatus } from './guardrail.js';
import type { IdentityProviderSpec } from './identity-provider.js';
import type { McpServerSpec, McpServerStatus } from './mcp-server.js';
import type { CommonStatus } from './meta.js';
import type { ModelDeploymentSpec, ModelDeploymentStatus } from './model-deployment.js';
import type { NodeConfigurationSpec } from './node-configuration.js';
import type { NodeTemplateSpec } from './node-template.js';
import type { RoutingPolicySpec, RoutingPolicyStatus } from './routing-policy.js';
import { crdManifest, type JsonSchema, KIND_NAMES, openApiSchema } from './schema.js';

function walk(schema: JsonSchema, path: string, visit: (s: JsonSchema, path: string) => void): void {
  visit(schema, path);
  for (const [k, v] of Object.entries(schema.properties ?? {})) walk(v, `${path}.${k}`, visit);
  if (schema.items) walk(schema.items, `${path}[]`, visit);
  if (typeof schema.additionalProperties === 'object') walk(schema.additionalProperties, `${path}{}`, visit);
}

describe('CRD manifests', () => {
  it('agree with the constants of the API', () => {
    for (const kind of KIND_NAMES) {
      const crd = crdManifest(kind);
      expect(crd.metadata.name).toBe(`${KINDS[kind].plural}.${API_GROUP}`);
      expect(crd.spec.group).toBe(API_GROUP);
      expect(crd.spec.names.kind).toBe(kind);
      expect(crd.spec.names.plural).toBe(KINDS[kind].plural);
      expect(crd.spec.scope).toBe(KINDS[kind].namespaced ? 'Namespaced' : 'Cluster');
      expect(crd.spec.versions.map((v) => [v.name, v.served, v.storage])).toEqual([[API_VERSION, true, true]]);
      // ModelDeployment also has the scale subresource (kubectl scale, HPA, the autoscaler).
      expect(crd.spec.versions[0]?.subresources).toEqual(
        kind === 'ModelDeployment'
          ? {
              status: {},
              scale: {
                specReplicasPath: '.spec.replicas',
                statusReplicasPath: '.status.replicas',
                labelSelectorPath: '.status.selector',
              },
            }
          : { status: {} },
      );
    }
  });

  it('describe every field', () => {
    const undocumented: string[] = [];
    for (const kind of KIND_NAMES) {
      walk(openApiSchema(kind), kind, (s, path) => {
        // ObjectMeta's schema may hold nothing but name constraints, descriptions included.
        if (!s.description && !path.endsWith('{}') && !path.includes('.metadata')) undocumented.push(path);
      });
    }
    expect(undocumented).toEqual([]);
  });

  it('share one condition shape', () => {
    const shapes = KIND_NAMES.map((k) => openApiSchema(k).properties?.status?.properties?.conditions?.items);
    for (const shape of shapes) expect(shape).toEqual(shapes[0]);
    expect(shapes[0]?.required).toEqual(['type', 'status', 'lastTransitionTime', 'reason', 'message']);
  });

  it('print the columns kubectl get shows', () => {
    const columns = (kind: KindName) =>
      crdManifest(kind)
        .spec.versions[0]?.additionalPrinterColumns?.filter((c) => !c.priority)
        .map((c) => c.name.toUpperCase());
    expect(columns('ModelDeployment')).toEqual(['MODEL', 'ENGINE', 'STATUS', 'READY', 'DESIRED', 'ENDPOINT', 'AGE']);
    expect(columns('ExternalProvider')).toEqual(['PROVIDER', 'REGION', 'AUTH', 'STATUS', 'MODELS', 'AGE']);
    expect(crdManifest('ModelDeployment').spec.names.shortNames).toContain('md');
    // Not `ep`: core Endpoints owns it, and kubectl would resolve `kubectl get ep` to Endpoints.
    expect(crdManifest('ExternalProvider').spec.names.shortNames).toEqual(['xp']);
    expect(columns('McpServer')).toEqual(['URL', 'IMAGE', 'AUTH', 'STATUS', 'PROTOCOL', 'AGE']);
    expect(crdManifest('McpServer').spec.names.shortNames).toEqual(['mcps']);
    expect(columns('RoutingPolicy')).toEqual(['OBJECTIVE', 'ENABLED', 'READY', 'AGE']);
    expect(crdManifest('RoutingPolicy').spec.names.shortNames).toEqual(['rp']);
  });

  it('default the Ollama port and one replica', () => {
    const spec = openApiSchema('ModelDeployment').properties?.spec?.properties;
    expect(spec?.port?.default).toBe(11434);
    expect(spec?.replicas?.default).toBe(1);
  });

  it("keep an McpServer's name a tool-name prefix, and a key's server names the same", () => {
    // <server>_<tool> at /mcp: a server name holds no '_', so the first '_' splits the two.
    const name = openApiSchema('McpServer').properties?.metadata?.properties?.name;
    const keyServer = openApiSchema('ApiKey').properties?.spec?.properties?.mcp?.properties?.servers?.items;
    expect(name?.pattern).toBe('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$');
    expect([keyServer?.properties?.name?.pattern, keyServer?.properties?.name?.maxLength]).toEqual([
      name?.pattern,
      name?.maxLength,
    ]);
    // The tool-name rule of MCP (1-128 of letters, digits, '_', '.', '-') wherever a tool is named.
    const tools = openApiSchema('McpServer').properties?.spec?.properties?.tools?.properties;
    for (const items of [tools?.allow?.items, tools?.deny?.items, keyServer?.properties?.tools?.items]) {
      expect(items?.pattern).toBe('^[A-Za-z0-9_.-]{1,128}$');
    }
  });
});

describe('YAML keys', () => {
  it('are quoted where YAML 1.1, which kubectl reads, would make them booleans (none is: a bare on, yes or no key would reach the API server as true or false)', () => {
    const files = [
      ...KIND_NAMES.map((k) => fileURLToPath(new URL(`./${API_GROUP}_${KINDS[k].plural}.yaml`, import.meta.url))),
      ...[...validExamples(), ...invalidExamples()].map((e) => e.file),
    ];
    const bare = files.flatMap((f) =>
      readFileSync(f, 'utf8')
        .split('\n')
        .filter((line) => /^\s*(-\s+)?(y|yes|n|no|on|off)\s*:/i.test(line))
        .map((line) => `${f}: ${line.trim()}`),
    );
    expect(bare).toEqual([]);
  });
});

describe('CEL rules', () => {
  const rules = KIND_NAMES.flatMap((kind) => {
    const found: Array<{ at: string; rule: string; message: string | undefined }> = [];
    walk(openApiSchema(kind), kind, (s, path) => {
      for (const r of s['x-kubernetes-validations'] ?? []) {
        found.push({ at: `${path}${r.fieldPath ?? ''}`, rule: r.rule.replace(/\s+/g, ' ').trim(), message: r.message });
      }
    });
    return found;
  });

  it('are the reviewed set', () => {
    expect(rules.map((r) => `${r.at}: ${r.rule}`)).toMatchInlineSnapshot(`
      [
        "ModelDeployment.spec.fallback: !has(self.fallback) || !(self.model in self.fallback)",
        "ModelDeployment.spec.aliases: !has(self.aliases) || !(self.model in self.aliases)",
        "ModelDeployment.spec.autoscaling.whileWaking: !has(self.autoscaling) || !has(self.autoscaling.whileWaking) || self.autoscaling.whileWaking != 'Fallback' || (has(self.fallback) && size(self.fallback) > 0)",
        "ModelDeployment.spec.server.numParallel: self.engine != 'Ollama' || !has(self.server) || !has(self.server.numParallel) || self.server.numParallel <= 64",
        "ModelDeployment.spec.autoscaling: !has(self.autoscaling) || !has(self.endpoint)",
        "ModelDeployment.spec.model: self.engine != 'Ollama' || self.model.matches('^[a-z0-9][a-z0-9._-]*(/[a-z0-9][a-z0-9._-]*)*(:[A-Za-z0-9][A-Za-z0-9._-]*)?$')",
        "ModelDeployment.spec.model: self.engine != 'VLLM' || self.model.matches('^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$')",
        "ModelDeployment.spec.serviceName: self == oldSelf",
        "ModelDeployment.spec.port: self == oldSelf",
        "ModelDeployment.spec.autoscaling.minReplicas: self.minReplicas <= self.maxReplicas",
        "ModelDeployment.spec.autoscaling.hibernateAfterSeconds: !has(self.hibernateAfterSeconds) || self.minReplicas == 0",
        "ExternalProvider.spec.region: self.provider != 'bedrock' || has(self.region)",
        "ExternalProvider.spec.region: self.provider == 'bedrock' || !has(self.region)",
        "ExternalProvider.spec.auth.method: (self.provider == 'bedrock') == (self.auth.method == 'IAMRole' || self.auth.method == 'AccessKey')",
        "ExternalProvider.spec.auth.method: self.auth.method != 'WorkloadIdentity' || self.provider == 'azure-openai' || self.provider == 'vertex-ai'",
        "ExternalProvider.spec.auth.method: self.provider != 'vertex-ai' || self.auth.method == 'WorkloadIdentity'",
        "ExternalProvider.spec.auth.method: self.auth.method != 'None' || self.provider == 'openai-compatible'",
        "ExternalProvider.spec.baseUrl: self.provider != 'openai-compatible' || has(self.baseUrl)",
        "ExternalProvider.spec.baseUrl: !has(self.baseUrl) || self.provider == 'openai' || self.provider == 'anthropic' || self.provider == 'openai-compatible'",
        "ExternalProvider.spec.azure: has(self.azure) == (self.provider == 'azure-openai')",
        "ExternalProvider.spec.models: self.provider != 'azure-openai' || !has(self.azure) || self.models.all(m, self.azure.deployments.exists(d, d.name == m))",
        "ExternalProvider.spec.vertex: has(self.vertex) == (self.provider == 'vertex-ai')",
        "ExternalProvider.spec.auth.clientId: self.provider != 'azure-openai' || self.auth.method != 'WorkloadIdentity' || (has(self.auth.tenantId) && has(self.auth.clientId))",
        "ExternalProvider.spec.auth.tenantId: self.provider == 'azure-openai' || (!has(self.auth.tenantId) && !has(self.auth.clientId))",
        "ExternalProvider.spec.auth.audience: self.provider == 'vertex-ai' || (!has(self.auth.audience) && !has(self.auth.serviceAccount))",
        "ExternalProvider.spec.guardrail: self.provider == 'bedrock' || (!has(self.guardrail) && (!has(self.streaming) || self.streaming))",
        "ExternalProvider.spec.auth.roleArn: !has(self.region) || !has(self.auth.roleArn) || !self.auth.roleArn.startsWith('arn:') || (self.region.startsWith('us-gov-') ? self.auth.roleArn.startsWith('arn:aws-us-gov:') : self.region.startsWith('cn-') ? self.auth.roleArn.startsWith('arn:aws-cn:') : self.auth.roleArn.startsWith('arn:aws:'))",
        "ExternalProvider.spec.fallback: !has(self.fallback) || self.fallback.all(f, !(f in self.models))",
        "ExternalProvider.spec.aliases: !has(self.aliases) || self.aliases.all(a, a.model in self.models)",
        "ExternalProvider.spec.aliases: !has(self.aliases) || self.aliases.all(a, !(a.name in self.models))",
        "ExternalProvider.spec.provider: self == oldSelf",
        "ExternalProvider.spec.baseUrl: !self.endsWith('/')",
        "ExternalProvider.spec.auth.roleArn: self.method != 'IAMRole' || has(self.roleArn)",
        "ExternalProvider.spec.auth.secretRef: self.method != 'IAMRole' || !has(self.secretRef)",
        "ExternalProvider.spec.auth.secretRef: self.method != 'AccessKey' || has(self.secretRef)",
        "ExternalProvider.spec.auth.roleArn: self.method != 'AccessKey' || (!has(self.roleArn) && !has(self.externalId))",
        "ExternalProvider.spec.auth.secretRef: self.method != 'APIKey' || has(self.secretRef)",
        "ExternalProvider.spec.auth.secretRef: !(self.method == 'WorkloadIdentity' || self.method == 'None') || !has(self.secretRef)",
        "ExternalProvider.spec.auth.roleArn: self.method == 'IAMRole' || self.method == 'AccessKey' || (!has(self.roleArn) && !has(self.externalId))",
        "ExternalProvider.spec.auth.method: self.method == 'WorkloadIdentity' || (!has(self.tenantId) && !has(self.clientId) && !has(self.audience) && !has(self.serviceAccount))",
        "ExternalProvider.spec.freeCredits: self >= 0.0",
        "NodeTemplate.spec.constraints.gpu.minCount: !has(self.minCount) || !has(self.maxCount) || self.minCount <= self.maxCount",
        "ApiKey.spec.tags: !has(self.tags) || !('team' in self.tags) || self.tags['team'] == self.team",
        "ApiKey.spec.tags: self.all(k, k.matches('^[A-Za-z0-9_.-]{1,64}$'))",
        "ApiKey.spec.rateLimit.burst: !has(self.burst) || has(self.requestsPerSecond)",
        "ApiKey.spec.budget.usd: self > 0.0",
        "Budget.spec.usd: self > 0.0",
        "McpServer.spec.url: has(self.url) != has(self.stdio)",
        "McpServer.spec.auth.method: !has(self.stdio) || !has(self.auth) || self.auth.method == 'None'",
        "McpServer.spec.auth.secretRef: self.method == 'None' || has(self.secretRef)",
        "McpServer.spec.auth.secretRef: self.method != 'None' || !has(self.secretRef)",
        "McpServer.spec.auth.tokenUrl: self.method != 'OAuthClientCredentials' || has(self.tokenUrl)",
        "McpServer.spec.auth.clientId: self.method != 'OAuthClientCredentials' || has(self.clientId)",
        "McpServer.spec.auth: self.method == 'OAuthClientCredentials' || (!has(self.tokenUrl) && !has(self.clientId) && !has(self.scopes) && !has(self.resource))",
        "RoutingPolicy.spec.enabled: self.metadata.name == 'default' || !has(self.spec.enabled) || !self.spec.enabled",
        "RoutingPolicy.spec.baseline: !has(self.baseline) || self.models.exists(m, m.name == self.baseline)",
        "RoutingPolicy.spec.scorer.thresholds.standard: !has(self.standard) || !has(self.frontier) || self.standard < self.frontier",
        "RoutingPolicy.spec.scorer.semantic.examples: has(self.embeddingModel) || (has(self.examples) && size(self.examples) > 0) || has(self.examplesFrom)",
        "IdentityProvider.spec: has(self.issuer) != has(self.kubernetes)",
        "IdentityProvider.spec: has(self.profiles) || has(self.profileClaim)",
        "IdentityProvider.spec.pageSignIn: !has(self.pageSignIn) || has(self.issuer)",
        "IdentityProvider.spec.mcpAuthorization: !has(self.mcpAuthorization) || has(self.issuer)",
        "IdentityProvider.spec.profiles[]: has(self.claim) || has(self.serviceAccount)",
        "Guardrail.spec.actions: !has(self.actions) || self.actions.all(a, a.category in ['Email', 'Phone', 'PaymentCard', 'Iban', 'NationalId', 'IpAddress', 'CloudCredential', 'PrivateKey', 'ApiToken'] || (has(self.detectors.patterns) && self.detectors.patterns.exists(p, p.name == a.category)) || (has(self.detectors.judge) && a.category == (has(self.detectors.judge.category) ? self.detectors.judge.category : 'Jailbreak')) || (has(self.detectors.services) && size(self.detectors.services) > 0))",
        "Guardrail.spec.detectors: has(self.builtIn) || (has(self.patterns) && size(self.patterns) > 0) || has(self.judge) || (has(self.services) && size(self.services) > 0)",
        "Guardrail.spec.detectors.judge: (has(self.kind) && self.kind == 'Classifier') == has(self.examples)",
        "Guardrail.spec.detectors.services[]: [has(self.bedrockGuardrail), has(self.openAIModeration), has(self.presidio)].filter(x, x).size() == 1",
      ]
    `);
  });

  it('all parse as CEL and carry a message', () => {
    for (const r of rules) {
      expect(() => parseCel(r.rule), r.rule).not.toThrow();
      expect(r.message, r.rule).toBeTruthy();
    }
  });

  it('each have an invalid example that breaks them', () => {
    const covered = new Set(invalidExamples().map((e) => e.expectMessage));
    expect(rules.filter((r) => !covered.has(r.message)).map((r) => r.at)).toEqual([]);
  });
});

/**
 * The TypeScript types are written by hand; these fully populated values (every optional
 * field present, no extra field allowed by the compiler) pin them to the schema's fields.
 */
type Full<T> = T extends Array<infer U> ? Full<U>[] : T extends object ? { [K in keyof T]-?: Full<T[K]> } : T;

const condition = [
  { type: 'Ready', status: 'True', observedGeneration: 1, lastTransitionTime: 't', reason: 'R', message: 'm' },
] satisfies Full<CommonStatus>['conditions'];

const usage = {
  period: 'Monthly',
  periodStart: 't',
  spendUsd: 1,
  lastUsed: 't',
  updated: 't',
} satisfies Full<UsageStatus>;

const full: Record<KindName, { spec: object; status: object }> = {
  ModelDeployment: {
    spec: {
      engine: 'VLLM',
      model: 'm',
      serviceName: 's',
      port: 1,
      nodeTemplate: 't',
      replicas: 1,
      autoscaling: {
        minReplicas: 0,
        maxReplicas: 2,
        targetInFlight: 4,
        targetRequestsPerSecond: 1.5,
        scaleDownDelaySeconds: 60,
        hibernateAfterSeconds: 600,
        whileWaking: 'Wait',
      },
      endpoint: 'e',
      fallback: ['f'],
      aliases: ['a'],
      includeInCLI: true,
      timeouts: { firstByteSeconds: 1, idleSeconds: 1, queueSeconds: 1 },
      server: { numParallel: 1, maxQueue: 1, contextLength: 256, cpu: '1' },
      cache: { existingClaim: 'c' },
    } satisfies Full<ModelDeploymentSpec>,
    status: {
      phase: 'Running',
      endpoint: 'e',
      replicas: 1,
      readyReplicas: 1,
      selector: 's',
      deployingSince: 't',
      observedGeneration: 1,
      conditions: condition,
    } satisfies Full<ModelDeploymentStatus>,
  },
  ExternalProvider: {
    spec: {
      provider: 'bedrock',
      displayName: 'd',
      region: 'r',
      baseUrl: 'u',
      azure: { resourceName: 'r', apiVersion: 'v', deployments: [{ name: 'd', model: 'm' }] },
      vertex: { project: 'p', location: 'l' },
      auth: {
        method: 'IAMRole',
        roleArn: 'a',
        externalId: 'x',
        secretRef: { name: 'n' },
        tenantId: 't',
        clientId: 'c',
        audience: 'a',
        serviceAccount: 's',
      },
      freeCredits: 1,
      includeInCLI: true,
      streaming: true,
      models: ['m'],
      aliases: [{ name: 'a', model: 'm' }],
      fallback: ['f'],
      guardrail: { identifier: 'g', version: '1', trace: 'disabled', streamProcessingMode: 'sync' },
    } satisfies Full<ExternalProviderSpec>,
    status: {
      phase: 'Ready',
      availableModels: ['m'],
      models: [
        {
          id: 'm',
          type: 'Text',
          family: 'openai',
          baseModel: 'b',
          profile: 'SystemDefined',
          streaming: true,
          images: true,
          lifecycle: 'Active',
          priced: true,
        },
      ],
      accessKeyLast4: 'abcd',
      lastDiscoveryTime: 't',
      observedGeneration: 1,
      conditions: condition,
    } satisfies Full<ExternalProviderStatus>,
  },
  NodeTemplate: {
    spec: {
      enabled: true,
      configurationRef: { name: 'n' },
      constraints: {
        architectures: ['amd64'],
        spot: false,
        gpu: {
          manufacturer: 'NVIDIA',
          models: ['A100'],
          minCount: 1,
          maxCount: 1,
          minMemoryGiB: 1,
          minComputeCapability: '8.0',
        },
      },
      labels: {},
      taints: [{ key: 'k', value: 'v', effect: 'NoSchedule' }],
    } satisfies Full<NodeTemplateSpec>,
    status: { observedGeneration: 1, conditions: condition } satisfies Full<CommonStatus>,
  },
  NodeConfiguration: {
    spec: { image: 'i', imageFamily: 'cos', diskSizeGiB: 100 } satisfies Full<NodeConfigurationSpec>,
    status: { observedGeneration: 1, conditions: condition } satisfies Full<CommonStatus>,
  },
  AutoscalerPolicy: {
    spec: { optimizationMode: 'Automated', unschedulablePods: { enabled: true } } satisfies Full<AutoscalerPolicySpec>,
    status: { observedGeneration: 1, conditions: condition } satisfies Full<CommonStatus>,
  },
  ApiKey: {
    spec: {
      team: 't',
      role: 'User',
      tags: {},
      models: ['m'],
      mcp: {
        servers: [{ name: 's', tools: ['t'] }],
        toolRateLimit: { requestsPerSecond: 1, burst: 1 },
        recordPayloads: false,
      },
      rateLimit: { requestsPerSecond: 1, burst: 1, tokensPerMinute: 1 },
      budget: { usd: 1, period: 'Monthly', whenSpent: 'Degrade' },
      routing: 'Enabled',
      routingPolicy: 'p',
      cache: { mode: 'Semantic', ttlSeconds: 60, scope: 'Key', anyTemperature: true, similarity: 0.9 },
      expiresAt: 't',
      rotation: 0,
    } satisfies Full<ApiKeySpec>,
    status: {
      digest: 'd',
      keyHint: 'k',
      rotation: 0,
      observedGeneration: 1,
      usage,
      conditions: condition,
    } satisfies Full<ApiKeyStatus>,
  },
  Budget: {
    spec: { tag: 't:v', usd: 1, period: 'Daily', whenSpent: 'Refuse' } satisfies Full<TagBudgetSpec>,
    status: {
      observedGeneration: 1,
      usage: { period: usage.period, periodStart: 't', spendUsd: 1, updated: 't' },
      conditions: condition,
    } satisfies Full<BudgetStatus>,
  },
  McpServer: {
    spec: {
      url: 'u',
      stdio: { image: 'i', command: ['c'], env: [{ name: 'n', value: 'v' }], replicas: 1 },
      auth: { method: 'Bearer', secretRef: { name: 'n' }, tokenUrl: 'u', clientId: 'c', scopes: ['s'], resource: 'r' },
      tools: { allow: ['a'], deny: ['d'] },
      timeoutSeconds: 60,
    } satisfies Full<McpServerSpec>,
    status: {
      phase: 'Ready',
      endpoint: 'e',
      protocolVersion: '2025-06-18',
      serverInfo: { name: 'n', version: 'v' },
      tools: [{ name: 't', description: 'd' }],
      lastDiscoveryTime: 't',
      observedGeneration: 1,
      conditions: condition,
    } satisfies Full<McpServerStatus>,
  },
  RoutingPolicy: {
    spec: {
      models: [{ name: 'm', tier: 'Light' }],
      objective: 'Balanced',
      enabled: false,
      scorer: {
        thresholds: { standard: 0.3, frontier: 0.7 },
        semantic: {
          embeddingModel: 'e',
          examples: [{ tier: 'Light', prompt: 'p' }],
          examplesFrom: { configMapName: 'c', key: 'k' },
          neighbours: 5,
          weight: 0.5,
        },
      },
      cascade: { maxEscalations: 1, triggers: ['Error'] },
      baseline: 'm',
    } satisfies Full<RoutingPolicySpec>,
    status: {
      models: [{ name: 'm', tier: 'Light', inputPerMillion: 1, outputPerMillion: 1, contextWindow: 1, problem: 'p' }],
      observedGeneration: 1,
      conditions: condition,
    } satisfies Full<RoutingPolicyStatus>,
  },
  IdentityProvider: {
    spec: {
      issuer: 'https://i',
      kubernetes: { verify: 'Discovery' },
      audiences: ['a'],
      jwksUri: 'https://j',
      clockSkewSeconds: 60,
      subject: { claim: 'sub', inRecords: 'Hashed' },
      profiles: [
        { apiKey: 'k', claim: { name: 'groups', values: ['g'] }, serviceAccount: { namespace: 'n', names: ['s'] } },
      ],
      profileClaim: { name: 'c', allowed: ['k'] },
      mcpAuthorization: { scopes: ['s'] },
      pageSignIn: { clientId: 'c', scopes: ['s'] },
    } satisfies Full<IdentityProviderSpec>,
    status: { observedGeneration: 1, conditions: condition } satisfies Full<CommonStatus>,
  },
  Guardrail: {
    spec: {
      selector: { apiKeys: ['k'], teams: ['t'], tags: ['a:b'], models: ['m'] },
      order: 1,
      appliesTo: ['Request'],
      detectors: {
        builtIn: { categories: ['Email'], phoneRegions: ['US'] },
        patterns: [{ name: 'P', regex: 'p' }],
        judge: {
          model: 'm',
          kind: 'Classifier',
          policy: 'p',
          examples: { unsafe: ['u'], safe: ['s'] },
          similarity: 0.6,
          category: 'Jailbreak',
          timeoutSeconds: 3,
          onFailure: 'Allow',
        },
        // One item naming every kind's fields (a real one has exactly one kind).
        services: [
          {
            name: 's',
            bedrockGuardrail: { provider: 'p', identifier: 'g', version: '1' },
            openAIModeration: { provider: 'p', model: 'm' },
            presidio: { url: 'http://p', language: 'en', entities: ['PERSON'], scoreThreshold: 0.5 },
            timeoutSeconds: 3,
            onFailure: 'Allow',
          },
        ],
      },
      action: 'Redact',
      actions: [{ category: 'Email', action: 'Block' }],
      stream: { lookBehindChars: 64 },
    } satisfies Full<GuardrailSpec>,
    status: {
      detectors: [{ name: 'builtIn', ready: true, message: 'm' }],
      observedGeneration: 1,
      conditions: condition,
    } satisfies Full<GuardrailStatus>,
  },
};

function valuePaths(value: unknown, path: string, out: string[]): string[] {
  out.push(path);
  if (Array.isArray(value)) valuePaths(value[0], `${path}[]`, out);
  else if (value !== null && typeof value === 'object' && !path.endsWith('.labels') && !path.endsWith('.tags')) {
    for (const [k, v] of Object.entries(value)) valuePaths(v, `${path}.${k}`, out);
  }
  return out;
}

describe('TypeScript types', () => {
  for (const kind of KIND_NAMES) {
    it(`of ${kind} name exactly the schema's spec and status fields`, () => {
      const schema = openApiSchema(kind).properties;
      for (const part of ['spec', 'status'] as const) {
        const fromSchema: string[] = [];
        const partSchema = schema?.[part];
        if (!partSchema) throw new Error(`${kind} has no ${part}`);
        walk(partSchema, part, (_s, p) => {
          if (!p.endsWith('{}')) fromSchema.push(p);
        });
        expect(valuePaths(full[kind][part], part, []).sort()).toEqual(fromSchema.sort());
      }
    });
  }
});
