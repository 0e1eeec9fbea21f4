import { describe, expect, it } from 'vitest';
import type { ExternalProvider } from '../../crds/external-provider.js';
import type { Guardrail } from '../../crds/guardrail.js';
import type { ModelDeployment } from '../../crds/model-deployment.js';
import { guardrailStatus } from './guardrail-status.js';

const guardrail = (detectors: Guardrail['spec']['detectors']): Guardrail => ({
  apiVersion: 'ai.platform/v1beta1',
  kind: 'Guardrail',
  metadata: { name: 'g', namespace: 'platform-agent', generation: 3 },
  spec: { detectors },
});

const deployment = (model: string, aliases: string[] = []): ModelDeployment => ({
  apiVersion: 'ai.platform/v1beta1',
  kind: 'ModelDeployment',
  metadata: { name: 'm', namespace: 'platform-llms' },
  spec: { model, serviceName: 'm', port: 11434, replicas: 1, aliases },
});

describe("a Guardrail's status", () => {
  it('is Ready when every detector runs: the built-in ones, patterns that compile, a judge whose model is served', () => {
    const s = guardrailStatus(
      guardrail({ builtIn: {}, patterns: [{ name: 'EmployeeId', regex: 'EMP-[0-9]{6}' }], judge: { model: 'guard' } }),
      { deployments: [deployment('llama-guard3:1b', ['guard'])], providers: [] },
    );
    expect(s.detectors).toEqual([
      { name: 'builtIn', ready: true },
      { name: 'pattern/EmployeeId', ready: true },
      { name: 'judge', ready: true },
    ]);
    expect(s.ready).toMatchObject({ status: 'True', reason: 'DetectorsReady', observedGeneration: 3 });
  });

  it('says which detector does not run and why: a pattern that is not RE2, a judge whose model nothing serves', () => {
    const s = guardrailStatus(
      guardrail({ patterns: [{ name: 'Look', regex: 'a(?=b)' }], judge: { model: 'absent', onFailure: 'Block' } }),
      { deployments: [], providers: [] },
    );
    expect(s.detectors.map((d) => [d.name, d.ready])).toEqual([
      ['pattern/Look', false],
      ['judge', false],
    ]);
    expect(s.ready).toMatchObject({ status: 'False', reason: 'DetectorNotReady' });
    expect(s.ready.message).toMatch(
      /^pattern\/Look: not RE2, skipped: .+; judge: no ModelDeployment or ExternalProvider serves absent: every judgement fails, and onFailure \(Block\) decides$/,
    );
  });

  it("says whether each service runs: its provider's kind and Ready, an analyzer's health", () => {
    const provider = (name: string, type: 'bedrock' | 'openai', ready: 'True' | 'False'): ExternalProvider => ({
      apiVersion: 'ai.platform/v1beta1',
      kind: 'ExternalProvider',
      metadata: { name, namespace: 'platform-agent' },
      spec: {
        provider: type,
        displayName: name,
        auth: { method: 'APIKey', secretRef: { name: 'k' } },
        includeInCLI: false,
        streaming: true,
        models: [],
      },
      status: {
        conditions: [
          { type: 'Ready', status: ready, reason: 'R', message: 'm', lastTransitionTime: '2026-11-30T00:00:00Z' },
        ],
      },
    });
    const services = [
      { name: 'aws', bedrockGuardrail: { provider: 'bedrock-prod', identifier: 'g1', version: '1' } },
      { name: 'wrong-kind', bedrockGuardrail: { provider: 'openai', identifier: 'g1', version: '1' } },
      { name: 'moderation', openAIModeration: { provider: 'openai' } },
      { name: 'unready', openAIModeration: { provider: 'openai-broken' } },
      { name: 'absent', openAIModeration: { provider: 'nosuch' }, onFailure: 'Block' as const },
      { name: 'pii', presidio: { url: 'http://presidio:3000' } },
      { name: 'down', presidio: { url: 'http://down:3000' } },
    ];
    const s = guardrailStatus(guardrail({ services }), {
      deployments: [],
      providers: [
        provider('bedrock-prod', 'bedrock', 'True'),
        provider('openai', 'openai', 'True'),
        provider('openai-broken', 'openai', 'False'),
      ],
      analyzers: new Map<string, true | string>([
        ['http://presidio:3000', true],
        ['http://down:3000', 'the analyzer did not answer its health check'],
      ]),
    });
    expect(s.detectors).toEqual([
      { name: 'service/aws', ready: true },
      {
        name: 'service/wrong-kind',
        ready: false,
        message: 'ExternalProvider openai is not bedrock: onFailure (Allow) decides',
      },
      { name: 'service/moderation', ready: true },
      {
        name: 'service/unready',
        ready: false,
        message: 'ExternalProvider openai-broken is not Ready: onFailure (Allow) decides',
      },
      { name: 'service/absent', ready: false, message: 'no ExternalProvider nosuch: onFailure (Block) decides' },
      { name: 'service/pii', ready: true },
      {
        name: 'service/down',
        ready: false,
        message: 'the analyzer did not answer its health check: onFailure (Allow) decides',
      },
    ]);
    expect(s.ready).toMatchObject({ status: 'False', reason: 'DetectorNotReady' });
  });
});
