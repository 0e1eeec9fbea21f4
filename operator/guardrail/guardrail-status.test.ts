import { describe, expect, it } from 'vitest';
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
});
