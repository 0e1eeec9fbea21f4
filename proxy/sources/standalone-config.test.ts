import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { ConfigError, loadStandaloneConfig, parseStandaloneConfig } from './standalone-config.js';

describe('standalone config', () => {
  it('loads the shipped example with schema defaults applied', () => {
    const config = loadStandaloneConfig(fileURLToPath(new URL('../examples/standalone.yaml', import.meta.url)));
    expect(config.modelDeployments.map((m) => [m.spec.model, m.spec.endpoint, m.spec.port])).toEqual([
      ['llama3.2:3b', 'http://localhost:11434', 11434],
      ['qwen2.5:0.5b', 'http://localhost:11434', 11434],
    ]);
    // `auto` works out of the box: the default policy over both.
    expect(config.routingPolicies.map((p) => [p.metadata.name, p.spec.models.map((m) => m.tier)])).toEqual([
      ['default', ['Light', 'Standard']],
    ]);
  });

  it('rejects documents the CRD schemas reject, naming resource and field', () => {
    const text = [
      'apiVersion: ai.platform/v1beta1',
      'kind: ExternalProvider',
      'metadata: {name: bedrock}',
      'spec: {provider: bedrock, displayName: B, region: us-east-1, auth: {method: IAMRole}, models: [amazon.nova-lite-v1:0]}',
    ].join('\n');
    expect(() => parseStandaloneConfig(text, 'gw.yaml')).toThrow(
      'gw.yaml is not a valid gateway config:\nExternalProvider bedrock:\n  spec.auth.roleArn: roleArn is required when auth.method is IAMRole',
    );
  });

  it("needs an endpoint on every ModelDeployment, and only this API's kinds", () => {
    const md =
      'apiVersion: ai.platform/v1beta1\nkind: ModelDeployment\nmetadata: {name: m}\nspec: {model: llama3.1:8b, serviceName: m}\n';
    expect(() => parseStandaloneConfig(md, 'a.yaml')).toThrow('spec.endpoint is required in standalone mode');
    expect(() => parseStandaloneConfig('apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n', 'b.yaml')).toThrow(
      'document 1: expected a ModelDeployment, ExternalProvider, ApiKey, Budget',
    );
    expect(() => parseStandaloneConfig('a: [', 'c.yaml')).toThrow(ConfigError);
    expect(() => loadStandaloneConfig('/nonexistent/gw.yaml')).toThrow('cannot read /nonexistent/gw.yaml: ENOENT');
  });

  it('reads McpServers at their URL, with schema defaults applied', () => {
    const text = [
      'apiVersion: ai.platform/v1beta1',
      'kind: McpServer',
      'metadata: {name: docs}',
      'spec: {url: "http://localhost:3001/mcp", tools: {deny: [reindex]}}',
    ].join('\n');
    const config = parseStandaloneConfig(text, 'gw.yaml');
    expect(config.mcpServers.map((s) => [s.metadata.name, s.spec])).toEqual([
      [
        'docs',
        {
          url: 'http://localhost:3001/mcp',
          tools: { deny: ['reindex'] },
          auth: { method: 'None' },
          timeoutSeconds: 60,
        },
      ],
    ]);
    expect(config.modelDeployments).toEqual([]);
  });

  it('refuses a stdio McpServer: the operator runs those, standalone mode takes a URL', () => {
    const text = [
      'apiVersion: ai.platform/v1beta1',
      'kind: McpServer',
      'metadata: {name: memory}',
      'spec: {stdio: {image: "node:24-bookworm-slim", command: [npx, -y, "@modelcontextprotocol/server-memory@2026.8.31"]}}',
    ].join('\n');
    expect(() => parseStandaloneConfig(text, 'gw.yaml')).toThrow(ConfigError);
    expect(() => parseStandaloneConfig(text, 'gw.yaml')).toThrow(
      'gw.yaml is not a valid gateway config:\nMcpServer memory: spec.stdio servers are run by the operator in a cluster; standalone mode takes spec.url',
    );
  });

  it('validates McpServers by the CRD schema, naming resource and field', () => {
    const text = [
      'apiVersion: ai.platform/v1beta1',
      'kind: McpServer',
      'metadata: {name: tickets}',
      'spec: {url: "https://mcp.example.com/mcp", auth: {method: Bearer}}',
    ].join('\n');
    expect(() => parseStandaloneConfig(text, 'gw.yaml')).toThrow(
      'McpServer tickets:\n  spec.auth.secretRef: secretRef is required when auth.method is Bearer or OAuthClientCredentials',
    );
  });
});

describe('standalone RoutingPolicies', () => {
  const policy = (name: string, semantic: string) =>
    [
      'apiVersion: ai.platform/v1beta1',
      'kind: RoutingPolicy',
      `metadata: {name: ${name}}`,
      'spec:',
      '  models: [{name: "llama3.2:3b", tier: Light}, {name: gpt-4o, tier: Frontier}]',
      `  scorer: {semantic: {embeddingModel: nomic-embed-text, ${semantic}}}`,
    ].join('\n');

  it('reads a policy with inline examples, with schema defaults applied', () => {
    const config = parseStandaloneConfig(policy('default', 'examples: [{tier: Light, prompt: hi}]'), 'gw.yaml');
    expect(config.routingPolicies.map((p) => [p.metadata.name, p.spec])).toEqual([
      [
        'default',
        {
          models: [
            { name: 'llama3.2:3b', tier: 'Light' },
            { name: 'gpt-4o', tier: 'Frontier' },
          ],
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
        },
      ],
    ]);
  });

  it('refuses examplesFrom: there are no ConfigMaps standalone, the examples go inline', () => {
    const text = policy('support', 'examplesFrom: {configMapName: support-examples, key: examples.yaml}');
    expect(() => parseStandaloneConfig(text, 'gw.yaml')).toThrow(ConfigError);
    expect(() => parseStandaloneConfig(text, 'gw.yaml')).toThrow(
      'gw.yaml is not a valid gateway config:\nRoutingPolicy support: spec.scorer.semantic.examplesFrom reads a ConfigMap of a cluster, and standalone mode has none: put the examples inline in spec.scorer.semantic.examples',
    );
  });

  it('refuses enabled on a policy not named default, as the API server does', () => {
    const text = `${policy('support', 'examples: [{tier: Light, prompt: hi}]')}\n  enabled: true`;
    expect(() => parseStandaloneConfig(text, 'gw.yaml')).toThrow(
      'RoutingPolicy support:\n  spec.enabled: enabled may only be true on the policy named default',
    );
  });
});
