import { describe, expect, it } from 'vitest';
import type { ExternalProvider } from './external-provider.js';
import type { ModelDeployment } from './model-deployment.js';
import { resolveNames } from './model-names.js';

const md = (name: string, model: string, aliases: string[], created: string): ModelDeployment => ({
  apiVersion: 'ai.platform/v1beta1',
  kind: 'ModelDeployment',
  metadata: { name, namespace: 'platform-llms', creationTimestamp: created },
  spec: { model, serviceName: name, port: 11434, replicas: 1, aliases },
});
const xp = (name: string, models: string[], aliases: Array<[string, string]>, created: string): ExternalProvider => ({
  apiVersion: 'ai.platform/v1beta1',
  kind: 'ExternalProvider',
  metadata: { name, namespace: 'platform-agent', creationTimestamp: created },
  spec: {
    provider: 'bedrock',
    displayName: name,
    region: 'us-east-1',
    auth: { method: 'IAMRole', roleArn: 'arn:aws:iam::123456789012:role/r' },
    includeInCLI: true,
    streaming: true,
    models,
    aliases: aliases.map(([n, model]) => ({ name: n, model })),
  },
});

const OLD = '2026-01-01T00:00:00Z';
const NEW = '2026-06-01T00:00:00Z';

describe('resolveNames', () => {
  const cases: Array<{
    name: string;
    mds: ModelDeployment[];
    eps: ExternalProvider[];
    aliases: Record<string, string>;
    refused: Record<string, string[]>;
  }> = [
    {
      name: 'aliases of both kinds stand when nobody else claims them',
      mds: [md('llama', 'llama3.1:8b', ['house'], OLD)],
      eps: [
        xp(
          'bedrock',
          ['us.anthropic.claude-sonnet-4-5'],
          [['claude-sonnet-4-5', 'us.anthropic.claude-sonnet-4-5']],
          OLD,
        ),
      ],
      aliases: { house: 'llama3.1:8b', 'claude-sonnet-4-5': 'us.anthropic.claude-sonnet-4-5' },
      refused: {},
    },
    {
      name: 'the older claim keeps a contested alias, whichever kind is younger',
      mds: [md('llama', 'llama3.1:8b', ['claude-haiku-4-5'], NEW)],
      eps: [xp('bedrock', ['anthropic.claude-haiku'], [['claude-haiku-4-5', 'anthropic.claude-haiku']], OLD)],
      aliases: { 'claude-haiku-4-5': 'anthropic.claude-haiku' },
      refused: {
        'ModelDeployment/platform-llms/llama': [
          'alias claude-haiku-4-5 already stands for anthropic.claude-haiku (ExternalProvider platform-agent/bedrock, the older claim)',
        ],
      },
    },
    {
      name: 'same age: the ModelDeployment first, then by name',
      mds: [md('b', 'qwen2.5:7b', ['fast'], OLD), md('a', 'llama3.1:8b', ['fast'], OLD)],
      eps: [xp('bedrock', ['x.y'], [['fast', 'x.y']], OLD)],
      aliases: { fast: 'llama3.1:8b' },
      refused: {
        'ModelDeployment/platform-llms/b': [
          'alias fast already stands for llama3.1:8b (ModelDeployment platform-llms/a, the older claim)',
        ],
        'ExternalProvider/platform-agent/bedrock': [
          'alias fast already stands for llama3.1:8b (ModelDeployment platform-llms/a, the older claim)',
        ],
      },
    },
    {
      name: "a served model name is never an alias, even an older resource's claim on it",
      mds: [md('llama', 'llama3.1:8b', [], NEW)],
      eps: [xp('bedrock', ['x.y'], [['llama3.1:8b', 'x.y']], OLD)],
      aliases: {},
      refused: {
        'ExternalProvider/platform-agent/bedrock': [
          'alias llama3.1:8b is the model name ModelDeployment platform-llms/llama serves',
        ],
      },
    },
    {
      name: 'two deployments of one model may both claim its alias: they agree',
      mds: [md('a', 'llama3.1:8b', ['house'], OLD), md('b', 'llama3.1:8b', ['house'], NEW)],
      eps: [],
      aliases: { house: 'llama3.1:8b' },
      refused: {},
    },
  ];
  it.each(cases)('$name', ({ mds, eps, aliases, refused }) => {
    const got = resolveNames(mds, eps);
    expect(Object.fromEntries(got.aliases)).toEqual(aliases);
    expect(Object.fromEntries([...got.refused].map(([k, v]) => [k, v.map((r) => r.message)]))).toEqual(refused);
  });
});
